"""The tools' REST views (one per tool of retrieval/tools/registry.py), their schemas and the
platform's index operations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import DatabaseError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import exceptions, serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.models import Channel
from datasets.auth import Caller, IsPlatformKey, caller
from datasets.models import ApiKey, Job
from datasets.selectors import NotFound, db_id
from datasets.serializers import JobOutput
from kbplatform.errors import ApiError, ServiceUnavailable
from kbplatform.openapi import ErrorSerializer, errors
from retrieval.index.health import health_checks
from retrieval.index.models import IndexVersion
from retrieval.index.operations import index_operation_start
from retrieval.index.rebuild import CONFIRM_WORD, ROLLBACK_WORD
from retrieval.index.versions import index_versions
from retrieval.tools.audit_once import AuditOnce
from retrieval.tools.registry import Tool
from retrieval.tools.schemas import FORMATS, tool_definitions


def _unavailable(component: str, contract: type[serializers.Serializer[Any]]
                 ) -> OpenApiResponse:
    return OpenApiResponse(
        PolymorphicProxySerializer(component_name=component,
                                   serializers=[contract, ErrorSerializer],
                                   resource_type_field_name=None),
        description="A backend failed: the contract with UNAVAILABLE (or the error shape "
                    "when the database is down).")


class ToolApi(APIView):
    """A tool of the registry over REST; for an audited one, exactly one audit row per call:
    `post` writes the answer's, `handle_exception` a failure's, a 401 from `initial` included."""

    tool: Tool
    audit: AuditOnce

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.audit = AuditOnce(self.tool, channel=Channel.REST)
        super().initial(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> Response:
        self.audit.failed(exc, api_key=self._audit_key, payload=self._audit_payload)
        return super().handle_exception(exc)

    def post(self, request: Request) -> Response:
        done = self.audit.run(caller(request), request.data)
        return Response(done.body, status=status.HTTP_503_SERVICE_UNAVAILABLE
                        if done.unavailable else status.HTTP_200_OK)

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


def tool_api(tool: Tool) -> type[ToolApi]:
    """The REST view of `tool`, documented by its operation."""
    operation = tool.operation
    assert operation is not None and tool.method == "post", f"{tool.name} is not served here"
    answered: Any = OpenApiResponse(operation.output, description=operation.answered) \
        if operation.answered else operation.output
    failed = {503: _unavailable(operation.unavailable, operation.output)} \
        if operation.unavailable else {}
    described = {"e400": operation.e400} if operation.e400 else {}
    name = "".join(word.title() for word in tool.name.split("_")) + "Api"  # LookupKnowledgeApi
    view = type(name, (ToolApi,), {"tool": tool})
    return extend_schema_view(post=extend_schema(
        operation_id=tool.name, summary=operation.summary, description=operation.description,
        request=tool.contract,
        responses={200: answered, **failed, **errors(*operation.errors, **described)}))(view)


class _ToolFormatNegotiation(DefaultContentNegotiation):
    """`?format=` names a tool format here, not one of DRF's renderers: always JSON."""

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        json_renderer = next(iter(renderers))
        return json_renderer, json_renderer.media_type


class ToolSchemaApi(APIView):
    """The tool definitions for agent frameworks; readable without a key, like the OpenAPI
    schema they are generated from."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    content_negotiation_class = _ToolFormatNegotiation

    @extend_schema(
        operation_id="tool_schemas", summary="The tools' definitions for an agent", auth=[],
        description="Name, description (when to use it, how to cite) and the JSON Schema of "
                    "the input of every tool, as OpenAI function calling, Anthropic tool use "
                    "or MCP (with the result's schema) expect them.",
        parameters=[OpenApiParameter("format", str, enum=list(FORMATS), default="openai")],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="{tools: [...]}"),
                   **errors(400)})
    def get(self, request: Request) -> Response:
        fmt = request.query_params.get("format", "openai")
        if fmt not in FORMATS:
            raise ApiError(f"format must be one of {', '.join(FORMATS)}", code="invalid_format")
        return Response({"format": fmt, "tools": tool_definitions(fmt)})


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
