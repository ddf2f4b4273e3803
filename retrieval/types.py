"""Typed data passed between the lookup stages. No stage shares a mutable dict."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Literal, Protocol

from datasets.documents.validity import Validity
from datasets.ingestion.locations import Location
from datasets.tenancy.permissions import ANONYMOUS, Access

SearchMode = Literal["dense", "hybrid", "bm25", "milvus_hybrid"]


class EvidenceStatus(StrEnum):
    READY = "READY"
    EMPTY = "EMPTY"
    UNAVAILABLE = "UNAVAILABLE"


class RelevanceLevel(StrEnum):
    PRECISE = "PRECISE"
    REFERENCE = "REFERENCE"
    NONE = "NONE"


@dataclass(frozen=True)
class MetadataFilter:
    """RagConfig.metadata_filters, validated: document fields stored on every chunk entity.
    An empty tuple or None matches everything."""

    category: tuple[str, ...] = ()
    domain: tuple[str, ...] = ()
    business_key: tuple[str, ...] = ()
    file_name: tuple[str, ...] = ()
    updated_after: int | None = None  # epoch seconds, inclusive
    updated_before: int | None = None  # epoch seconds, exclusive

    def __bool__(self) -> bool:
        return bool(self.field_names())

    def field_names(self) -> list[str]:
        """The keys it compares (what the audit says of a call's filters: never the values)."""
        return [f.name for f in fields(self) if getattr(self, f.name) not in ((), None)]


@dataclass(frozen=True)
class DocumentMatch:
    """A call's filters on what the documents' rows hold and the chunks in Milvus do not: its
    source path, format, frontmatter tags and the frontmatter fields its tenant declared
    filterable. Resolved to the documents they match among those the lookup may serve, which
    narrow it as `document_ids` do. An empty tuple matches everything."""

    source: tuple[str, ...] = ()  # path prefixes (a folder, a file's path)
    format: tuple[str, ...] = ()  # md, pdf, docx...
    tags: tuple[str, ...] = ()  # frontmatter keywords, case aside
    # (field, its values): each field must hold one of its values, case aside.
    fields: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.field_names())

    def field_names(self) -> list[str]:
        named = [f.name for f in fields(self) if f.name != "fields" and getattr(self, f.name)]
        return [*named, *(f"fields.{name}" for name, _ in self.fields)]

    def undeclared(self, declared: Sequence[str]) -> list[str]:
        """The fields it filters on that are not among `declared` (the tenant's)."""
        return [name for name, _ in self.fields if name not in declared]


@dataclass(frozen=True)
class CallFilters:
    """What one call asked to narrow its search to (`filters` of lookup_knowledge and the
    answering tools): ANDed inside the Milvus query with the key's scope and the config's
    filters, so it can only narrow. `documents` None: any document; (): none that may be
    served (every id given was malformed, unknown, another tenant's or out of the search's
    datasets), which searches nothing."""

    metadata: MetadataFilter = MetadataFilter()
    documents: tuple[int, ...] | None = None
    match: DocumentMatch = DocumentMatch()

    def __bool__(self) -> bool:
        return bool(self.metadata) or self.documents is not None or bool(self.match)

    def field_names(self) -> list[str]:
        """The keys it filters on (what the audit keeps: never the values)."""
        return [*self.metadata.field_names(), *self.match.field_names()]


@dataclass(frozen=True)
class Withheld:
    """The live documents restricted to others than a search's access, as its lookup resolves
    them from its view of the documents: all of them (left out by id where the collection's
    rows do not name readers), and, where they do, the documents whose rows may not name their
    readers yet (the indexing worker writes a change there): those withheld, and those the
    access may read."""

    all: tuple[int, ...] = ()
    unsynced: tuple[int, ...] = ()
    unsynced_readable: tuple[int, ...] = ()
    # False: no live document of the searched datasets has readers or rows that may still
    # name some, so the search compares no readers at all.
    restricted: bool = True


