"""MilvusHybridKnowledgeStore on a real Milvus Lite: filters, writes, the alias, failures."""

from __future__ import annotations

import socket

import pytest
from rest_framework.test import APIClient

from retrieval.store import (
    ChunkRow,
    MilvusHybridKnowledgeStore,
    VectorStoreUnavailable,
    filter_expression,
    reset_store,
)
from retrieval.types import SearchFilters, SearchRequest

DIM = 4
INJECTION = 'ops" or tenant_id == 2 or category == "'


def _row(key: str, *, tenant: int = 1, dataset: int = 1, activated: bool = True,
         category: str = "ops", text: str = "redis eviction policy maxmemory",
         vector: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0)) -> ChunkRow:
    doc_id = int(key.split("#")[0])
    return ChunkRow(id=key, tenant_id=tenant, dataset_id=dataset, doc_id=doc_id,
                    activated=activated, category=category, content=f"{key}: {text}",
                    search_text=text, vector=list(vector),
                    metadata={"docId": str(doc_id), "title": text})


def _search(store, mode: str, *, tenant: int = 1, datasets=(1,),  # type: ignore[no-untyped-def]
            category: str | None = None, text: str = "redis eviction policy") -> list[str]:
    request = SearchRequest(query_text=text, query_vector=[1.0, 0.0, 0.0, 0.0],
                            mode=mode, limit=10,  # type: ignore[arg-type]
                            filters=SearchFilters(tenant_id=tenant, dataset_ids=tuple(datasets),
                                                  category=category))
    return sorted(hit.chunk_id for hit in store.search(request))


@pytest.fixture
def serving(store):  # type: ignore[no-untyped-def]
    """A serving collection with chunks of two tenants, two datasets, one switched off."""
    store.create_collection("biz_t1", DIM)
    store.point_alias("biz_t1")
    store.upsert([
        _row("10#chunk-0"), _row("10#chunk-1", category="db"),
        _row("11#chunk-0", dataset=2),
        _row("12#chunk-0", activated=False),
        _row("20#chunk-0", tenant=2, dataset=3),
    ])
    return store


def test_filter_expression_quotes_user_values_and_needs_a_dataset() -> None:
    expr = filter_expression(SearchFilters(tenant_id=1, dataset_ids=(2, 3), category=INJECTION))

    assert expr == ('tenant_id == 1 and dataset_id in [2, 3] and activated == true and '
                    'category == "ops\\" or tenant_id == 2 or category == \\""')
    with pytest.raises(ValueError, match="at least one dataset"):
        filter_expression(SearchFilters(tenant_id=1, dataset_ids=()))


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_search_sees_only_its_tenant_datasets_and_activated_chunks(serving, mode) -> None:
    assert _search(serving, mode) == ["10#chunk-0", "10#chunk-1"]
    assert _search(serving, mode, datasets=(1, 2)) == ["10#chunk-0", "10#chunk-1", "11#chunk-0"]
    assert _search(serving, mode, datasets=(3,)) == []  # tenant 2's dataset, asked by tenant 1
    assert _search(serving, mode, tenant=2, datasets=(3,)) == ["20#chunk-0"]
    assert _search(serving, mode, category="db") == ["10#chunk-1"]
    # A category that tries to close the string and add a clause is just an unknown category.
    assert _search(serving, mode, category=INJECTION) == []


def test_replace_documents_leaves_exactly_the_new_chunks(serving) -> None:
    serving.upsert([_row("10#chunk-2"), _row("10#chunk-3")])
    assert serving.chunk_ids(10) == [f"10#chunk-{i}" for i in range(4)]

    serving.replace_documents([10], [_row("10#chunk-0", text="rewritten")])

    assert serving.chunk_ids(10) == ["10#chunk-0"]
    assert serving.chunk_ids(11) == ["11#chunk-0"]  # other documents are untouched
    assert _search(serving, "bm25", text="rewritten") == ["10#chunk-0"]


def test_delete_and_activation_change_one_document_only(serving) -> None:
    assert serving.set_document_activation(10, False) == 2
    assert _search(serving, "dense", datasets=(1, 2)) == ["11#chunk-0"]
    serving.set_document_activation(12, True)
    assert _search(serving, "dense") == ["12#chunk-0"]

    serving.delete_document(12)

    assert serving.chunk_ids(12) == []
    assert serving.count() == 4
    assert _search(serving, "dense", datasets=(1, 2)) == ["11#chunk-0"]


def test_the_alias_switches_between_collections_and_is_never_dropped(serving) -> None:
    serving.create_collection("biz_t2", DIM)
    serving.upsert([_row("30#chunk-0")], collection="biz_t2")
    serving.load("biz_t2")
    assert _search(serving, "dense") == ["10#chunk-0", "10#chunk-1"]

    serving.point_alias("biz_t2")

    assert serving.alias_target() == "biz_t2"
    assert _search(serving, "dense") == ["30#chunk-0"]
    for name in ("biz", "biz_t2"):  # Milvus Lite would drop the alias's target (B4)
        with pytest.raises(ValueError, match="refusing to drop"):
            serving.drop_collection(name)
    serving.drop_collection("biz_t1")
    assert serving.collections() == ["biz_t2"]
    assert _search(serving, "dense") == ["30#chunk-0"]


def test_an_unreachable_milvus_is_an_error_never_an_empty_result() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = MilvusHybridKnowledgeStore(uri=f"http://127.0.0.1:{port}", timeout=1)

    with pytest.raises(VectorStoreUnavailable):
        down.collections()
    with pytest.raises(VectorStoreUnavailable):
        _search(down, "hybrid")


@pytest.mark.django_db
def test_a_lookup_while_milvus_is_down_answers_503_unavailable(settings, make_key) -> None:
    from datasets.services import dataset_create

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        settings.MILVUS_URI = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings.MILVUS_TIMEOUT_SECONDS = 1
    reset_store()
    key, secret = make_key()
    dataset_create(tenant=key.tenant, name="ops")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    try:
        response = client.post("/api/tools/lookup_knowledge", {"query": "redis eviction"},
                                format="json")
    finally:
        reset_store()

    assert response.status_code == 503
    assert response.json()["evidence_status"] == "UNAVAILABLE"
    assert response.json()["evidence"] == []
    assert "127.0.0.1" not in response.content.decode()  # no backend detail leaks


@pytest.mark.embedded
def test_the_embedded_milvus_lite_file_filters_and_switches_like_the_server(store) -> None:
    assert store.is_local
    store.create_collection("biz_e1", DIM)
    store.point_alias("biz_e1")
    store.upsert([_row("10#chunk-0"), _row("20#chunk-0", tenant=2, dataset=3),
                  _row("12#chunk-0", activated=False)])

    for mode in ("dense", "bm25", "hybrid"):
        assert _search(store, mode) == ["10#chunk-0"]
    store.replace_documents([10], [])
    assert store.chunk_ids(10) == []
    assert store.count() == 2
