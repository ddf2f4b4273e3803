"""Property tests of the scope rules (DESIGN.md "Rules that hold everywhere"), on the real
platform: no lookup, listing, document read, evidence guard or trace ever hands a key another
tenant's data, a dataset outside its scope, or a deactivated or deleted document; and what a
key may not see answers exactly as what does not exist.

One world is indexed per test (three tenants with datasets of the same names, thirteen small
runbooks that all speak of "redis restart" and each of one marker word, so that a leak would
rank), with keys of every kind. Hypothesis then drives the REST API in process with sequences
of lookups, listings, document reads, guard checks, traces, activation flips, deletions,
dataset deactivations and uploads, drawn over every key and every tenant's ids, and checks
each answer against a model of the world. Each example runs in a savepoint that is rolled back
(the Milvus rows of its uploads are removed first), so every example starts from the world.

CI runs KB_PROPERTY_EXAMPLES examples (default 25) of up to KB_PROPERTY_STEPS steps (default
40), derandomized: well under a minute. A longer run explores other examples each time with
KB_PROPERTY_RANDOM=1 (a failure prints its program; --hypothesis-seed=N replays a run), with the
services of scripts/test.sh's integration run:

    KB_PROPERTY_EXAMPLES=60 KB_PROPERTY_STEPS=60 KB_PROPERTY_RANDOM=1 DJANGO_SECRET_KEY=prop \
    DATABASE_URL=mysql://root:@127.0.0.1:3306/test REDIS_URL=redis://127.0.0.1:6379/13 \
    CELERY_BROKER_URL=redis://127.0.0.1:6379/14 CELERY_TASK_ALWAYS_EAGER=false \
    MILVUS_URI=http://127.0.0.1:19541 KB_EMBEDDER=use python -m pytest -s tests/test_properties.py
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pytest
from django.db import transaction
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test
from rest_framework.test import APIClient

from audit.models import ToolInvocation
from datasets.documents.services import dataset_create, document_delete, tenant_get_or_create
from datasets.models import Dataset, Document
from retrieval.index.sync import document_sync
from tests.datasets.builders import api_client, markdown, md_file

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("KB_PROPERTY_EXAMPLES", "25"))
STEPS = int(os.environ.get("KB_PROPERTY_STEPS", "40"))
RANDOM = os.environ.get("KB_PROPERTY_RANDOM", "") == "1"

MISSING = 999_999_999  # an id nothing has: "not yours" must answer exactly like it
RUN = uuid.uuid4().hex[:8]  # tool call and session ids of earlier runs stay in Redis

# tenant -> dataset -> the marker words of its documents. Same dataset names in every tenant;
# a/cold is deactivated from the start (with keys scoped to it).
WORLD: dict[str, dict[str, tuple[str, ...]]] = {
    "a": {"ops": ("quokka", "narwhal"), "edge": ("ocelot", "pangolin"), "cold": ("axolotl",)},
    "b": {"ops": ("capybara", "okapi"), "edge": ("tapir", "wombat")},
    "c": {"ops": ("gecko", "lemur"), "edge": ("marmot", "ibex")},
}
COLD = {"a/cold"}
# label -> (role, datasets it is limited to; None: the whole tenant), for every tenant
KEY_KINDS = {"tool": ("tool", None), "admin": ("admin", None), "tool@ops": ("tool", ("ops",)),
             "admin@edge": ("admin", ("edge",)), "tool@ops+edge": ("tool", ("ops", "edge"))}
EXTRA_KEYS = {"a:tool@cold": ("tool", ("cold",)), "a:admin@cold": ("admin", ("cold",)),
              "a:platform": ("platform", None)}
UPLOAD_MARKERS = ("dingo", "heron", "otter", "lynx", "puffin")  # fresh documents, per example

DATASET_LABELS = sorted(f"{t}/{d}" for t, ds in WORLD.items() for d in ds)
KEY_LABELS = sorted([f"{t}:{k}" for t in WORLD for k in KEY_KINDS] + list(EXTRA_KEYS))
MARKERS = sorted(m for ds in WORLD.values() for ms in ds.values() for m in ms)
ALL_MARKERS = MARKERS + list(UPLOAD_MARKERS)
MARKER_RE = re.compile(r"\b(" + "|".join(ALL_MARKERS) + r")\b")
DOC_ID_RE = re.compile(r"\b(\d{10,19})#chunk-\d+")
SHARED = ("redis restart", "how do I restart redis", "check the dashboard after the restart",
          "replicas reconnect and the cache warms up")
# Changes are drawn half the time with the keys that may make them (most keys may not).
CHANGERS = st.one_of(st.sampled_from([k for k in KEY_LABELS
                                      if "admin" in k or "platform" in k]),
                     st.sampled_from(KEY_LABELS))
CALLS = ("call-0", "call-1", "call-2")  # the same labels in every tenant
SESSIONS = ("s-0", "s-1")


def runbook(marker: str) -> bytes:
    """Every section names the marker and speaks of redis restarts, like all the others."""
    return markdown(f"Redis restart on {marker}", {
        f"Restarting redis on {marker}": f"To restart redis on the {marker} cluster, drain the "
                                         f"{marker} clients, run the redis restart and watch "
                                         f"the {marker} dashboard.",
        f"Checking {marker} after the restart": f"After a redis restart, check that the "
                                                f"{marker} replicas reconnect and the {marker} "
                                                "cache warms up.",
    }, category="ops", keywords=[marker])


# --- the model -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    label: str
    tenant: str
    role: str
    scope: frozenset[str] | None  # dataset labels
    client: APIClient

    @property
    def admin(self) -> bool:
        return self.role in ("admin", "platform")


@dataclass
class Ds:
    label: str
    tenant: str
    pk: int
    activated: bool


@dataclass
class Doc:
    marker: str
    dataset: str  # label
    doc_id: str
    activated: bool = True
    deleted: bool = False
    uploaded: bool = False  # by this example (its Milvus rows are removed at the end)


@dataclass(frozen=True)
class Call:
    """A lookup as the audit and the canonical store should remember it."""

    tool_call_id: str
    key: str
    searched: tuple[int, ...] | None  # None: the call failed before a search
    ready: tuple[tuple[str, int], ...] = ()  # (evidence id, dataset pk)


@dataclass
class World:
    keys: dict[str, Key]
    datasets: dict[str, Ds]
    docs: dict[str, Doc]  # by marker
    tenants: dict[str, int]  # pk by label
    applied: Callable[[], Any]
    stats: Counter[str] = field(default_factory=Counter)


def tenant_of(label: str) -> str:
    return label.split(":", 1)[0].split("/", 1)[0]


# --- the machine -----------------------------------------------------------------------------

class ScopeMachine(RuleBasedStateMachine):
    world: ClassVar[World]

    def __init__(self) -> None:
        super().__init__()
        self.savepoint = transaction.savepoint()
        self.stats = self.world.stats
        self.stats["examples"] += 1
        self.prefix = f"{RUN}-{self.stats['examples']}-"
        self.keys = self.world.keys
        self.datasets = {k: replace(v) for k, v in self.world.datasets.items()}
        self.docs = {k: replace(v) for k, v in self.world.docs.items()}
        self.uploads = 0
        self.calls: dict[tuple[str, str], Call] = {}  # (tenant, tool call id): latest call
        self.sessions: dict[tuple[str, str], list[Call]] = {}  # (tenant, session id): calls
        self.seen_evidence: set[str] = set()
        self.jobs: list[tuple[int, Doc]] = []  # upload jobs, with their document

    def teardown(self) -> None:
        try:
            for doc in self.docs.values():
                if doc.uploaded:  # its Milvus rows would outlive the rollback
                    row = Document.objects.get(doc_id=int(doc.doc_id))
                    document_delete(document=row)
                    document_sync(document_id=row.pk)
        finally:
            transaction.savepoint_rollback(self.savepoint)

    # --- what the model says a key may see ---------------------------------------------------

    def visible(self, key: Key) -> set[str]:
        """Datasets the key may see at all (Caller.datasets)."""
        return {label for label, ds in self.datasets.items() if ds.tenant == key.tenant
                and (key.scope is None or label in key.scope)
                and (key.admin or ds.activated)}

    def readable(self, key: Key) -> set[str]:
        return {label for label in self.visible(key) if self.datasets[label].activated}

    def writable(self, key: Key) -> set[str]:
        return self.visible(key) if key.admin else set()

    def live(self, doc: Doc) -> bool:
        return doc.activated and not doc.deleted and self.datasets[doc.dataset].activated

    def doc_by_id(self, doc_id: str) -> Doc | None:
        return next((d for d in self.docs.values() if d.doc_id == doc_id), None)

    def pk(self, label: str) -> int:
        return MISSING if label == "missing" else self.datasets[label].pk

    def send(self, key: Key, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.stats["requests"] += 1
        return getattr(key.client, method)(path, body, **kwargs)

    def same_as_missing(self, key: Key, found: Any, method: str, path: str, real: object,
                        body: Any = None, **kwargs: Any) -> None:
        """A refused request answers exactly like the same request for an id nobody has."""
        missing = self.send(key, method, path.replace(str(real), str(MISSING)), body, **kwargs)
        assert found.status_code == missing.status_code, (found.content, missing.content)
        assert found.status_code in (400, 403, 404), found.content
        assert (found.content.decode().replace(str(real), "ID")
                == missing.content.decode().replace(str(MISSING), "ID")), \
            (found.content, missing.content)

    def no_foreign_markers(self, text: str, allowed: Iterable[str], where: str) -> None:
        leaked = set(MARKER_RE.findall(text)) - set(allowed)
        assert not leaked, f"{where}: {sorted(leaked)} in {text[:2000]}"

    # --- lookups -----------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEY_LABELS),
          query=st.one_of(
              st.sampled_from(ALL_MARKERS), st.sampled_from(SHARED),
              st.tuples(st.sampled_from(ALL_MARKERS), st.sampled_from(SHARED))
              .map(" ".join),
              st.lists(st.sampled_from(ALL_MARKERS), min_size=2, max_size=3).map(" ".join),
              st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=30)),
          datasets=st.none() | st.lists(st.sampled_from([*DATASET_LABELS, "missing"]),
                                        max_size=3),
          call=st.none() | st.sampled_from(CALLS),
          session=st.none() | st.sampled_from(SESSIONS))
    def lookup(self, key: str, query: str, datasets: list[str] | None, call: str | None,
               session: str | None) -> None:
        self.stats["op:lookup"] += 1
        self.lookup_as(self.keys[key], query, datasets, call, session)

    def lookup_as(self, key: Key, query: str, datasets: list[str] | None = None,
                  call: str | None = None, session: str | None = None) -> list[Doc]:
        """Run one lookup, check it against the model, remember it; the documents found."""
        self.stats["lookups"] += 1
        body: dict[str, Any] = {"query": query}
        if datasets is not None:
            body["dataset_ids"] = [self.pk(label) for label in datasets]
        if call:
            body["tool_call_id"] = self.prefix + call
        if session:
            body["session_id"] = self.prefix + session
        response = self.send(key, "post", "/api/tools/lookup_knowledge", body, format="json")
        readable = {self.datasets[label].pk for label in self.readable(key)}
        requested = body.get("dataset_ids")
        unknown = sorted({pk for pk in requested or () if pk not in readable})
        failed = Call(tool_call_id=body.get("tool_call_id", ""), key=key.label, searched=None)
        if not query.strip():
            assert response.status_code == 400, response.content
            return self.remember(key, session, failed)
        if requested and unknown:
            # The same words as for an id that does not exist, another tenant's id included.
            assert response.status_code == 400, response.content
            assert response.json() == {"code": "unknown_dataset", "extra": {},
                                       "message": f"unknown dataset ids: {unknown}"}
            if len(unknown) == 1 and unknown[0] != MISSING:
                # The same request with an id nobody has (and no session: not a call to trace).
                probe = {"query": query, "dataset_ids": [MISSING if pk == unknown[0] else pk
                                                         for pk in requested]}
                missing = self.send(key, "post", "/api/tools/lookup_knowledge", probe,
                                    format="json")
                assert (response.content.decode().replace(str(unknown[0]), "ID")
                        == missing.content.decode().replace(str(MISSING), "ID"))
            return self.remember(key, session, failed)
        assert response.status_code == 200, response.content
        answer = response.json()
        assert answer["evidence_status"] in ("READY", "EMPTY"), answer
        scope = set(requested) if requested else readable
        found: list[Doc] = []
        ready: list[tuple[str, int]] = []
        for item in answer["evidence"]:
            doc = self.doc_by_id(item["document_id"].split("#", 1)[0])
            assert doc is not None, f"evidence of a document that does not exist: {item}"
            where = f"{key.label} looked up {query!r} in {sorted(scope)}: {doc}"
            assert tenant_of(doc.dataset) == key.tenant, f"another tenant's evidence: {where}"
            assert self.datasets[doc.dataset].pk in scope, f"out-of-scope evidence: {where}"
            assert self.live(doc), f"evidence of a deactivated/deleted document: {where}"
            self.no_foreign_markers(json.dumps(item), [doc.marker], where)
            found.append(doc)
            ready.append((item["document_id"], self.datasets[doc.dataset].pk))
        # Completeness, or the test could pass on a platform that finds nothing: a query of
        # one marker (alone or with shared words) finds its document when the lookup may
        # read it. (Several markers of several tenants make a query the relevance gate may
        # rightly find too vague: EMPTY.)
        markers = [word for word in query.split() if word in ALL_MARKERS]
        doc = self.docs.get(markers[0]) if len(markers) == 1 else None
        if doc and self.live(doc) and self.datasets[doc.dataset].pk in scope:
            assert doc in found, f"{key.label}: {query!r} did not find {doc}: {answer}"
        # The search itself carries the filters (DESIGN.md): Milvus never hands the lookup's
        # guard a document it may not serve, so the guard stage never drops anything here.
        row = ToolInvocation.objects.filter(tool_call_id=answer["tool_call_id"]).latest("id")
        stages = (row.details["retrievalDetails"] or {}).get("stages", [])
        dropped = [self.doc_by_id(c["evidence_key"].split("#", 1)[0]) for stage in stages
                   if stage["stage"] == "guard" for c in stage["candidates"]]
        assert not dropped, (f"{key.label}: {query!r}: the search returned hits of documents "
                             f"it may not serve: {dropped}")
        self.stats["evidence"] += len(ready)
        self.seen_evidence.update(e for e, _ in ready)
        call_record = Call(tool_call_id=answer["tool_call_id"], key=key.label,
                           searched=tuple(sorted(scope)), ready=tuple(ready))
        if call:
            self.calls[(key.tenant, body["tool_call_id"])] = call_record
        self.remember(key, session, call_record)
        return found

    def remember(self, key: Key, session: str | None, call: Call) -> list[Doc]:
        if session:
            self.sessions.setdefault((key.tenant, self.prefix + session), []).append(call)
        return []

    def probe(self, doc: Doc) -> None:
        """A lookup of the document's marker by its tenant's whole-tenant tool key: found
        exactly when it may be served, at once."""
        found = self.lookup_as(self.keys[f"{tenant_of(doc.dataset)}:tool"], doc.marker)
        assert (doc in found) == self.live(doc), (doc, found)

    # --- the evidence guard ------------------------------------------------------------------

    @rule(key=st.sampled_from(KEY_LABELS), by_session=st.booleans(),
          label=st.sampled_from(CALLS + SESSIONS), data=st.data())
    def evidence_guard(self, key: str, by_session: bool, label: str, data: st.DataObject) -> None:
        # Evidence handed out so far (any key, any tenant), chunks of every document, junk.
        # Picked by position: the ids are random, and a replay must draw the same way.
        named = {f"{d.marker}#{d.doc_id}": d.doc_id for d in self.docs.values()}
        pool = sorted(self.seen_evidence, key=self.stable_name)
        pool += [f"{named[n]}#chunk-0" for n in sorted(named)]
        pool += ["1#chunk-0", f"{MISSING}#chunk-1", "not-an-id"]
        picks = data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=6), "picks")
        asked = [pool[i % len(pool)] for i in picks]
        note(f"asked: {[self.stable_name(e) for e in asked]}")
        self.stats["op:evidence_guard"] += 1
        self.guard_as(self.keys[key], by_session, label, asked)

    @rule(owner=st.sampled_from(KEY_LABELS), asker=st.sampled_from(KEY_LABELS),
          marker=st.sampled_from(MARKERS), call=st.sampled_from(CALLS),
          session=st.sampled_from(SESSIONS), by_session=st.booleans())
    def guard_of_a_call(self, owner: str, asker: str, marker: str, call: str, session: str,
                        by_session: bool) -> None:
        """A key asks the guard about what a call of another (or the same) key handed out."""
        self.stats["op:guard_of_a_call"] += 1
        self.lookup_as(self.keys[owner], f"{marker} redis restart", call=call, session=session)
        given = [e for c in self.sessions.get((self.keys[owner].tenant, self.prefix + session),
                                              [])[-1:] for e, _ in c.ready]
        asked = given + [f"{self.docs[marker].doc_id}#chunk-0"]
        self.guard_as(self.keys[asker], by_session, session if by_session else call, asked)

    def stable_name(self, evidence: str) -> str:
        """`quokka#chunk-1` for an evidence id of the quokka document: the same in a replay."""
        doc_id, _, chunk = evidence.partition("#")
        doc = self.doc_by_id(doc_id)
        return f"{doc.marker}#{chunk}" if doc else evidence

    def guard_as(self, who: Key, by_session: bool, label: str, asked: list[str]) -> None:
        self.stats["guards"] += 1
        ident = self.prefix + label
        body = {"session_id" if by_session else "tool_call_id": ident, "document_ids": asked}
        response = self.send(who, "post", "/api/tools/evidence_guard", body, format="json")
        assert response.status_code == 200, response.content
        if by_session:
            calls = self.sessions.get((who.tenant, ident), [])
        else:
            calls = [c for c in [self.calls.get((who.tenant, ident))] if c]
        given = {evidence: pk for c in calls for evidence, pk in c.ready}
        readable = {self.datasets[label].pk for label in self.readable(who)}
        expected = []
        for evidence in dict.fromkeys(asked):
            doc = self.doc_by_id(evidence.split("#", 1)[0])
            if (evidence in given and given[evidence] in readable and doc is not None
                    and self.live(doc) and tenant_of(doc.dataset) == who.tenant):
                expected.append(evidence)
        verdict = response.json()
        assert verdict["ready"] == expected, (who.label, body, verdict, calls)
        assert verdict["not_ready"] == [e for e in dict.fromkeys(asked) if e not in expected]
        self.stats["guard_confirmed"] += len(expected)

    # --- traces --------------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEY_LABELS), session=st.sampled_from(SESSIONS))
    def read_trace(self, key: str, session: str) -> None:
        self.stats["op:trace"] += 1
        self.trace(key, session)

    def trace(self, key: str, session: str) -> None:
        self.stats["traces"] += 1
        who = self.keys[key]
        ident = self.prefix + session
        path = f"/api/diagnosis/{ident}/trace"
        response = self.send(who, "get", path)
        calls = self.sessions.get((who.tenant, ident), [])
        if who.scope is not None:
            writable = {self.datasets[label].pk for label in self.writable(who)}
            calls = [c for c in calls if c.key == who.label
                     or c.searched and set(c.searched) <= writable]
        if not who.admin or not calls:
            self.same_as_missing(who, response, "get", path, ident)
            return
        assert response.status_code == 200, response.content
        rows = response.json()["toolInvocations"]
        assert [r["tool_call_id"] for r in rows] == [c.tool_call_id for c in calls], \
            (who.label, rows, calls)
        for row, call in zip(rows, calls, strict=True):
            details = row["retrievalDetails"]
            if call.searched is None:
                assert details is None, row
                continue
            assert details["filters"]["tenant"] == self.world.tenants[who.tenant], row
            assert sorted(details["filters"]["datasets"]) == list(call.searched), row
            assert details["pack"]["evidence_keys"] == [e for e, _ in call.ready], row
            text = json.dumps(row)
            # Every document a trace names is one of this tenant's, in the datasets searched.
            for doc_id in DOC_ID_RE.findall(text):
                doc = self.doc_by_id(doc_id)
                assert doc is not None and self.datasets[doc.dataset].pk in call.searched, \
                    (who.label, doc_id, doc, row)
            allowed = [d.marker for d in self.docs.values()
                       if self.datasets[d.dataset].pk in call.searched]
            self.no_foreign_markers(text, allowed, f"trace of {who.label}")
        self.stats["trace_rows"] += len(rows)

    @rule(owner=st.sampled_from(KEY_LABELS), asker=st.sampled_from(KEY_LABELS),
          query=st.sampled_from(MARKERS) | st.sampled_from(SHARED),
          session=st.sampled_from(SESSIONS))
    def trace_of_a_session(self, owner: str, asker: str, query: str, session: str) -> None:
        """A key reads the trace of a session another (or the same) key has just used."""
        self.stats["op:trace_of_a_session"] += 1
        self.lookup_as(self.keys[owner], query, session=session)
        self.trace(asker, session)

    # --- listings and reads ----------------------------------------------------------------------

    @rule(key=st.sampled_from(KEY_LABELS))
    def list_datasets(self, key: str) -> None:
        self.stats["op:list_datasets"] += 1
        who = self.keys[key]
        response = self.send(who, "get", "/api/datasets")
        assert response.status_code == 200, response.content
        listed = [(d["id"], d["activated"]) for d in response.json()["datasets"]]
        expected = sorted(self.visible(who), key=lambda label: label.split("/")[1])
        assert listed == [(self.datasets[lb].pk, self.datasets[lb].activated)
                          for lb in expected], (who.label, listed, expected)

    @rule(key=st.sampled_from(KEY_LABELS), dataset=st.sampled_from([*DATASET_LABELS, "missing"]))
    def list_documents(self, key: str, dataset: str) -> None:
        self.stats["op:list_documents"] += 1
        who = self.keys[key]
        path = f"/api/datasets/{self.pk(dataset)}/documents"
        response = self.send(who, "get", path)
        if dataset not in self.visible(who):
            self.same_as_missing(who, response, "get", path, self.pk(dataset))
            return
        assert response.status_code == 200, response.content
        # Live documents: an admin key sees deactivated ones too, with their flag, a tool key
        # only what a lookup may serve; never a deleted one, never one of another dataset.
        listed = [(d["document_id"], d["activated"]) for d in response.json()["documents"]]
        docs = sorted((d for d in self.docs.values() if d.dataset == dataset and not d.deleted
                       and (who.admin or d.activated)), key=lambda d: d.marker)
        assert listed == [(d.doc_id, d.activated) for d in docs], (who.label, dataset, listed)
        self.no_foreign_markers(response.content.decode(), [d.marker for d in docs], path)

    @rule(key=st.sampled_from(KEY_LABELS), data=st.data())
    def get_document(self, key: str, data: st.DataObject) -> None:
        self.stats["op:get_document"] += 1
        who, doc = self.keys[key], self.draw_doc(data)
        path = f"/api/documents/{doc.doc_id}"
        response = self.send(who, "get", path)
        if not self.may_change(who, doc):
            self.same_as_missing(who, response, "get", path, doc.doc_id)
            return
        assert response.status_code == 200, response.content
        assert response.json()["activated"] == doc.activated, response.content
        self.no_foreign_markers(response.content.decode(), [doc.marker], path)

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def get_job(self, data: st.DataObject) -> None:
        self.stats["op:get_job"] += 1
        job, doc = self.jobs[data.draw(st.integers(0, len(self.jobs) - 1), "job")]
        # Half the time a key of the job's own tenant: the interesting refusals are there.
        own = [k for k in KEY_LABELS if tenant_of(k) == tenant_of(doc.dataset)]
        who = self.keys[data.draw(st.sampled_from(own) | st.sampled_from(KEY_LABELS), "key")]
        path = f"/api/jobs/{job}"
        response = self.send(who, "get", path)
        if not who.admin:  # a job's log names the files it read: admin keys only
            assert response.status_code == 403, response.content
            return
        # A job of a dataset the key may not see "does not exist" for it, like the dataset.
        if doc.dataset not in self.visible(who):
            self.same_as_missing(who, response, "get", path, job)
            return
        assert response.status_code == 200, response.content
        self.no_foreign_markers(response.content.decode(), [doc.marker], path)

    def draw_doc(self, data: st.DataObject, key: Key | None = None,
                 deleted: bool = False) -> Doc:
        """Any document of any tenant; for a change, half the time one the key may change
        (most keys may change nothing, and the changes are what the lookups must follow)."""
        mine = sorted(m for m, d in self.docs.items() if key and (
            self.may_change(key, d) or deleted and d.deleted and d.dataset in self.writable(key)))
        if bool(mine) and data.draw(st.booleans(), "one the key may change"):
            return self.docs[data.draw(st.sampled_from(mine), "document")]
        return self.docs[data.draw(st.sampled_from(sorted(self.docs)), "document")]

    def may_change(self, key: Key, doc: Doc) -> bool:
        return (key.admin and doc.dataset in self.writable(key) and not doc.deleted)

    # --- changes -------------------------------------------------------------------------------

    @rule(key=CHANGERS, activated=st.booleans(), data=st.data())
    def flip(self, key: str, activated: bool, data: st.DataObject) -> None:
        self.stats["op:flip"] += 1
        who = self.keys[key]
        doc = self.draw_doc(data, who)
        path = f"/api/documents/{doc.doc_id}"
        response = self.send(who, "patch", path, {"activated": activated}, format="json")
        if not self.may_change(who, doc):
            self.same_as_missing(who, response, "patch", path, doc.doc_id,
                                 {"activated": activated}, format="json")
        else:
            assert response.status_code == 200, response.content
            assert response.json()["activated"] is activated
            doc.activated = activated
            self.stats["op:flip(applied)"] += 1
        self.probe(doc)

    @rule(key=CHANGERS, data=st.data())
    def delete(self, key: str, data: st.DataObject) -> None:
        self.stats["op:delete"] += 1
        who = self.keys[key]
        doc = self.draw_doc(data, who)
        path = f"/api/documents/{doc.doc_id}"
        response = self.send(who, "delete", path)
        if not self.may_change(who, doc):
            self.same_as_missing(who, response, "delete", path, doc.doc_id)
        else:
            assert response.status_code == 204, response.content
            doc.deleted, doc.activated = True, False
            self.stats["op:delete(applied)"] += 1
        self.probe(doc)

    @rule(dataset=st.sampled_from(DATASET_LABELS), activated=st.booleans(), data=st.data())
    def set_dataset_activation(self, dataset: str, activated: bool, data: st.DataObject) -> None:
        # There is no API for it: an operator changes the row (the admin).
        Dataset.objects.filter(pk=self.pk(dataset)).update(activated=activated)
        self.datasets[dataset].activated = activated
        self.stats["op:dataset_activation"] += 1
        members = [d for d in self.docs.values() if d.dataset == dataset]
        if members:
            self.probe(data.draw(st.sampled_from(members), "member"))

    @rule(key=CHANGERS, data=st.data())
    def reupload(self, key: str, data: st.DataObject) -> None:
        """The same file again into its dataset: a deleted document comes back, live."""
        self.stats["op:reupload"] += 1
        who = self.keys[key]
        doc = self.draw_doc(data, who, deleted=True)
        dataset = doc.dataset
        response = self.upload(who, dataset, doc.marker)
        if response is None:
            return
        if not doc.deleted:
            assert response.status_code == 200, response.content  # unchanged: nothing to do
        else:
            assert response.status_code == 202, response.content
            assert response.json()["document"]["document_id"] == doc.doc_id
            self.jobs.append((response.json()["job"]["id"], doc))
            doc.deleted, doc.activated = False, True
            self.stats["op:reupload(deleted)"] += 1
        self.probe(doc)

    @precondition(lambda self: self.uploads < len(UPLOAD_MARKERS))
    @rule(key=CHANGERS, data=st.data())
    def upload_new(self, key: str, data: st.DataObject) -> None:
        self.stats["op:upload_new"] += 1
        who = self.keys[key]
        mine = sorted(self.writable(who))
        if bool(mine) and data.draw(st.booleans(), "one the key may write"):
            dataset = data.draw(st.sampled_from(mine), "dataset")
        else:
            dataset = data.draw(st.sampled_from(DATASET_LABELS), "dataset")
        marker = UPLOAD_MARKERS[self.uploads]
        response = self.upload(who, dataset, marker)
        if response is None:
            return
        assert response.status_code == 202, response.content
        self.uploads += 1
        doc = Doc(marker=marker, dataset=dataset, uploaded=True,
                  doc_id=response.json()["document"]["document_id"])
        self.docs[marker] = doc
        self.jobs.append((response.json()["job"]["id"], doc))
        self.stats["op:upload_new(applied)"] += 1
        self.probe(doc)

    def upload(self, who: Key, dataset: str, marker: str) -> Any:
        """The upload's answer when the key may upload there; else checks the refusal."""
        path = f"/api/datasets/{self.pk(dataset)}/documents"

        def send(to: str) -> Any:
            with self.world.applied():  # the indexing worker's part, in this process
                return self.send(who, "post", to, {"file": md_file(f"{marker}.md",
                                                                   runbook(marker))},
                                 format="multipart")

        response = send(path)
        if dataset not in self.visible(who):
            missing = send(path.replace(str(self.pk(dataset)), str(MISSING)))
            assert response.status_code == missing.status_code == 404, response.content
            assert (response.content.decode().replace(str(self.pk(dataset)), "ID")
                    == missing.content.decode().replace(str(MISSING), "ID"))
            return None
        if not who.admin:
            assert response.status_code == 403, response.content
            return None
        return response


