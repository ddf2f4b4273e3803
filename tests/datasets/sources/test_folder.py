"""Folder sources (import_knowledge's folder, made incremental): mtime and size first, then the
content hash; only KB_SOURCE_ROOTS may be read."""

from __future__ import annotations

import io
import os

import pytest
from django.core.management import call_command

from datasets.models import Document, Job, Source
from datasets.sources.services import InvalidSource
from kbplatform.env import SourceRoot
from tests.datasets.ingestion.office_files import docx_of, html_of, pdf_of
from tests.datasets.sources.builders import doc, make_source, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]


@pytest.fixture
def folder(settings, tmp_path):
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)  # acme's: roots/acme/
    root = tmp_path / "roots" / "acme" / "kb"
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


def test_a_demo_restart_does_not_index_a_sources_file_twice(kb, store, settings,
                                                             tmp_path) -> None:
    # The demo imports the knowledge folder at every start; it is no tenant's source folder
    # (as the settings are loaded: the default roots are a parent under KB_VAR_DIR).
    knowledge = settings.KB_KNOWLEDGE_DIR
    with pytest.raises(InvalidSource, match="inside this tenant's source folders"):
        make_source(kb.dataset, kind="folder", location=str(knowledge / "cache"))
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)  # the tests write here only
    own = tmp_path / "roots" / "acme" / "notes"
    own.mkdir(parents=True)
    (own / "kafka.md").write_bytes(doc("Kafka lag", "Consumer lag grows when ..."))
    source = make_source(kb.dataset, kind="folder", location=str(own))

    for _ in range(2):  # a start, then a restart: the import, then the source's schedule
        call_command("import_knowledge", str(knowledge / "cache"), "--tenant", "acme",
                     "--dataset", kb.dataset.name, stdout=io.StringIO())
        sync(source)

    live = Document.objects.filter(dataset=kb.dataset, deleted=False)
    hashes = list(live.values_list("content_hash", flat=True))
    assert len(hashes) == len(set(hashes)) == 4  # three runbooks and the note, once each


def test_a_source_takes_every_format_an_upload_takes(kb, store, folder) -> None:
    (folder / "guide.docx").write_bytes(docx_of("# Guide\n\nThe guide's words."))
    (folder / "page.html").write_bytes(html_of("# Page\n\nThe page's words.", title="Page"))
    (folder / "report.pdf").write_bytes(pdf_of("# Report\n\nThe report's words."))
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    source = make_source(kb.dataset, kind="folder", location=str(folder))

    job = sync(source)

    assert {"src/guide.docx", "src/page.html", "src/report.pdf"} <= set(_paths(source))
    assert Document.objects.filter(source=source, status=Document.Status.READY).count() == 6
    assert [line["message"].split(":")[1].strip() for line in job.log
            if line["message"].startswith("failed: ")] == ["logo.png"]
