"""Agentic RAG (seed 003 §4): needs-retrieval → analysis and plan → retrieve → evaluate → route.

The state is the original query, the analysis, the plan (its sub-questions), the candidates
gathered, the quality of each sub-question, the iteration count, the corrected query and the
final answer. After each retrieval the route is one of:

- continue: this sub-question is answered well enough and the plan has another;
- self_correct: the evidence is weak and corrections are left: search a corrected query (the
  judge's better query, else the question without its words of asking);
- synthesize: the plan is done: answer from every iteration's evidence;
- no_answer: nothing relevant was found.

Whether the question needs retrieval, and its plan, are the chat model's when one is configured,
else the rules' (retrieval/answers/agentic_plan.py): a question with no content word ("thanks",
"你好") routes `direct`, no answer. The judge is the chat model when one is configured, else the
rules of the retrieval graph's quality stage (calibrated retrieval scores); the answer is the
standard answer's generator. The simplified graph (RagConfig.agentic_graph SIMPLIFIED) searches
the question once and synthesizes: no model plan, no evaluation, no query optimisation. The
graph has its own settings, never the lookup graph's (seed 003): a grade below
`agentic_quality_threshold` is weak, and corrections are bounded by `agentic_max_retry_count`;
the whole call by `timeout_millis`. Each retrieval is the tool's own lookup (one canonical
record per iteration, under the call's session), so the evidence guard confirms every citation;
the audit row keeps the retrieval details of every iteration (the first
MAX_TRACED_ITERATIONS).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import zip_longest
from typing import Any

from audit.privacy import audited_text
from audit.types import InvocationRecord, ReadyEvidence
from retrieval.answers.agentic_plan import Analysis, model_analysis, rules_analysis
from retrieval.answers.answer import AnswerStatus, Draft, Source
from retrieval.answers.service import generate
from retrieval.chat import ChatModel, ChatModelError, chat_model_for
from retrieval.lexical import query_terms
from retrieval.lookup.graph.model_judge import ModelQualityJudge
from retrieval.lookup.graph.quality import QualityAssessor
from retrieval.lookup.graph.query_transform import rewrite
from retrieval.lookup.project import LookupViews
from retrieval.lookup.service import confirmed_evidence, served_lookup
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.selectors import rag_config_for
from retrieval.ragconfig.settings import RagSettings
from retrieval.types import (
    EvidenceStatus,
    LookupResult,
    RelevanceLevel,
    SearchFilters,
    call_id,
)

MAX_SOURCES = 8  # what the answer is built from, over every sub-question
MIN_LOOKUP_MS = 100  # the shortest deadline a lookup takes (RagConfig's own minimum)
_IDENT_ROOM = 120  # a tool call id of at most 128 characters, with "-{iteration}"
# The audit row keeps each iteration's retrieval details, within these bounds: a run of many
# corrections keeps its first iterations, each stage its best candidates.
MAX_TRACED_ITERATIONS = 10
MAX_TRACED_CANDIDATES = 20


class Route(StrEnum):
    DIRECT = "direct"
    CONTINUE = "continue"
    SELF_CORRECT = "self_correct"
    SYNTHESIZE = "synthesize"
    NO_ANSWER = "no_answer"


@dataclass
class AgenticState:
    query: str
    analysis: dict[str, Any] = field(default_factory=dict)
    plan: list[str] = field(default_factory=list)
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)  # agent-facing items
    quality: list[float] = field(default_factory=list)  # the best of each sub-question
    iteration: int = 0
    corrected_query: str = ""
    routes: list[dict[str, Any]] = field(default_factory=list)
    answer: Draft | None = None


@dataclass(frozen=True)
class AgenticOutcome:
    state: AgenticState
    status: AnswerStatus
    tool_call_id: str
    session_id: str
    lookups: tuple[LookupViews, ...]  # every iteration's, in order
    error: str = ""

    @property
    def last(self) -> LookupViews | None:
        return self.lookups[-1] if self.lookups else None

    @property
    def answer(self) -> str:
        draft = self.state.answer
        return draft.answer if draft and self.status is AnswerStatus.ANSWERED else ""

    @property
    def citations(self) -> tuple[str, ...]:
        draft = self.state.answer
        return draft.citations if draft and self.status is AnswerStatus.ANSWERED else ()

    @property
    def confidence(self) -> float:
        quality = self.state.quality
        return round(sum(quality) / len(quality), 4) if quality else 0.0

    def invocation(self, filters: SearchFilters) -> InvocationRecord:
        """The audit row of the call: its last lookup's details with every iteration's, the
        whole run's answer."""
        if self.last is not None:
            record = self.last.record
            record = replace(record, details={**record.details,
                                              "iterations": self.iteration_details()})
        else:  # no lookup ran (no retrieval needed, or the config did not validate)
            record = InvocationRecord(
                tenant_id=filters.tenant_id, tool_call_id="", session_id="",
                query=self.state.query, evidence_status=EvidenceStatus.EMPTY.value,
                relevance_level=RelevanceLevel.NONE.value, returned_count=0,
                config_version=None, error=self.error, details={})
        if self.state.candidates:  # the run found evidence, whatever its last search did
            record = replace(record, evidence_status=EvidenceStatus.READY.value)
        # What the run handed out is its candidates, from any of its lookups, in their order.
        datasets = {item.chunk.evidence_key: item.chunk.dataset_id
                    for lookup in self.lookups for item in lookup.result.pack.items}
        ready = tuple(ReadyEvidence(key, dataset) for key in self.state.candidates
                      if (dataset := datasets.get(key)) is not None)
        # The question asked (its hash, its text only when kept), not the last sub-question.
        return replace(record, query=self.state.query, ready=ready, cited=self.citations,
                       tool_call_id=self.tool_call_id, session_id=self.session_id,
                       error=self.error or record.error,
                       returned_count=len(self.state.candidates), tool_name="rag_agentic",
                       answer=self.trace())

    def iteration_details(self) -> list[dict[str, Any]]:
        """Each iteration's retrievalDetails (the first MAX_TRACED_ITERATIONS), each stage's
        candidates cut to the best MAX_TRACED_CANDIDATES."""
        kept = []
        for number, lookup in enumerate(self.lookups[:MAX_TRACED_ITERATIONS], 1):
            details = dict(lookup.record.details)
            details["stages"] = [{**stage, "candidates": stage["candidates"][
                :MAX_TRACED_CANDIDATES]} for stage in details["stages"]]
            kept.append({"iteration": number, **details})
        return kept

    def trace(self) -> dict[str, Any]:
        """What the audit keeps of the run: the queries searched (the plan, each iteration's
        query and its next) marked as texts made of the question, which the audit keeps where
        the tenant keeps raw queries, like the question itself, and hashes elsewhere."""
        draft = self.state.answer.trace() if self.state.answer else {}
        iterations = [{k: audited_text(v) if k in ("query", "next") and isinstance(v, str)
                       else v for k, v in hop.items()} for hop in self.state.routes]
        return {**draft, "answer_status": self.status.value,
                "error": self.error or draft.get("error", ""), "analysis": self.state.analysis,
                "plan": [audited_text(q) for q in self.state.plan],
                "iterations": iterations, "confidence": self.confidence,
                "model_usage": self.model_usage()}

    def model_usage(self) -> dict[str, int]:
        """Every chat-model call of the run (the plan, the judges, the answer) and their token
        counts."""
        usages = [hop["judge_usage"] for hop in self.state.routes if hop.get("judge_usage")]
        if self.state.analysis.get("usage"):
            usages.insert(0, self.state.analysis["usage"])
        if self.state.answer is not None and self.state.answer.usage:
            usages.append(self.state.answer.usage)
        return {"calls": len(usages),
                "prompt_tokens": sum(int(u.get("prompt_tokens", 0)) for u in usages),
                "completion_tokens": sum(int(u.get("completion_tokens", 0)) for u in usages)}


