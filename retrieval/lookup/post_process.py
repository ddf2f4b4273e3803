"""Post-processing: one quality scale across modes, chunk identity, dedup, limits, relevance.

Seed 000 §6.2 / §7: the order is the store's order (the fused order for hybrid), changed here
only by what a config asks for (the relevance model's order of the first ten, the recency
prior); L0 overlap only explains a hit (`hit_reasons`). Thresholds look at the gate
quality, which prefers the absolute dense L2 distance over the rank, because a rank says
nothing about whether the best hit is any good, and at the query's own words in the chunk's
text (`_judged`); or, when the config asks for it, at the embedder's relevance model's
probability (`_modelled`, relevance.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from audit.types import DropReason
from datasets.documents.evidence import ANCHOR_DIGITS, EvidenceKey
from datasets.documents.links import stored_lines
from datasets.ingestion.language import text_language
from datasets.ingestion.locations import Location
from retrieval.analysis import contains_term, normalize_text
from retrieval.lexical import QueryTerms, query_terms, vocabulary_terms
from retrieval.lookup import relevance
from retrieval.lookup.relevance import RelevanceModel
from retrieval.types import (
    RRF_K,
    PostProcessed,
    QueryHints,
    RelevanceLevel,
    ScoredChunk,
    SearchHit,
    SearchMode,
)

# How much of a calibrated dense quality a chunk that shares none of the query's content terms
# loses before the REFERENCE threshold (fitted on the hit-test set's `fit` half; see
# docs/benchmarks.md, "Hit test").
LEXICAL_DISCOUNT = 0.3
# The query's words looked up in the text of this many best candidates, and kept at most: a
# few terms per lookup, read from text the gate has in memory anyway (audit/gaps.py).
VOCABULARY_HITS = 5
VOCABULARY_TERMS = 4


class RetrievalScoreNormalizer:
    """Raw scores → quality in [0, 1]."""

    def __init__(self, max_l2_distance: float) -> None:
        if not (math.isfinite(max_l2_distance) and max_l2_distance > 0):
            raise ValueError("max_l2_distance must be a positive number")
        self.max_l2_distance = max_l2_distance

    def dense_quality(self, l2: float) -> float:
        if math.isnan(l2):
            return 0.0
        return 1.0 - min(max(l2, 0.0), self.max_l2_distance) / self.max_l2_distance

    def rank_quality(self, rank: int, n: int) -> float:
        """Linear in this round's rank: 1 → 1.0 … n → 1/n. Fused RRF scores are not L2."""
        if n < 1:
            return 0.0
        rank = min(max(rank, 1), n)
        return (n - rank + 1) / n

    def gate_quality(self, hit: SearchHit, *, mode: SearchMode, rank: int, n: int) -> float:
        """Quality used against the thresholds: the hit's dense L2 when known, else its rank."""
        if hit.dense_l2 is not None:
            return self.dense_quality(hit.dense_l2)
        if mode == "dense":  # a dense hit's score is its L2 distance
            return self.dense_quality(hit.score)
        return self.rank_quality(rank, n)


_ANCHOR = re.compile(f"[0-9a-f]{{{ANCHOR_DIGITS}}}")


def _text(metadata: dict[str, Any], key: str) -> str:
    value = metadata.get(key)
    return "" if value is None else str(value)


def _int(metadata: dict[str, Any], key: str) -> int | None:
    text = _text(metadata, key).strip()
    return int(text) if text.isdigit() and len(text) <= 19 else None


def _chunk_index(metadata: dict[str, Any]) -> int | None:
    value = metadata.get("chunkIndex")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def evidence_key_of(hit: SearchHit) -> str:
    """The id the chunk is served as (datasets/documents/evidence.py): docId#{anchor} when its row
    holds one, else docId#chunk-{chunkIndex}; fallback vector:{chunk_id}; fallback
    rank:{rank} (seed 000 §7)."""
    doc_id = _text(hit.metadata, "docId").strip()
    anchor = _text(hit.metadata, "anchor")
    if doc_id and _ANCHOR.fullmatch(anchor):
        return str(EvidenceKey(doc_id, anchor=anchor))
    index = _chunk_index(hit.metadata)
    if doc_id and index is not None:
        return str(EvidenceKey(doc_id, index))
    if hit.chunk_id:
        return f"vector:{hit.chunk_id}"
    return f"rank:{hit.rank}"


def searchable_text(hit: SearchHit) -> str:
    """The chunk's title, breadcrumb and content, through normalize_text."""
    meta = hit.metadata
    return normalize_text(" ".join((_text(meta, "title"), _text(meta, "breadcrumb"),
                                    hit.content)))


def _normalised(text: str) -> str:
    """What two copies of a chunk share: its words, whitespace and case aside."""
    return " ".join(text.split()).casefold()


