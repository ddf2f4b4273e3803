"""The operator console's pages of tenants, keys, datasets, documents, chunks, sources and
jobs, and what they share: tenant-scoped staff, previews, panels of the apps above."""

from datasets.admin import pages  # noqa: F401  (registers the pages)
