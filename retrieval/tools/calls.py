"""The agent tools as calls: one function per tool, from the caller and its validated input to
the agent-facing body and the audit record.

The registry (retrieval/tools/registry.py) declares each tool with its call; the REST views and
the MCP server are both channels over it. Tenant and datasets always come from the caller's
key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from audit.models import Rating
from audit.selectors import served_config
from audit.services import evidence_cite, evidence_rate
from audit.types import InvocationRecord
from datasets.api.serializers import DatasetOutput
from datasets.documents.selectors import dataset_list, readable_datasets
from datasets.tenancy.keys import Caller
from kbplatform.errors import ApiError, ErrorCode, ServiceUnavailable
from retrieval.answers.agentic import agentic_answer
from retrieval.answers.answer import AnswerStatus
from retrieval.answers.rag_node import DatasetRef, NodeInput, NodeStatus, rag_node
from retrieval.answers.service import rag_answer
from retrieval.answers.verify import Verification, judged, served_texts, verify
from retrieval.chat import ChatModelError, chat_model_for
from retrieval.lookup.fetch import FETCH_DEFAULT_CHARS, Fetched, FetchRequest, fetch_evidence
from retrieval.lookup.project import titled
from retrieval.lookup.replay import replay
from retrieval.lookup.service import (
    confirmed_evidence,
    declared_fields_checked,
    lookup_scope,
    served_lookup,
)
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.selectors import rag_config_for
from retrieval.types import CallFilters, EvidenceStatus, SearchFilters


@dataclass(frozen=True)
class ToolCall:
    body: dict[str, Any]  # the agent-facing result
    record: InvocationRecord | None = None  # the audit row's content; None: a tool not audited
    unavailable: bool = False  # a backend failed: HTTP 503, an MCP tool error


# The tools' validated inputs, typed: each is built by its contract's field names
# (registry.Tool.valid), so a field one declares and the other lacks fails at once.

@dataclass(frozen=True)
class LookupArgs:
    """lookup_knowledge's, rag_answer's and rag_agentic's input (`LookupInput`)."""

    query: str
    tool_call_id: str = ""
    session_id: str = ""
    dataset_ids: tuple[int, ...] = ()
    filters: CallFilters = CallFilters()


@dataclass(frozen=True)
class GuardArgs:
    """evidence_guard's input (`EvidenceGuardInput`): exactly one of the two ids."""

    document_ids: tuple[str, ...]
    tool_call_id: str = ""
    session_id: str = ""


@dataclass(frozen=True)
class RateArgs:
    """rate_evidence's input (`RateEvidenceInput`)."""

    tool_call_id: str
    document_ids: tuple[str, ...]
    rating: str


@dataclass(frozen=True)
class FetchArgs:
    """fetch_evidence's input (`FetchEvidenceInput`)."""

    document_id: str
    max_chars: int
    section: str = ""
    tool_call_id: str = ""
    session_id: str = ""


@dataclass(frozen=True)
class VerifyArgs:
    """verify_answer's input (`VerifyAnswerInput`): exactly one of the two ids."""

    answer: str
    tool_call_id: str = ""
    session_id: str = ""
    judge: bool = False  # the tenant's chat model judges the sentences too


@dataclass(frozen=True)
class SearchArgs:
    """The research profile's search input (`ResearchSearchInput`)."""

    query: str


@dataclass(frozen=True)
class ResearchFetchArgs:
    """The research profile's fetch input (`ResearchFetchInput`)."""

    id: str


@dataclass(frozen=True)
class ReplayArgs:
    """replay_evidence's input (`ReplayEvidenceInput`: the URL's tool call id)."""

    tool_call_id: str


def _scope(who: Caller, args: LookupArgs) -> SearchFilters:
    return lookup_scope(caller=who, requested=args.dataset_ids, narrowed=args.filters)


def lookup_call(who: Caller, args: LookupArgs) -> ToolCall:
    served = served_lookup(filters=_scope(who, args), query=args.query,
                           tool_call_id=args.tool_call_id, session_id=args.session_id)
    return ToolCall(served.view.as_dict(), served.record,
                    served.view.evidence_status is EvidenceStatus.UNAVAILABLE)


def rag_answer_call(who: Caller, args: LookupArgs) -> ToolCall:
    outcome = rag_answer(filters=_scope(who, args), query=args.query,
                         tool_call_id=args.tool_call_id, session_id=args.session_id)
    body = {"answer": outcome.answer, "citations": list(outcome.citations),
            "answer_status": outcome.status.value, **outcome.lookup.view.as_dict()}
    record = replace(outcome.lookup.record, tool_name="rag_answer",
                     answer=outcome.trace(), cited=outcome.citations)
    return ToolCall(body, record, outcome.status is AnswerStatus.UNAVAILABLE)


