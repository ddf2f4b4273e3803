"""REST endpoints for sources: list, create, read, change, delete, sync now. Admin keys; a
dataset-scoped key reaches its datasets' sources only, as it does their documents."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets.api.serializers import JobOutput, ReadersField, SourceListOutput, SourceOutput
from datasets.documents.selectors import dataset_get, source_get, source_list
from datasets.models import REGION, Source
from datasets.sources.locations import MAX_GLOBS
from datasets.sources.services import (
    source_create,
    source_delete,
    source_sync_request,
    source_update,
)
from datasets.tenancy.keys import IsAdminKey, caller
from kbplatform.errors import ApiError, ErrorCode
from kbplatform.fields import BoundedListField
from kbplatform.openapi import errors, path_id

SOURCE_ID = path_id("source_id", "The source's id.")


class SourceSettings(serializers.Serializer[dict[str, Any]]):
    """What a source's owner sets; checked further by the service (the location's policy)."""

    location = serializers.CharField(max_length=1000)
    branch = serializers.CharField(max_length=200, required=False, allow_blank=True)
    subfolder = serializers.CharField(max_length=500, required=False, allow_blank=True)
    include = BoundedListField(child=serializers.CharField(max_length=200), max_length=MAX_GLOBS,
                               required=False)
    max_depth = serializers.IntegerField(min_value=0, max_value=10, required=False)
    max_pages = serializers.IntegerField(min_value=1, max_value=10_000, required=False)
    max_page_bytes = serializers.IntegerField(min_value=1024, max_value=2**31 - 1,
                                              required=False)
    region = serializers.CharField(max_length=40, required=False, allow_blank=True,
                                   validators=[REGION],
                                   help_text=Source._meta.get_field("region").help_text)
    interval_minutes = serializers.IntegerField(min_value=1, max_value=10**6, allow_null=True,
                                                required=False)
    secret_env = serializers.CharField(max_length=120, required=False, allow_blank=True,
                                       help_text="git over http(s) and s3: the name of the "
                                                 "variable holding its credential "
                                                 "(docs/operations.md).")
    readers = ReadersField(required=False, help_text=(
        "Who may read its documents: `user:<name>` and `group:<name>`; empty: every caller "
        "of the dataset. Its documents take them at once."))


def _credential_allowed(request: Request, fields: dict[str, Any]) -> None:
    """A credential variable is the tenant's: named by its tenant-wide keys only (a
    dataset-scoped key could point a source of its own at another's token)."""
    if fields.get("secret_env") and caller(request).is_scoped:
        raise ApiError("a dataset-scoped key may not name a credential variable (a tenant-wide "
                       "admin key or the admin may)", code=ErrorCode.FORBIDDEN, status_code=403)


class SourceListApi(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema_serializer(component_name="SourceCreate")
    class InputSerializer(SourceSettings):
        dataset_id = serializers.IntegerField(min_value=1)
        name = serializers.RegexField(r"^[a-z0-9][a-z0-9_-]{0,62}$", max_length=63)
        kind = serializers.ChoiceField(choices=Source.Kind.choices)

    @extend_schema(operation_id="sources_list", summary="The sources of the key's datasets",
                   responses={200: SourceListOutput, **errors(401, 403, 503)})
    def get(self, request: Request) -> Response:
        return Response({"sources": SourceOutput(source_list(caller=caller(request)),
                                                 many=True).data})

    @extend_schema(operation_id="source_create", summary="Add a source to a dataset",
                   request=InputSerializer,
                   responses={201: SourceOutput, **errors(
                       400, 401, 403, 404, 409, 415, 503,
                       e400="Invalid fields, or a location the policy refuses "
                            "(`invalid_source`).",
                       e409="The dataset has a source of that name.")})
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        _credential_allowed(request, fields)
        dataset = dataset_get(caller=caller(request), dataset_id=fields.pop("dataset_id"))
        source = source_create(dataset=dataset, **fields)
        return Response(SourceOutput(source).data, status=status.HTTP_201_CREATED)


class SourceDetailApi(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema_serializer(component_name="SourceUpdate")
    class InputSerializer(SourceSettings):
        location = serializers.CharField(max_length=1000, required=False)

    @extend_schema(operation_id="source_get", summary="One source", parameters=[SOURCE_ID],
                   responses={200: SourceOutput, **errors(401, 403, 404, 503)})
    def get(self, request: Request, source_id: str) -> Response:
        return Response(SourceOutput(source_get(caller=caller(request),
                                                source_id=source_id)).data)

    @extend_schema(operation_id="source_update", summary="Change a source's settings",
                   description="Its name and kind stay (they name its documents).",
                   parameters=[SOURCE_ID], request=InputSerializer,
                   responses={200: SourceOutput, **errors(400, 401, 403, 404, 415, 503)})
    def patch(self, request: Request, source_id: str) -> Response:
        data = self.InputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        source = source_get(caller=caller(request), source_id=source_id)
        _credential_allowed(request, data.validated_data)
        return Response(SourceOutput(source_update(source=source,
                                                   **data.validated_data)).data)

    @extend_schema(operation_id="source_delete",
                   summary="Delete a source and the documents it made",
                   parameters=[SOURCE_ID], responses={204: None, **errors(
                       401, 403, 404, 409, 503, e409="The source is syncing.")})
    def delete(self, request: Request, source_id: str) -> Response:
        source_delete(source=source_get(caller=caller(request), source_id=source_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SourceSyncApi(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(operation_id="source_sync", summary="Sync a source now",
                   description="202 with the sync's job (follow it with GET /api/jobs/{id}).",
                   parameters=[SOURCE_ID], request=None,
                   responses={202: JobOutput, **errors(
                       401, 403, 404, 409, 503,
                       e409="A sync of the source is queued or running (`extra.job_id`).")})
    def post(self, request: Request, source_id: str) -> Response:
        job = source_sync_request(source=source_get(caller=caller(request),
                                                    source_id=source_id))
        job.refresh_from_db()  # as it is now: with tasks in-process the sync has run
        return Response(JobOutput(job).data, status=status.HTTP_202_ACCEPTED)
