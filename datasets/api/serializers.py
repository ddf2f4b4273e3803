"""Output serializers shared by the API views of several apps, and the bodies they make up
(the bodies document the OpenAPI schema; the views build them as plain dicts).

Output fields are all read-only, so the schema marks every one of them as always present.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from datasets.models import Dataset, Document, Job, Source
from datasets.sources.secrets import secret_resolves
from datasets.tenancy.permissions import MAX_PRINCIPAL_CHARS, MAX_READERS, readers_checked
from kbplatform.fields import BoundedListField


class ReadersField(BoundedListField):
    """A document's or a source's readers (datasets/tenancy/permissions.py), checked and sorted."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=MAX_PRINCIPAL_CHARS),
                         max_length=MAX_READERS, **kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        try:
            return readers_checked(super().to_internal_value(data))
        except ValidationError as exc:
            raise serializers.ValidationError(exc.messages) from exc


@extend_schema_serializer(component_name="Dataset")
class DatasetOutput(serializers.ModelSerializer[Dataset]):
    # Plain text: the import command may create names the API itself would refuse.
    name = serializers.CharField(read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "name", "description", "kb_scope", "activated", "created_at"]
        read_only_fields = fields


@extend_schema_serializer(component_name="Document")
class DocumentOutput(serializers.ModelSerializer[Document]):
    document_id = serializers.CharField(
        source="doc_key", help_text="The document's id: digits, sent as a string (62 bits).")
    dataset_id = serializers.IntegerField()
    keywords = serializers.ListField(child=serializers.CharField())
    sync_pending = serializers.BooleanField(
        help_text="A change (activation, deletion, content) the vector store has not applied "
                  "yet. Lookups follow the document's state at once either way.")
    format = serializers.CharField(help_text="The uploaded file's format: its canonical suffix "
                                             "(md, txt, html, pdf, docx, pptx, xlsx, csv).")
    conversion_notes = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the conversion of the original told the uploader (pages read by OCR).")
    source_id = serializers.IntegerField(allow_null=True,
                                         help_text="The source that made it; null: uploaded.")
    source_commit = serializers.CharField(
        allow_blank=True, help_text="git sources: the commit its content came from.")
    readers = serializers.ListField(child=serializers.CharField(), help_text=(
        "Who may read it (`user:<name>`, `group:<name>`); empty: every caller of the "
        "dataset; `none:`: no agent (its source restricts it in a way readers cannot say)."))
    readers_at_source = serializers.ListField(
        child=serializers.CharField(),
        help_text=Document._meta.get_field("readers_at_source").help_text)

    class Meta:
        model = Document
        fields = ["document_id", "dataset_id", "source_path", "title", "domain", "keywords",
                  "category", "format", "activated", "status", "error", "conversion_notes",
                  "chunk_count", "sync_pending", "source_id", "source_commit", "readers",
                  "readers_at_source", "updated_at"]
        read_only_fields = fields


@extend_schema_serializer(component_name="Job")
class JobOutput(serializers.ModelSerializer[Job]):
    class Meta:
        model = Job
        fields = ["id", "kind", "status", "done", "total", "detail", "error", "log",
                  "created_at", "updated_at"]
        read_only_fields = fields


@extend_schema_serializer(component_name="DatasetList")
class DatasetListOutput(serializers.Serializer[dict[str, Any]]):
    datasets = DatasetOutput(many=True)
    filterable_fields = serializers.ListField(
        child=serializers.CharField(), help_text="The frontmatter fields a call's "
        "`filters.fields` may name: those the key's tenant declared filterable.")


@extend_schema_serializer(component_name="DocumentList")
class DocumentListOutput(serializers.Serializer[dict[str, Any]]):
    documents = DocumentOutput(many=True)


@extend_schema_serializer(component_name="DocumentUpload")
class DocumentUploadOutput(serializers.Serializer[dict[str, Any]]):
    document = DocumentOutput()
    changed = serializers.BooleanField(help_text="False when the same bytes were uploaded again.")
    job = JobOutput(allow_null=True, help_text="The indexing job to follow; null when there is "
                                               "nothing to do (200).")


@extend_schema_serializer(component_name="DocumentReindex")
class DocumentReindexOutput(serializers.Serializer[dict[str, Any]]):
    document = DocumentOutput()
    job = JobOutput()


@extend_schema_serializer(component_name="Source")
class SourceOutput(serializers.ModelSerializer[Source]):
    dataset_id = serializers.IntegerField()
    include = serializers.ListField(child=serializers.CharField())
    secret_resolves = serializers.SerializerMethodField(help_text=(
        "Whether the credential variable it names is set in this deployment (null: it names "
        "none); never the credential."))

    class Meta:
        model = Source
        fields = ["id", "dataset_id", "name", "kind", "location", "branch", "subfolder",
                  "include", "secret_env", "secret_resolves", "readers", "max_depth",
                  "max_pages", "max_page_bytes", "region", "interval_minutes", "last_revision",
                  "last_sync_at", "last_status", "last_error", "created_at"]
        read_only_fields = fields

    def get_secret_resolves(self, source: Source) -> bool | None:
        return secret_resolves(source)


@extend_schema_serializer(component_name="SourceList")
class SourceListOutput(serializers.Serializer[dict[str, Any]]):
    sources = SourceOutput(many=True)
