"""The tool endpoints (lookup, RAG answer, agentic RAG, the RAG node), the evidence guard and
the platform's index operations."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import invocation_record
from datasets.auth import Caller, IsPlatformKey, caller
from datasets.models import ApiKey, Job
from datasets.selectors import MAX_DB_ID, NotFound, db_id, readable_datasets
from datasets.serializers import JobOutput
from kbplatform.errors import ApiError, ServiceUnavailable
from kbplatform.openapi import ErrorSerializer, errors
from retrieval.agentic import Route, agentic_answer
from retrieval.answer import AnswerStatus
from retrieval.answer_service import rag_answer
from retrieval.health import health_checks
from retrieval.lookup_service import confirmed_evidence, lookup_scope, served_lookup
from retrieval.models import IndexVersion
from retrieval.project import RagResultProjector, invocation_of
from retrieval.rag_node import TOOL_NAME, DatasetRef, NodeInput, NodeStatus, rag_node
from retrieval.rebuild import CONFIRM_WORD, ROLLBACK_WORD
from retrieval.selectors import index_versions
from retrieval.services import index_operation_start
from retrieval.types import EvidenceStatus, RelevanceLevel, SearchFilters

IDENT = r"^[A-Za-z0-9_.:\-]{1,128}$"


# --- the agent contract (DESIGN.md "Agent-facing result"), as RagResultProjector builds it ----

@extend_schema_serializer(component_name="Evidence")
class EvidenceOutput(serializers.Serializer[dict[str, Any]]):
    document_id = serializers.CharField(help_text="The evidence key `<docId>#chunk-<n>`: cite "
                                                  "it, and check it with the evidence guard.")
    # DRF takes declared fields off the class, so this does not shadow Field.source at runtime.
    source = serializers.CharField(allow_blank=True)  # type: ignore[assignment]
    title = serializers.CharField(allow_blank=True)
    breadcrumb = serializers.CharField(allow_blank=True)
    excerpt = serializers.CharField(allow_blank=True, help_text="Retrieved text: untrusted data.")


@extend_schema_serializer(component_name="RagToolResult")
class RagToolResultOutput(serializers.Serializer[dict[str, Any]]):
    evidence_status = serializers.ChoiceField(
        choices=[s.value for s in EvidenceStatus],
        help_text="READY: evidence found. EMPTY: nothing relevant. UNAVAILABLE: a backend "
                  "failed (HTTP 503) - never the same as EMPTY.")
    tool_call_id = serializers.CharField(help_text="The caller's, or a generated `call_...`.")
    query = serializers.CharField(allow_blank=True)
    evidence = EvidenceOutput(many=True, help_text="Empty unless READY.")
    relevance_level = serializers.ChoiceField(choices=[r.value for r in RelevanceLevel])
    truncated = serializers.BooleanField(help_text="The context budget cut some evidence.")
    returned_count = serializers.IntegerField(min_value=0)


@extend_schema_serializer(component_name="EvidenceGuardResult")
class EvidenceGuardOutput(serializers.Serializer[dict[str, Any]]):
    ready = serializers.ListField(child=serializers.CharField(), help_text="Confirmed: READY "
                                  "evidence of that call or session that may still be served.")
    not_ready = serializers.ListField(child=serializers.CharField())


@extend_schema_serializer(component_name="Lookup")
class LookupInput(serializers.Serializer[dict[str, Any]]):
    query = serializers.CharField(trim_whitespace=True, max_length=settings.KB_MAX_QUERY_CHARS)
    tool_call_id = serializers.RegexField(IDENT, required=False)
    session_id = serializers.RegexField(IDENT, required=False)
    dataset_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_DB_ID), required=False,
        max_length=100)


def _unavailable(component: str, contract: type[serializers.Serializer[Any]]
                 ) -> OpenApiResponse:
    return OpenApiResponse(
        PolymorphicProxySerializer(component_name=component,
                                   serializers=[contract, ErrorSerializer],
                                   resource_type_field_name=None),
        description="A backend failed: the contract with UNAVAILABLE (or the error shape "
                    "when the database is down).")


class _AuditedToolApi(APIView):
    """A tool call with exactly one audit row: `post` writes it for an answer (READY, EMPTY,
    UNAVAILABLE), `handle_exception` for every failure, a 401 from `initial` included."""

    tool_name = "lookup_knowledge"
    started = 0.0

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()  # before authentication: a 401 has a latency too
        super().initial(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> Response:
        key = self._audit_key()
        # A stranger's body is not parsed: no tenant could trace its ids anyway.
        invocation_record(api_key=key, payload=self._audit_payload() if key else None,
                          error=exc, latency_ms=self._elapsed_ms(), tool_name=self.tool_name)
        return super().handle_exception(exc)

    def _scoped(self, request: Request) -> tuple[Caller, dict[str, Any], SearchFilters]:
        """The caller, its validated body and the scope its key (and body) give."""
        who = caller(request)
        data = LookupInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        return who, values, lookup_scope(caller=who, requested=values.get("dataset_ids"))

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def _audit_key(self) -> ApiKey | None:
        try:
            user = self.request.user  # authenticates now if a 406 came first; may fail again
        except (exceptions.APIException, DatabaseError):
            return None
        return user.api_key if isinstance(user, Caller) else None

    def _audit_payload(self) -> Mapping[str, Any] | None:
        try:
            data = self.request.data
        except exceptions.APIException:  # an unparsable body; the error is the one audited
            return None
        return data if isinstance(data, Mapping) else None


class LookupKnowledgeApi(_AuditedToolApi):
    """The tool."""

    @extend_schema(
        operation_id="lookup_knowledge", summary="The lookup_knowledge tool",
        description="Tenant and datasets come from the API key; `dataset_ids` can only narrow "
                    "them. Any role.",
        request=LookupInput,
        responses={
            200: OpenApiResponse(RagToolResultOutput, description="READY or EMPTY."),
            503: _unavailable("LookupUnavailable", RagToolResultOutput),
            **errors(400, 401, 415,
                     e400="Invalid input, or a dataset id the key may not read."),
        })
    def post(self, request: Request) -> Response:
        who, values, filters = self._scoped(request)
        result = served_lookup(filters=filters, query=values["query"],
                               tool_call_id=values.get("tool_call_id", ""),
                               session_id=values.get("session_id", ""))
        body = RagResultProjector().project(result)
        # Last, so that anything raising above is audited once, by handle_exception.
        invocation_record(api_key=who.api_key, result=invocation_of(result),
                          latency_ms=self._elapsed_ms())
        unavailable = result.evidence_status == EvidenceStatus.UNAVAILABLE
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if unavailable
                        else status.HTTP_200_OK)


@extend_schema_serializer(component_name="RagAnswerResult")
class RagAnswerOutput(serializers.Serializer[dict[str, Any]]):
    answer = serializers.CharField(allow_blank=True, help_text="Empty unless ANSWERED. Built "
                                   "from retrieved text: cite it by `citations`.")
    citations = serializers.ListField(
        child=serializers.CharField(), help_text="Evidence `document_id`s the answer rests on, "
        "each confirmed by the evidence guard for this call.")
    answer_status = serializers.ChoiceField(
        choices=[s.value for s in AnswerStatus],
        help_text="ANSWERED; NO_ANSWER: evidence was found but does not answer; EMPTY: nothing "
                  "relevant; UNAVAILABLE: a backend failed (HTTP 503).")
    evidence_status = serializers.ChoiceField(choices=[s.value for s in EvidenceStatus])
    tool_call_id = serializers.CharField()
    query = serializers.CharField(allow_blank=True)
    evidence = EvidenceOutput(many=True, help_text="The lookup's evidence, as the tool returns "
                                                   "it.")
    relevance_level = serializers.ChoiceField(choices=[r.value for r in RelevanceLevel])
    truncated = serializers.BooleanField()
    returned_count = serializers.IntegerField(min_value=0)


class RagAnswerApi(_AuditedToolApi):
    """The standard RAG answer: the tool's lookup, then an answer with citations."""

    tool_name = "rag_answer"

    @extend_schema(
        operation_id="rag_answer", summary="An answer with citations (standard RAG)",
        description="Runs the lookup_knowledge tool (same scope, config and audit), then "
                    "answers from its evidence: with the chat model of KB_CHAT_BASE_URL, else "
                    "extractively. Any role.",
        request=LookupInput,
        responses={200: OpenApiResponse(RagAnswerOutput, description="ANSWERED, NO_ANSWER or "
                                                                      "EMPTY."),
                   503: _unavailable("RagAnswerUnavailable", RagAnswerOutput),
                   **errors(400, 401, 415)})
    def post(self, request: Request) -> Response:
        who, values, filters = self._scoped(request)
        outcome = rag_answer(filters=filters, query=values["query"],
                             tool_call_id=values.get("tool_call_id", ""),
                             session_id=values.get("session_id", ""))
        body = {"answer": outcome.answer, "citations": list(outcome.citations),
                "answer_status": outcome.status.value, **outcome.body}
        invocation_record(api_key=who.api_key, latency_ms=self._elapsed_ms(),
                          result=replace(invocation_of(outcome.result), tool_name=self.tool_name,
                                         answer=outcome.trace()))
        unavailable = outcome.status is AnswerStatus.UNAVAILABLE
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if unavailable
                        else status.HTTP_200_OK)


