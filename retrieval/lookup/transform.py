"""L0 query understanding: domain / keyword hints and an optional category filter.

L0 comes from document frontmatter. It is a hint for the search (seed 000 §8), never evidence:
nothing here returns document text, and a document matching by keyword is not a result.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from retrieval.analysis import MIN_TERM_CHARS, contains_term, normalize_text
from retrieval.types import QueryHints

# Words joined the way code joins them: com.example.cache.LocalCache, MALLOC_ARENA_MAX, a/b.
# (Not by hyphens: redis-cli and kube-proxy name their domain.)
_COMPOUND = re.compile(r"[0-9a-z]+(?:[_.:/\\][0-9a-z]+)+")


@dataclass(frozen=True)
class L0Document:
    """Frontmatter of one document (as in datasets.Document)."""

    doc_id: str
    title: str = ""
    domain: str = ""
    keywords: tuple[str, ...] = ()
    category: str = ""


@dataclass(frozen=True)
class _Domain:
    name: str
    terms: frozenset[str]  # normalized: the domain name, titles and keywords
    categories: frozenset[str]
    keywords: tuple[str, ...]  # as written in the frontmatter, first seen first


class L0Index:
    """An immutable snapshot of the frontmatter of the visible documents."""

    def __init__(self, documents: Iterable[L0Document]) -> None:
        terms: dict[str, set[str]] = {}
        categories: dict[str, set[str]] = {}
        names: dict[str, str] = {}
        written: dict[str, dict[str, str]] = {}  # domain → normalized keyword → as written
        keywords: set[str] = set()
        domain_of: dict[str, str] = {}
        for doc in documents:
            doc_keywords = {normalize_text(k).strip() for k in doc.keywords}
            keywords |= doc_keywords
            domain = normalize_text(doc.domain).strip()
            if not domain:
                continue
            names.setdefault(domain, doc.domain.strip())
            domain_of[doc.doc_id] = names[domain]
            terms.setdefault(domain, {domain}).update(
                doc_keywords | {normalize_text(doc.title).strip()})
            categories.setdefault(domain, set()).add(doc.category.strip())
            for keyword in doc.keywords:
                written.setdefault(domain, {}).setdefault(normalize_text(keyword).strip(),
                                                          keyword.strip())
        self._domains: Mapping[str, _Domain] = MappingProxyType({
            key: _Domain(names[key], frozenset(t for t in terms[key] if len(t) >= MIN_TERM_CHARS),
                         frozenset(categories[key]),
                         tuple(w for k, w in written.get(key, {}).items()
                               if len(k) >= MIN_TERM_CHARS))
            for key in sorted(terms)
        })
        self._domain_of: Mapping[str, str] = MappingProxyType(domain_of)
        # The domains by how many documents they hold, most first (then by name).
        counts = Counter(domain_of.values())
        self._by_size = tuple(sorted(counts, key=lambda name: (-counts[name], name)))
        self._keywords = frozenset(k for k in keywords if len(k) >= MIN_TERM_CHARS)
        self._terms = self._keywords.union(*(d.terms for d in self._domains.values()))

    def match(self, query: str) -> QueryHints:
        # A compound identifier is one term: "cache" in com.example.cache.LocalCache says
        # nothing of the query's domain (and must not filter the search to it).
        text = _COMPOUND.sub(lambda m: m.group(0) if m.group(0) in self._terms else " ",
                             normalize_text(query))
        domains = [d for d in self._domains.values()
                   if any(contains_term(text, term) for term in d.terms)]
        keywords = sorted(k for k in self._keywords if contains_term(text, k))
        category: str | None = None
        # Filtering narrows recall, so only an unambiguous hint may do it: one domain whose
        # documents all carry the same, non-empty category.
        if len(domains) == 1 and len(domains[0].categories) == 1:
            category = next(iter(domains[0].categories)) or None
        return QueryHints(domains=tuple(sorted(d.name for d in domains)),
                          keywords=tuple(keywords), category_filter=category)


    def nearest_domains(self, hints: QueryHints, doc_ids: Iterable[str],
                        limit: int) -> tuple[str, ...]:
        """The domains these documents cover, nearest to a question first: those its words
        named (`hints`), then those of the documents its search came closest to (`doc_ids`,
        best first), then the others by their documents' count."""
        near = (*hints.domains, *(self._domain_of[d] for d in doc_ids if d in self._domain_of),
                *self._by_size)
        return tuple(dict.fromkeys(near))[:limit]

    def domain_keywords(self, domains: Iterable[str]) -> tuple[str, ...]:
        """The frontmatter keywords of `domains` (names as in QueryHints.domains)."""
        out: dict[str, str] = {}
        for name in domains:
            domain = self._domains.get(normalize_text(name).strip())
            for keyword in domain.keywords if domain else ():
                out.setdefault(normalize_text(keyword), keyword)
        return tuple(out.values())


class KnowledgeQueryTransformer:
    """query → QueryHints from the L0 index."""

    def __init__(self, index: L0Index) -> None:
        self._index = index

    def transform(self, query: str) -> QueryHints:
        if not query.strip():
            return QueryHints()
        return self._index.match(query)
