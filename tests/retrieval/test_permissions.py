"""Document permissions, probed over every tool and both channels: a document whose readers
name users or groups is served only to a call made for one of them (`on_behalf_of`, from a
key that may act for people), enforced inside the Milvus filter, and in fetch, replay, the
evidence guard, verify_answer and rate_evidence; a document without readers stays everyone's;
a key that may not act for people reads documents without readers only, and naming a person
is a 403 for it. Permission changes (by hand, or a source's readers, synced) hold from the
next call on."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pytest
from django.conf import settings

from audit.models import ToolInvocation
from datasets.documents.services import dataset_documents_changed, document_readers_set
from datasets.models import Document, PrincipalAlias
from datasets.tenancy.keys import caller_for_key
from datasets.tenancy.permissions import Access
from kbplatform.env import SourceRoot
from retrieval.index.milvus.expressions import filter_expression
from retrieval.index.sync import document_sync
from retrieval.lookup.l0 import documents_view
from retrieval.lookup.revisions import lookup_revisions
from retrieval.lookup.service import lookup_scope
from retrieval.tools.mcp_server import call_tool
from retrieval.types import CallFilters
from tests.conftest import Kb, wait_until
from tests.datasets.builders import api_client
from tests.datasets.sources.builders import Repo, make_source, sync
from tests.datasets.sources.confluence_server import Wiki, WikiPage, confluence_server
from tests.datasets.sources.yuque_server import Book, YuqueDoc, yuque_server
from tests.retrieval.conftest import MakeKey

pytestmark = pytest.mark.django_db(transaction=True)  # call_tool closes its connections

# marker -> readers. Every runbook speaks of restarting the cache service, each of its own
# marker word (in its text, title and domain), so that a leak would rank and show.
RUNBOOKS = {
    "quokka": [],
    "narwhal": ["group:sre"],
    "pangolin": ["group:dba"],
    "ocelot": ["user:alice@example.com"],
    "tapir": ["user:557058:c0ffee"],  # as a source names carol (an alias maps it)
    "wombat": ["group:sre", "group:dba"],
}
MARKERS = tuple(RUNBOOKS)
ANSWER = "Drain the cache service, restart it and watch its hit rate recover."


@dataclass(frozen=True)
class Person:
    label: str
    on_behalf_of: dict[str, Any] | None
    reads: frozenset[str]  # the markers of the documents it may read


PEOPLE = (
    Person("alice", {"user": "Alice@Example.com", "groups": ["sre"]},
           frozenset({"quokka", "narwhal", "ocelot", "wombat"})),
    Person("bob", {"user": "bob@example.com", "groups": ["dba"]},
           frozenset({"quokka", "pangolin", "wombat"})),
    Person("carol", {"user": "carol@example.com"}, frozenset({"quokka", "tapir"})),
    Person("nobody", None, frozenset({"quokka"})),
)


def runbook(marker: str) -> bytes:
    return (f"---\ntitle: {marker} cache restart\ndomain: {marker}\n---\n"
            f"# Restart the {marker} cache service\n\nWhen the {marker} cache service "
            f"hangs, drain it, restart the {marker} cache service and watch its hit rate "
            "recover within five minutes.\n").encode()


def question(marker: str) -> str:
    return f"how do I restart the {marker} cache service"


def without_queries(value: Any) -> Any:
    """The body without the texts that echo what was asked (the question names its marker;
    a refusal names the id asked for)."""
    if isinstance(value, dict):
        return {k: without_queries(v) for k, v in value.items()
                if k not in ("query", "message", "extra", "not_ready")}
    if isinstance(value, list):
        return [without_queries(v) for v in value]
    return value


class Probe:
    """Calls of one key, each checked for what the person may not read."""

    def __init__(self, secret: str, documents: dict[str, Document]) -> None:
        self.secret = secret
        self.client = api_client(secret)
        self.documents = documents
        self.calls = 0

    def leaked(self, person: Person, body: Any) -> list[str]:
        text = json.dumps(without_queries(body), ensure_ascii=False)
        return [marker for marker, doc in self.documents.items() if marker not in person.reads
                and (re.search(rf"\b{marker}\b", text) or str(doc.doc_id) in text)]

    def rest(self, person: Person, tool: str, body: dict[str, Any]) -> Any:
        if person.on_behalf_of:
            body = {**body, "on_behalf_of": person.on_behalf_of}
        response = self.client.post(f"/api/tools/{tool}", body, format="json")
        return self._checked(person, response.status_code, response.json())

    def mcp(self, person: Person, tool: str, arguments: dict[str, Any]) -> Any:
        if person.on_behalf_of:
            arguments = {**arguments, "on_behalf_of": person.on_behalf_of}
        result = call_tool(tool, arguments, self.secret)
        body = result.structured_content or {}
        text = " ".join(getattr(item, "text", "") for item in result.content)
        # A refusal's text names what was asked, as the guard's names what it did not confirm.
        if not result.is_error and tool != "evidence_guard":
            assert not self.leaked(person, text), (person.label, tool, text)
        return self._checked(person, 200 if not result.is_error else 404, body)

    def replay(self, person: Person, tool_call_id: str) -> Any:
        query = person.on_behalf_of or {}
        params = {"user": query["user"], "group": query.get("groups", [])} if query else {}
        response = self.client.get(f"/api/evidence/{tool_call_id}", params)
        return self._checked(person, response.status_code, response.json())

    def _checked(self, person: Person, status: int, body: Any) -> Any:
        self.calls += 1
        assert status in (200, 404), (person.label, status, body)
        assert not self.leaked(person, body), (person.label, body)
        return body


def ask_for_ibex(probe: Probe, *people: Person) -> None:
    """Ten lookups of the ibex runbook for each person: served to its readers alone."""
    for person in people:
        for _ in range(10):
            found = probe.rest(person, "lookup_knowledge", {"query": question("ibex")})
            assert ("ibex" in person.reads) == any(
                "ibex" in e["title"] for e in found["evidence"]), (person.label, found)


@pytest.fixture
def restricted(kb: Kb, ingest: Any) -> dict[str, Document]:
    documents = {}
    for marker, readers in RUNBOOKS.items():
        document = ingest(kb.dataset, f"cache/{marker}.md", runbook(marker))
        document_readers_set(document=document, readers=readers)
        document_sync(document_id=document.pk)  # as the indexing worker does: into its rows
        documents[marker] = Document.objects.get(pk=document.pk)
        assert documents[marker].indexed_readers == sorted(readers)
    PrincipalAlias.objects.create(tenant=kb.tenant, alias="user:557058:c0ffee",
                                  principal="user:carol@example.com")
    return documents


def acting_key(make_key: MakeKey) -> str:
    key, secret = make_key(role="tool")
    key.acts_for_people = True
    key.save(update_fields=["acts_for_people"])
    return secret


def test_every_tool_on_both_channels_serves_each_person_what_it_may_read(
        kb: Kb, restricted: dict[str, Document], make_key: MakeKey) -> None:
    probe = Probe(acting_key(make_key), restricted)
    for person in PEOPLE:
        for n, marker in enumerate(MARKERS):
            call = f"perm-{person.label}-{n}"
            found = probe.rest(person, "lookup_knowledge",
                               {"query": question(marker), "tool_call_id": call})
            served = [e["document_id"] for e in found["evidence"]]
            if marker in person.reads:
                assert found["evidence_status"] == "READY", (person.label, marker, found)
                assert served[0].startswith(f"{restricted[marker].doc_id}#")
            probe.mcp(person, "lookup_knowledge", {"query": question(marker)})
            probe.rest(person, "rag_answer", {"query": question(marker)})
            probe.mcp(person, "rag_answer", {"query": question(marker)})
            for document in restricted.values():
                fetched = probe.rest(person, "fetch_evidence",
                                     {"document_id": str(document.doc_id)})
                mine = next(m for m, d in restricted.items() if d == document) in person.reads
                assert ("text" in fetched) == mine, (person.label, document.source_path)
                probe.mcp(person, "fetch_evidence", {"document_id": str(document.doc_id)})
            every = [*served, *(f"{d.doc_id}#chunk-0" for d in restricted.values())]
            guard = probe.rest(person, "evidence_guard",
                               {"tool_call_id": call, "document_ids": every})
            assert guard["ready"] == served
            probe.mcp(person, "evidence_guard", {"tool_call_id": call, "document_ids": every})
            replayed = probe.replay(person, call)
            assert replayed["withheld"] == 0
            probe.mcp(person, "replay_evidence", {"tool_call_id": call})
            probe.rest(person, "verify_answer", {
                "tool_call_id": call, "answer": ANSWER})
            probe.mcp(person, "verify_answer", {
                "tool_call_id": call, "answer": ANSWER})
            if served:
                probe.rest(person, "rate_evidence", {"tool_call_id": call, "rating": "helpful",
                                                     "document_ids": served[:1]})
        probe.rest(person, "rag_agentic", {"query": question("narwhal")})
        probe.rest(person, "rag_node", {"query": question("narwhal")})
        probe.mcp(person, "rag_node", {"query": question("pangolin")})
    assert probe.calls >= 500, probe.calls


def test_what_one_person_was_served_is_not_anothers(
        kb: Kb, restricted: dict[str, Document], make_key: MakeKey) -> None:
    """Alice's call, asked of by Bob (the same key acting for him): its replay withholds what
    he may not read, the guard does not confirm it, and he cannot rate it."""
    probe = Probe(acting_key(make_key), restricted)
    alice, bob = PEOPLE[0], PEOPLE[1]
    found = probe.rest(alice, "lookup_knowledge", {"query": question("ocelot"),
                                                   "tool_call_id": "perm-alice-call"})
    ocelot = found["evidence"][0]["document_id"]
    assert ocelot.startswith(f"{restricted['ocelot'].doc_id}#")
    replayed = probe.replay(bob, "perm-alice-call")
    assert ocelot not in json.dumps(replayed) and replayed["withheld"] >= 1
    assert probe.rest(bob, "evidence_guard", {"tool_call_id": "perm-alice-call",
                                              "document_ids": [ocelot]})["ready"] == []
    refused = probe.rest(bob, "rate_evidence", {"tool_call_id": "perm-alice-call",
                                                "rating": "helpful", "document_ids": [ocelot]})
    assert refused["code"] == "not_served"
    assert probe.rest(bob, "fetch_evidence", {"document_id": ocelot})["code"] == "not_found"
    assert probe.rest(alice, "fetch_evidence", {"document_id": ocelot})["evidence_status"] \
        == "READY"


def test_a_key_that_may_not_act_for_people_reads_unrestricted_documents_only(
        kb: Kb, restricted: dict[str, Document], make_key: MakeKey) -> None:
    nobody = PEOPLE[3]
    _, secret = make_key(role="tool")
    probe = Probe(secret, restricted)
    for marker in MARKERS:
        found = probe.rest(nobody, "lookup_knowledge", {"query": question(marker)})
        if marker == "quokka":
            assert found["evidence_status"] == "READY"
    refused = probe.client.post("/api/tools/lookup_knowledge", {
        "query": question("narwhal"), "on_behalf_of": {"user": "alice@example.com"}},
        format="json")
    assert refused.status_code == 403 and "may not act for people" in refused.json()["message"]
    row = ToolInvocation.objects.order_by("-pk").first()
    assert row is not None and row.outcome == "forbidden"
    assert "alice" not in json.dumps(row.details)


def test_the_person_is_enforced_inside_the_milvus_filter_and_audited_as_a_hash(
        kb: Kb, restricted: dict[str, Document], make_key: MakeKey) -> None:
    secret = acting_key(make_key)
    body = {"query": question("narwhal"), "tool_call_id": "perm-audit",
            "on_behalf_of": {"user": "bob@example.com", "groups": ["dba"]}}
    answer = api_client(secret).post("/api/tools/lookup_knowledge", body, format="json")
    assert answer.status_code == 200
    # Bob's lookups search without the documents he may not read: inside the query itself.
    who = caller_for_key(secret).acting_for(Access.person("bob@example.com", ["dba"]))
    filters = lookup_scope(caller=who, requested=None, narrowed=CallFilters())
    view = documents_view(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids,
                          revisions=lookup_revisions(tenant_id=filters.tenant_id,
                                                     dataset_ids=filters.dataset_ids))
    withheld = view.withheld(filters.access)
    assert set(withheld.all) == {restricted[m].doc_id for m in ("narwhal", "ocelot", "tapir")}
    # Compared with the rows' readers; by id only where the rows may not name them yet, or
    # where the collection's rows name no readers.
    expression = filter_expression(replace(filters, withheld=withheld))
    assert 'array_contains_any(readers, ["group:dba", "user:bob@example.com"])' in expression
    assert all(str(doc) not in expression for doc in withheld.all)
    old = filter_expression(replace(filters, withheld=withheld), readers_rows=False)
    assert all(str(doc) in old for doc in withheld.all) and "readers" not in old
    # Readers changed, not yet in the rows (the worker has not run): held by id meanwhile.
    Document.objects.filter(pk=restricted["quokka"].pk).update(readers=["group:ops"])
    dataset_documents_changed(dataset_id=kb.dataset.pk)
    revisions = lookup_revisions(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids)
    now = documents_view(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids,
                         revisions=revisions).withheld(filters.access)
    assert now.unsynced == (restricted["quokka"].doc_id,)
    assert f"doc_id not in [{restricted['quokka'].doc_id}]" in filter_expression(
        replace(filters, withheld=now))
    # Written into its rows, it is compared there again, in every process's next lookup.
    document_sync(document_id=restricted["quokka"].pk)
    revisions = lookup_revisions(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids)
    assert documents_view(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids,
                          revisions=revisions).withheld(filters.access).unsynced == ()
    row = ToolInvocation.objects.get(tool_call_id="perm-audit")
    audited = row.details["retrievalDetails"]["on_behalf_of"]
    assert audited["principals"] == 2 and len(audited["hash"]) == 16
    assert "bob" not in json.dumps(row.details) and "dba" not in json.dumps(row.details)


def test_a_permission_change_holds_from_the_next_call(
        kb: Kb, restricted: dict[str, Document], make_key: MakeKey,
        request: pytest.FixtureRequest) -> None:
    """A document moving between groups while lookups run: no lookup after a move serves it
    to the group it left; the group it joined finds it (at once, or once a worker that is
    rewriting its rows is done); readers set through the API."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        request.getfixturevalue("celery_worker")  # rewriting the rows while lookups run
    probe = Probe(acting_key(make_key), restricted)
    alice, bob = PEOPLE[0], PEOPLE[1]
    admin = kb.admin
    target = restricted["narwhal"]
    for turn in range(6):
        group = "sre" if turn % 2 else "dba"
        changed = admin.patch(f"/api/documents/{target.doc_id}",
                              {"readers": [f"group:{group}"]}, format="json")
        assert changed.status_code == 200 and changed.json()["readers"] == [f"group:{group}"]
        readers = {p.label: p for p in (alice, bob)}
        for person in readers.values():
            may = (group == "sre") == (person.label == "alice")
            reads = person.reads | {"narwhal"} if may else person.reads - {"narwhal"}
            now = Person(person.label, person.on_behalf_of, frozenset(reads))

            def served(now: Person = now) -> bool:
                found = probe.rest(now, "lookup_knowledge", {"query": question("narwhal")})
                return any(e["document_id"].startswith(f"{target.doc_id}#")
                           for e in found["evidence"])

            if may:
                wait_until(served, timeout=30, what=f"turn {turn}: {person.label} finds it")
            else:
                assert not served(), (turn, person.label)  # the probe checks it too
    refused = admin.patch(f"/api/documents/{target.doc_id}", {"readers": ["sre"]},
                          format="json")
    assert refused.status_code == 400 and "readers" in refused.json()["extra"]["fields"]