# --- the test --------------------------------------------------------------------------------

@pytest.fixture
def world(db: None, store: Any, applied: Callable[[], Any]) -> World:
    from datasets.documents.services import document_store
    from datasets.tenancy.keys import api_key_create

    datasets: dict[str, Ds] = {}
    docs: dict[str, Doc] = {}
    for tenant, spec in WORLD.items():
        row = tenant_get_or_create(slug=f"prop-{tenant}")
        for name, markers in spec.items():
            dataset = dataset_create(tenant=row, name=name)
            label = f"{tenant}/{name}"
            for marker in markers:
                stored = document_store(dataset=dataset, file_name=f"{marker}.md",
                                        raw=runbook(marker), max_bytes=1 << 20, queue=False)
                document_sync(document_id=stored.document.pk)
                docs[marker] = Doc(marker=marker, dataset=label,
                                   doc_id=stored.document.doc_key)
            datasets[label] = Ds(label=label, tenant=tenant, pk=dataset.pk, activated=True)
    keys: dict[str, Key] = {}
    kinds = {f"{t}:{k}": v for t in WORLD for k, v in KEY_KINDS.items()} | EXTRA_KEYS
    for label, (role, scope) in kinds.items():
        tenant = tenant_of(label)
        rows = [Dataset.objects.get(pk=datasets[f"{tenant}/{d}"].pk) for d in scope or ()]
        _, secret = api_key_create(tenant=tenant_get_or_create(slug=f"prop-{tenant}"),
                                   role=role, datasets=rows)
        keys[label] = Key(label=label, tenant=tenant, role=role, client=api_client(secret),
                          scope=frozenset(f"{tenant}/{d}" for d in scope) if scope else None)
    for label in COLD:
        Dataset.objects.filter(pk=datasets[label].pk).update(activated=False)
        datasets[label].activated = False
    assert Document.objects.filter(status=Document.Status.READY).count() == len(MARKERS)
    tenants = {t: tenant_get_or_create(slug=f"prop-{t}").pk for t in WORLD}
    return World(keys=keys, datasets=datasets, docs=docs, tenants=tenants, applied=applied)


def test_no_answer_leaves_the_keys_tenant_scope_or_the_live_documents(world: World) -> None:
    ScopeMachine.world = world
    started = time.monotonic()
    # No example database (Hypothesis's other caches are in the run's folder: tests/var_dir.py).
    run_state_machine_as_test(ScopeMachine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
        derandomize=not RANDOM, print_blob=True, suppress_health_check=[HealthCheck.too_slow]))
    stats = world.stats
    print(f"\nproperties: {dict(sorted(stats.items()))} in {time.monotonic() - started:.1f}s")
    # The run exercised what it claims to (a machine that never reached a READY answer or a
    # confirmed id would check nothing).
    assert stats["examples"] >= min(EXAMPLES, 2) and stats["evidence"] > 0