def rag_agentic_call(who: Caller, args: LookupArgs) -> ToolCall:
    filters = _scope(who, args)
    outcome = agentic_answer(filters=filters, query=args.query,
                             tool_call_id=args.tool_call_id, session_id=args.session_id)
    state = outcome.state
    body = {"answer": outcome.answer, "citations": list(outcome.citations),
            "answer_status": outcome.status.value, "confidence": outcome.confidence,
            "iterations": state.iteration, "routes": state.routes,
            "evidence": list(state.candidates.values()),
            "tool_call_id": outcome.tool_call_id, "session_id": outcome.session_id,
            "query": state.query}
    return ToolCall(body, outcome.invocation(filters),
                    outcome.status is AnswerStatus.UNAVAILABLE)


def rag_node_call(who: Caller, node: NodeInput) -> ToolCall:
    declared_fields_checked(who, node.filters)
    readable = [DatasetRef(pk, name) for pk, name in readable_datasets(caller=who)]
    done = rag_node(tenant_id=who.tenant.pk, readable=readable, access=who.access, node=node)
    outcome = done.outcome
    body = {"status": done.status.value, "result": done.text,
            "answer": outcome.answer if outcome else "",
            "citations": list(outcome.citations) if outcome else [],
            "structured": done.structured, "query": done.query,
            "query_source": done.query_source, "selected_by": done.selected_by,
            "delegated_to": done.delegated_to, "missing": list(done.missing),
            "routes": outcome.state.routes if outcome else [],
            "evidence": list(outcome.state.candidates.values()) if outcome else [],
            "tool_call_id": done.tool_call_id, "session_id": done.session_id}
    filters = SearchFilters(tenant_id=who.tenant.pk,
                            dataset_ids=tuple(d.id for d in done.target_datasets),
                            access=who.access)
    return ToolCall(body, done.invocation(filters), done.status is NodeStatus.UNAVAILABLE)


def _fetched(who: Caller, args: FetchArgs) -> Fetched:
    return fetch_evidence(FetchRequest(
        tenant_id=who.tenant.pk, readable=tuple(who.readable_dataset_ids()),
        access=who.access, document_id=args.document_id, max_chars=args.max_chars,
        section=args.section, tool_call_id=args.tool_call_id, session_id=args.session_id))


def fetch_evidence_call(who: Caller, args: FetchArgs) -> ToolCall:
    """The section of an evidence id, from a dataset this key may read (404 otherwise)."""
    fetched = _fetched(who, args)
    section = fetched.section
    return ToolCall(section.as_dict(), fetched.record,
                    section.evidence_status is EvidenceStatus.UNAVAILABLE)


def search_call(who: Caller, args: SearchArgs) -> ToolCall:
    """The research profile's search: a lookup, its evidence as {id, title, text, url}."""
    served = served_lookup(filters=_scope(who, LookupArgs(args.query)), query=args.query)
    view = served.view
    body = {"results": [{"id": e.document_id, "title": titled(e.title, e.breadcrumb),
                         "text": e.excerpt, "url": e.url} for e in view.evidence],
            "evidence_status": view.evidence_status.value, "tool_call_id": view.tool_call_id}
    return ToolCall(body, replace(served.record, tool_name="search"),
                    view.evidence_status is EvidenceStatus.UNAVAILABLE)


def research_fetch_call(who: Caller, args: ResearchFetchArgs) -> ToolCall:
    """The research profile's fetch: fetch_evidence at its default length, as a document
    {id, title, text, url, metadata}."""
    fetched = _fetched(who, FetchArgs(document_id=args.id, max_chars=FETCH_DEFAULT_CHARS))
    section = fetched.section.as_dict()
    body = {"id": section.pop("document_id"),
            "title": titled(section.pop("title"), section["breadcrumb"]),
            "text": section.pop("text"), "url": section.pop("url"), "metadata": section}
    return ToolCall(body, replace(fetched.record, tool_name="fetch"),
                    fetched.section.evidence_status is EvidenceStatus.UNAVAILABLE)


def list_datasets_call(who: Caller, args: None) -> ToolCall:
    """The datasets the key's lookups may search (GET /api/datasets' shape)."""
    readable = dataset_list(caller=who).filter(activated=True)
    return ToolCall({"datasets": DatasetOutput(readable, many=True).data,
                     "filterable_fields": who.tenant.filterable_fields})


def evidence_guard_call(who: Caller, args: GuardArgs) -> ToolCall:
    """Confirmed: READY evidence of the call (or session), from a dataset this key may read,
    of a document that may still be served."""
    asked = list(dict.fromkeys(args.document_ids))
    readable = who.readable_dataset_ids()
    ready = confirmed_evidence(tenant_id=who.tenant.pk, readable=readable,
                               access=who.access, document_ids=asked,
                               tool_call_id=args.tool_call_id, session_id=args.session_id)
    # What the caller confirmed counts as cited, for the cited rates (audit/cited.py).
    evidence_cite(tenant_id=who.tenant.pk, dataset_ids=readable, evidence_keys=ready,
                  tool_call_id=args.tool_call_id, session_id=args.session_id)
    return ToolCall({"ready": ready, "not_ready": [key for key in asked if key not in ready]})