@dataclass(frozen=True)
class SearchFilters:
    """Built on the server from the caller's API key and the tenant's RagConfig; never taken
    from a request body."""

    tenant_id: int
    dataset_ids: tuple[int, ...]
    category: str | None = None  # the L0 category hint
    # Documents no lookup may serve (deactivated, or deleted and not yet removed from Milvus).
    excluded_doc_ids: tuple[int, ...] = ()
    metadata: MetadataFilter = MetadataFilter()  # the config's metadata_filters
    call: CallFilters = CallFilters()  # what the call itself narrowed to
    # For whom it reads (the person an agent acts for; datasets/tenancy/permissions.py):
    # compared with the rows' readers inside the Milvus filter, with the documents the lookup
    # resolved.
    access: Access = ANONYMOUS
    withheld: Withheld = Withheld()


# The default fusion: RagSettings' defaults (its knobs are declared in ragconfig, which this base
# cannot import), so a request that names no fusion fuses as a lookup does.
FUSION_METHOD = "ADAPTIVE"
RRF_K = 5
DENSE_WEIGHT = 0.3
BM25_WEIGHT = 0.7


@dataclass(frozen=True)
class SearchRequest:
    query_text: str
    query_vector: list[float] | None  # None for mode "bm25"
    mode: SearchMode
    limit: int
    filters: SearchFilters
    rrf_k: int = RRF_K
    dense_weight: float = DENSE_WEIGHT
    bm25_weight: float = BM25_WEIGHT
    # hybrid: RRF (weighted, rrf_k), CONVEX (normalised scores) or ADAPTIVE (CONVEX whose dense
    # share rises when BM25 matched few of the query's terms: retrieval/fusion.py)
    fusion_method: str = FUSION_METHOD
    # Measure the dense distance of hybrid hits the dense arm did not return (the relevance
    # gate reads it); a lookup whose gate and aggregation ignore it skips that work.
    distances: bool = True
    # Searched by the BM25 arm beside query_text, never embedded: the tenant's synonyms of
    # the query's terms (lookup/synonyms.py).
    bm25_terms: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchHit:
    """One candidate chunk as the vector store returned it."""

    chunk_id: str  # Milvus primary key = evidence key "{docId}#chunk-{n}"
    content: str
    metadata: dict[str, Any]  # docId, chunkIndex, title, breadcrumb, source, category, ...
    rank: int  # 1-based rank in the store's answer
    score: float  # raw: L2 for dense, fused RRF score for hybrid, BM25 for bm25
    dense_l2: float | None = None  # squared L2 of the hit's vector to the query, when known
    # Whether BM25 returned it (the query's terms matched it); None: not known (Milvus fused
    # the arms in one request).
    bm25_match: bool | None = False


class KnowledgeSearchPort(Protocol):
    def search(self, request: SearchRequest) -> list[SearchHit]: ...

    def fetch(self, filters: SearchFilters, *, limit: int, ids: Sequence[str] = (),
              doc_id: int | None = None, content: bool = True) -> list[SearchHit]:
        """Chunks by evidence key or of one document, within `filters`, unranked (rank 0)."""
        ...


@dataclass(frozen=True)
class QueryHints:
    """L0 hints from document frontmatter. A hint, never evidence."""

    domains: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    category_filter: str | None = None


@dataclass(frozen=True)
class ScoredChunk:
    evidence_key: str
    doc_id: str
    chunk_index: int | None
    content: str
    title: str
    breadcrumb: str
    source: str
    category: str
    original_rank: int
    raw_score: float
    quality: float  # 0..1, comparable across modes
    dense_l2: float | None = None
    hit_reasons: tuple[str, ...] = ()
    dataset_id: int | None = None  # the evidence guard checks it against the caller's scope
    location: Location | None = None  # the page, slide or sheet of the original it begins on
    commit: str = ""  # a git source's document: the commit its content came from
    revision: str = ""  # the content hash of the document version it was indexed from
    lines: tuple[int, int] | None = None  # the lines of the file it spans (markdown)
    url: str = ""  # where a person reads it (datasets/documents/links.py); set when it is served
    validity: Validity | None = None  # how current its document is; set when it is served
    # Lower-ranked candidates with the same text (an upload and a source's copy, two
    # datasets): collapsed into this one, so they spend no slot of their own.
    also_in: tuple[ScoredChunk, ...] = ()


