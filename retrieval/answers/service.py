"""The standard RAG answer (seed 003 §3): the retrieval-only graph, then a generation node.

The lookup is the tool's own (same scope, same config, stored canonically), so the answer is
built from exactly the evidence an agent calling the tool would see. The generator is the chat
model when one is configured, else extractive; a model failure falls back to extractive when
the config's `enable_fallback` allows, else the answer is UNAVAILABLE. Last, every citation is
checked with the evidence guard's own record of the call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from retrieval.answers.answer import (
    AnswerStatus,
    Draft,
    ExtractiveAnswerer,
    ModelAnswerer,
    Source,
)
from retrieval.chat import ChatModel, ChatModelError, chat_model_for
from retrieval.lookup.project import LookupViews
from retrieval.lookup.service import confirmed_evidence, served_lookup
from retrieval.types import EvidenceStatus, SearchFilters

_NO_DRAFT = {EvidenceStatus.EMPTY: AnswerStatus.EMPTY,
             EvidenceStatus.UNAVAILABLE: AnswerStatus.UNAVAILABLE}
_DEFAULT_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class RagAnswer:
    lookup: LookupViews  # the tool's lookup: what the agent saw of it, what the audit keeps
    status: AnswerStatus
    draft: Draft | None  # None when there was nothing to answer from
    error: str = ""

    @property
    def answer(self) -> str:
        return self.draft.answer if self.draft and self.status is AnswerStatus.ANSWERED else ""

    @property
    def citations(self) -> tuple[str, ...]:
        return self.draft.citations if self.draft and self.status is AnswerStatus.ANSWERED \
            else ()

    def trace(self) -> dict[str, Any]:
        """What the audit keeps of the generation."""
        draft = self.draft.trace() if self.draft else {}
        return {**draft, "answer_status": self.status.value, "error": self.error
                or draft.get("error", "")}


def rag_answer(*, filters: SearchFilters, query: str, tool_call_id: str = "",
               session_id: str = "") -> RagAnswer:
    """The generator is the chat model of the lookup's config (RagConfig chat_*, else
    KB_CHAT_*), else extractive."""
    started = time.perf_counter()
    lookup = served_lookup(filters=filters, query=query, tool_call_id=tool_call_id,
                           session_id=session_id)
    answered = answer_from(lookup, model=chat_model_for(lookup.result.config), started=started)
    if answered.draft is None or not answered.draft.citations:
        return answered
    confirmed = confirmed_evidence(tenant_id=filters.tenant_id, readable=filters.dataset_ids,
                                   access=filters.access, document_ids=answered.draft.citations,
                                   tool_call_id=lookup.view.tool_call_id)
    draft = answered.draft.confined_to(frozenset(confirmed))
    return replace(answered, status=draft.status, draft=draft)


def answer_from(lookup: LookupViews, *, model: ChatModel | None, started: float) -> RagAnswer:
    """The generation node over a lookup's agent-facing evidence; `started` (perf_counter)
    is when the call began, for the config's deadline."""
    result, view = lookup.result, lookup.view
    if result.evidence_status in _NO_DRAFT:
        return RagAnswer(lookup, _NO_DRAFT[result.evidence_status], None, result.error)
    sources = [Source(item.document_id, item.title, item.excerpt) for item in view.evidence]
    deadline_s = result.config.get("timeout_millis", _DEFAULT_TIMEOUT_MS) / 1000
    left_s = max(deadline_s - (time.perf_counter() - started), 0.001)
    try:
        draft = generate(result.query, sources, model=model, timeout_s=left_s,
                          fallback=result.config.get("enable_fallback", True))
    except ChatModelError as exc:
        return RagAnswer(lookup, AnswerStatus.UNAVAILABLE, None, str(exc))
    return RagAnswer(lookup, draft.status, draft)


def generate(query: str, sources: list[Source], *, model: ChatModel | None, timeout_s: float,
              fallback: bool) -> Draft:
    extractive = ExtractiveAnswerer()
    if model is None:
        return extractive.answer(query, sources, timeout_s=timeout_s)
    try:
        return ModelAnswerer(model).answer(query, sources, timeout_s=timeout_s)
    except ChatModelError as exc:
        if not fallback:
            raise
        draft = extractive.answer(query, sources, timeout_s=timeout_s)
        return replace(draft, generator=f"{draft.generator} (fallback)", error=str(exc))
