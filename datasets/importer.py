"""Import a folder of markdown (the sample `knowledge_base/`) into one dataset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from datasets.ingestion.parse import DocumentParseError
from datasets.jobs import job_update
from datasets.models import Dataset, Job
from datasets.services import (
    document_index,
    document_mark_failed,
    document_store,
    tenant_get_or_create,
)
from kbplatform.errors import ApiError


@dataclass
class ImportSummary:
    found: int = 0
    indexed: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    chunks: int = 0


def markdown_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    return sorted(path for path in root.rglob("*")
                  if path.is_file() and path.suffix.lower() in (".md", ".markdown")
                  and path.name.lower() != "readme.md")


def knowledge_import(*, root: Path, tenant_slug: str, dataset_name: str, job: Job | None = None,
                     progress: Callable[[int, int, str, str], None] | None = None,
                     ) -> ImportSummary:
    """Store and index every markdown file under `root`; never modifies the files."""
    tenant = tenant_get_or_create(slug=tenant_slug)
    dataset, _ = Dataset.objects.get_or_create(tenant=tenant, name=dataset_name)
    files = markdown_files(root)
    summary = ImportSummary(found=len(files))
    job_update(job, status=Job.Status.RUNNING, total=len(files), done=0)
    for number, path in enumerate(files, 1):
        relative = path.relative_to(root).as_posix()
        outcome_text = "unchanged"
        document = None
        try:
            outcome = document_store(dataset=dataset, file_name=path.name, raw=path.read_bytes(),
                                     max_bytes=settings.KB_MAX_UPLOAD_BYTES,
                                     source_path=relative, replace=True)
            document = outcome.document
            before = document.indexed_hash
            chunks = document_index(document=document)
            document.refresh_from_db()
            if outcome.changed or before != document.indexed_hash:
                summary.indexed += 1
                outcome_text = f"indexed ({chunks} chunks)"
            else:
                summary.unchanged += 1
            summary.chunks += chunks
        except (DocumentParseError, ApiError) as exc:
            summary.failed.append((relative, str(exc)))
            outcome_text = f"FAILED: {exc}"
        except Exception as exc:
            if document is not None:
                document_mark_failed(document_id=document.pk, error=f"{type(exc).__name__}: {exc}")
            raise
        job_update(job, done=number)
        if progress:
            progress(number, len(files), relative, outcome_text)
    job_update(job, status=Job.Status.SUCCEEDED if not summary.failed else Job.Status.FAILED,
               detail={"indexed": summary.indexed, "unchanged": summary.unchanged,
                       "failed": summary.failed, "chunks": summary.chunks},
               error="; ".join(f"{p}: {e}" for p, e in summary.failed)[:2000] or None)
    return summary
