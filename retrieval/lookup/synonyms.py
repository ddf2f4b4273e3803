"""A tenant's synonym groups as lookups apply them: the other terms of every group the question
names are added to the text BM25 searches (never to the dense query, never to what anyone is
shown).

Each process caches the groups per tenant with the tenant's synonym revision (bumped by
ragconfig/synonyms.py with every write), as l0.py caches the documents: a lookup reads the
revision with its other revisions (revisions.py) and the groups again only when it changed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from retrieval.analysis import contains_term, normalize_text
from retrieval.lookup.revisions import Revisions
from retrieval.ragconfig.models import SYNONYM_SEPARATOR, SynonymGroup

# Every added term is one more term of the BM25 query: bounded, like the query transform's.
MAX_ADDED_TERMS = 32


@dataclass(frozen=True)
class SynonymExpansion:
    terms: tuple[str, ...] = ()  # added to the BM25 query text
    groups: tuple[str, ...] = ()  # the groups that added them, as the admin wrote them


class Synonyms:
    """An immutable snapshot of one tenant's groups."""

    def __init__(self, groups: Iterable[tuple[str, ...]]) -> None:
        self._groups = tuple(
            (SYNONYM_SEPARATOR.join(terms), tuple((term, normalize_text(term)) for term in terms))
            for terms in groups)

    def __bool__(self) -> bool:
        return bool(self._groups)

    def expand(self, query: str) -> SynonymExpansion:
        """The other terms of the groups a term of which the query contains (CJK as a
        substring, latin on word boundaries), those the query lacks, first seen first."""
        text = normalize_text(query)
        added: dict[str, str] = {}
        groups: list[str] = []
        for label, terms in self._groups:
            # `in` first: a plain substring test rules most groups out cheaply.
            if not any(key in text and contains_term(text, key) for _, key in terms):
                continue
            groups.append(label)
            for term, key in terms:
                if key not in added and not contains_term(text, key):
                    added[key] = term
        return SynonymExpansion(tuple(added.values())[:MAX_ADDED_TERMS], tuple(groups))


NO_SYNONYMS = Synonyms(())

# tenant → (its synonym revision, its groups).
_cache: dict[int, tuple[str, Synonyms]] = {}
_lock = threading.Lock()


def tenant_synonyms(*, tenant_id: int, revisions: Revisions) -> Synonyms:
    """The tenant's groups, current as of `revisions`."""
    revision = revisions.synonyms
    if revision is None:  # the tenant never had a group
        return NO_SYNONYMS
    with _lock:
        cached = _cache.get(tenant_id)
        if cached and cached[0] == revision:
            return cached[1]
    rows = SynonymGroup.objects.filter(tenant_id=tenant_id).order_by("pk")
    synonyms = Synonyms(row.term_list() for row in rows.only("terms"))
    with _lock:
        _cache[tenant_id] = (revision, synonyms)
    return synonyms
