"""Import a folder of documents (the sample `knowledge_base/`) into one dataset: every file
whose suffix is a supported format (datasets/ingestion/formats SUFFIXES).

Files are validated and stored here; indexing runs on the indexing queue like every upload
(in-process in the embedded mode), and `documents_wait` follows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from datasets.documents.services import document_store, tenant_get_or_create
from datasets.ingestion.formats import SUFFIXES
from datasets.jobs.progress import job_update
from datasets.models import Dataset, Document, Job
from kbplatform.errors import ApiError


@dataclass
class ImportSummary:
    found: int = 0
    queued: list[int] = field(default_factory=list)  # document pks to index
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class IndexingState:
    done: int  # indexed or failed
    total: int
    chunks: int
    failed: list[tuple[str, str]]  # (source path, error)


def document_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    return sorted(path for path in root.rglob("*")
                  if path.is_file() and path.suffix.lower() in SUFFIXES
                  and path.name.lower() != "readme.md")


@dataclass(frozen=True)
class Stored:
    """One file handled: `outcome` is queued, unchanged or FAILED: <why>."""

    number: int
    total: int
    path: str
    outcome: str
    document_id: int | None


def knowledge_import(*, root: Path, tenant_slug: str, dataset_name: str, job: Job | None = None,
                     progress: Callable[[Stored], None] | None = None) -> ImportSummary:
    """Store every document under `root` and queue its indexing; never modifies files.
    In-process tasks (the embedded defaults) index each file before the next is read."""
    tenant = tenant_get_or_create(slug=tenant_slug)
    dataset, _ = Dataset.objects.get_or_create(tenant=tenant, name=dataset_name)
    files = document_files(root)
    summary = ImportSummary(found=len(files))
    job_update(job, status=Job.Status.RUNNING, total=len(files), done=0,
               log=f"importing {len(files)} files")
    for number, path in enumerate(files, 1):
        relative = path.relative_to(root).as_posix()
        document_id = None
        try:
            outcome = document_store(dataset=dataset, file_name=path.name, raw=path.read_bytes(),
                                     max_bytes=settings.KB_MAX_UPLOAD_BYTES,
                                     source_path=relative, replace=True)
        except ApiError as exc:
            summary.failed.append((relative, str(exc.detail)))
            outcome_text = f"FAILED: {exc.detail}"
        else:
            document_id = outcome.document.pk
            if outcome.job is None:
                summary.unchanged += 1
                outcome_text = "unchanged"
            else:
                summary.queued.append(outcome.document.pk)
                outcome_text = "queued"
        job_update(job, done=number)
        if progress:
            progress(Stored(number, len(files), relative, outcome_text, document_id))
    job_update(job, status=Job.Status.SUCCEEDED if not summary.failed else Job.Status.FAILED,
               detail={"queued": len(summary.queued), "unchanged": summary.unchanged,
                       "failed": summary.failed},
               error="; ".join(f"{p}: {e}" for p, e in summary.failed)[:2000] or None,
               log=f"{len(summary.queued)} queued, {summary.unchanged} unchanged, "
                   f"{len(summary.failed)} failed")
    return summary


def indexing_state(document_ids: Sequence[int]) -> IndexingState:
    rows = list(Document.objects.filter(pk__in=document_ids).values_list(
        "source_path", "status", "chunk_count", "error"))
    finished = [r for r in rows if r[1] in (Document.Status.READY, Document.Status.FAILED)]
    return IndexingState(
        done=len(finished), total=len(document_ids),
        chunks=sum(r[2] for r in finished if r[1] == Document.Status.READY),
        failed=[(r[0], r[3]) for r in finished if r[1] == Document.Status.FAILED])


def documents_wait(document_ids: Sequence[int], *, timeout: float,
                   progress: Callable[[IndexingState], None] | None = None,
                   poll_seconds: float = 0.5) -> IndexingState:
    """Follow the indexing of `document_ids` until each is ready or failed, or the timeout."""
    deadline = time.monotonic() + timeout
    seen = -1
    while True:
        state = indexing_state(document_ids)
        if progress and state.done != seen:
            progress(state)
            seen = state.done
        if state.done >= state.total or time.monotonic() >= deadline:
            return state
        time.sleep(poll_seconds)
