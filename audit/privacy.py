"""Query text as the audit may keep it (seed 000 §9.1): by default a keyed hash and a length,
never the text; the text itself only with KB_AUDIT_STORE_RAW_QUERY.

Light on purpose (no models): the retrieval graph words its trace with it.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.crypto import salted_hmac


def query_fingerprint(query: str) -> str:
    # Keyed with SECRET_KEY: a plain SHA-256 of a short question is one dictionary lookup
    # away from the question itself. Equal queries still share a hash, so repeats group.
    # surrogatepass: a lone surrogate (a command line's undecodable byte) still has a hash.
    return salted_hmac("kbplatform.audit.query", query.encode("utf-8", "surrogatepass"),
                       algorithm="sha256").hexdigest()


def audited_text(text: str) -> str:
    """A query, or a query made of one (a rewrite, a correction), as a trace may word it: the
    text with KB_AUDIT_STORE_RAW_QUERY, else its length and the start of its keyed hash (equal
    texts look alike, so an operator still sees whether a rewrite changed anything)."""
    if settings.KB_AUDIT_STORE_RAW_QUERY:
        return repr(text)
    return f"{len(text)} characters #{query_fingerprint(text)[:8]}"
