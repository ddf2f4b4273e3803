"""KB_SOURCE_ROOTS binds server folders to tenants: `SLUG=/path` is that tenant's, `/path` a
parent whose `/path/<slug>/` is each tenant's. A folder or local git source reads only its own
tenant's folders, when saved and when synced; a refusal reads the same whether the path exists
or not; a rename never hands a folder over."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse

from datasets.documents.services import dataset_create
from datasets.models import Document, Job, Source, Tenant
from datasets.sources.base import Deadline
from datasets.sources.folder import FolderReader
from kbplatform.env import SourceRoot, env_source_roots
from tests.datasets.builders import api_client
from tests.datasets.sources.builders import Repo, doc, make_source, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]


@pytest.fixture
def parent(settings, tmp_path) -> Path:
    """A parent root with a folder each for acme (the kb fixture's tenant) and globex, whose
    private folder and repository acme must not read."""
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)
    settings.VAR_DIR = tmp_path / "var"
    root = tmp_path / "roots"
    (root / "acme" / "kb").mkdir(parents=True)
    (root / "acme" / "kb" / "mine.md").write_bytes(doc("Mine"))
    (root / "globex" / "private").mkdir(parents=True)
    (root / "globex" / "private" / "secret.md").write_bytes(doc("Globex merger plan"))
    repo = Repo(root / "globex" / "repo")
    repo.write({"secret.md": doc("Globex merger plan")})
    repo.commit()
    return root


def _refusal(client, dataset, kind: str, location: str) -> str:
    answer = client.post("/api/sources", {"dataset_id": dataset.pk, "name": "s", "kind": kind,
                                          "location": location}, format="json")
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_source"), answer.json()
    return str(answer.json()["extra"]["fields"]["location"])


def test_a_tenant_cannot_read_another_tenants_folder_and_cannot_tell_it_exists(
        kb, parent) -> None:
    texts = {_refusal(kb.admin, kb.dataset, kind, location) for kind, location in (
        ("folder", f"{parent}/globex/private"), ("folder", f"{parent}/globex/missing"),
        ("folder", f"{parent}/acme/../globex/private"), ("git", f"{parent}/globex/repo"),
        ("git", f"{parent}/globex/no-such-repo"), ("folder", "/etc"),
        ("folder", str(parent)), ("folder", "relative/path"))}

    assert texts == {f"a local path must be absolute and inside this tenant's source "
                     f"folders: {parent}/acme"}
    assert not Source.objects.exists()


def test_a_link_in_ones_own_folder_does_not_lead_into_anothers(kb, parent) -> None:
    (parent / "acme" / "link").symlink_to(parent / "globex" / "private")
    (parent / "acme" / "dangling").symlink_to(parent / "globex" / "missing")

    assert (_refusal(kb.admin, kb.dataset, "folder", f"{parent}/acme/link")
            == _refusal(kb.admin, kb.dataset, "folder", f"{parent}/acme/dangling"))


def test_a_parents_tenant_folder_that_is_a_link_is_none(kb, parent) -> None:
    (parent / "acme").rename(parent / "acme-real")
    (parent / "acme").symlink_to(parent / "globex")  # acme's folder now leads into globex's

    assert _refusal(kb.admin, kb.dataset, "folder", f"{parent}/acme/private") == (
        "this tenant has no source folder on the server (KB_SOURCE_ROOTS names none)")


def test_a_folder_bound_to_a_slug_is_that_tenants_alone(kb, settings, tmp_path,
                                                        make_key) -> None:
    (tmp_path / "acme-docs").mkdir()
    (tmp_path / "globex-docs").mkdir()
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "acme-docs", "acme"),
                                SourceRoot(tmp_path / "globex-docs", "globex"))
    _, secret = make_key(tenant="globex", role="admin")
    globex = api_client(secret)
    theirs = dataset_create(tenant=Tenant.objects.get(slug="globex"), name="docs")

    assert _refusal(kb.admin, kb.dataset, "folder", str(tmp_path / "globex-docs")) == (
        f"a local path must be absolute and inside this tenant's source folders: "
        f"{tmp_path}/acme-docs")
    assert _refusal(globex, theirs, "folder", str(tmp_path / "acme-docs")).endswith(
        f"folders: {tmp_path}/globex-docs")
    assert make_source(kb.dataset, kind="folder", location=str(tmp_path / "acme-docs"))


def test_a_sync_checks_the_tenants_folders_again_and_tells_nothing_of_others(
        kb, store, parent, settings) -> None:
    source = make_source(kb.dataset, kind="folder", location=f"{parent}/acme/kb")
    assert sync(source).detail["added"] == 1
    # The operator moves acme's folder: the old path now lies in globex's.
    (parent / "acme" / "kb").rename(parent / "globex" / "kb")
    Source.objects.filter(pk=source.pk).update(location=f"{parent}/globex/kb")

    job = sync(source)

    expected = f"a local path must be absolute and inside this tenant's source folders: " \
               f"{parent}/acme"
    assert (job.status, job.error) == (Job.Status.FAILED, expected)
    assert "mine.md" not in str(job.log) and "secret" not in str(job.log)
    assert Document.objects.filter(source=source, deleted=False).count() == 1  # none deleted

    Source.objects.filter(pk=source.pk).update(location=f"{parent}/acme/gone")
    job = sync(source)  # missing, in its own folder: said so
    assert job.error == "the folder does not exist or is not a folder"


def test_a_local_repository_that_makes_git_read_anothers_is_refused(kb, store,
                                                                    parent) -> None:
    globex_repo = parent / "globex" / "repo"
    mine = parent / "acme"
    (mine / "gitfile").mkdir()
    (mine / "gitfile" / ".git").write_text(f"gitdir: {globex_repo}/.git\n")
    subprocess.run(["git", "clone", "-q", "--bare", "--shared", str(globex_repo),
                    str(mine / "shared.git")], check=True)  # objects/info/alternates

    assert "a file or a link" in _refusal(kb.admin, kb.dataset, "git", f"{mine}/gitfile")
    assert "alternates" in _refusal(kb.admin, kb.dataset, "git", f"{mine}/shared.git")

    subprocess.run(["git", "clone", "-q", "--bare", str(globex_repo), str(mine / "linked.git")],
                   check=True)
    source = make_source(kb.dataset, kind="git", location=f"{mine}/linked.git")
    objects = mine / "linked.git" / "objects"
    subprocess.run(["rm", "-rf", str(objects)], check=True)
    objects.symlink_to(globex_repo / ".git" / "objects")
    job = sync(source)
    assert job.status == Job.Status.FAILED and "symbolic link" in job.error
    assert not Document.objects.filter(source=source).exists()


def test_a_local_repository_of_ones_own_syncs(kb, store, parent) -> None:
    repo = Repo(parent / "acme" / "handbook")
    repo.write({"a.md": doc("Alpha")})
    repo.commit()

    job = sync(make_source(kb.dataset, kind="git", location=str(repo.path)))

    assert job.status == Job.Status.SUCCEEDED and job.detail["added"] == 1


def rename(client: Client, tenant: Tenant, slug: str) -> str:
    answer = client.post(reverse("admin:datasets_tenant_change", args=[tenant.pk]),
                         {"slug": slug, "name": slug, "_save": "Save"})
    return "" if answer.status_code == 302 else answer.content.decode()


def test_a_rename_never_hands_a_folder_over(kb, parent, admin_client, settings,
                                            tmp_path) -> None:
    # acme renamed to globex (whose folder exists) would read it: refused
    refusal = rename(admin_client, kb.tenant, "globex")
    assert "gives globex the source folders" in refusal
    (parent / "globex").rename(tmp_path / "globex-away")
    # acme's own folder would be left for the next tenant named acme: refused too
    assert "gives acme the source folders" in rename(admin_client, kb.tenant, "globex")
    (parent / "acme").rename(tmp_path / "acme-away")
    settings.KB_SOURCE_ROOTS = (SourceRoot(parent), SourceRoot(tmp_path / "bound", "globex"))
    assert "gives globex the source folders" in rename(admin_client, kb.tenant, "globex")

    assert rename(admin_client, kb.tenant, "initech") == ""
    kb.tenant.refresh_from_db()
    assert kb.tenant.slug == "initech"


@pytest.mark.parametrize("raw", ["acme", "ACME=/srv/a", "acme=relative", "relative",
                                 "=/srv/a", "a b=/srv/a", "acme=/srv/a,/srv/a/b",
                                 "/srv/p,globex=/srv/p/globex", "/srv/p,/srv/p",
                                 "/srv", "acme=/srv/knowledge/acme"])  # the demo's folder
def test_a_malformed_or_overlapping_setting_stops_the_start(monkeypatch, raw) -> None:
    monkeypatch.setenv("KB_SOURCE_ROOTS", raw)
    with pytest.raises(ImproperlyConfigured, match="KB_SOURCE_ROOTS"):
        env_source_roots("KB_SOURCE_ROOTS", "", apart_from=Path("/srv/knowledge"))


def test_the_setting_parsed(monkeypatch) -> None:
    monkeypatch.setenv("KB_SOURCE_ROOTS", " acme=/srv/acme , /srv/tenants,")
    assert env_source_roots("KB_SOURCE_ROOTS", "", apart_from=Path("/srv/knowledge")) == (
        SourceRoot(Path("/srv/acme"), "acme"), SourceRoot(Path("/srv/tenants")))
    monkeypatch.delenv("KB_SOURCE_ROOTS")
    assert env_source_roots("KB_SOURCE_ROOTS", "/var/kb/source-roots",
                            apart_from=Path("/srv/knowledge")) == (
        SourceRoot(Path("/var/kb/source-roots")),)


def test_a_file_swapped_for_a_link_after_the_listing_is_not_read(kb, parent,
                                                                  settings) -> None:
    """The folder's owner races the sync: between the walk and the read, a file becomes a
    link into globex's folder, a folder becomes one, a file grows past the bound."""
    settings.KB_MAX_UPLOAD_BYTES = 10_000
    mine = parent / "acme" / "kb"
    (mine / "sub").mkdir()
    for name in ("b.md", "c.md", "sub/secret.md"):
        (mine / name).write_bytes(doc(name))
    source = make_source(kb.dataset, kind="folder", location=str(mine))
    items = FolderReader(source, Deadline()).items({})
    assert next(items).path == "b.md"  # listed all, read the first

    (mine / "c.md").write_bytes(doc("C", "c" * 20_000))
    (mine / "mine.md").unlink()
    (mine / "mine.md").symlink_to(parent / "globex" / "private" / "secret.md")
    (mine / "sub").rename(parent / "acme" / "sub-away")
    (mine / "sub").symlink_to(parent / "globex" / "private")
    rest = {item.path: item for item in items}

    assert all(item.raw is None for item in rest.values()), rest
    assert rest["c.md"].failure == "over KB_MAX_UPLOAD_BYTES (10000) when read"
    assert rest["mine.md"].failure.startswith("could not be read")
    assert rest["sub/secret.md"].failure.startswith("changed while the sync read it")