def run_session(given: str = "") -> str:
    """The caller's session, else a new `agentic_...` one: every lookup of the run is recorded
    under it, for the evidence guard. The one place run sessions are minted."""
    return given or f"agentic_{uuid.uuid4().hex}"


def agentic_answer(*, filters: SearchFilters, query: str, tool_call_id: str = "",
                   session_id: str = "", overrides: Mapping[str, Any] | None = None
                   ) -> AgenticOutcome:
    """`overrides`: a delegated agent's settings (RagAgent) over the tenant's RagConfig, for
    the graph, its model and each of its lookups."""
    started = time.perf_counter()
    call = call_id(tool_call_id)
    session = run_session(session_id)
    state = AgenticState(query=query)
    try:
        # The run's session routes it, as it routes each of its lookups: one A/B arm.
        config = rag_config_for(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids,
                                routing_key=session).settings
        if overrides:
            config = RagConfigConverter.to_settings(overrides, base=config)
    except RagConfigError as exc:
        return AgenticOutcome(state, AnswerStatus.UNAVAILABLE, call, session, (),
                              f"RagConfigError: {exc}")
    model = chat_model_for(RagConfigConverter.to_dict(config))
    run = _Run(state, config, filters, model, call, session, started, dict(overrides or {}))
    return run.execute()


