"""The L0 category filter, and the search without it whenever the filtered one is not PRECISE."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings

from datasets.documents.services import document_store
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    last_trace,
    lookup,
    ready,
)

# "zebra" and "stripes" are zoology terms (keywords of zebra.md) and no other domain's.
ZEBRA_QUESTION = "zebra stripes: why are they black and white"
# A 502 question that happens to name a zoology term: the hint points to the wrong category.
MISLEADING = "our proxy returns 502 bad gateway because the upstream refused connections " \
             "(service zebra)"

OKAPI = b"""---
title: Okapi census
domain: savanna
keywords: [okapi]
category: savanna
---
# Okapi census

## Counting okapis

Okapis are counted from camera traps in the rain forest.
"""


def session() -> str:
    return f"s-{uuid.uuid4().hex}"


@pytest.mark.django_db
def test_an_unambiguous_l0_hint_restricts_the_search_to_its_category(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, admin_secret = make_key("acme", role="admin")
    tool, admin = client_for(secret), client_for(admin_secret)

    sid = session()
    ids = evidence_ids(ready(lookup(tool, ZEBRA_QUESTION, session_id=sid)))
    assert {acme.stem_of(e) for e in ids} == {"zebra"}
    trace = last_trace(admin, sid)
    assert trace["hints"]["domains"] == ["zoology"]
    assert trace["hints"]["category_filter"] == "zoology"
    assert trace["filters"]["category"] == "zoology"
    assert trace["retry"]["ran"] is False

    # The photo runbook is relevant to the same question; only the filter kept it out. With
    # the zoology runbook switched off there is no hint, no filter, and it is found.
    zebra = acme.documents["zebra"]
    assert admin.patch(f"/api/documents/{zebra.doc_key}", {"activated": False},
                       format="json").status_code == 200
    sid = session()
    ids = evidence_ids(ready(lookup(tool, ZEBRA_QUESTION, session_id=sid)))
    assert "photo" in {acme.stem_of(e) for e in ids}
    trace = last_trace(admin, sid)
    assert trace["hints"]["category_filter"] is None and trace["filters"]["category"] is None


@pytest.mark.django_db
def test_a_filtered_search_with_nothing_relevant_is_retried_without_the_filter(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, admin_secret = make_key("acme", role="admin")
    sid = session()

    body = ready(lookup(client_for(secret), MISLEADING, session_id=sid))
    assert {acme.stem_of(e) for e in evidence_ids(body)} == {"nginx"}

    trace = last_trace(client_for(admin_secret), sid)
    assert trace["hints"]["category_filter"] == "zoology"
    assert trace["retry"]["ran"] is True, trace["retry"]
    assert trace["filters"]["category"] is None  # the answer came from the unfiltered search
    stages = [s["stage"] for s in trace["stages"]]
    assert stages.index("retrieve_filtered") < stages.index("retrieve_unfiltered")


@pytest.mark.django_db
def test_a_hint_from_a_document_not_indexed_yet_does_not_empty_the_answer(
        acme: Imported, make_key: MakeKey) -> None:
    # Stored but not indexed (its upload is still queued): L0 knows its category, the
    # vector store has no chunk of it, so the filtered search is empty.
    document_store(dataset=acme.dataset, file_name="okapi.md", raw=OKAPI,
                   max_bytes=settings.KB_MAX_UPLOAD_BYTES)
    _, secret = make_key("acme")
    _, admin_secret = make_key("acme", role="admin")
    sid = session()

    question = "okapi team: our proxy returns 502 bad gateway, the upstream refused connections"
    body = ready(lookup(client_for(secret), question, session_id=sid))
    assert {acme.stem_of(e) for e in evidence_ids(body)} == {"nginx"}
    trace = last_trace(client_for(admin_secret), sid)
    assert trace["hints"]["category_filter"] == "savanna"
    assert trace["retry"]["ran"] is True
    assert "filtered search was NONE" in trace["retry"]["reason"]


DATABASE_HOST = b"""---
title: MySQL host health
domain: database
keywords: [mysql, database]
category: database
---
# MySQL host health

## Checking the database host

When the database host is slow, check the connections, the buffer pool, the load and the disk
of the database host before restarting MySQL.
"""
# No frontmatter, as an uploaded PDF or Word runbook has none: no category at all.
DISK_FULL = b"""# Disk full

## ENOSPC: no space left on device

When a host's disk is full, every write fails with ENOSPC (no space left on device). Find what
grew with `du -xh / | sort -h | tail`, remove rotated logs and old core dumps, then restart the
service that failed to write.
"""


@pytest.mark.django_db
def test_a_category_does_not_hide_a_more_relevant_document_without_it(kb, ingest) -> None:
    """Issue 36: "disk is full on the database host" was searched in the database category
    alone, answered REFERENCE with a MySQL runbook, and never saw the disk runbook (of another
    category, or none: an uploaded PDF). Below PRECISE the whole scope is searched too."""
    ingest(kb.dataset, "mysql-host.md", DATABASE_HOST)
    disk = ingest(kb.dataset, "disk-full.md", DISK_FULL)
    sid = session()
    body = ready(lookup(kb.tool, "ENOSPC no space left on device on the database host",
                        session_id=sid))
    assert body["relevance_level"] == "PRECISE", body
    assert body["evidence"][0]["document_id"].startswith(f"{disk.doc_id}#"), body

    trace = last_trace(kb.admin, sid)
    assert trace["hints"]["category_filter"] == "database"
    assert trace["retry"]["ran"] is True, trace["retry"]
    assert trace["filters"]["category"] is None  # served from the whole scope
