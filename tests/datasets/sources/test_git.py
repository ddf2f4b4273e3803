"""Git sources: a real repository made with the git CLI; only what changed is indexed again,
a deleted file leaves Milvus, an unreachable repository deletes nothing."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from typing import Any

import pytest

from datasets.models import Document, Job, Source
from datasets.sources.services import InvalidSource
from datasets.sources.sync import source_claim, source_sync
from kbplatform.env import SourceRoot
from tests.datasets.sources.builders import Repo, doc, make_source, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]


@pytest.fixture
def roots(settings, tmp_path):
    """The folder of tenant acme (the kb fixture's) under a parent root."""
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)
    settings.VAR_DIR = tmp_path / "var"
    return tmp_path / "roots" / "acme"


def _live(source: Source) -> dict[str, Document]:
    return {d.source_path: d for d in Document.objects.filter(source=source, deleted=False)}


def test_200_files_then_one_change_reindexes_exactly_one_document(kb, store, roots) -> None:
    repo = Repo(roots / "repo")
    repo.write({f"docs/topic-{n:03}.md": doc(f"Topic {n}") for n in range(200)})
    repo.write({"docs/image.png": b"\x89PNG", "other/skip.md": doc("Outside")})
    first_commit = repo.commit("200 files")
    source = make_source(kb.dataset, kind="git", location=str(repo.path), subfolder="docs",
                         include=["**/*.md"])

    started = time.monotonic()
    job = sync(source)
    first_seconds = time.monotonic() - started

    assert job.status == Job.Status.SUCCEEDED, job.log
    assert job.detail["added"] == 200 and job.detail.get("failed", 0) == 0
    documents = _live(source)
    assert len(documents) == 200 and "src/topic-000.md" in documents
    assert {d.status for d in documents.values()} == {Document.Status.READY}
    assert {d.source_commit for d in documents.values()} == {first_commit}
    revisions = {d.pk: d.revision for d in documents.values()}
    index_jobs = Job.objects.filter(kind=Job.Kind.INDEX_DOCUMENT).count()

    repo.write({"docs/topic-042.md": doc("Topic 42", "Rewritten: about kafka lag now.")})
    second_commit = repo.commit("one change")
    started = time.monotonic()
    job = sync(source)
    second_seconds = time.monotonic() - started

    assert job.status == Job.Status.SUCCEEDED, job.log
    assert (job.detail["changed"], job.detail["unchanged"]) == (1, 199)
    assert Job.objects.filter(kind=Job.Kind.INDEX_DOCUMENT).count() == index_jobs + 1
    after = _live(source)
    moved = [d.source_path for d in after.values() if d.revision != revisions[d.pk]]
    assert moved == ["src/topic-042.md"]
    assert after["src/topic-042.md"].source_commit == second_commit
    assert after["src/topic-001.md"].source_commit == first_commit
    source.refresh_from_db()
    assert (source.last_revision, source.last_status) == (second_commit, "succeeded")

    repo.write({"README.txt": b"outside the sub-folder"})
    repo.commit("nothing under docs/ changes")
    started = time.monotonic()
    job = sync(source)
    idle_seconds = time.monotonic() - started
    assert job.detail["unchanged"] == 200 and job.detail.get("changed", 0) == 0
    assert Job.objects.filter(kind=Job.Kind.INDEX_DOCUMENT).count() == index_jobs + 1
    print(f"\ngit source, 200 files: first sync {first_seconds:.2f} s, one file changed "
          f"{second_seconds:.2f} s, nothing changed {idle_seconds:.2f} s")


def test_a_deleted_file_leaves_milvus_and_only_its_document_goes(kb, store, roots) -> None:
    repo = Repo(roots / "repo")
    repo.write({"a.md": doc("Alpha"), "b.md": doc("Beta")})
    repo.commit()
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    upload = Document.objects.create(dataset=kb.dataset, source_path="uploaded.md",
                                     file_name="uploaded.md", content_hash="x")
    assert sync(source).status == Job.Status.SUCCEEDED
    gone = _live(source)["src/b.md"]
    assert store.rows(gone.doc_id)  # indexed

    (repo.path / "b.md").unlink()
    repo.commit("remove b")
    job = sync(source)

    assert job.detail["deleted"] == 1 and "deleted: b.md: gone from the source" in str(job.log)
    assert store.rows(gone.doc_id) == []  # Milvus, not only the row
    assert list(_live(source)) == ["src/a.md"]
    assert Document.objects.get(pk=upload.pk).deleted is False  # not the source's


