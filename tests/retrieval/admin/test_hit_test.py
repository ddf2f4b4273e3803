"""The admin's hit-testing page: the tool's answer and the lookup's trace, for the serving
config or an earlier version of it, scoped to one tenant; nothing is audited."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from audit.models import ToolInvocation
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.admin.test_ragconfig import form_data
from tests.retrieval.conftest import Imported

pytestmark = pytest.mark.django_db
QUESTION = "nginx 502 bad gateway upstream connection refused"


def hit_test(client: Client, **params: Any) -> tuple[int, str]:
    """A run of the page: a POST (a GET only shows the form)."""
    page = client.post(reverse("admin:retrieval_ragconfig_hit_test"), params)
    return page.status_code, page.content.decode()


def answer_of(html: str) -> dict[str, Any]:
    found = re.search(r'<fieldset class="module" id="hit-answer">.*?<pre[^>]*>(.*?)</pre>', html,
                      re.S)
    assert found, "no answer on the page"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&#x27;", "'")
                      .replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


def test_the_page_shows_the_tools_answer_and_the_trace(admin_client: Client,
                                                       acme: Imported) -> None:
    listed = admin_client.get(reverse("admin:retrieval_ragconfig_changelist")).content.decode()
    assert 'id="hit-testing-link"' in listed  # reachable from the RAG configs

    status, html = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION)
    assert status == 200
    answer = answer_of(html)
    assert answer["evidence_status"] == "READY"
    assert acme.stem_of(answer["evidence"][0]["document_id"]) == "nginx"
    assert set(answer) >= {"tool_call_id", "relevance_level", "truncated", "returned_count"}
    for table in ("retrieval-details", "retrieval-stages", "retrieval-timings", "pack-evidence"):
        assert f'id="{table}"' in html, table
    assert "nginx.md" in html  # candidates are named by their documents
    assert not ToolInvocation.objects.exists()  # a hit test is not an agent's call


def test_an_earlier_version_runs_as_it_was(admin_client: Client, acme: Imported) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                               changed_by="a")
    rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 5},
                      changed_by="b")
    _, serving = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION)
    _, first = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                        version=config.changes.get(version=1).pk)
    assert answer_of(serving)["returned_count"] > 1
    assert answer_of(first)["returned_count"] == 1
    assert re.search(r"<th>config version</th><td>1</td>", first)

    _, missing = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION, version=9999)
    assert "Select a valid choice" in missing and 'id="hit-answer"' not in missing


def test_the_question_runs_narrowed_by_a_calls_filters(admin_client: Client,
                                                        acme: Imported) -> None:
    others = [d.doc_key for stem, d in acme.documents.items() if stem != "nginx"]
    _, html = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                       filters=json.dumps({"document_ids": others}))
    assert "nginx" not in {acme.stem_of(e["document_id"])
                           for e in answer_of(html)["evidence"]}
    _, web = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                      filters='{"domain": ["web"]}')
    assert {acme.stem_of(e["document_id"]) for e in answer_of(web)["evidence"]} == {"nginx"}
    for bad, says in (('{"service": ["x"]}', "not a filter: &#x27;service&#x27;"),
                      ("[1]", "Expected a dictionary"), ("{", "Expecting"),
                      ('{"document_ids": []}', "at least 1")):
        _, refused = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                              filters=bad)
        assert says in refused and 'id="hit-answer"' not in refused, bad


def test_datasets_of_another_tenant_are_refused(admin_client: Client, acme: Imported,
                                               globex: Imported) -> None:
    _, html = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                       datasets=[globex.dataset.pk])
    assert "pick datasets of acme only" in html and 'id="hit-answer"' not in html
    _, own = hit_test(admin_client, tenant=globex.tenant.pk, question=QUESTION)
    assert all(e["source"].startswith(("nginx-globex", "coolant"))
               for e in answer_of(own)["evidence"])


def test_staff_without_the_view_permission_get_403(client: Client) -> None:
    staff = User.objects.create_user("someone", is_staff=True)
    client.force_login(staff)
    assert hit_test(client, question="q")[0] == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_ragconfig"))
    assert client.get(reverse("admin:retrieval_ragconfig_hit_test")).status_code == 200


def test_two_versions_side_by_side_mark_what_differs(admin_client: Client,
                                                     acme: Imported) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                               changed_by="a")
    rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 5},
                      changed_by="b")
    _, html = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                       version=config.changes.get(version=2).pk,
                       compare=config.changes.get(version=1).pk)
    table = re.search(r'id="hit-comparison">(.*?)</fieldset>', html, re.S)
    assert table, "no comparison"
    columns = re.findall(r"<td [^>]*><ol>(.*?)</ol></td>", table.group(1), re.S)
    first, second = (re.findall(r"<li( class=\"differs\")?[^>]*><code>([^<]+)</code>", c)
                     for c in columns)
    assert len(second) == 1 and len(first) > 1
    assert first[0] == ("", second[0][1]) and second[0][0] == ""  # the same first piece
    assert all(mark for mark, _ in first[1:])  # handed out by version 2 only
    assert "acme/default version 2:" in table.group(1)
    assert "acme/default version 1:" in table.group(1)


def test_a_configs_draft_runs_beside_the_serving_config_without_being_saved(
        admin_client: Client, acme: Imported) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={}, changed_by="a")
    data = {**form_data(acme.tenant, return_n=1), "changes-TOTAL_FORMS": "0",
            "changes-INITIAL_FORMS": "0", "_hit_test_draft": "1", "_hit_test_question": QUESTION}
    form_page = admin_client.get(reverse("admin:retrieval_ragconfig_change", args=[config.pk]))
    assert 'name="_hit_test_draft"' in form_page.content.decode()

    response = admin_client.post(reverse("admin:retrieval_ragconfig_change", args=[config.pk]),
                                 data)

    assert response.status_code == 200  # the hit-testing page, run: no link with the draft
    config.refresh_from_db()
    assert (config.version, config.return_n) == (1, 5)  # nothing saved
    html = response.content.decode()
    assert answer_of(html)["returned_count"] == 1  # the trace and answer are the draft's
    table = re.search(r'id="hit-comparison">(.*?)</fieldset>', html, re.S)
    assert table and "the draft:" in table.group(1) and "the serving config:" in table.group(1)

    # An invalid draft is the form's error, as a save would be; nothing runs.
    data["return_n"] = 0
    refused = admin_client.post(reverse("admin:retrieval_ragconfig_change", args=[config.pk]),
                                data)
    assert refused.status_code == 200 and "errornote" in refused.content.decode()


def test_a_typed_draft_is_checked_like_an_edit(admin_client: Client, acme: Imported) -> None:
    _, bad = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                      draft='{"return_n": 0}')
    assert "return_n" in bad and 'id="hit-answer"' not in bad
    _, broken = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION, draft="{oops")
    assert "not JSON" in broken
    _, good = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION,
                       draft='{"return_n": 1}')
    assert answer_of(good)["returned_count"] == 1


def test_a_draft_may_not_name_another_tenants_chat_key(admin_client: Client,
                                                      acme: Imported) -> None:
    draft = json.dumps({"chat_base_url": "https://chat.example.com/v1",
                        "chat_api_key_env": "KB_CHAT_API_KEY_GLOBEX",
                        "enable_query_transform": True})
    _, html = hit_test(admin_client, tenant=acme.tenant.pk, question=QUESTION, draft=draft)
    assert "must be KB_CHAT_API_KEY_ACME" in html and 'id="hit-answer"' not in html


def test_the_trace_says_why_the_gate_dropped_each_candidate(admin_client: Client,
                                                            acme: Imported) -> None:
    # Five chunks of kafka.md match; two per document are kept, the others say why not.
    _, html = hit_test(admin_client, tenant=acme.tenant.pk, question="Kafka consumer lag")
    dropped = re.search(r'id="dropped-post_process">(.*?)</fieldset>', html, re.S)
    assert dropped, "no table of what the gate dropped"
    assert "its document has max_chunks_per_document chunks kept already" in dropped.group(1)
    assert "kafka.md" in dropped.group(1)  # each key beside its document