def verify_answer_call(who: Caller, args: VerifyArgs) -> ToolCall:
    """Each sentence of the answer against what the call (or session) served as READY, of
    datasets this key may read; audited with the config version that served the call, for
    the unsupported rate beside the cited rate."""
    served = served_texts(tenant_id=who.tenant.pk, readable=who.readable_dataset_ids(),
                          access=who.access, tool_call_id=args.tool_call_id,
                          session_id=args.session_id)
    done = verify(args.answer, served)
    if args.judge:
        done = _judged(who, done, served)
    config = served_config(tenant_id=who.tenant.pk, tool_call_id=args.tool_call_id,
                           session_id=args.session_id)
    config_id, version = config or (None, None)
    counts = {"sentences": len(done.sentences), "unsupported": len(done.unsupported),
              "evidence": done.evidence, "skipped": done.skipped,
              "judge": done.judge or None,
              "judged": sum(s.judged_by == "model" for s in done.sentences)}
    # Counted for a config only when its evidence was read (not after the call's record
    # expired, nor for a call that served this key nothing) and the config is known.
    counted = bool(served) and config is not None and bool(done.sentences)
    record = InvocationRecord(
        tenant_id=who.tenant.pk, tool_call_id=args.tool_call_id, session_id=args.session_id,
        query="", evidence_status=(EvidenceStatus.READY if served
                                   else EvidenceStatus.EMPTY).value,
        relevance_level="NONE", returned_count=len(done.sentences), config_version=version,
        config_id=config_id, error="", details={"verified": counts},
        tool_name="verify_answer",
        checked=(len(done.sentences), len(done.unsupported)) if counted else None)
    return ToolCall({"sentences": [s.as_dict() for s in done.sentences],
                     "unsupported": list(done.unsupported), "evidence_checked": done.evidence,
                     "skipped": done.skipped, "judge": done.judge or None}, record)


def _judged(who: Caller, done: Verification, served: dict[str, str]) -> Verification:
    """`done` judged by the chat model of the config serving the key's datasets: a 400 when
    none is configured, a 503 when it fails (the words' verdicts are no answer to a judge
    asked for)."""
    try:
        serving = rag_config_for(tenant_id=who.tenant.pk,
                                 dataset_ids=who.readable_dataset_ids())
    except RagConfigError as exc:
        raise ServiceUnavailable("the tenant's RAG config does not validate; the chat model "
                                 "cannot be named") from exc
    model = chat_model_for(RagConfigConverter.to_dict(serving.settings))
    if model is None:
        raise ApiError("judge: no chat model is configured for this tenant (its RagConfig's "
                       "chat_base_url, or the deployment's KB_CHAT_BASE_URL)",
                       code=ErrorCode.INVALID, extra={"fields": {"judge": ["no chat model"]}})
    try:
        return judged(done, served, model)
    except ChatModelError as exc:
        raise ServiceUnavailable(f"the chat model could not judge the answer: {exc}") from exc


def replay_evidence_call(who: Caller, args: ReplayArgs) -> ToolCall:
    """What the call served, as it served it, of documents this key may still be served."""
    done = replay(tenant_id=who.tenant.pk, readable=who.readable_dataset_ids(),
                  access=who.access, tool_call_id=args.tool_call_id)
    record = InvocationRecord(
        tenant_id=who.tenant.pk, tool_call_id=args.tool_call_id, session_id="", query="",
        evidence_status=(EvidenceStatus.READY if done.evidence else EvidenceStatus.EMPTY).value,
        relevance_level="NONE", returned_count=len(done.evidence),
        config_version=done.config_version, error="",
        details={"replayed": {"evidence": len(done.evidence), "withheld": done.withheld,
                              "index_version": done.index_version}},
        tool_name="replay_evidence")
    return ToolCall(done.as_dict(), record)


def rate_evidence_call(who: Caller, args: RateArgs) -> ToolCall:
    """Helpful or not: evidence served to a call of this key, from a dataset it may read
    (audit.services.evidence_rate refuses anything else, rating nothing)."""
    rating = Rating(args.rating)
    rated = evidence_rate(tenant_id=who.tenant.pk, api_key_id=who.api_key.pk,
                          dataset_ids=who.readable_dataset_ids(), access=who.access,
                          tool_call_id=args.tool_call_id,
                          evidence_keys=args.document_ids, rating=rating)
    record = InvocationRecord(
        tenant_id=who.tenant.pk, tool_call_id=args.tool_call_id, session_id="", query="",
        evidence_status=EvidenceStatus.READY.value, relevance_level="NONE",
        returned_count=len(rated), config_version=None, error="",
        details={"rating": rating.value, "document_ids": rated}, tool_name="rate_evidence")
    return ToolCall({"tool_call_id": args.tool_call_id, "rating": rating.value,
                     "rated": rated}, record)
