"""A private git repository over http(s): the source names the variable holding its token,
bound to its tenant's slug, never the token; the sync sends it to the host (a real git host
over smart HTTP, asking for it on every request), and no log, error or sync log holds it. A
refused or missing credential fails the sync clearly and touches no document."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from datasets.models import Document, Job, Source
from datasets.sources.services import InvalidSource
from datasets.tenancy.slug_secrets import tenant_rename_refusals
from kbplatform.env import SourceRoot
from tests.datasets.sources.builders import GitHost, Repo, doc, git_host, make_source, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

TOKEN = "ghp_s3cretTOKENvalue0123456789"
VARIABLE = "KB_SOURCE_SECRET_ACME_DOCS"  # the kb fixture's tenant is acme


@pytest.fixture
def host(settings: Any, tmp_path: Path) -> Any:
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)
    settings.VAR_DIR = tmp_path / "var"
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    repo = Repo(tmp_path / "work")
    repo.write({"runbooks/a.md": doc("Alpha"), "runbooks/b.md": doc("Bravo")})
    repo.commit()
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(served / "r.git")],
                   check=True)
    with git_host(GitHost(root=served, token=TOKEN)) as running:
        yield running, repo


def _live(source: Source) -> list[str]:
    return sorted(Document.objects.filter(source=source, deleted=False)
                  .values_list("source_path", flat=True))


def _nowhere(token: str, job: Job, source: Source, logged: str) -> None:
    source.refresh_from_db()
    kept = [job.error, str(job.log), str(job.detail), source.last_error, logged]
    assert not any(token in text for text in kept)


def test_a_private_repository_syncs_with_the_token_its_variable_holds(
        kb: Any, store: Any, host: Any, monkeypatch: Any, capfd: Any, caplog: Any) -> None:
    running, _ = host

    def logged() -> str:
        """The operators' log: the process's stderr (the logging settings' handler) and what
        reaches the root logger (the services' settings), read once each."""
        text = capfd.readouterr().err + caplog.text
        caplog.clear()
        return text

    url = f"{running.url}/r.git"
    # Without a credential the host refuses: said so, nothing touched.
    source = make_source(kb.dataset, kind="git", location=url)
    job = sync(source)
    assert (job.status, job.error) == (
        Job.Status.FAILED, "the repository asks for a credential: name its variable (secret_env)")
    assert _live(source) == []

    # Named, not set in this deployment: the sync says which variable.
    monkeypatch.delenv(VARIABLE, raising=False)
    source.secret_env = VARIABLE
    source.save()
    job = sync(source)
    assert job.error == f"the credential variable {VARIABLE} is not set in this deployment"

    # A token the host refuses: said so, the token nowhere.
    monkeypatch.setenv(VARIABLE, "wrong-token")
    job = sync(source)
    assert job.error == f"the repository refused the credential in {VARIABLE}"
    _nowhere("wrong-token", job, source, logged())

    monkeypatch.setenv(VARIABLE, TOKEN)
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert _live(source) == ["src/runbooks/a.md", "src/runbooks/b.md"]
    # git's smart protocol, the token on each request of it.
    assert ("/r.git/git-upload-pack", 200) in running.hits
    assert all(status != 401 for _, status in running.hits[-2:])
    _nowhere(TOKEN, job, source, logged())
    # `user:token` names the user too; a secret file's last newline is no part of it.
    monkeypatch.setenv(VARIABLE, f"deploy-bot:{TOKEN}\n")
    assert sync(source).status == Job.Status.SUCCEEDED
    # A host whose error page quotes what it was sent: the operators' log reads it redacted.
    running.echo = True
    logged()
    job = sync(source)
    text = logged()
    assert job.error == "could not fetch the branch" and "you sent Basic ***" in text
    _nowhere(TOKEN, job, source, text)
    assert "ZGVwbG95LWJvd" not in text  # nor its Basic form


def test_a_source_names_only_its_own_tenants_variables(kb: Any, host: Any) -> None:
    running, _ = host
    url = f"{running.url}/r.git"
    for name in ("KB_SOURCE_SECRET_GLOBEX", "KB_SOURCE_SECRET_ACMEX", "KB_CHAT_API_KEY_ACME",
                 TOKEN, "KB_SOURCE_SECRET_ACME_lower"):
        with pytest.raises(InvalidSource, match="bound to this tenant"):
            make_source(kb.dataset, kind="git", location=url, secret_env=name)
    with pytest.raises(InvalidSource, match="only a git source over http"):
        make_source(kb.dataset, kind="web", location="https://example.org/",
                    secret_env="KB_SOURCE_SECRET_ACME")
    make_source(kb.dataset, kind="git", location=url, secret_env="KB_SOURCE_SECRET_ACME")
    # The slug names the variable: no rename while a source names one.
    assert any("credential variables" in r
               for r in tenant_rename_refusals(tenant=kb.tenant, slug="acme2"))


def test_the_admin_says_whether_the_variable_is_set_never_its_value(
        kb: Any, host: Any, admin_client: Client, monkeypatch: Any) -> None:
    running, _ = host
    source = make_source(kb.dataset, kind="git", location=f"{running.url}/r.git",
                         secret_env=VARIABLE)
    page = reverse("admin:datasets_source_change", args=[source.pk])
    monkeypatch.delenv(VARIABLE, raising=False)
    assert f"{VARIABLE} is not set in this deployment" in admin_client.get(page).content.decode()
    monkeypatch.setenv(VARIABLE, TOKEN)
    html = admin_client.get(page).content.decode()
    assert f"{VARIABLE} is set" in html and TOKEN not in html
    listed = admin_client.get(reverse("admin:datasets_source_changelist")).content.decode()
    assert TOKEN not in listed


def test_the_api_takes_a_variables_name_and_says_whether_it_is_set(
        kb: Any, host: Any, monkeypatch: Any) -> None:
    running, _ = host
    body = {"dataset_id": kb.dataset.pk, "name": "private", "kind": "git",
            "location": f"{running.url}/r.git"}
    refused = kb.admin.post("/api/sources", {**body, "secret_env": "KB_SOURCE_SECRET_GLOBEX"},
                            format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_source"
    monkeypatch.setenv(VARIABLE, TOKEN)
    created = kb.admin.post("/api/sources", {**body, "secret_env": VARIABLE}, format="json")
    assert created.status_code == 201, created.content
    assert (created.json()["secret_env"], created.json()["secret_resolves"]) == (VARIABLE, True)
    assert TOKEN not in created.content.decode()
    source_id = created.json()["id"]
    cleared = kb.admin.patch(f"/api/sources/{source_id}", {"secret_env": ""}, format="json")
    assert cleared.json()["secret_resolves"] is None


def test_a_variable_another_tenants_slug_names_is_not_this_ones(kb: Any, host: Any) -> None:
    """acme may not name KB_SOURCE_SECRET_ACME_X once a tenant acme-x exists (its own
    variable), nor a variable two slugs name alike (`a-b`, `a_b`); the sync checks again."""
    from datasets.models import Tenant

    running, _ = host
    url = f"{running.url}/r.git"
    source = make_source(kb.dataset, kind="git", location=url,
                         secret_env="KB_SOURCE_SECRET_ACME_X_DOCS")
    Tenant.objects.create(slug="acme-x")
    with pytest.raises(InvalidSource, match="not available to this tenant"):
        make_source(kb.dataset, kind="git", location=url, name="other",
                    secret_env="KB_SOURCE_SECRET_ACME_X")
    job = sync(source)
    assert job.error == ("the credential variable KB_SOURCE_SECRET_ACME_X_DOCS is not one of "
                         "this tenant's")
    make_source(kb.dataset, kind="git", location=url, name="mine",
                secret_env="KB_SOURCE_SECRET_ACME_Y_DOCS")
    # Nor is a tenant made, or renamed, under whose names acme's sources read credentials.
    from datasets.documents.services import tenant_get_or_create
    from kbplatform.errors import ApiError

    with pytest.raises(ApiError, match="another tenant's sources"):
        tenant_get_or_create(slug="acme_y")
    assert tenant_rename_refusals(tenant=Tenant.objects.get(slug="acme-x"), slug="acme-y")


def test_a_credential_follows_its_location_and_its_tenant_wide_keys(
        kb: Any, host: Any, monkeypatch: Any) -> None:
    """A new location drops the credential unless named again; a dataset-scoped key names
    none; plain http carries one only to a host the deployment allows."""
    from datasets.models import ApiKey
    from tests.datasets.builders import api_client

    running, _ = host
    source = make_source(kb.dataset, kind="git", location=f"{running.url}/r.git",
                         secret_env=VARIABLE)
    moved = kb.admin.patch(f"/api/sources/{source.pk}",
                           {"location": f"{running.url}/other.git"}, format="json")
    assert moved.status_code == 200 and moved.json()["secret_env"] == ""
    again = kb.admin.patch(f"/api/sources/{source.pk}", {
        "location": f"{running.url}/r.git", "secret_env": VARIABLE}, format="json")
    assert again.json()["secret_env"] == VARIABLE

    from datasets.tenancy.keys import api_key_create

    _, scoped = api_key_create(tenant=kb.tenant, role=ApiKey.Role.ADMIN,
                               datasets=[kb.dataset])
    refused = api_client(scoped).patch(f"/api/sources/{source.pk}",
                                       {"secret_env": "KB_SOURCE_SECRET_ACME"}, format="json")
    assert refused.status_code == 403
    with pytest.raises(InvalidSource, match="https only"):
        make_source(kb.dataset, kind="git", location="http://git.example.org/r.git",
                    name="plain", secret_env=VARIABLE)


def test_a_credential_may_be_a_mounted_file(kb: Any, store: Any, host: Any, monkeypatch: Any,
                                            tmp_path: Path) -> None:
    running, _ = host
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    monkeypatch.delenv(VARIABLE, raising=False)
    monkeypatch.setenv(f"{VARIABLE}_FILE", str(secret))
    with pytest.raises(InvalidSource, match="name the variable itself"):
        make_source(kb.dataset, kind="git", location=f"{running.url}/r.git",
                    secret_env=f"{VARIABLE}_FILE")
    source = make_source(kb.dataset, kind="git", location=f"{running.url}/r.git",
                         secret_env=VARIABLE)
    assert sync(source).status == Job.Status.SUCCEEDED
    secret.unlink()
    assert sync(source).error == f"the credential file {VARIABLE}_FILE names cannot be read"
