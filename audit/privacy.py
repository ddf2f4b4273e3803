"""Query text as the audit may keep it (seed 000 §9.1): by default a keyed hash and a length,
never the text; the text itself only for a tenant that keeps raw queries (its own switch, or
KB_AUDIT_STORE_RAW_QUERY for every tenant), and only for its retention.

Light on purpose (no models): the retrieval graph words its trace with it. A text made of the
query (a rewrite, a sub-question) is marked in the trace (`audited_text`); the audit writes it
as it is for a tenant that keeps raw queries and as its length and hash for any other
(`texts_hidden`), and words it the same way once its retention ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils.crypto import salted_hmac

if TYPE_CHECKING:
    from datasets.models import Tenant

# A marked text: what no query keeps inside it (a mark in the text is replaced).
OPEN, CLOSE = "⟦", "⟧"
_MARKED = re.compile(f"{OPEN}([^{CLOSE}]*){CLOSE}")


def query_fingerprint(query: str) -> str:
    # Keyed with SECRET_KEY: a plain SHA-256 of a short question is one dictionary lookup
    # away from the question itself. Equal queries still share a hash, so repeats group.
    # surrogatepass: a lone surrogate (a command line's undecodable byte) still has a hash.
    return salted_hmac("kbplatform.audit.query", query.encode("utf-8", "surrogatepass"),
                       algorithm="sha256").hexdigest()


def _hashed(text: str) -> str:
    # Equal texts look alike, so an operator still sees whether a rewrite changed anything.
    return f"{len(text)} characters #{query_fingerprint(text)[:8]}"


def audited_text(text: str) -> str:
    """A query, or a query made of one (a rewrite, a correction), as a trace words it: marked,
    so that the audit keeps it only where raw queries are kept (`texts_hidden`)."""
    return f"{OPEN}{text.replace(OPEN, '[').replace(CLOSE, ']')}{CLOSE}"


def texts_hidden(value: Any) -> tuple[Any, bool]:
    """`value` (JSON: a trace) with every marked text worded as its length and keyed hash,
    and whether it held any. Containers are copied only where something changed."""
    if isinstance(value, str):
        if OPEN not in value:
            return value, False
        hidden = _MARKED.sub(lambda m: _hashed(m.group(1)), value)
        return hidden, hidden != value
    if isinstance(value, dict):
        pairs = {k: texts_hidden(v) for k, v in value.items()}
        if any(found for _, found in pairs.values()):
            return {k: v for k, (v, _) in pairs.items()}, True
        return value, False
    if isinstance(value, list):
        items = [texts_hidden(v) for v in value]
        if any(found for _, found in items):
            return [v for v, _ in items], True
        return value, False
    return value, False


@dataclass(frozen=True)
class RawQueries:
    """Whether a tenant's question text is kept, and for how many days."""

    kept: bool
    days: int


def raw_queries(tenant: Tenant | None) -> RawQueries:
    """The tenant's rule: kept where the deployment keeps every tenant's or the tenant opted
    in; for the tenant's own days, never more than the deployment's bound. A call with no
    tenant (refused before its key was known) follows the deployment's switch."""
    bound = settings.KB_AUDIT_RAW_QUERY_RETENTION_DAYS
    everyone = bool(settings.KB_AUDIT_STORE_RAW_QUERY)
    if tenant is None:
        return RawQueries(everyone, bound)
    return RawQueries(everyone or tenant.store_raw_queries,
                      min(tenant.raw_query_retention_days or bound, bound))