@extend_schema_serializer(component_name="AgenticIteration")
class AgenticIterationOutput(serializers.Serializer[dict[str, Any]]):
    iteration = serializers.IntegerField(min_value=0)
    route = serializers.ChoiceField(choices=[r.value for r in Route])
    query = serializers.CharField(required=False, help_text="What this iteration searched.")
    next = serializers.CharField(required=False, help_text="What the next iteration searches.")
    evidence_status = serializers.CharField(required=False)
    returned = serializers.IntegerField(required=False)
    quality = serializers.FloatField(required=False, help_text="The judge's grade, 0-1.")
    judge_usage = serializers.DictField(required=False, help_text="The model judge's token "
                                        "counts: model, prompt_tokens, completion_tokens.")
    judge_error = serializers.CharField(required=False, help_text="Why the model judge "
                                        "failed, when the rules judged instead.")
    reason = serializers.CharField(required=False)


@extend_schema_serializer(component_name="RagAgenticResult")
class RagAgenticOutput(serializers.Serializer[dict[str, Any]]):
    answer = serializers.CharField(allow_blank=True)
    citations = serializers.ListField(child=serializers.CharField(), help_text="Evidence "
                                      "`document_id`s, confirmed by the evidence guard for "
                                      "the call's session.")
    answer_status = serializers.ChoiceField(choices=[s.value for s in AnswerStatus])
    confidence = serializers.FloatField(help_text="The mean grade of the sub-questions, 0-1.")
    iterations = serializers.IntegerField(min_value=0)
    routes = AgenticIterationOutput(many=True, help_text="The route taken after each "
                                                         "iteration.")
    evidence = EvidenceOutput(many=True, help_text="What the answer was built from: each "
                              "sub-question's best evidence in turn, at most 8 items.")
    tool_call_id = serializers.CharField()
    session_id = serializers.CharField(help_text="Each iteration's lookup is recorded under "
                                                 "it: check citations with the guard.")
    query = serializers.CharField()


