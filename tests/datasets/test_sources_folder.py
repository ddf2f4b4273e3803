"""Folder sources (import_knowledge's folder, made incremental): mtime and size first, then the
content hash; only KB_SOURCE_ROOTS may be read."""

from __future__ import annotations

import os

import pytest

from datasets.models import Document, Job, Source
from datasets.sources.services import InvalidSource
from tests.datasets.source_builders import doc, make_source, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]


@pytest.fixture
def folder(settings, tmp_path):
    settings.KB_SOURCE_ROOTS = [tmp_path / "roots"]
    root = tmp_path / "roots" / "kb"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_bytes(doc("Alpha"))
    (root / "sub" / "b.md").write_bytes(doc("Beta"))
    (root / ".hidden.md").write_bytes(doc("Hidden"))
    (root / "notes.txt").write_bytes(b"plain text: taken unless the globs leave it out")
    return root


def _paths(source: Source) -> list[str]:
    return sorted(Document.objects.filter(source=source, deleted=False)
                  .values_list("source_path", flat=True))


def test_incremental_by_mtime_size_then_content(kb, store, folder) -> None:
    source = make_source(kb.dataset, kind="folder", location=str(folder), include=["**/*.md"])
    assert sync(source).detail["added"] == 2
    assert _paths(source) == ["src/a.md", "src/sub/b.md"]
    index_jobs = Job.objects.filter(kind=Job.Kind.INDEX_DOCUMENT).count()

    stat = (folder / "a.md").stat()
    os.utime(folder / "a.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched only
    (folder / "sub" / "b.md").write_bytes(doc("Beta", "Beta, rewritten."))
    (folder / "c.md").write_bytes(doc("Gamma"))
    job = sync(source)

    assert (job.detail["added"], job.detail["changed"], job.detail["unchanged"]) == (1, 1, 1)
    assert Job.objects.filter(kind=Job.Kind.INDEX_DOCUMENT).count() == index_jobs + 2
    touched = Document.objects.get(source=source, source_path="src/a.md")
    assert touched.source_version.endswith(f":{stat.st_size}")  # the new mtime is recorded

    (folder / "c.md").unlink()
    job = sync(source)
    assert job.detail["deleted"] == 1 and _paths(source) == ["src/a.md", "src/sub/b.md"]


def test_a_missing_folder_deletes_nothing(kb, store, folder) -> None:
    source = make_source(kb.dataset, kind="folder", location=str(folder))
    sync(source)
    folder.rename(folder.with_name("moved"))

    job = sync(source)

    assert job.status == Job.Status.FAILED and "does not exist" in job.error
    assert _paths(source) == ["src/a.md", "src/notes.txt", "src/sub/b.md"]


def test_a_symlink_out_of_the_root_is_not_followed(kb, store, folder, tmp_path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_bytes(doc("Secret"))
    (folder / "link.md").symlink_to(secret)
    source = make_source(kb.dataset, kind="folder", location=str(folder))

    sync(source)

    assert "src/link.md" not in _paths(source)


def test_a_path_outside_the_roots_is_refused(kb, folder, tmp_path) -> None:
    for location in ("/etc", str(tmp_path), f"{folder}/../../..", "kb"):
        with pytest.raises(InvalidSource):
            make_source(kb.dataset, kind="folder", location=location)


def test_a_path_taken_by_another_document_is_not_overwritten(kb, store, folder) -> None:
    first = make_source(kb.dataset, kind="folder", location=str(folder), name="src")
    sync(first)
    Source.objects.filter(pk=first.pk).update(name="renamed-by-hand")
    second = make_source(kb.dataset, kind="folder", location=str(folder), name="src")

    job = sync(second)

    taken = [line for line in job.log if "not this source's" in line["message"]]
    assert len(taken) == 3 and _paths(second) == []  # a.md, notes.txt, sub/b.md
    assert len(_paths(first)) == 3


def test_a_file_over_the_upload_limit_is_a_failed_line_and_not_read(kb, store, folder,
                                                                     settings) -> None:
    (folder / "big.md").write_bytes(doc("Big", "x" * 4000))
    settings.KB_MAX_UPLOAD_BYTES = 2000
    source = make_source(kb.dataset, kind="folder", location=str(folder), include=["**/*.md"])

    job = sync(source)

    assert job.status == Job.Status.SUCCEEDED and job.detail["failed"] == 1
    assert any(line["message"].startswith("failed: big.md: ") and "KB_MAX_UPLOAD_BYTES"
               in line["message"] for line in job.log)
    assert _paths(source) == ["src/a.md", "src/sub/b.md"]
