"""The operator console's retrieval pages: RagConfig with its history, hit testing and A/B
tests, the tenants' synonym groups, the index versions and index operations. (The evaluation
runs' pages are the evaluation app's.)"""

from retrieval.admin import index, ragconfig, synonyms  # noqa: F401  (register their pages)
