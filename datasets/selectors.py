"""Reads for datasets and documents, always scoped to the caller's tenant."""

from __future__ import annotations

from django.db.models import QuerySet

from datasets.models import Dataset, Document, Job
from kbplatform.errors import ApiError


class NotFound(ApiError):
    status_code = 404
    default_code = "not_found"


def dataset_list(*, tenant_id: int) -> QuerySet[Dataset]:
    return Dataset.objects.filter(tenant_id=tenant_id).order_by("name")


def dataset_get(*, tenant_id: int, dataset_id: int) -> Dataset:
    dataset = Dataset.objects.select_related("tenant").filter(
        tenant_id=tenant_id, pk=dataset_id).first()
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    return dataset


def document_list(*, dataset: Dataset) -> QuerySet[Document]:
    return Document.objects.filter(dataset=dataset, deleted=False).order_by("source_path")


def document_get(*, tenant_id: int, doc_id: str) -> Document:
    document = None
    if doc_id.isdigit():
        document = Document.objects.select_related("dataset").filter(
            doc_id=int(doc_id), dataset__tenant_id=tenant_id, deleted=False).first()
    if document is None:
        raise NotFound(f"document {doc_id} does not exist")
    return document


def job_get(*, tenant_id: int, job_id: int) -> Job:
    job = Job.objects.filter(pk=job_id, tenant_id=tenant_id).first()
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job
