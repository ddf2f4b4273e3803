"""The index's REST endpoints for platform operators (index versions, rebuild, rollback,
reconcile: each queued as one index operation at a time) and the health check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets.api.serializers import JobOutput
from datasets.documents.selectors import db_id
from datasets.models import Job
from datasets.tenancy.keys import IsPlatformKey
from kbplatform.errors import ApiError, ErrorCode, NotFound, ServiceUnavailable
from kbplatform.openapi import errors
from retrieval.index.health import (
    CROSSED_LANGUAGES,
    LOCAL_MODEL_STATES,
    crossed_languages,
    health_checks,
    local_model_health,
)
from retrieval.index.models import IndexVersion
from retrieval.index.operations import index_operation_start
from retrieval.index.rebuild import CONFIRM_WORD, ROLLBACK_WORD
from retrieval.index.versions import index_versions


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


Handler = TypeVar("Handler", bound=Callable[..., Response])


def _operation(operation_id: str, summary: str, *params: OpenApiParameter,
               statuses: tuple[int, ...] = (400, 401, 403, 409, 503)
               ) -> Callable[[Handler], Handler]:
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
        raise ApiError(f"{what}: add ?confirm={word}", code=ErrorCode.CONFIRMATION_REQUIRED)


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


class LocalModelOutput(serializers.Serializer[dict[str, Any]]):
    state = serializers.ChoiceField(choices=LOCAL_MODEL_STATES)
    detail = serializers.CharField()


@extend_schema_serializer(component_name="Health")
class HealthOutput(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(choices=["ok"])
    checks = serializers.DictField(child=serializers.ChoiceField(choices=["ok"]),
                                   help_text="database, cache, milvus")
    local_model = LocalModelOutput(
        help_text="the local model that translates crossed-language questions: never a 503 "
                  "(a lookup goes on without it)")
    crossed_languages = serializers.ChoiceField(
        choices=CROSSED_LANGUAGES, help_text="whether a question finds documents in the other "
        "language: through the deployment's chat model, the local model, or not")


class HealthApi(APIView):
    """Readable without a key: it names the parts that answer, nothing else."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    @extend_schema(operation_id="health", summary="Can this process serve lookups now?",
                   auth=[], responses={200: HealthOutput, **errors(
                       503, e503="A part does not answer: `extra.checks` says which "
                                 "(ok / unavailable); `extra.local_model` and "
                                 "`extra.crossed_languages` as in a 200.")})
    def get(self, request: Request) -> Response:
        checks = {name: "ok" if ok else "unavailable" for name, ok in health_checks().items()}
        local_model = local_model_health()
        models = {"local_model": {"state": local_model.state, "detail": local_model.detail},
                  "crossed_languages": crossed_languages(local_model)}
        down = sorted(name for name, state in checks.items() if state != "ok")
        if down:
            raise ServiceUnavailable(f"not answering: {', '.join(down)}",
                                     extra={"checks": checks, **models})
        return Response({"status": "ok", "checks": checks, **models})