class RagAgenticApi(_AuditedToolApi):
    """Agentic RAG: plan, retrieve, evaluate, self-correct, then answer with citations."""

    tool_name = "rag_agentic"

    @extend_schema(
        operation_id="rag_agentic", summary="An answer with citations (agentic RAG)",
        description="Plans sub-questions, runs the tool's lookup for each, grades the evidence "
                    "and corrects weak searches (the chat model of KB_CHAT_BASE_URL when set, "
                    "else rules), then answers. RagConfig.agentic_graph SIMPLIFIED searches "
                    "once. Any role.",
        request=LookupInput,
        responses={200: OpenApiResponse(RagAgenticOutput, description="ANSWERED, NO_ANSWER "
                                                                       "or EMPTY."),
                   503: _unavailable("RagAgenticUnavailable", RagAgenticOutput),
                   **errors(400, 401, 415)})
    def post(self, request: Request) -> Response:
        who, values, filters = self._scoped(request)
        outcome = agentic_answer(filters=filters, query=values["query"],
                                 tool_call_id=values.get("tool_call_id", ""),
                                 session_id=values.get("session_id", ""))
        state = outcome.state
        body = {"answer": outcome.answer, "citations": list(outcome.citations),
                "answer_status": outcome.status.value, "confidence": outcome.confidence,
                "iterations": state.iteration, "routes": state.routes,
                "evidence": list(state.candidates.values()),
                "tool_call_id": outcome.tool_call_id, "session_id": outcome.session_id,
                "query": state.query}
        invocation_record(api_key=who.api_key, latency_ms=self._elapsed_ms(),
                          result=outcome.invocation(filters))
        unavailable = outcome.status is AnswerStatus.UNAVAILABLE
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if unavailable
                        else status.HTTP_200_OK)


