"""REST endpoints for datasets, documents, jobs and the rebuild. Thin: parse, call, serialize."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets.auth import Caller, IsAdminKey
from datasets.models import Dataset, Document, Job
from datasets.rebuild import CONFIRM_WORD
from datasets.selectors import dataset_get, dataset_list, document_get, document_list, job_get
from datasets.services import (
    dataset_create,
    document_delete,
    document_set_activation,
    document_upload,
)
from kbplatform.errors import ApiError


def caller(request: Request) -> Caller:
    assert isinstance(request.user, Caller)
    return request.user


class DatasetOutput(serializers.ModelSerializer[Dataset]):
    class Meta:
        model = Dataset
        fields = ["id", "name", "description", "kb_scope", "activated", "created_at"]


class DocumentOutput(serializers.ModelSerializer[Document]):
    document_id = serializers.CharField(source="doc_key")
    dataset_id = serializers.IntegerField()

    class Meta:
        model = Document
        fields = ["document_id", "dataset_id", "source_path", "title", "domain", "keywords",
                  "category", "activated", "status", "error", "chunk_count", "updated_at"]


class JobOutput(serializers.ModelSerializer[Job]):
    class Meta:
        model = Job
        fields = ["id", "kind", "status", "done", "total", "detail", "error", "created_at",
                  "updated_at"]


class DatasetListApi(APIView):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        name = serializers.RegexField(r"^[a-z0-9][a-z0-9_-]{0,62}$", max_length=63)
        description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
        kb_scope = serializers.CharField(required=False, allow_blank=True, max_length=100)

    def get(self, request: Request) -> Response:
        datasets = dataset_list(tenant_id=caller(request).tenant.pk)
        return Response({"datasets": DatasetOutput(datasets, many=True).data})

    def post(self, request: Request) -> Response:
        if not caller(request).is_admin:
            raise ApiError("creating a dataset needs an admin API key", code="forbidden",
                           status_code=403)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dataset = dataset_create(tenant=caller(request).tenant, **data.validated_data)
        return Response(DatasetOutput(dataset).data, status=status.HTTP_201_CREATED)


class DocumentListApi(APIView):
    parser_classes = [MultiPartParser, FormParser]

    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = dataset_get(tenant_id=caller(request).tenant.pk, dataset_id=dataset_id)
        return Response({"documents": DocumentOutput(document_list(dataset=dataset),
                                                     many=True).data})

    def post(self, request: Request, dataset_id: int) -> Response:
        if not caller(request).is_admin:
            raise ApiError("uploading needs an admin API key", code="forbidden", status_code=403)
        dataset = dataset_get(tenant_id=caller(request).tenant.pk, dataset_id=dataset_id)
        upload = request.FILES.get("file")
        if upload is None:
            raise ApiError("send the markdown as the multipart field 'file'", code="missing_file")
        if upload.size and upload.size > settings.KB_MAX_UPLOAD_BYTES:
            raise ApiError(f"the file has {upload.size} bytes; the limit is "
                           f"{settings.KB_MAX_UPLOAD_BYTES}", code="too_large", status_code=413)
        outcome = document_upload(dataset=dataset, file_name=upload.name or "", raw=upload.read(),
                                  max_bytes=settings.KB_MAX_UPLOAD_BYTES)
        body = {"document": DocumentOutput(outcome.document).data, "changed": outcome.changed,
                "job": JobOutput(outcome.job).data if outcome.job else None}
        return Response(body, status=status.HTTP_202_ACCEPTED if outcome.changed
                        else status.HTTP_200_OK)


class DocumentDetailApi(APIView):
    permission_classes = [IsAdminKey]

    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        activated = serializers.BooleanField()

    def get(self, request: Request, doc_id: str) -> Response:
        document = document_get(tenant_id=caller(request).tenant.pk, doc_id=doc_id)
        return Response(DocumentOutput(document).data)

    def patch(self, request: Request, doc_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        document = document_get(tenant_id=caller(request).tenant.pk, doc_id=doc_id)
        document = document_set_activation(document=document,
                                           activated=data.validated_data["activated"])
        return Response(DocumentOutput(document).data)

    def delete(self, request: Request, doc_id: str) -> Response:
        document = document_get(tenant_id=caller(request).tenant.pk, doc_id=doc_id)
        document_delete(document=document)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobDetailApi(APIView):
    def get(self, request: Request, job_id: int) -> Response:
        return Response(JobOutput(job_get(tenant_id=caller(request).tenant.pk,
                                          job_id=job_id)).data)


class RebuildApi(APIView):
    permission_classes = [IsAdminKey]

    def post(self, request: Request) -> Response:
        from datasets.tasks import rebuild_task

        if request.query_params.get("confirm") != CONFIRM_WORD:
            raise ApiError(f"a rebuild re-indexes everything: add ?confirm={CONFIRM_WORD}",
                           code="confirmation_required")
        job = Job.objects.create(tenant=caller(request).tenant, kind=Job.Kind.REBUILD)
        rebuild_task.delay(job.pk)
        return Response({"job": JobOutput(job).data, "task_id": str(job.pk)},
                        status=status.HTTP_202_ACCEPTED)