@pytest.fixture
def repo(settings: Any, tmp_path: Any) -> Repo:
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)  # roots/<tenant slug>/
    settings.VAR_DIR = tmp_path / "var"
    made = Repo(tmp_path / "roots" / "acme" / "handbook")
    made.write({"vault.md": runbook("ibex"), "open.md": runbook("quokka")})
    made.commit()
    return made


@pytest.mark.usefixtures("eager_tasks")
def test_a_sources_readers_are_its_documents_and_a_removal_holds_at_once(
        kb: Kb, store: Any, repo: Repo, make_key: MakeKey) -> None:
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    changed = kb.admin.patch(f"/api/sources/{source.pk}", {"readers": ["group:SRE"]},
                             format="json")
    assert changed.status_code == 200 and changed.json()["readers"] == ["group:sre"]
    assert sync(source).status == "succeeded"
    synced = Document.objects.filter(source=source, deleted=False)
    assert {tuple(d.readers) for d in synced} == {("group:sre",)}
    secret = acting_key(make_key)
    sre = Person("sre", {"user": "dan@example.com", "groups": ["sre"]},
                 frozenset({"ibex", "quokka"}))
    other = Person("other", {"user": "eve@example.com", "groups": ["ops"]}, frozenset())
    documents = {Document.objects.get(pk=d.pk).source_path.split("/")[-1][:-3]: d
                 for d in synced}
    probe = Probe(secret, {"ibex": documents["vault"]})
    assert probe.rest(sre, "lookup_knowledge", {"query": question("ibex")})[
        "evidence_status"] == "READY"
    probe.rest(other, "lookup_knowledge", {"query": question("ibex")})
    # sre's access is removed at the source: gone for sre's next call, and after a sync.
    kb.admin.patch(f"/api/sources/{source.pk}", {"readers": ["group:ops"]}, format="json")
    gone = Person("sre", sre.on_behalf_of, frozenset())
    probe.rest(gone, "lookup_knowledge", {"query": question("ibex")})
    repo.write({"vault.md": runbook("ibex") + b"\nAlso check the eviction rate.\n"})
    repo.commit()
    assert sync(source).status == "succeeded"
    assert {tuple(d.readers) for d in Document.objects.filter(source=source, deleted=False)} \
        == {("group:ops",)}
    probe.rest(gone, "lookup_knowledge", {"query": question("ibex")})
    now_other = Person("other", other.on_behalf_of, frozenset({"ibex"}))
    assert probe.rest(now_other, "lookup_knowledge", {"query": question("ibex")})[
        "evidence_status"] == "READY"
    # A synced document's readers are its source's: a hand edit is refused.
    refused = kb.admin.patch(f"/api/documents/{documents['vault'].doc_id}",
                             {"readers": []}, format="json")
    assert refused.status_code == 400