@extend_schema_serializer(component_name="RagNode")
class RagNodeInput(serializers.Serializer[dict[str, Any]]):
    query = serializers.CharField(required=False, allow_blank=True,
                                  max_length=settings.KB_MAX_QUERY_CHARS,
                                  help_text="The task's query parameter: searched when given.")
    rag_keywords = serializers.ListField(
        child=serializers.CharField(max_length=200, allow_blank=True), required=False,
        max_length=50, help_text="The intent's keywords: searched, joined by spaces, when "
                                 "there is no query.")
    user_input = serializers.CharField(required=False, allow_blank=True,
                                       max_length=settings.KB_MAX_QUERY_CHARS,
                                       help_text="Searched when neither of the above is given.")
    target_dataset_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_DB_ID), required=False,
        max_length=100, help_text="Exactly these (of those the key may read).")
    target_dataset_name = serializers.CharField(
        required=False, allow_blank=True, max_length=100,
        help_text="Without ids: empty, 全部 or all = every readable dataset; else the dataset "
                  "of that name, else those whose name contains it.")
    agent = serializers.CharField(required=False, allow_blank=True, max_length=100,
                                  help_text="The task's agent: a RagAgent of the tenant by this "
                                            "name runs the question with its settings.")
    sub_agents = serializers.ListField(
        child=serializers.CharField(max_length=100, allow_blank=True), required=False,
        max_length=20, help_text="The loop agent's sub-agents: the first that is a RagAgent of "
                                 "the tenant is delegated to (after `agent`).")
    tool_call_id = serializers.RegexField(IDENT, required=False)
    session_id = serializers.RegexField(IDENT, required=False)

    def validate_rag_keywords(self, value: list[str]) -> list[str]:
        if len(" ".join(value)) > settings.KB_MAX_QUERY_CHARS:
            raise serializers.ValidationError(
                f"joined, at most {settings.KB_MAX_QUERY_CHARS} characters")
        return value


@extend_schema_serializer(component_name="TargetDataset")
class TargetDatasetOutput(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    name = serializers.CharField()


@extend_schema_serializer(component_name="RagNodeStructured")
class RagNodeStructuredOutput(serializers.Serializer[dict[str, Any]]):
    confidence = serializers.FloatField()
    iterations = serializers.IntegerField(min_value=0)
    target_datasets = TargetDatasetOutput(many=True)


@extend_schema_serializer(component_name="RagNodeResult")
class RagNodeOutput(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(
        choices=[s.value for s in NodeStatus],
        help_text="The answer's statuses, and NO_KNOWLEDGE_BASE (no readable dataset matched "
                  "the target: 未配置知识库, not EMPTY) and NEEDS_INPUT (nothing to look up: "
                  "see `missing`).")
    result = serializers.CharField(help_text="For the loop: the answer, else the evidence as "
                                             "delimited untrusted snippets, else why not.")
    answer = serializers.CharField(allow_blank=True)
    citations = serializers.ListField(child=serializers.CharField())
    structured = RagNodeStructuredOutput()
    query = serializers.CharField(allow_blank=True, help_text="What was searched.")
    query_source = serializers.ChoiceField(choices=["query", "rag_keywords", "user_input", ""])
    selected_by = serializers.ChoiceField(choices=["ids", "all", "name", "contains", ""],
                                          help_text="Which rule chose the datasets.")
    delegated_to = serializers.CharField(allow_blank=True, help_text="The RagAgent that ran "
                                         "the question; empty: the node's own agentic graph.")
    missing = serializers.ListField(child=serializers.CharField())
    routes = AgenticIterationOutput(many=True)
    evidence = EvidenceOutput(many=True)
    tool_call_id = serializers.CharField()
    session_id = serializers.CharField()


class RagNodeApi(_AuditedToolApi):
    """The RAG node of an agent loop (seed 003 §5)."""

    tool_name = TOOL_NAME

    @extend_schema(
        operation_id="rag_node", summary="The RAG node of an agent loop",
        description="Builds the query from the task (query, else rag_keywords, else "
                    "user_input), picks the datasets by target, and runs agentic RAG: a named "
                    "RagAgent's, else the node's own. Tenant and datasets come from the key. "
                    "Any role.",
        request=RagNodeInput,
        responses={200: OpenApiResponse(RagNodeOutput, description="Every status but "
                                                                    "UNAVAILABLE."),
                   503: _unavailable("RagNodeUnavailable", RagNodeOutput),
                   **errors(400, 401, 415)})
    def post(self, request: Request) -> Response:
        who = caller(request)
        data = RagNodeInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        readable = [DatasetRef(pk, name) for pk, name in readable_datasets(caller=who)]
        node = NodeInput(
            query=values.get("query", ""), rag_keywords=tuple(values.get("rag_keywords", ())),
            user_input=values.get("user_input", ""),
            target_dataset_ids=tuple(values.get("target_dataset_ids", ())),
            target_dataset_name=values.get("target_dataset_name", ""),
            agent=values.get("agent", ""), sub_agents=tuple(values.get("sub_agents", ())),
            tool_call_id=values.get("tool_call_id", ""),
            session_id=values.get("session_id", ""))
        done = rag_node(tenant_id=who.tenant.pk, readable=readable, node=node)
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
                                dataset_ids=tuple(d.id for d in done.target_datasets))
        invocation_record(api_key=who.api_key, latency_ms=self._elapsed_ms(),
                          result=done.invocation(filters))
        unavailable = done.status is NodeStatus.UNAVAILABLE
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if unavailable
                        else status.HTTP_200_OK)