def _hit_reasons(hit: SearchHit, hints: QueryHints, terms: QueryTerms) -> tuple[str, ...]:
    meta = hit.metadata
    reasons = []
    if hints.keywords or terms.identifiers:  # normalising the text is the costly part
        text = searchable_text(hit)
        reasons = [f"keyword:{k}" for k in hints.keywords if contains_term(text, k)]
        reasons += [f"identifier:{t}" for t in terms.identifiers_in(text)]
    domain = normalize_text(_text(meta, "domain")).strip()
    reasons += [f"domain:{d}" for d in hints.domains if domain and normalize_text(d) == domain]
    category = _text(meta, "category")
    if hints.category_filter and category == hints.category_filter:
        reasons.append(f"category:{category}")
    return tuple(reasons)


class _Probabilities:
    """The probabilities each model gives the judged candidates (`signals`: their documents
    and signals; None when no model reads them), each model's worked out once a round."""

    def __init__(self, signals: list[tuple[str, relevance.ChunkSignals]] | None) -> None:
        self.signals = signals
        self._of: dict[int, list[float]] = {}

    def of(self, model: RelevanceModel) -> list[float]:
        assert self.signals is not None
        if id(model) not in self._of:
            self._of[id(model)] = [model.probability(s) for _, s in self.signals]
        return self._of[id(model)]

    def best(self, model: RelevanceModel) -> dict[str, float]:
        """Each document's highest probability among its candidates."""
        assert self.signals is not None
        best: dict[str, float] = {}
        for (document, _), p in zip(self.signals, self.of(model), strict=True):
            best[document] = max(p, best.get(document, 0.0))
        return best

    def best_first(self, model: RelevanceModel) -> list[int]:
        """The candidates' indexes, each document by its best probability (at a tie, the
        one first in the search), its candidates by theirs, ties in the search's order."""
        assert self.signals is not None
        documents = [document for document, _ in self.signals]
        best, probabilities = self.best(model), self.of(model)
        first: dict[str, int] = {}
        for i, document in enumerate(documents):
            first.setdefault(document, i)
        return sorted(range(len(documents)), key=lambda i: (
            -best[documents[i]], first[documents[i]], -probabilities[i], i))


def _below(chunk: ScoredChunk, support: float) -> str:
    """A dropped chunk's reason in the audit's compact form: below:quality[/support]."""
    lexical = f"/{support:.3f}" if support != chunk.quality else ""
    return f"{DropReason.BELOW}:{chunk.quality:.3f}{lexical}"


