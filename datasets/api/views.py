"""REST endpoints for datasets, documents and jobs. Thin: parse, call, serialize.

Every endpoint goes through the key's scope (datasets/tenancy/keys.py): what the key may not see
answers exactly as what does not exist.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets.api.serializers import (
    DatasetListOutput,
    DatasetOutput,
    DocumentListOutput,
    DocumentOutput,
    DocumentReindexOutput,
    DocumentUploadOutput,
    JobOutput,
    ReadersField,
)
from datasets.documents.selectors import (
    dataset_get,
    dataset_list,
    document_get,
    document_list,
    job_get,
)
from datasets.documents.services import (
    DocumentTooBig,
    dataset_create,
    document_delete,
    document_readers_set,
    document_reindex,
    document_set_activation,
    document_store,
)
from datasets.tenancy.keys import IsAdminKey, caller
from kbplatform.errors import ApiError, ErrorCode, Forbidden
from kbplatform.openapi import errors, path_id
from kbplatform.parsers import FormParser, MultiPartParser

DATASET_ID = path_id("dataset_id", "The dataset's id (an integer, as returned by the listing).")
DOC_ID = path_id("doc_id", "The document's `document_id`.")


class DatasetListApi(APIView):
    @extend_schema_serializer(component_name="DatasetCreate")
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        name = serializers.RegexField(r"^[a-z0-9][a-z0-9_-]{0,62}$", max_length=63)
        description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
        kb_scope = serializers.CharField(required=False, allow_blank=True, max_length=100)

    @extend_schema(operation_id="datasets_list", summary="The datasets this key may see",
                   responses={200: DatasetListOutput, **errors(401, 503)})
    def get(self, request: Request) -> Response:
        who = caller(request)
        return Response({"datasets": DatasetOutput(dataset_list(caller=who), many=True).data,
                         "filterable_fields": who.tenant.filterable_fields})

    @extend_schema(operation_id="dataset_create", summary="Create a dataset",
                   description="Needs an admin (or platform) key of the whole tenant.",
                   request=InputSerializer,
                   responses={201: DatasetOutput, **errors(
                       400, 401, 403, 409, 415, 503,
                       e409="The tenant has a dataset of that name.")})
    def post(self, request: Request) -> Response:
        who = caller(request)
        if not who.is_admin or who.is_scoped:
            raise Forbidden("creating a dataset needs an admin API key of the whole tenant")
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dataset = dataset_create(tenant=who.tenant, **data.validated_data)
        return Response(DatasetOutput(dataset).data, status=status.HTTP_201_CREATED)


class DocumentListApi(APIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(operation_id="documents_list", summary="The live documents of a dataset",
                   parameters=[DATASET_ID],
                   responses={200: DocumentListOutput, **errors(401, 404, 503)})
    def get(self, request: Request, dataset_id: str) -> Response:
        dataset = dataset_get(caller=caller(request), dataset_id=dataset_id)
        documents = document_list(caller=caller(request), dataset=dataset)
        return Response({"documents": DocumentOutput(documents, many=True).data})

    @extend_schema(
        operation_id="document_upload", summary="Upload a document (markdown, text, HTML, "
                                                 "PDF, DOCX, PPTX, XLSX, CSV)",
        description="Admin keys. The file is checked before anything is written (markdown is "
                    "parsed; another format has its type checked by name and content and its "
                    "original kept), then converted and indexed in the background: 202 with "
                    "the job to follow. A failed conversion fails the job and the document "
                    "(`status` failed, `error` says why). The same bytes again: 200 and no job "
                    "when the document is indexed and unchanged.",
        parameters=[DATASET_ID],
        request={"multipart/form-data": inline_serializer(
            "DocumentUpload", {"file": serializers.FileField(
                help_text="The file: .md/.markdown or .txt (UTF-8), .html/.htm, .pdf, "
                          ".docx, .pptx, .xlsx or .csv.")})},
        responses={200: DocumentUploadOutput, 202: DocumentUploadOutput, **errors(
            400, 401, 403, 404, 409, 413, 415, 503,
            e400="No `file`, a bad file name; markdown that is not UTF-8, binary, empty or "
                 "has bad frontmatter.",
            e409="The dataset has a document of that name with other content.",
            e413="Over KB_MAX_UPLOAD_BYTES, or markdown with too many lines or chunks.",
            e415="Not a supported format, content that is not what the name says, a "
                 "macro-enabled or oversized Office file.")})
    def post(self, request: Request, dataset_id: str) -> Response:
        dataset = dataset_get(caller=caller(request), dataset_id=dataset_id)
        if not caller(request).is_admin:
            raise Forbidden("uploading needs an admin API key")
        upload = request.FILES.get("file")
        if upload is None:
            raise ApiError("send the document as the multipart field 'file'",
                           code=ErrorCode.MISSING_FILE)
        if upload.size and upload.size > settings.KB_MAX_UPLOAD_BYTES:
            raise DocumentTooBig(f"the file has {upload.size} bytes; the limit is "
                                 f"{settings.KB_MAX_UPLOAD_BYTES}")
        outcome = document_store(dataset=dataset, file_name=upload.name or "", raw=upload.read(),
                                 max_bytes=settings.KB_MAX_UPLOAD_BYTES)
        # As they are now: with tasks run in-process (the embedded defaults) the job is done.
        outcome.document.refresh_from_db()
        if outcome.job:
            outcome.job.refresh_from_db()
        body = {"document": DocumentOutput(outcome.document).data, "changed": outcome.changed,
                "job": JobOutput(outcome.job).data if outcome.job else None}
        return Response(body, status=status.HTTP_202_ACCEPTED if outcome.job
                        else status.HTTP_200_OK)


class DocumentDetailApi(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema_serializer(component_name="DocumentChange")
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        activated = serializers.BooleanField(required=False)
        readers = ReadersField(required=False, help_text=(
            "Who may read it: `user:<name>` and `group:<name>`; empty: every caller of the "
            "dataset. A synced document's are its source's (400)."))

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if not attrs:
                raise serializers.ValidationError("give activated, readers or both")
            return attrs

    @extend_schema(operation_id="document_get", summary="One document", parameters=[DOC_ID],
                   responses={200: DocumentOutput, **errors(401, 403, 404, 503)})
    def get(self, request: Request, doc_id: str) -> Response:
        return Response(DocumentOutput(document_get(caller=caller(request), doc_id=doc_id)).data)

    @extend_schema(operation_id="document_activate",
                   summary="Activate or deactivate; set who may read it",
                   parameters=[DOC_ID], request=InputSerializer,
                   responses={200: DocumentOutput, **errors(400, 401, 403, 404, 415, 503)})
    def patch(self, request: Request, doc_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        document = document_get(caller=caller(request), doc_id=doc_id)
        if "readers" in data.validated_data:
            try:
                document = document_readers_set(document=document,
                                                readers=data.validated_data["readers"])
            except ValidationError as exc:
                raise ApiError(" ".join(exc.messages), code=ErrorCode.INVALID,
                               extra={"fields": {"readers": exc.messages}}) from exc
        if "activated" in data.validated_data:
            document = document_set_activation(document=document,
                                               activated=data.validated_data["activated"])
        return Response(DocumentOutput(document).data)

    @extend_schema(operation_id="document_delete",
                   summary="Delete: gone for lookups at once, its chunks leave the index",
                   parameters=[DOC_ID], responses={204: None, **errors(401, 403, 404, 503)})
    def delete(self, request: Request, doc_id: str) -> Response:
        document_delete(document=document_get(caller=caller(request), doc_id=doc_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DocumentReindexApi(APIView):
    """Index a document again from its stored source: a failed or stuck one, or on demand."""

    permission_classes = [IsAdminKey]

    @extend_schema(operation_id="document_reindex", summary="Index again from the stored source",
                   parameters=[DOC_ID], request=None,
                   responses={202: DocumentReindexOutput, **errors(401, 403, 404, 503)})
    def post(self, request: Request, doc_id: str) -> Response:
        document = document_get(caller=caller(request), doc_id=doc_id)
        job = document_reindex(document=document)
        document.refresh_from_db()
        job.refresh_from_db()
        return Response({"document": DocumentOutput(document).data, "job": JobOutput(job).data},
                        status=status.HTTP_202_ACCEPTED)


class JobDetailApi(APIView):
    # Admin keys: a job's log names the files it read, a source sync's every path of the
    # source, which a tool key may not read (a document's readers; datasets/tenancy/permissions.py).
    permission_classes = [IsAdminKey]

    @extend_schema(operation_id="job_get",
                   summary="Progress of an upload, import, rebuild, rollback or reconcile",
                   parameters=[path_id("job_id", "The job's id.")],
                   responses={200: JobOutput, **errors(401, 403, 404, 503)})
    def get(self, request: Request, job_id: str) -> Response:
        return Response(JobOutput(job_get(caller=caller(request), job_id=job_id)).data)
