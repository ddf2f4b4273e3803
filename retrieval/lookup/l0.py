"""What lookups need to know about the documents of (tenant, datasets), kept in sync with the
database in every web and worker process: the L0 index, the deactivated and the live documents,
the languages they are written in, each document's path, format and tags.

Each process caches one view per (tenant, datasets) with the datasets' document revisions
(bumped by datasets/documents/services.py with every change lookups must see). A lookup reads
them with its other revisions (revisions.py: one statement, whatever the number of documents) and
rebuilds the view when another process changed a document: no invalidation messages to lose.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from django.db.models import F, Q, QuerySet

from datasets.documents.links import DocumentLink
from datasets.documents.validity import Validity
from datasets.ingestion.language import UNKNOWN
from datasets.models import Document, Tenant
from datasets.tenancy.permissions import Access
from retrieval.lookup.revisions import Revisions
from retrieval.lookup.transform import L0Document, L0Index
from retrieval.types import DocumentMatch, Withheld

# Deactivated documents excluded in the Milvus filter itself, so that they do not take places
# in the top-k. Beyond this many, the rest are dropped by the lookup's guard after the search.
MAX_EXCLUDED = 1000
# What a view keeps for calls that may not read all of its documents: the documents withheld
# from each set of principals, and an L0 index for each set of documents withheld (a person's
# groups decide it); all dropped once this many are kept.
MAX_ACCESSES = 64
MAX_L0S = 32


@dataclass(frozen=True)
class DocumentFacts:
    """What a call's DocumentMatch reads of one document, case folded where it compares
    case aside."""

    path: str
    format: str
    tags: frozenset[str]
    fields: Mapping[str, frozenset[str]]

    def matches(self, match: DocumentMatch, tags: set[str]) -> bool:
        return ((not match.source or self.path.startswith(match.source))
                and (not match.format or self.format in match.format)
                and (not tags or bool(self.tags & tags))
                and all(self.fields.get(name, frozenset()).intersection(values)
                        for name, values in match.fields))


@dataclass(frozen=True)
class DocumentsView:
    l0: L0Index
    # Documents whose chunks Milvus may hold but no lookup may serve: deactivated ones, and
    # deleted ones whose removal the indexing worker has not applied yet.
    excluded: tuple[int, ...]
    # Every document a lookup may serve now (live and activated): the guard checks each hit
    # against it, whatever Milvus holds, without a query per lookup.
    live: frozenset[int]
    # Each live document's language (zh, en; one without text yet has none): a question in
    # another language than those of the documents its caller may read is translated
    # (lookup/graph/translate.py).
    language: Mapping[int, str]
    # Each live document's source path, format, tags and the fields its tenant declared: what
    # a call's DocumentMatch reads.
    facts: Mapping[int, DocumentFacts] = field(
        default_factory=lambda: MappingProxyType({}))
    # Each live document's link parts and validity: what its evidence says of it.
    links: Mapping[int, DocumentLink] = field(default_factory=lambda: MappingProxyType({}))
    validity: Mapping[int, Validity] = field(default_factory=lambda: MappingProxyType({}))
    # The readers of each live document that has any (datasets/tenancy/permissions.py), the live
    # documents whose rows in the index may not name their readers yet, and the documents'
    # frontmatter, for the L0 index of a call that may not read them all.
    restricted: Mapping[int, frozenset[str]] = field(
        default_factory=lambda: MappingProxyType({}))
    unsynced: frozenset[int] = frozenset()
    documents: tuple[L0Document, ...] = ()
    # Each set of principals: what it may not read, the live documents it may and their
    # languages.
    _readings: dict[frozenset[str] | None, tuple[Withheld, frozenset[int], frozenset[str]]] = \
        field(default_factory=dict, compare=False, repr=False)
    _l0s: dict[tuple[int, ...], L0Index] = field(default_factory=dict, compare=False,
                                                 repr=False)

    def withheld(self, access: Access) -> Withheld:
        """The live documents `access` may not read, those of them the index's rows may not
        say so of yet, and the readable ones whose rows may still name others."""
        return self._reading(access)[0]

    def readable(self, access: Access) -> frozenset[int]:
        """The live documents `access` may read."""
        return self._reading(access)[1]

    def languages(self, access: Access) -> frozenset[str]:
        """The languages of the live documents `access` may read: one it may not read never
        decides whether its question is translated."""
        return self._reading(access)[2]

    def _reading(self, access: Access) -> tuple[Withheld, frozenset[int], frozenset[str]]:
        """Worked out once a view for each set of principals: a lookup asks several times
        (its filter, then the guard after each search round)."""
        if not self.restricted and not self.unsynced:
            return Withheld(restricted=False), self.live, self._all_languages
        with _lock:
            found = self._readings.get(access.principals)
        if found is None:
            hidden = frozenset(doc for doc, readers in self.restricted.items()
                               if not access.may_read(readers))
            # The unsynced ones by id, the most MAX_EXCLUDED each: a longer list costs every
            # search more than the guard after it (which drops any other restricted hit).
            found = (Withheld(tuple(sorted(hidden)),
                              tuple(sorted(self.unsynced & hidden))[:MAX_EXCLUDED],
                              tuple(sorted(self.unsynced - hidden))[:MAX_EXCLUDED]),
                     self.live - hidden,
                     frozenset(language for doc, language in self.language.items()
                               if doc not in hidden) if hidden else self._all_languages)
            with _lock:
                if len(self._readings) >= MAX_ACCESSES:
                    self._readings.clear()
                self._readings[access.principals] = found
        return found

    @cached_property
    def _all_languages(self) -> frozenset[str]:
        return frozenset(self.language.values())

    def l0_for(self, access: Access) -> L0Index:
        """The L0 index of the documents `access` may read: the topics an EMPTY answer names
        and the hints a question gets never come of a document restricted to others."""
        withheld = self.withheld(access).all
        if not withheld:
            return self.l0
        with _lock:
            index = self._l0s.get(withheld)
        if index is None:
            hidden = set(withheld)
            index = L0Index(d for d in self.documents if int(d.doc_id) not in hidden)
            with _lock:
                if len(self._l0s) >= MAX_L0S:
                    self._l0s.clear()
                self._l0s[withheld] = index
        return index

    def matching(self, match: DocumentMatch) -> frozenset[int]:
        """The live documents the call's source / format / tags / fields match (each key
        given)."""
        tags = {tag.casefold() for tag in match.tags}
        return frozenset(doc for doc, facts in self.facts.items() if facts.matches(match, tags))


# (tenant, datasets) → (the datasets' (pk, created_at, revision), the view). created_at tells
# a dataset apart from an earlier one that had its pk (SQLite reuses the highest rowid); the
# revision is random, so a rolled-back change cannot leave a view that looks current.
_cache: dict[tuple[int, tuple[int, ...]], tuple[tuple[Any, ...], DocumentsView]] = {}
_lock = threading.Lock()


def _documents(tenant_id: int, dataset_ids: Sequence[int]) -> QuerySet[Document]:
    return Document.objects.filter(dataset__tenant_id=tenant_id, dataset_id__in=dataset_ids)


def documents_view(*, tenant_id: int, dataset_ids: Sequence[int],
                   revisions: Revisions) -> DocumentsView:
    """The view of `dataset_ids`, current as of `revisions` (read for the key's datasets,
    which the config may have narrowed to these)."""
    key = (tenant_id, tuple(sorted(dataset_ids)))
    fingerprint = tuple(r for r in revisions.datasets if r[0] in key[1])
    with _lock:
        cached = _cache.get(key)
        if cached and cached[0] == fingerprint:
            return cached[1]
    # The fields the tenant declared filterable: the only ones a call's filters may name
    # (declaring them renews the tenant's views: datasets/documents/services.py).
    declared = Tenant.objects.filter(pk=tenant_id).values_list(
        "filterable_fields", flat=True).first() or []
    rows = list(_documents(tenant_id, key[1]).filter(deleted=False, activated=True)
                .values_list("doc_id", "title", "domain", "keywords", "category", "language",
                             "source_path", "format", "pk", "url", "content_updated_at",
                             "reviewed_at", "valid_until", "owner", "fields", "readers",
                             "indexed_readers"))
    documents = [L0Document(doc_id=str(doc_id), title=title, domain=domain,
                            keywords=tuple(keywords or ()), category=category)
                 for doc_id, title, domain, keywords, category, *_ in rows]
    links, validity = {}, {}
    for doc_id, *_, fmt, pk, url, updated_at, reviewed_at, valid_until, owner, _, _, _ in rows:
        links[doc_id] = DocumentLink(pk=pk, format=fmt, url=url)
        validity[doc_id] = Validity(updated_at, reviewed_at, valid_until, owner)
    excluded = (_documents(tenant_id, key[1])
                .filter(Q(deleted=False, activated=False) | Q(deleted=True,
                                                             synced_revision__lt=F("revision")))
                .order_by("-updated_at").values_list("doc_id", flat=True)[:MAX_EXCLUDED])
    view = DocumentsView(l0=L0Index(documents), excluded=tuple(sorted(excluded)),
                         live=frozenset(int(d.doc_id) for d in documents),
                         language=MappingProxyType({row[0]: row[5] for row in rows
                                                    if row[5] != UNKNOWN}),
                         facts=MappingProxyType({
                             doc_id: DocumentFacts(
                                 path, fmt, frozenset(str(k).casefold() for k in keywords or ()),
                                 {name: frozenset(str(v).casefold() for v in values)
                                  for name, values in (named or {}).items()
                                  if name in declared})
                             for doc_id, _, _, keywords, _, _, path, fmt, *_, named, _, _
                             in rows}),
                         links=MappingProxyType(links), validity=MappingProxyType(validity),
                         restricted=MappingProxyType({row[0]: frozenset(row[-2]) for row in rows
                                                      if row[-2]}),
                         unsynced=frozenset(row[0] for row in rows if row[-1] != row[-2]),
                         documents=tuple(documents))
    with _lock:
        _cache[key] = (fingerprint, view)
    return view