class KnowledgeEvidencePostProcessor:
    """Search hits of one round → at most `return_n` relevant chunks, in the store's order
    (or the relevance model's, or the recency prior's, where the config asks)."""

    def __init__(self, return_n: int, max_chunks_per_document: int, reference_threshold: float,
                 precise_threshold: float, *, max_l2_distance: float = 2.0,
                 model: RelevanceModel | None = None,
                 rater: RelevanceModel | None = None,
                 orderer: RelevanceModel | None = None) -> None:
        if return_n < 1 or max_chunks_per_document < 1:
            raise ValueError("return_n and max_chunks_per_document must be at least 1")
        if not 0.0 <= reference_threshold <= precise_threshold <= 1.0:
            raise ValueError("need 0 <= reference_threshold <= precise_threshold <= 1")
        self.return_n = return_n
        self.max_chunks_per_document = max_chunks_per_document
        self.reference_threshold = reference_threshold
        self.precise_threshold = precise_threshold
        self.normalizer = RetrievalScoreNormalizer(max_l2_distance)
        # None: the gate reads each chunk's calibrated distance and words (`_judged`);
        # a model: its probability is the quality and the support (relevance.py).
        self.model = model
        # The model that rates each answer (`PostProcessed.ratings`), whatever the gate: the
        # lookup's choice between a question's search and its translation's
        # (judge_translation); None: answers are not rated.
        self.rater = rater
        # The model that orders the first PLACES candidates (relevance_order); None: they
        # keep the store's order.
        self.orderer = orderer

    @property
    def judge(self) -> str:
        """What the gate reads (and what orders the candidates), as the trace names it."""
        if self.precise_threshold == 0:
            gate = "no gate"
        elif self.model is None:
            gate = "DISTANCE gate"
        else:
            gate = f"MODEL ({self.model.embedder}) gate, fit {self.model.fingerprint}"
        if self.orderer is None:
            return gate
        return (f"{gate}; ordered by the relevance model ({self.orderer.embedder}), "
                f"fit {self.orderer.fingerprint}")

    def process(self, hits: Sequence[SearchHit], mode: SearchMode, hints: QueryHints,
                query: str = "", prior: Callable[[str], float] | None = None
                ) -> PostProcessed:
        """The gate reads each chunk's quality and its lexical support (see `_judged`);
        `query` is the caller's question, whose own words the chunks' text is checked for.
        The orderer (relevance_order) orders the first PLACES judged chunks by its
        probability, then `prior` (the recency prior: a document id → its weight, 0.5-1)
        orders them by weight / (RRF_K + place), before the limits pick: each chunk's quality
        and verdict, and so the answer's relevance level, stay the gate's; which of the
        passing chunks fill return_n and the per-document limit follows the new order."""
        ordered = sorted(hits, key=lambda h: h.rank)  # stable: ties keep the store's order
        terms = query_terms(query)
        hit_of: dict[str, SearchHit] = {}
        places: list[int] = []
        dropped: list[tuple[str, str]] = []
        for position, hit in enumerate(ordered, start=1):
            key = evidence_key_of(hit)
            if key in hit_of:  # the first (best-ranked) occurrence wins
                dropped.append((key, DropReason.DUPLICATE))
                continue
            hit_of[key] = hit
            places.append(position)
        unique = list(hit_of.items())
        signals = self._signals(unique, mode, query, terms)
        probabilities = _Probabilities(signals)
        verdicts = self._modelled(probabilities, len(unique))
        if verdicts is None:
            verdicts = [self._judged(hit, self.normalizer.gate_quality(
                hit, mode=mode, rank=position, n=len(ordered)), terms, distance_known=(
                hit.dense_l2 is not None or mode == "dense"))
                for (_, hit), position in zip(unique, places, strict=True)]
        judged = [(self._scored(hit, key, quality, mode), support)
                  for (key, hit), (quality, support) in zip(unique, verdicts, strict=True)]
        if self.orderer is not None and signals is not None:
            order = probabilities.best_first(self.orderer)  # the first PLACES; the rest stay
            judged = [judged[i] for i in order] + judged[len(order):]
        if prior is not None:
            weighted = sorted(enumerate(judged, 1), key=lambda pair: -prior(pair[1][0].doc_id)
                              / (RRF_K + pair[0]))
            judged = [pair for _, pair in weighted]
        top_quality = max((c.quality for c, _ in judged), default=0.0)
        top_support = max((support for _, support in judged), default=0.0)
        level = (RelevanceLevel.PRECISE if top_quality >= self.precise_threshold else
                 RelevanceLevel.REFERENCE if top_support >= self.reference_threshold else
                 RelevanceLevel.NONE)
        best = ordered[:VOCABULARY_HITS]
        vocabulary = vocabulary_terms(
            query, [f"{_text(h.metadata, 'title')} {h.content}" for h in best],
            limit=VOCABULARY_TERMS) if query else ()
        if level is RelevanceLevel.NONE:
            # Nothing relevant: the answer is EMPTY, not the least bad junk.
            dropped += [(chunk.evidence_key, _below(chunk, support)) for chunk, support in judged]
            return PostProcessed(chunks=(), relevance_level=level, top_quality=top_quality,
                                 dropped=tuple(dropped), vocabulary=vocabulary,
                                 ratings=self._ratings(probabilities))

        kept: list[ScoredChunk] = []
        per_document: dict[str, int] = {}
        texts: dict[str, int] = {}  # a kept chunk's normalised text → its place in `kept`
        for chunk, support in judged:
            key = chunk.evidence_key
            # A kept chunk again — its title, headings and text (another copy of its
            # document: an upload and a source's, two datasets): named by the kept one,
            # spending no slot. Not with the gate off (evaluation ranks every copy).
            text = _normalised(f"{chunk.title}\n{chunk.breadcrumb}\n{chunk.content}") \
                if self.precise_threshold > 0 else None
            same = texts.get(text) if text is not None else None
            if same is not None:
                kept[same] = replace(kept[same], also_in=(*kept[same].also_in, chunk))
                dropped.append((key, DropReason.SAME_TEXT))
                continue
            if len(kept) == self.return_n:
                dropped.append((key, DropReason.RETURN_N))
                continue
            # Below-reference chunks are dropped before the limits so they do not take the
            # place of a relevant chunk further down, and never sit under a precise hit.
            if support < self.reference_threshold and chunk.quality < self.precise_threshold:
                dropped.append((key, _below(chunk, support)))
                continue
            document = chunk.doc_id or key
            if per_document.get(document, 0) >= self.max_chunks_per_document:
                dropped.append((key, DropReason.PER_DOCUMENT))
                continue
            per_document[document] = per_document.get(document, 0) + 1
            if text is not None:
                texts[text] = len(kept)
            # Explained here, for the few kept: the reasons read the chunk's whole text.
            kept.append(replace(chunk, hit_reasons=_hit_reasons(hit_of[key], hints, terms)))
        return PostProcessed(chunks=tuple(kept), relevance_level=level, top_quality=top_quality,
                             dropped=tuple(dropped), vocabulary=vocabulary,
                             ratings=self._ratings(probabilities))

    def _judging(self) -> bool:
        return self.model is not None and self.precise_threshold > 0

    def _signals(self, unique: Sequence[tuple[str, SearchHit]], mode: SearchMode, query: str,
                 terms: QueryTerms) -> list[tuple[str, relevance.ChunkSignals]] | None:
        """The relevance signals of the first PLACES candidates, each with its document, when
        a model judges or rates them or `fit_relevance` records them (it records them here);
        else None."""
        if not (self._judging() or self.rater is not None or self.orderer is not None
                or relevance.recording_active()):
            return None
        candidates = [relevance.CandidateText(
            document=_text(hit.metadata, "docId").strip() or key, text=searchable_text(hit),
            headings=f"{_text(hit.metadata, 'title')} {_text(hit.metadata, 'breadcrumb')}",
            language=text_language(hit.content),
            dense_quality=self._dense_quality(hit, mode), bm25_match=bool(hit.bm25_match))
            for key, hit in unique[:relevance.PLACES]]
        signals = relevance.pool_signals(query, terms, candidates)
        relevance.record([(_text(hit.metadata, "source"), s)
                          for (_, hit), s in zip(unique, signals, strict=False)])
        return [(c.document, s) for c, s in zip(candidates, signals, strict=True)]

    def _modelled(self, probabilities: _Probabilities,
                  candidates: int) -> list[tuple[float, float]] | None:
        """(quality, support) of each candidate by the relevance model: its probability for
        the first PLACES, 0 for the rest; None when the model does not judge (none, or the
        gate off)."""
        if not self._judging() or probabilities.signals is None:
            return None
        assert self.model is not None
        verdicts = [(p, p) for p in probabilities.of(self.model)]
        return verdicts + [(0.0, 0.0)] * (candidates - len(verdicts))

    def _ratings(self, probabilities: _Probabilities) -> dict[str, float] | None:
        """Each judged document's highest probability by the rater; None: no rater."""
        if self.rater is None or probabilities.signals is None:
            return None
        return probabilities.best(self.rater)

    def _dense_quality(self, hit: SearchHit, mode: SearchMode) -> float:
        """The calibrated distance, 0 when the hit's distance is not known."""
        if hit.dense_l2 is not None:
            return self.normalizer.dense_quality(hit.dense_l2)
        return self.normalizer.dense_quality(hit.score) if mode == "dense" else 0.0

    def _judged(self, hit: SearchHit, quality: float, terms: QueryTerms, *,
                distance_known: bool) -> tuple[float, float]:
        """(quality, support): quality decides PRECISE, support REFERENCE.

        A chunk that contains every identifier of the query is PRECISE whatever its dense
        distance. Otherwise a calibrated distance is discounted by up to LEXICAL_DISCOUNT
        for the query's content terms the chunk lacks: a chunk that shares none of the
        query's words needs a closer distance to count as a reference (an off-topic question
        still has a nearest chunk). The text is read only where it can change a decision:
        support is compared with the reference threshold alone, so outside the band the
        discount can reach, the quality stands for it.
        """
        if self.precise_threshold == 0:  # no gate (evaluation): both thresholds are 0
            return quality, quality
        text: str | None = None
        if terms.identifiers and quality < self.precise_threshold:
            text = searchable_text(hit)
            if len(terms.identifiers_in(text)) == len(terms.identifiers):
                return self.precise_threshold, self.precise_threshold
        in_band = quality * (1.0 - LEXICAL_DISCOUNT) < self.reference_threshold <= quality
        if not (distance_known and terms.terms and in_band):  # a rank is no distance
            return quality, quality
        coverage = terms.coverage(text if text is not None else searchable_text(hit))
        return quality, quality * (1.0 - LEXICAL_DISCOUNT * (1.0 - coverage))

    @staticmethod
    def _scored(hit: SearchHit, key: str, quality: float, mode: SearchMode) -> ScoredChunk:
        meta = hit.metadata
        dense_l2 = hit.dense_l2 if hit.dense_l2 is not None else (
            hit.score if mode == "dense" else None)
        return ScoredChunk(
            evidence_key=key,
            doc_id=_text(meta, "docId").strip(),
            chunk_index=_chunk_index(meta),
            content=hit.content,
            title=_text(meta, "title"),
            breadcrumb=_text(meta, "breadcrumb"),
            source=_text(meta, "source"),
            category=_text(meta, "category"),
            original_rank=hit.rank,
            raw_score=hit.score,
            quality=quality,
            dense_l2=dense_l2,
            dataset_id=_int(meta, "datasetId"),
            location=Location.stored(meta.get("location")),
            commit=_text(meta, "commit"),
            revision=_text(meta, "contentHash"),
            lines=stored_lines(meta.get("lines")),
        )