@dataclass(frozen=True)
class PostProcessed:
    """Output of the post-processor: kept chunks in original rank order and the gate verdict."""

    chunks: tuple[ScoredChunk, ...]
    relevance_level: RelevanceLevel
    top_quality: float  # best gate quality among the deduplicated candidates; 0.0 when none
    # Each candidate the gate did not keep, and why, compactly (it is in every audited call):
    # duplicate | below:QUALITY[/SUPPORT] | per_document | return_n (audit/admin_display.py).
    dropped: tuple[tuple[str, str], ...] = ()
    # The query's words that the best candidates' text contains, kept or not (an EMPTY answer's
    # too): what a lookup was about in the knowledge base's own words (audit/gaps.py).
    vocabulary: tuple[str, ...] = ()
    # The relevance model's rating of each document among the first ten candidates (the
    # highest probability it gives one of its chunks there), when a lookup chooses between a
    # question's search and its translation's (judge_translation); None when not rated.
    ratings: Mapping[str, float] | None = None

    def rating(self) -> float:
        """The rating of the answer: its first chunk's document's (0 when EMPTY or not rated
        among the first ten)."""
        if not (self.ratings and self.chunks):
            return 0.0
        first = self.chunks[0]
        return self.ratings.get(first.doc_id or first.evidence_key, 0.0)

    def rated_with(self, other: PostProcessed) -> PostProcessed:
        """This answer, its ratings merged with another search's of the same question (each
        document's higher): an answer is rated by everything its search saw."""
        if self.ratings is None or other.ratings is None:
            return self
        merged = dict(other.ratings)
        for document, rating in self.ratings.items():
            merged[document] = max(rating, merged.get(document, 0.0))
        return replace(self, ratings=merged)


@dataclass(frozen=True)
class StageTrace:
    stage: str
    elapsed_ms: float
    candidates: tuple[tuple[str, float], ...] = ()  # (evidence key, score)
    note: str = ""
    dropped: tuple[tuple[str, str], ...] = ()  # (evidence key, why the stage dropped it)


@dataclass(frozen=True)
class RetryDecision:
    ran: bool
    reason: str


@dataclass(frozen=True)
class PackedEvidence:
    chunk: ScoredChunk
    excerpt: str
    truncated: bool


@dataclass(frozen=True)
class ContextPack:
    items: tuple[PackedEvidence, ...]
    total_chars: int
    truncated: bool


def call_id(given: str = "") -> str:
    """The agent's id for its call when it sent one, else a new `call_...`: the key of the
    call's canonical record and what routes it to an A/B arm. The one place ids are minted."""
    return given or f"call_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class LookupResult:
    """The internal, complete answer of one lookup: what the audit and traces are built from."""

    tool_call_id: str
    session_id: str
    query: str
    evidence_status: EvidenceStatus
    relevance_level: RelevanceLevel
    pack: ContextPack
    hints: QueryHints
    filters: SearchFilters
    mode: str  # "hybrid", "dense", … or "parallel:VECTOR+BM25": what the graph ran
    retry: RetryDecision
    traces: tuple[StageTrace, ...]
    config: dict[str, Any]
    config_version: int | None
    error: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    graph: dict[str, Any] = field(default_factory=dict)  # the plan, attempts, fallback
    # The evidence keys in their final order before packing (evaluation ranks by these).
    ranked: tuple[str, ...] = ()
    # What the lookup was about, in words of the tenant's documents: the L0 hints' domains and
    # keywords, then the query's words its candidates contain (at most TOPIC_TERMS).
    topic_terms: tuple[str, ...] = ()
    # EMPTY only, for the agent to route or ask instead of retrying blindly: the datasets it
    # searched (id, name) and the topics they cover, nearest to the question first.
    searched: tuple[tuple[int, str], ...] = ()
    covered_topics: tuple[str, ...] = ()
    experiment: tuple[int, str] | None = None  # (A/B test id, arm) when one routed the call
    config_id: int | None = None  # the RagConfig row whose config_version served; None: none
    index_version: int | None = None  # the index version searched; None: none (or a suite's)
