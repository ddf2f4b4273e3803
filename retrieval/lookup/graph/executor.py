"""The executor: runs a retrieval-only graph for one query within one deadline.

transform → (attempt: retrieve per execution mode → aggregate → guard → rerank → gate; below
PRECISE (always, with judge_translation), translate and retrieve again with the translation →
quality) × correction → neighbours → pack. A stage that fails or overruns falls back to the
plain hybrid search when the graph allows it; a backend that is down (Milvus, the embedder, the
database) is never hidden behind a fallback: the caller answers UNAVAILABLE. The translation
never fails a lookup: without one, the question is searched alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from retrieval.lexical import query_terms
from retrieval.lookup.bilingual import other_language_terms
from retrieval.lookup.graph.aggregate import Aggregator, CandidateList
from retrieval.lookup.graph.plan import RetrievalGraph, fallback_graph
from retrieval.lookup.graph.quality import Quality, QualityAssessor
from retrieval.lookup.graph.registry import (
    RetrieverCall,
    RetrieverRun,
)
from retrieval.lookup.graph.run import (
    BACKEND_ERRORS,
    FALLBACK_GRACE_MS,
    Clock,
    Deadline,
    GraphOutcome,
    GraphParts,
    GraphRun,
    GraphTimeout,
    StageFailed,
    StageUnavailable,
    await_runs,
)
from retrieval.lookup.graph.translate import (
    Direction,
    bm25_with,
    direction_for,
    searched_together_first,
    vector_with,
)
from retrieval.lookup.post_process import evidence_key_of, searchable_text
from retrieval.lookup.transform import KnowledgeQueryTransformer
from retrieval.types import (
    PostProcessed,
    QueryHints,
    RelevanceLevel,
    RetryDecision,
    ScoredChunk,
    SearchFilters,
    SearchHit,
    SearchMode,
)

LEVELS = {RelevanceLevel.NONE: 0, RelevanceLevel.REFERENCE: 1, RelevanceLevel.PRECISE: 2}


def _less_relevant(one: PostProcessed, other: PostProcessed) -> bool:
    return LEVELS[one.relevance_level] < LEVELS[other.relevance_level]


class GraphExecutor:
    """Runs one graph for one lookup; `log` collects what ran for the audit."""

    def __init__(self, graph: RetrievalGraph, parts: GraphParts, log: GraphRun) -> None:
        self.graph = graph
        self.parts = parts
        self.log = log
        self.assessor = QualityAssessor()
        self._translation: str | None = None  # asked once, when a search first needs it
        self._direction: Direction | None = None  # which way, once per lookup (run)

    def run(self, query: str, filters: SearchFilters, clock: Clock) -> GraphOutcome:
        run = self.log
        deadline = Deadline(self.graph.timeout_ms)
        with clock.stage("transform"):
            hints = KnowledgeQueryTransformer(self.parts.l0_index()).transform(query)
        clock.record("transform", note=f"domains={list(hints.domains)} "
                                       f"category={hints.category_filter}")
        self._direction = direction_for(query, self.parts.languages)
        try:
            return self._run(self.graph, query, filters, hints, clock, run, deadline)
        except BACKEND_ERRORS:
            raise
        except Exception as exc:  # a stage failed or overran: fall back, or UNAVAILABLE
            reason = f"{type(exc).__name__}: {exc}"
            if not self.graph.fallback:
                raise StageFailed(reason) from exc
            run.fallback = reason
            clock.record("fallback", note=f"plain hybrid search because {reason}")
            grace = Deadline(max(deadline.remaining_s() * 1000, min(FALLBACK_GRACE_MS,
                                                                    self.graph.timeout_ms)))
            try:
                return self._run(fallback_graph(self.graph), query, filters, hints, clock,
                                 run, grace)
            except BACKEND_ERRORS:
                raise
            except Exception as again:  # the fallback overran too: UNAVAILABLE, never a 500
                raise StageFailed(f"{reason}; the fallback failed too: "
                                  f"{type(again).__name__}: {again}") from again

    def _translate(self, query: str, clock: Clock, deadline: Deadline) -> str:
        """The question in the other language, or "" (none needed, or none to be had); asked
        of the model once per lookup."""
        if self._translation is not None:
            return self._translation
        self._translation = ""
        translator, budget = self.parts.translator, self.graph.translation_budget_ms
        direction = self._direction  # None: every searched document is in its language
        if translator is None or budget is None or direction is None:
            return ""
        # At most half of what is left: the search keeps time for itself.
        timeout_s = min(budget / 1000, deadline.remaining_s() / 2)
        with clock.stage("translate"):
            translation = translator.translate(query, direction, timeout_s=timeout_s)
        clock.record("translate", note=translation.note())
        self.log.translation = translation.as_dict()
        self._translation = translation.text
        return translation.text

    # --- one graph: attempts with correction, then neighbours and the pack ----------------

    def _run(self, graph: RetrievalGraph, query: str, filters: SearchFilters,
             hints: QueryHints, clock: Clock, run: GraphRun,
             deadline: Deadline) -> GraphOutcome:
        best: tuple[PostProcessed, SearchFilters, RetryDecision, Quality | None,
                    RetrievalGraph] | None = None
        plan = graph
        quality: Quality | None = None
        for attempt in range(graph.max_attempts):
            change, searched = "as configured", query
            if attempt:
                deadline.check(f"correction attempt {attempt}")
                plan, change = graph.corrected(attempt)
                if quality is not None and quality.correction:
                    # The judge's better query is searched; the question judged stays the same.
                    searched = quality.correction
                    change += "; the judge's better query"
            result, used, retry = self._attempt(plan, query, searched, filters, hints, clock,
                                                deadline, attempt)
            quality = (self._assess(query, result.chunks, clock, deadline, attempt)
                       if plan.assess or graph.max_attempts > 1 else None)
            run.attempts.append({
                "attempt": attempt, "change": change, "execution": plan.execution,
                "retrievers": [r.name for r in plan.retrievers], "transform": plan.transform,
                "returned": len(result.chunks),
                "quality": None if quality is None else quality.score})
            if quality is not None:
                clock.record(f"quality[{attempt}]", note=quality.note())
            if best is None or (quality is not None and best[3] is not None
                                and quality.score > best[3].score):
                best = (result, used, retry, quality, plan)
            if quality is None or quality.score >= graph.quality_threshold:
                break
        assert best is not None
        result, used, retry, quality, plan = best
        if quality is not None and graph.assess and quality.score < graph.quality_threshold:
            # Below the bar the evidence may still help, but is never called precise.
            if result.relevance_level is RelevanceLevel.PRECISE:
                result = replace(result, relevance_level=RelevanceLevel.REFERENCE)
        chunks = result.chunks
        if graph.neighbours and chunks:
            deadline.check("neighbours")
            chunks = self._neighbours(graph, chunks, used, clock)
        deadline.check("pack")
        with clock.stage("pack"):
            pack = self.parts.packer.pack(chunks)
        clock.record("pack", hits=tuple((i.chunk.evidence_key, len(i.excerpt))
                                        for i in pack.items))
        return GraphOutcome(result=result, chunks=chunks, pack=pack, hints=hints, filters=used,
                            retry=retry, quality=quality, mode=plan.label())

    def _assess(self, query: str, chunks: tuple[ScoredChunk, ...], clock: Clock,
                deadline: Deadline, attempt: int) -> Quality:
        judge = self.parts.judge
        if judge is None:
            return self.assessor.assess(query, chunks)
        deadline.check("quality")
        with clock.stage(f"quality[{attempt}]"):
            return judge.assess(query, chunks, timeout_s=max(deadline.remaining_s(), 0.001))

    def _attempt(self, plan: RetrievalGraph, question: str, query: str,
                 filters: SearchFilters, hints: QueryHints, clock: Clock, deadline: Deadline,
                 attempt: int) -> tuple[PostProcessed, SearchFilters, RetryDecision]:
        """`query` searched (the question, or the judge's better query) alone, then, below
        PRECISE, together with the question's translation (when the searched documents hold
        the other language): the more relevant answer serves, the translated one at a tie.
        Searched together always, a question in its runbook's own language lost (a
        translation blurs a precise question); a PRECISE answer waits for no model (unless
        judge_translation, below).
        Where no searched document is in the question's language there is no runbook of its
        own for a translation to draw it away from: it is searched together from the start,
        once (docs/benchmarks.md, "Translation: the question and its translation").

        With judge_translation (and a relevance model for the embedder) every such question
        is translated, PRECISE or not, and the translation is also searched alone, in the
        question's place: its answer serves when it is no less relevant a level and the
        relevance model rates it higher (`_judged`; docs/benchmarks.md, "Which search serves:
        the relevance model chooses"). Not for a correction's better query: the translation
        is the question's."""
        suffix = f"[{attempt}]" if attempt else ""
        queries = self._queries(plan, query, hints, clock, deadline, suffix)
        vectors = self._vectors(plan, queries, clock)
        bm25 = self._bm25_terms(plan, queries, clock, suffix)

        def search(vectors: dict[str, list[float] | None], bm25: dict[str, tuple[str, ...]],
                   name: str) -> tuple[PostProcessed, SearchFilters, RetryDecision]:
            return self._rounds(plan, query, queries, vectors, bm25, filters, hints, clock,
                                deadline, name)

        alone = None
        together_first = searched_together_first(self._direction, self.parts.languages)
        # Both languages searched (the question's own search first), the question itself.
        judging = plan.judge_translation and query == question and not together_first
        rated = judging and self.parts.post.rater is not None
        if judging and not rated and self._direction is not None and not suffix:
            clock.record("judge_translation", note=(
                "the embedder has no fitted relevance model: as without judge_translation"))
        if not together_first:
            alone = search(vectors, bm25, suffix)
            if alone[0].relevance_level is RelevanceLevel.PRECISE and not rated:
                return alone
        translation = self._translate(question, clock, deadline)
        if not translation:
            return alone if alone is not None else search(vectors, bm25, suffix)
        # The queries' own vectors and terms, each with the translation's (translate.py).
        other = self._vectors(plan, (translation,), clock)[translation]
        if alone is not None and alone[0].relevance_level is RelevanceLevel.PRECISE:
            served = alone  # rated: a PRECISE answer is still judged against the translation's
        else:
            together = search({q: _with(v, other) for q, v in vectors.items()},
                              {q: (*bm25.get(q, ()), *bm25_with(translation)) for q in queries},
                              suffix + "[translated]")
            served = together
            if alone is not None:
                served, unserved = ((alone, together) if _less_relevant(together[0], alone[0])
                                    else (together, alone))
                # Rated by all the question's searches saw (as chosen on the fit halves).
                served = (served[0].rated_with(unserved[0]), served[1], served[2])
        if not rated:
            return served
        return self._judged(plan, served, translation, other, filters, hints, clock, deadline,
                            suffix)

    def _judged(self, plan: RetrievalGraph, served: tuple[PostProcessed, SearchFilters,
                                                            RetryDecision],
                translation: str, vector: list[float] | None, filters: SearchFilters,
                hints: QueryHints, clock: Clock, deadline: Deadline,
                suffix: str) -> tuple[PostProcessed, SearchFilters, RetryDecision]:
        """The translation searched alone, as if it were the question (its own words judged
        in the chunks), and its answer served in place of `served` when it is no less
        relevant a level and the relevance model rates it higher (chosen on the fit halves
        of the runbook sets, docs/benchmarks.md). Past the deadline, `served` serves."""
        stage = "judge_translation" + suffix
        try:
            bm25 = self._bm25_terms(plan, (translation,), clock, suffix + "[translation]")
            translated = self._rounds(plan, translation, (translation,),
                                      {translation: vector}, bm25, filters, hints, clock,
                                      deadline, suffix + "[translation]")
        except GraphTimeout as exc:
            clock.record(stage, note=f"the translation's own search ran out of time ({exc}): "
                                     "served the question's")
            return served
        mine, theirs = served[0].rating(), translated[0].rating()
        chosen = theirs > mine and not _less_relevant(translated[0], served[0])
        clock.record(stage, note=(
            f"the relevance model rated the translation's answer {theirs:.3f} "
            f"({translated[0].relevance_level}), the question's {mine:.3f} "
            f"({served[0].relevance_level}): served the "
            + ("translation's" if chosen else "question's")))
        return translated if chosen else served

    def _rounds(self, plan: RetrievalGraph, query: str, queries: Sequence[str],
                vectors: dict[str, list[float] | None], bm25: dict[str, tuple[str, ...]],
                filters: SearchFilters, hints: QueryHints, clock: Clock, deadline: Deadline,
                suffix: str) -> tuple[PostProcessed, SearchFilters, RetryDecision]:
        """One search of `queries` (their `vectors` and BM25 terms): narrowed to the L0
        hint's category, and also without it below PRECISE."""
        if not (plan.category_filter and hints.category_filter):
            reason = "no category hint" if plan.category_filter else "category hint not used"
            return (self._round(plan, query, queries, vectors, bm25, filters, hints, clock,
                                deadline, "retrieve" + suffix),
                    filters, RetryDecision(ran=False, reason=reason))
        narrowed = replace(filters, category=hints.category_filter)
        filtered = self._round(plan, query, queries, vectors, bm25, narrowed, hints, clock,
                               deadline, "retrieve_filtered" + suffix)
        if filtered.relevance_level is RelevanceLevel.PRECISE:
            return filtered, narrowed, RetryDecision(
                ran=False, reason="the category-filtered search was PRECISE")
        # A category must not hide a better document (one of another category, or of none,
        # like an uploaded PDF): below PRECISE the whole scope is searched too, and served
        # when it is judged more relevant. At the same level the category's answer stays:
        # the wider search's first hit, then of another domain, was the wrong runbook more
        # often (docs/benchmarks.md, "The L0 category filter").
        unfiltered = self._round(plan, query, queries, vectors, bm25, filters, hints, clock,
                                 deadline, "retrieve_unfiltered" + suffix)
        kept = (filtered.relevance_level is not RelevanceLevel.NONE
                and not _less_relevant(filtered, unfiltered))
        reason = (f"the category-filtered search was {filtered.relevance_level}, without the "
                  f"category {unfiltered.relevance_level}: served "
                  f"{'the category' if kept else 'the whole scope'}")
        if kept:
            return filtered.rated_with(unfiltered), narrowed, RetryDecision(ran=True,
                                                                           reason=reason)
        return unfiltered.rated_with(filtered), filters, RetryDecision(ran=True, reason=reason)

    def _queries(self, plan: RetrievalGraph, query: str, hints: QueryHints, clock: Clock,
                 deadline: Deadline, suffix: str) -> tuple[str, ...]:
        if plan.transform is None:
            return (query,)
        stage = "query_transform" + suffix
        with clock.stage(stage):
            transformer = self.parts.transformer(plan.transform, self.parts.l0_index())
            transformed = transformer.transform(query, hints,
                                                timeout_s=max(deadline.remaining_s(), 0.001))
        clock.record(stage, note=f"{plan.transform}: {transformed.note} "
                                 f"({len(transformed.queries)} queries)")
        return transformed.queries or (query,)

    def _vectors(self, plan: RetrievalGraph, texts: Sequence[str],
                 clock: Clock) -> dict[str, list[float] | None]:
        """Each text's dense vector (None when no retriever of the plan needs one)."""
        needed = any(self.parts.registry.spec(r.name).needs_vector for r in plan.retrievers)
        search = self.parts.search
        with clock.stage("embed"):
            if not needed:
                return dict.fromkeys(texts)
            # Embedded here, not in the retriever threads: the embedding cache may use the DB.
            return {t: search.embed(t, "hybrid").vector for t in texts}

    def _bm25_terms(self, plan: RetrievalGraph, queries: Sequence[str], clock: Clock,
                    suffix: str) -> dict[str, tuple[str, ...]]:
        """What each query's BM25 search also looks for: the other terms of the tenant's
        synonym groups it names, and its words in the other language."""
        synonyms = self._synonyms(queries, clock, suffix)
        words = self._bilingual(plan, queries, clock, suffix)
        terms = {q: (*synonyms.get(q, ()), *words.get(q, ())) for q in queries}
        return {q: t for q, t in terms.items() if t}

    def _bilingual(self, plan: RetrievalGraph, queries: Sequence[str], clock: Clock,
                   suffix: str) -> dict[str, tuple[str, ...]]:
        """Each query's words in the other language, from CC-CEDICT (bilingual_bm25)."""
        if not plan.bilingual:
            return {}
        stage = "bilingual" + suffix
        with clock.stage(stage):
            translated = {q: other_language_terms(q, self.parts.languages) for q in queries}
        added = sum(len(terms) for terms in translated.values())
        if added:  # how many, never which: they are the question's words
            clock.record(stage, note=f"BM25 also searched {added} term(s) in the other "
                                     "language (CC-CEDICT)")
        return translated

    def _synonyms(self, queries: Sequence[str], clock: Clock,
                  suffix: str) -> dict[str, tuple[str, ...]]:
        """Each query's BM25 terms from the tenant's synonym groups; the trace names the groups
        (the tenant's own terms, never the query)."""
        synonyms = self.parts.synonyms
        if not synonyms:
            return {}
        stage = "synonyms" + suffix
        with clock.stage(stage):
            expansions = {q: synonyms.expand(q) for q in queries}
        groups = list(dict.fromkeys(g for e in expansions.values() for g in e.groups))
        if groups:
            clock.record(stage, note=f"BM25 also searched the other terms of {groups}")
        return {q: e.terms for q, e in expansions.items() if e.terms}

    # --- one round: retrieve per execution mode, aggregate, guard, rerank, gate ------------

    def _round(self, plan: RetrievalGraph, query: str, queries: Sequence[str],
               vectors: dict[str, list[float] | None], bm25: dict[str, tuple[str, ...]],
               filters: SearchFilters,
               hints: QueryHints, clock: Clock, deadline: Deadline,
               stage: str) -> PostProcessed:
        lists: list[CandidateList] = []
        steps = plan.retrievers
        groups = [steps] if plan.execution != "SEQUENTIAL" else [(s,) for s in steps]
        result = PostProcessed(chunks=(), relevance_level=RelevanceLevel.NONE, top_quality=0.0)
        for number, group in enumerate(groups):
            deadline.check(stage)
            with clock.stage(stage):
                lists += self._retrieve(plan, group, queries, vectors, bm25, filters, deadline)
            clock.record(stage, note=f"{plan.execution}: " + ", ".join(
                f"{c.retriever} {len(c.hits)}" for c in lists[-len(group) * len(queries):]),
                hits=tuple((evidence_key_of(h), round(h.score, 6))
                           for c in lists for h in c.hits)[:50])
            result = self._finish(plan, query, lists, filters, hints, clock, deadline)
            if plan.execution == "SEQUENTIAL" and number + 1 < len(groups):
                quality = self.assessor.assess(query, result.chunks)
                enough = quality.score >= plan.quality_threshold
                clock.record(f"sequential[{group[0].name}]", note=(
                    f"{quality.note()}: " + ("enough, the next retriever is skipped" if enough
                                             else "below the threshold, next retriever")))
                if enough:
                    break
        return result

    def _retrieve(self, plan: RetrievalGraph, steps: Sequence[Any], queries: Sequence[str],
                  vectors: dict[str, list[float] | None], bm25: dict[str, tuple[str, ...]],
                  filters: SearchFilters, deadline: Deadline) -> list[CandidateList]:
        registry = self.parts.registry
        listeners = [self.log.listen]
        runs: list[RetrieverRun] = []
        try:
            for step in steps:
                retriever = registry.inner(step.name, port=self.parts.search.port)
                spec = retriever.spec
                for text in queries:
                    call = RetrieverCall(
                        query=text, vector=vectors.get(text) if spec.needs_vector else None,
                        filters=filters, limit=plan.per_retriever,
                        arguments=dict(step.arguments), distances=self._distances_needed(plan),
                        bm25_terms=bm25.get(text, ()))
                    runs.append(registry.submit(retriever, call, listeners))
                    # Waited for one by one unless it may run beside others; one that is not
                    # thread-safe too, so that its calls do not queue on its single thread
                    # against their own timeout_s.
                    if not (spec.parallel and spec.thread_safe
                            and plan.execution == "PARALLEL"):
                        await_runs(runs[-1:], deadline)
            await_runs(runs, deadline)
        except BaseException:
            for run in runs:  # the stage failed: no call of it may reach the lookup
                run.abandon("the retrieval stage failed")
            raise
        # The floor's stand-in for BM25's match reads what BM25 searched: with the synonyms.
        return [CandidateList(run.name, run.query, tuple(self._floor(
                    plan, " ".join((run.query, *bm25.get(run.query, ()))), run.future.result())))
                for run in runs]  # result() re-raises a retriever's error

    def _floor(self, plan: RetrievalGraph, query: str, hits: list[SearchHit]) -> list[SearchHit]:
        """min_score: the calibrated vector similarity a candidate needs, unless BM25 matched
        it (RagConfig's help text: BM25's candidates have no similarity and are kept, in the
        hybrid search as with BM25 alone, although the gate measures their distance too)."""
        if plan.min_score <= 0:
            return hits
        quality = self.parts.post.normalizer.dense_quality
        terms = query_terms(query)

        def matched(hit: SearchHit) -> bool:
            if hit.bm25_match is not None:
                return hit.bm25_match
            # Milvus fused the arms without saying which found it: the query's own terms in
            # the chunk's text stand for BM25's match.
            return terms.coverage(searchable_text(hit)) > 0

        return [h for h in hits if h.dense_l2 is None or matched(h)
                or quality(h.dense_l2) >= plan.min_score]

    def _finish(self, plan: RetrievalGraph, query: str, lists: Sequence[CandidateList],
                filters: SearchFilters, hints: QueryHints, clock: Clock,
                deadline: Deadline) -> PostProcessed:
        post = self.parts.post
        aggregator = Aggregator(
            plan.aggregation, rrf_k=self.parts.rrf_k, weights=self.parts.weights,
            quality=lambda hit, rank, n: post.normalizer.gate_quality(
                hit, mode=_gate_mode(plan), rank=rank, n=n), limit=plan.pool)
        with clock.stage("aggregate"):
            hits = aggregator.aggregate(lists)
        if len(lists) > 1:
            clock.record("aggregate", note=f"{plan.aggregation} of {len(lists)} lists",
                         hits=tuple((evidence_key_of(h), round(h.score, 6)) for h in hits))
        with clock.stage("guard"):
            served = self._guard(hits, filters)
        if len(served) < len(hits):
            dropped = sorted({evidence_key_of(h) for h in hits}
                             - {evidence_key_of(h) for h in served})
            clock.record("guard", hits=tuple((key, 0.0) for key in dropped),
                         note=f"dropped {len(dropped)} hit(s) of deactivated or deleted "
                              "documents")
        if plan.rerank_top_n is not None and served:
            deadline.check("rerank")
            served = self._rerank(plan.rerank_top_n, query, served, clock, deadline)
        recency = self.parts.recency
        if recency is not None and served:
            clock.record("recency", note=f"half-life {recency.half_life_days} days", hits=tuple(
                (evidence_key_of(h), round(recency.weight(str(h.metadata.get("docId", ""))),
                                           4)) for h in served))
        with clock.stage("post_process"):
            result = post.process(served, _gate_mode(plan), hints, query,
                                  prior=recency.weight if recency is not None else None)
        clock.record("post_process", result,
                     note=f"{post.judge}, top_quality={result.top_quality:.4f}")
        return result

    def _guard(self, hits: list[SearchHit], filters: SearchFilters) -> list[SearchHit]:
        """Defence in depth: only hits of documents the database says may be served now,
        whatever Milvus holds (its copy follows the database through the indexing queue)."""
        doc_ids = {_doc_id(hit) for hit in hits}
        live = self.parts.live_documents(filters, {d for d in doc_ids if d is not None})
        return [hit for hit in hits if _doc_id(hit) in live]

    def _rerank(self, top_n: int, query: str, hits: list[SearchHit], clock: Clock,
                deadline: Deadline) -> list[SearchHit]:
        reranker = self.parts.reranker
        if reranker is None:
            raise StageUnavailable("rerank is on but no reranker is configured "
                                   "(KB_RERANK_BASE_URL)")
        documents = [" ".join(filter(None, (str(h.metadata.get("title") or ""),
                                            str(h.metadata.get("breadcrumb") or ""),
                                            h.content))) for h in hits]
        with clock.stage("rerank"):
            ranked = reranker.rerank(query, documents, top_n=min(top_n, len(hits)),
                                     timeout_s=max(deadline.remaining_s(), 0.001))
        reordered = [replace(hits[r.index], rank=rank, score=float(r.score))
                     for rank, r in enumerate(ranked, 1)]
        clock.record("rerank", note=f"{reranker.name}: top {len(reordered)} of {len(hits)}",
                     hits=tuple((evidence_key_of(h), round(h.score, 6)) for h in reordered))
        return reordered

    def _distances_needed(self, plan: RetrievalGraph) -> bool:
        """Whether anything reads the dense distance of a hit the dense arm did not return:
        the relevance gate, min_score, quality and MERGE of several lists (evaluation runs
        with the gate off and skips the work)."""
        post = self.parts.post
        merge = plan.aggregation == "MERGE" and (len(plan.retrievers) > 1
                                                 or plan.transform is not None)
        return (post.reference_threshold > 0 or post.precise_threshold > 0
                or plan.min_score > 0 or plan.assess or plan.max_attempts > 1
                or plan.execution == "SEQUENTIAL" or merge)

    def _neighbours(self, graph: RetrievalGraph, chunks: tuple[ScoredChunk, ...],
                    filters: SearchFilters, clock: Clock) -> tuple[ScoredChunk, ...]:
        assert graph.neighbours is not None
        mode, window = graph.neighbours
        packer = self.parts.packer
        # What the hits themselves take of the pack: neighbours only fill the rest.
        budget = packer.max_context_chars - sum(
            min(len(c.content.strip()), packer.max_excerpt_chars) for c in chunks)
        with clock.stage("neighbours"):
            expander = self.parts.neighbours(mode, window, port=self.parts.search.port)
            found = expander.expand(chunks, filters, budget=budget,
                                    excerpt_chars=packer.max_excerpt_chars)
        clock.record("neighbours", note=f"{mode} ±{window}: {len(found)} added",
                     hits=tuple((c.evidence_key, round(c.quality, 4)) for c in found))
        after: dict[str, list[ScoredChunk]] = {}
        for chunk in found:
            parent = next((r.split(":", 1)[1] for r in chunk.hit_reasons
                           if r.startswith("neighbour_of:")), "")
            after.setdefault(parent, []).append(chunk)
        out: list[ScoredChunk] = []
        for chunk in chunks:
            out.append(chunk)
            out += after.pop(chunk.evidence_key, [])
        return (*out, *(c for rest in after.values() for c in rest))


def _with(vector: list[float] | None, translated: list[float] | None) -> list[float] | None:
    return None if vector is None else vector_with(vector, translated)


def _gate_mode(plan: RetrievalGraph) -> SearchMode:
    names = [r.name for r in plan.retrievers]
    if names == ["VECTOR"]:
        return "dense"
    if names == ["BM25"]:
        return "bm25"
    return "hybrid"


def _doc_id(hit: SearchHit) -> int | None:
    value = str(hit.metadata.get("docId", "")).strip()
    return int(value) if value.isdigit() and len(value) <= 19 else None