@pytest.mark.usefixtures("eager_tasks")
def test_a_pages_restrictions_at_the_source_hold_from_the_sync_that_reads_them(
        kb: Kb, store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch,
        make_key: MakeKey) -> None:
    """A Confluence page restricted to a group, then moved to another group at the source
    (its body unchanged), then to a person its site names by account id (an alias maps it),
    then that person no longer viewing the space: each holds for every lookup from the sync
    that reads it."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv("KB_SOURCE_SECRET_ACME_WIKI", "personal-access-token")
    page = WikiPage("ibex", f"<p>{runbook('ibex').decode()}</p>", groups=["sre"])
    site = Wiki(space="OPS", credential="personal-access-token", pages={
        "1": page, "2": WikiPage("quokka", f"<p>{runbook('quokka').decode()}</p>")})
    PrincipalAlias.objects.create(tenant=kb.tenant, alias="user:557058:ca201",
                                  principal="user:carol@example.com")
    sre = Person("sre", {"user": "dan@example.com", "groups": ["sre"]}, frozenset({"ibex"}))
    ops = Person("ops", {"user": "eve@example.com", "groups": ["ops"]}, frozenset())
    carol = Person("carol", {"user": "carol@example.com"}, frozenset())
    with confluence_server(site) as running:
        source = make_source(kb.dataset, kind="confluence", location=running.space_url,
                             secret_env="KB_SOURCE_SECRET_ACME_WIKI")
        assert sync(source).status == "succeeded"
        probe = Probe(acting_key(make_key), {"ibex": Document.objects.get(title="ibex")})

        asked = partial(ask_for_ibex, probe)

        asked(sre, ops, carol)
        page.groups = ["ops"]  # moved between groups at the source
        assert sync(source).detail["changed"] == 1
        asked(replace(sre, reads=frozenset()), replace(ops, reads=frozenset({"ibex"})), carol)
        page.groups, page.users = [], [{"accountId": "557058:ca201"}]
        assert sync(source).detail["changed"] == 1
        asked(replace(sre, reads=frozenset()), ops, replace(carol, reads=frozenset({"ibex"})))
        # Carol no longer views the space (its permissions, as a Cloud site keeps them).
        running.space_permissions = [("group", "ops-id", "read", "space")]
        assert sync(source).detail["changed"] == 2  # the space restricts quokka now too
        asked(replace(sre, reads=frozenset()), ops, carol)
    assert probe.calls == 120


@pytest.mark.usefixtures("eager_tasks")
def test_a_private_yuque_books_team_holds_from_the_sync_that_reads_it(
        kb: Kb, store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch,
        make_key: MakeKey) -> None:
    """A private Yuque book read by its team's members (by id: aliases map them), then one of
    them leaving the team at the source, then the book opened to the whole space: each holds
    for every lookup from the sync that reads it."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv("KB_SOURCE_SECRET_ACME_BOOK", "yuque-token")
    book = Book(namespace="sre/runbooks", token="yuque-token", public=0,
                members=[101, 102],
                docs={1: YuqueDoc("ibex", runbook("ibex").decode().split("---\n")[-1])})
    for alias, person in (("user:101", "carol@example.com"), ("user:102", "dan@example.com")):
        PrincipalAlias.objects.create(tenant=kb.tenant, alias=alias, principal=f"user:{person}")
    dan = Person("dan", {"user": "dan@example.com"}, frozenset({"ibex"}))
    carol = Person("carol", {"user": "carol@example.com", "groups": ["sre"]},
                   frozenset({"ibex"}))
    eve = Person("eve", {"user": "eve@example.com", "groups": ["sre"]}, frozenset())
    with yuque_server(book) as running:
        source = make_source(kb.dataset, kind="yuque", location=running.book_url,
                             secret_env="KB_SOURCE_SECRET_ACME_BOOK")
        assert sync(source).status == "succeeded"
        probe = Probe(acting_key(make_key), {"ibex": Document.objects.get(source=source)})

        asked = partial(ask_for_ibex, probe)

        asked(dan, carol, eve, Person("nobody", None, frozenset()))
        running.members = [102]  # 101 (carol) leaves the team
        assert sync(source).detail["changed"] == 1
        asked(dan, replace(carol, reads=frozenset()), eve)
        running.public = 2  # open to the whole space
        assert sync(source).detail["changed"] == 1
        everyone = frozenset({"ibex"})
        asked(dan, replace(carol, reads=everyone), replace(eve, reads=everyone),
              Person("nobody", None, everyone))
    assert probe.calls == 110


def test_a_commands_key_may_act_for_people_when_it_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import call_command

    from datasets.models import ApiKey

    call_command("create_api_key", "--tenant", "acme", "--acts-for-people")
    call_command("create_api_key", "--tenant", "acme")
    assert "acts for people" in capsys.readouterr().out
    assert sorted(ApiKey.objects.values_list("acts_for_people", flat=True)) == [False, True]