class EvidenceGuardApi(APIView):
    @extend_schema_serializer(component_name="EvidenceGuard")
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        tool_call_id = serializers.RegexField(IDENT, required=False)
        session_id = serializers.RegexField(IDENT, required=False)
        document_ids = serializers.ListField(child=serializers.CharField(max_length=200),
                                             min_length=1, max_length=200)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if bool(attrs.get("tool_call_id")) == bool(attrs.get("session_id")):
                raise serializers.ValidationError("give exactly one of tool_call_id, session_id")
            return attrs

    @extend_schema(operation_id="evidence_guard",
                   summary="Which document ids were READY evidence of a call or session",
                   description="Give exactly one of `tool_call_id` and `session_id` (both or "
                               "neither: 400). Confirmed: READY evidence of that call or "
                               "session, from a dataset this key may read, of a document "
                               "that may still be served.",
                   request=InputSerializer,
                   responses={200: EvidenceGuardOutput, **errors(400, 401, 415, 503)})
    def post(self, request: Request) -> Response:
        """Confirmed: READY evidence of the call (or session), from a dataset this key may
        read, of a document that may still be served."""
        who = caller(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        asked = list(dict.fromkeys(values["document_ids"]))
        ready = confirmed_evidence(tenant_id=who.tenant.pk, readable=who.readable_dataset_ids(),
                                   document_ids=asked, tool_call_id=values.get("tool_call_id", ""),
                                   session_id=values.get("session_id", ""))
        return Response({"ready": ready, "not_ready": [key for key in asked if key not in ready]})


# --- platform operators: index versions, rebuild, rollback, reconcile ----------------------

@extend_schema_serializer(component_name="IndexVersion")
class IndexVersionOutput(serializers.ModelSerializer[IndexVersion]):
    class Meta:
        model = IndexVersion
        fields = ["id", "collection_name", "embedder", "dimension", "chunk_size",
                  "chunk_overlap", "whole_document_chars", "splitter", "status", "progress",
                  "created_at", "activated_at"]
        read_only_fields = fields


@extend_schema_serializer(component_name="IndexVersionList")
class IndexVersionListOutput(serializers.Serializer[dict[str, Any]]):
    index_versions = IndexVersionOutput(many=True)


@extend_schema_serializer(component_name="IndexOperationStarted")
class StartedOutput(serializers.Serializer[dict[str, Any]]):
    job = JobOutput()
    task_id = serializers.CharField(help_text="The job's id, as a string: GET /api/jobs/{id}.")


def _operation(operation_id: str, summary: str, *params: OpenApiParameter,
               statuses: tuple[int, ...] = (400, 401, 403, 409, 503)) -> Any:
    return extend_schema(
        operation_id=operation_id, summary=summary, request=None, parameters=list(params),
        description="Platform keys only. Queued as a background job (202); one index "
                    "operation at a time.",
        responses={202: StartedOutput, **errors(
            *statuses, e400="No `confirm` word, or the wrong one.",
            e403="Only a platform operator key may do this.",
            e409="Another rebuild, rollback or reconcile is queued or running "
                 "(`extra.job_id`).")})


def _confirm(word: str) -> OpenApiParameter:
    return OpenApiParameter("confirm", OpenApiTypes.STR, required=True, enum=[word],
                            description=f"Must be `{word}`; otherwise a 400 and nothing runs.")


def _confirmed(request: Request, word: str, what: str) -> None:
    if request.query_params.get("confirm") != word:
        raise ApiError(f"{what}: add ?confirm={word}", code="confirmation_required")


def _started(job: Job) -> Response:
    job.refresh_from_db()  # with tasks run in-process (the embedded defaults) it is done
    return Response({"job": JobOutput(job).data, "task_id": str(job.pk)},
                    status=status.HTTP_202_ACCEPTED)


class RebuildApi(APIView):
    permission_classes = [IsPlatformKey]

    @_operation("index_rebuild", "Rebuild the whole index into a new version",
                _confirm(CONFIRM_WORD))
    def post(self, request: Request) -> Response:
        _confirmed(request, CONFIRM_WORD, "a rebuild re-indexes every tenant's documents")
        return _started(index_operation_start(kind=Job.Kind.REBUILD))


class RollbackApi(APIView):
    permission_classes = [IsPlatformKey]

    @_operation("index_rollback", "Serve a retired index version again", _confirm(ROLLBACK_WORD),
                OpenApiParameter("version", OpenApiTypes.INT64, description=(
                    "The index version to serve; by default the latest retired one. Not an "
                    "id: 404.")), statuses=(400, 401, 403, 404, 409, 503))
    def post(self, request: Request) -> Response:
        _confirmed(request, ROLLBACK_WORD, "a rollback switches every tenant's index")
        version = request.query_params.get("version")
        version_id = db_id(version) if version else None
        if version and version_id is None:
            raise NotFound(f"index version {version} does not exist")
        return _started(index_operation_start(kind=Job.Kind.ROLLBACK, args=(version_id,),
                                              detail={"version_id": version_id}))


class ReconcileApi(APIView):
    permission_classes = [IsPlatformKey]

    @_operation("index_reconcile", "Compare the index with the database (and repair)",
                OpenApiParameter("repair", OpenApiTypes.BOOL, description=(
                    "`true` (or `1`) repairs what differs; otherwise only reports.")),
                statuses=(401, 403, 409, 503))
    def post(self, request: Request) -> Response:
        repair = request.query_params.get("repair", "").lower() in ("1", "true")
        return _started(index_operation_start(kind=Job.Kind.RECONCILE, args=(repair,),
                                              detail={"repair": repair}))


class IndexVersionListApi(APIView):
    permission_classes = [IsPlatformKey]

    @extend_schema(operation_id="index_versions_list", summary="The index versions",
                   responses={200: IndexVersionListOutput, **errors(
                       401, 403, 503, e403="Only a platform operator key may do this.")})
    def get(self, request: Request) -> Response:
        return Response({"index_versions": IndexVersionOutput(index_versions(),
                                                              many=True).data})


# --- health -----------------------------------------------------------------------------------

@extend_schema_serializer(component_name="Health")
class HealthOutput(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(choices=["ok"])
    checks = serializers.DictField(child=serializers.ChoiceField(choices=["ok"]),
                                   help_text="database, cache, milvus")


class HealthApi(APIView):
    """Readable without a key: it names the parts that answer, nothing else."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    @extend_schema(operation_id="health", summary="Can this process serve lookups now?",
                   auth=[], responses={200: HealthOutput, **errors(
                       503, e503="A part does not answer: `extra.checks` says which "
                                 "(ok / unavailable).")})
    def get(self, request: Request) -> Response:
        checks = {name: "ok" if ok else "unavailable" for name, ok in health_checks().items()}
        down = sorted(name for name, state in checks.items() if state != "ok")
        if down:
            raise ServiceUnavailable(f"not answering: {', '.join(down)}",
                                     extra={"checks": checks})
        return Response({"status": "ok", "checks": checks})