@dataclass
class _Run:
    state: AgenticState
    settings: RagSettings
    filters: SearchFilters
    model: ChatModel | None
    call: str
    session: str
    started: float
    overrides: dict[str, Any]  # the delegated agent's, for each lookup too
    lookups: list[LookupViews] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.settings.agentic_graph == "FULL"

    def left_s(self) -> float:
        return self.settings.timeout_millis / 1000 - (time.perf_counter() - self.started)

    def outcome(self, status: AnswerStatus, error: str = "") -> AgenticOutcome:
        return AgenticOutcome(self.state, status, self.call, self.session, tuple(self.lookups),
                              error)

    def execute(self) -> AgenticOutcome:
        state = self.state
        try:
            analysis = self.analyse()
        except ChatModelError as exc:
            return self.outcome(AnswerStatus.UNAVAILABLE, str(exc))
        terms = query_terms(state.query)
        state.plan = list(analysis.plan)
        state.analysis = {"identifiers": len(terms.identifiers), "terms": len(terms.terms),
                          "sub_questions": len(state.plan), "graph": self.settings.agentic_graph,
                          **analysis.trace()}
        if not analysis.needs_retrieval:
            state.routes.append({"iteration": 0, "route": Route.DIRECT.value,
                                 "reason": "the question names nothing to look up"})
            return self.outcome(AnswerStatus.NO_ANSWER)
        corrections = self.settings.agentic_max_retry_count if self.full else 0
        # Per sub-question: the evidence of its best-graded search, and that grade.
        answers: list[tuple[float, list[dict[str, Any]]]] = []
        step, current = 0, state.plan[0]
        best: tuple[float, list[dict[str, Any]]] = (-1.0, [])
        while True:
            state.iteration += 1
            served = served_lookup(
                filters=self.filters, query=current, session_id=self.session,
                tool_call_id=f"{self.call[:_IDENT_ROOM]}-{state.iteration}",
                overrides={**self.overrides,
                           "timeout_millis": max(int(self.left_s() * 1000), MIN_LOOKUP_MS)})
            self.lookups.append(served)
            result = served.result
            if result.evidence_status is EvidenceStatus.UNAVAILABLE:
                return self.outcome(AnswerStatus.UNAVAILABLE, result.error)
            try:  # the sub-question is judged, whatever query found the evidence
                quality, correction, judging = self.evaluate(state.plan[step], result)
            except ChatModelError as exc:
                return self.outcome(AnswerStatus.UNAVAILABLE, str(exc))
            evidence = served.view.as_dict()["evidence"]
            if quality > best[0]:
                best = (quality, evidence)
            weak = not evidence or quality < self.settings.agentic_quality_threshold
            hop = {"iteration": state.iteration, "query": current,
                   "evidence_status": result.evidence_status.value,
                   "returned": len(evidence), "quality": round(quality, 4), **judging}
            corrected = correction or rewrite(current)
            in_time = self.left_s() * 1000 >= MIN_LOOKUP_MS
            if self.full and weak and corrections and corrected != current and in_time:
                corrections -= 1
                state.corrected_query = current = corrected
                state.routes.append({**hop, "route": Route.SELF_CORRECT.value,
                                     "next": corrected})
                continue
            answers.append(best)
            state.quality.append(max(best[0], 0.0))
            if step + 1 < len(state.plan) and in_time:
                step, best = step + 1, (-1.0, [])
                current = state.plan[step]
                state.routes.append({**hop, "route": Route.CONTINUE.value, "next": current})
                continue
            found = any(items for _, items in answers)
            state.routes.append({**hop, "route": (Route.SYNTHESIZE if found
                                                  else Route.NO_ANSWER).value})
            break
        # Each sub-question's evidence in turn, best first: a weak part cannot crowd out the
        # others' evidence from what the answer is built from.
        for item in _interleaved([items for _, items in answers]):
            if len(state.candidates) >= MAX_SOURCES:
                break
            state.candidates.setdefault(item["document_id"], item)
        if not state.candidates:
            return self.outcome(AnswerStatus.EMPTY)
        return self.synthesize()

    def analyse(self) -> Analysis:
        """Needs-retrieval and the plan: the model's (FULL, with a model), else the rules'.
        ChatModelError when the model fails and fallback is off."""
        query = self.state.query
        if not self.full or self.model is None:
            return rules_analysis(query, split=self.full)
        try:
            return model_analysis(query, self.model, timeout_s=max(self.left_s(), 0.001))
        except ChatModelError as exc:
            if not self.settings.enable_fallback:
                raise
            return replace(rules_analysis(query, split=True), error=str(exc))

    def evaluate(self, query: str, result: LookupResult) -> tuple[float, str, dict[str, Any]]:
        """The evidence's grade, a better query (the judge's; "" from the rules) and what the
        trace keeps of the judging: the model's token counts, or why the rules judged."""
        chunks = [item.chunk for item in result.pack.items]
        if not chunks:
            return 0.0, "", {}
        if self.full and self.model is not None:
            try:
                judged = ModelQualityJudge(self.model).assess(
                    query, chunks, timeout_s=max(self.left_s(), 0.001))
                return judged.score, judged.correction, {"judge_usage": dict(judged.usage)}
            except ChatModelError as exc:
                if not self.settings.enable_fallback:
                    raise
                return QualityAssessor().assess(query, chunks).score, "", {
                    "judge_error": str(exc)}
        return QualityAssessor().assess(query, chunks).score, "", {}

    def synthesize(self) -> AgenticOutcome:
        state = self.state
        sources = [Source(item["document_id"], item["title"], item["excerpt"])
                   for item in state.candidates.values()]
        try:
            draft = generate(state.query, sources, model=self.model,
                             timeout_s=max(self.left_s(), 0.001),
                             fallback=self.settings.enable_fallback)
        except ChatModelError as exc:
            return self.outcome(AnswerStatus.UNAVAILABLE, str(exc))
        confirmed = confirmed_evidence(tenant_id=self.filters.tenant_id,
                                       readable=self.filters.dataset_ids,
                                       access=self.filters.access,
                                       document_ids=draft.citations, session_id=self.session)
        state.answer = draft.confined_to(frozenset(confirmed))
        return self.outcome(state.answer.status)


def _interleaved(lists: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    for row in zip_longest(*lists):
        yield from (item for item in row if item is not None)