def test_an_unreachable_repository_deletes_nothing(kb, store, roots) -> None:
    repo = Repo(roots / "repo")
    repo.write({"a.md": doc("Alpha"), "b.md": doc("Beta")})
    repo.commit()
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    sync(source)
    shutil.rmtree(repo.path)

    job = sync(source)

    assert job.status == Job.Status.FAILED and job.error.startswith("not a git repository")
    assert len(_live(source)) == 2
    source.refresh_from_db()
    assert source.last_status == "failed" and source.syncing_since is None


def test_a_failed_file_is_a_line_of_the_log_not_a_crash(kb, store, roots) -> None:
    repo = Repo(roots / "repo")
    repo.write({"a.md": doc("Alpha"), "logo.png": b"\x89PNG\r\n\x1a\n" + bytes(64),
                "bad.md": b"\xff\xfe\x00"})
    repo.commit()
    source = make_source(kb.dataset, kind="git", location=str(repo.path))

    job = sync(source)

    assert job.status == Job.Status.SUCCEEDED
    assert (job.detail["added"], job.detail["failed"]) == (1, 2)
    assert any(line["message"].startswith("failed: logo.png: ") for line in job.log)


def test_a_second_sync_of_a_syncing_source_is_skipped(kb, store, roots) -> None:
    repo = Repo(roots / "repo")
    repo.write({"a.md": doc("Alpha")})
    repo.commit()
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    assert source_claim(source)  # another worker's sync holds it
    assert not source_claim(source)

    assert source_sync(source=source, job=None) is None
    assert not Document.objects.filter(source=source).exists()


@pytest.mark.parametrize("location", ["ext::sh -c touch% /tmp/pwned", "file:///etc",
                                      "-uhelp", "/etc", "relative/path",
                                      "ssh://git@example.org/r.git",
                                      "http://127.0.0.1/r.git"])
def test_locations_git_may_not_read_are_refused(kb, roots, location) -> None:
    with pytest.raises(InvalidSource):
        make_source(kb.dataset, kind="git", location=location)


@pytest.fixture
def served(tmp_path):
    """A directory served over HTTP from a thread (git's dumb HTTP protocol reads files)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    root = tmp_path / "served"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_repository_over_http_goes_through_the_outbound_policy(kb, store, roots, served,
                                                                 settings) -> None:
    root, base = served
    repo = Repo(roots / "repo")
    repo.write({"a.md": doc("Alpha")})
    commit = repo.commit()
    bare = root / "r.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    url = f"{base}/r.git"

    with pytest.raises(InvalidSource, match="loopback"):
        make_source(kb.dataset, kind="git", location=url)
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    source = make_source(kb.dataset, kind="git", location=url)
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert _live(source)["src/a.md"].source_commit == commit
    # Its page at that commit, GitHub's way for a host of no known kind: evidence links to it.
    assert _live(source)["src/a.md"].url == f"{base}/r/blob/{commit}/a.md"

    settings.KB_OUTBOUND_ALLOWED_HOSTS = []
    job = sync(source)
    assert (job.status, job.error) == (Job.Status.FAILED, "could not connect to the repository")
    assert list(_live(source)) == ["src/a.md"]


NAME_ONLY_THE_POLICY_KNOWS = "git.kb-test.invalid"  # .invalid: no resolver answers for it


def test_git_connects_to_the_address_the_policy_checked(kb, store, roots, served, settings,
                                                        monkeypatch) -> None:
    """git resolves nothing itself: the name is known to this process's resolver only (as a
    name that rebinds is answered one way to the check and another to a second lookup), and
    git is pinned to the address the outbound policy resolved and checked."""
    root, base = served
    port = base.rsplit(":", 1)[1]
    repo = Repo(roots / "repo")
    repo.write({"a.md": doc("Alpha")})
    commit = repo.commit()
    bare = root / "r.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == NAME_ONLY_THE_POLICY_KNOWS:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port)))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    settings.KB_OUTBOUND_ALLOWED_HOSTS = [NAME_ONLY_THE_POLICY_KNOWS]
    source = make_source(kb.dataset, kind="git",
                         location=f"http://{NAME_ONLY_THE_POLICY_KNOWS}:{port}/r.git")

    job = sync(source)

    assert job.status == Job.Status.SUCCEEDED, job.log
    assert _live(source)["src/a.md"].source_commit == commit


@pytest.mark.parametrize("host", ["bücher.example", "example.org."])
def test_a_git_host_git_might_look_up_otherwise_is_refused(kb, roots, host) -> None:
    with pytest.raises(InvalidSource, match="ASCII"):
        make_source(kb.dataset, kind="git", location=f"https://{host}/r.git")
