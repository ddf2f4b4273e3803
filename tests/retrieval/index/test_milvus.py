"""The Milvus store on a real Milvus Lite: filter expressions, search arms, writes, the alias."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from rest_framework.test import APIClient

from datasets.tenancy.permissions import PLATFORM
from retrieval.index import milvus
from retrieval.index.milvus import VectorStoreUnavailable
from retrieval.index.milvus.arms import MilvusSearch
from retrieval.index.milvus.connection import MilvusConnection, reset_connection
from retrieval.index.milvus.expressions import filter_expression, quote
from retrieval.index.milvus.writer import ChunkRow
from retrieval.types import SearchFilters, SearchRequest, Withheld
from tests.conftest import ROOT
from tests.milvus import collection_before_filter_fields

DIM = 4
INJECTION = 'ops" or tenant_id == 2 or category == "'
# Every C0 control, quotes, backslashes, emoji and a Chinese category at the field's limit
# (100 bytes, as a Milvus server counts; ingestion holds categories to it): a category is
# whatever a document's frontmatter says.
CATEGORIES = [f"a{chr(c)}b" for c in range(1, 32)] + [
    "a \u0007 b", "a\x7fb", '"', "'", "\\", '\\"', "tail\\", "\\n", "🔥 fire", "👨‍👩‍👧",
    "缓存", "缓" * 33 + "a", "mixed '引号' \"and\" \\ 🔥\t", INJECTION, "x' or category != 'y"]


def _row(key: str, *, tenant: int = 1, dataset: int = 1, category: str = "ops",
         text: str = "redis eviction policy maxmemory",
         vector: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0)) -> ChunkRow:
    doc_id = int(key.split("#")[0])
    return ChunkRow(id=key, tenant_id=tenant, dataset_id=dataset, doc_id=doc_id,
                    activated=True, category=category, content=f"{key}: {text}",
                    search_text=text, vector=list(vector),
                    metadata={"docId": str(doc_id), "title": text})


def _search(collection: str, mode: str, *, tenant: int = 1, datasets=(1,),  # type: ignore[no-untyped-def]
            category: str | None = None, excluded=(),
            text: str = "redis eviction policy") -> list[str]:
    request = SearchRequest(query_text=text, query_vector=[1.0, 0.0, 0.0, 0.0],
                            mode=mode, limit=50,  # type: ignore[arg-type]
                            filters=SearchFilters(tenant_id=tenant, dataset_ids=tuple(datasets),
                                                  category=category,
                                                  excluded_doc_ids=tuple(excluded)))
    return sorted(hit.chunk_id for hit in milvus.searcher(collection).search(request))


@pytest.fixture
def serving(store, db):  # type: ignore[no-untyped-def]
    """A collection with chunks of two tenants and two datasets."""
    milvus.collections().create("biz_t1", DIM)
    milvus.writer().replace_documents([], [
        _row("10#chunk-0"), _row("10#chunk-1", category="db"),
        _row("11#chunk-0", dataset=2), _row("12#chunk-0"),
        _row("20#chunk-0", tenant=2, dataset=3),
    ], collection="biz_t1")
    return "biz_t1"


def test_filter_expression_quotes_user_values_and_needs_a_dataset() -> None:
    expr = filter_expression(SearchFilters(tenant_id=1, dataset_ids=(2, 3), category=INJECTION,
                                           excluded_doc_ids=(7, 8)))

    # Filters made without an access read as nobody: documents without readers only.
    assert expr == ('tenant_id == 1 and dataset_id in [2, 3] and doc_id not in [7, 8] and '
                    '(array_length(readers) == 0) and '
                    'category == "ops\\" or tenant_id == 2 or category == \\""')
    with pytest.raises(ValueError, match="at least one dataset"):
        filter_expression(SearchFilters(tenant_id=1, dataset_ids=()))
    with pytest.raises(TypeError):
        filter_expression(SearchFilters(tenant_id=1, dataset_ids=("1 or true",)))  # type: ignore[arg-type]


def test_quote_escapes_only_what_the_milvus_lexer_knows() -> None:
    # JSON's \u0007 is refused by the Milvus Lite lexer: that broke every lookup whose L0
    # hints picked a category with a control character.
    assert quote("a \u0007 b") == '"a \u0007 b"'
    assert quote('say "hi"\n\\') == '"say \\"hi\\"\\n\\\\"'
    # Milvus 2.5's engine knows no \t: a tab goes in raw, which every engine takes.
    assert quote("a\tb") == '"a\tb"'


@pytest.mark.parametrize("engine", ["default", pytest.param("lite3", marks=pytest.mark.lite3)])
@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_search_reads_the_rows_whose_readers_its_access_names(store, db, engine, mode) -> None:
    """Inside the query: the rows' readers against the access's principals, and the
    documents whose rows may not name their readers yet by id (datasets/tenancy/permissions.py)."""
    from datasets.tenancy.permissions import ANONYMOUS, Access

    milvus.collections().create("biz_readers", DIM)
    rows = [_row("30#chunk-0"), replace(_row("31#chunk-0"), readers=("group:sre",)),
            replace(_row("32#chunk-0"), readers=("user:alice", "group:dba")),
            replace(_row("33#chunk-0"), readers=('group:a" or 1 == 1',))]
    milvus.writer().replace_documents([], rows, collection="biz_readers")

    def found(access: Access, withheld: Withheld | None = None) -> list[str]:
        request = SearchRequest(query_text="redis eviction policy",
                                query_vector=[1.0, 0.0, 0.0, 0.0], mode=mode, limit=50,
                                filters=SearchFilters(tenant_id=1, dataset_ids=(1,),
                                                      access=access,
                                                      withheld=withheld or Withheld()))
        return sorted(h.chunk_id for h in milvus.searcher("biz_readers").search(request))

    assert found(ANONYMOUS) == ["30#chunk-0"]
    assert found(Access.person("bob", ["sre"])) == ["30#chunk-0", "31#chunk-0"]
    assert found(Access.person("alice")) == ["30#chunk-0", "32#chunk-0"]
    assert found(Access.person("eve", ['a" or 1 == 1'])) == ["30#chunk-0", "33#chunk-0"]
    assert len(found(PLATFORM)) == 4
    # 31 now readable by anyone, 30 by no one, neither written into the rows yet: by id.
    assert found(ANONYMOUS, Withheld(all=(30,), unsynced=(30,), unsynced_readable=(31,))) == [
        "31#chunk-0"]


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_search_sees_only_its_tenant_and_datasets_minus_the_excluded(serving, mode) -> None:
    assert _search(serving, mode) == ["10#chunk-0", "10#chunk-1", "12#chunk-0"]
    assert _search(serving, mode, excluded=(12,)) == ["10#chunk-0", "10#chunk-1"]
    assert _search(serving, mode, datasets=(1, 2)) == ["10#chunk-0", "10#chunk-1", "11#chunk-0",
                                                       "12#chunk-0"]
    assert _search(serving, mode, datasets=(3,)) == []  # tenant 2's dataset, asked by tenant 1
    assert _search(serving, mode, tenant=2, datasets=(3,)) == ["20#chunk-0"]
    assert _search(serving, mode, category="db") == ["10#chunk-1"]
    # A category that tries to close the string and add a clause is just an unknown category.
    assert _search(serving, mode, category=INJECTION) == []


def test_every_category_value_matches_exactly_its_own_rows(store, db) -> None:
    milvus.collections().create("biz_c", DIM)
    rows = [_row(f"{100 + n}#chunk-0", category=value) for n, value in enumerate(CATEGORIES)]
    milvus.writer().replace_documents([], rows, collection="biz_c")

    for n, value in enumerate(CATEGORIES):
        if "\n" in value or "\r" in value:
            continue  # no spelling of CR or LF in Milvus 2.5's literals (expressions.py)
        assert _search("biz_c", "dense", category=value) == [f"{100 + n}#chunk-0"], repr(value)


def test_replace_documents_leaves_exactly_the_new_chunks(serving, store) -> None:
    writer = milvus.writer()
    writer.replace_documents([10], [_row(f"10#chunk-{i}") for i in range(4)], collection=serving)
    assert store.chunk_ids(10, collection=serving) == [f"10#chunk-{i}" for i in range(4)]

    writer.replace_documents([10], [_row("10#chunk-0", text="rewritten")], collection=serving)

    assert store.chunk_ids(10, collection=serving) == ["10#chunk-0"]
    assert store.chunk_ids(11, collection=serving) == ["11#chunk-0"]  # others untouched
    assert _search(serving, "bm25", text="rewritten") == ["10#chunk-0"]


def test_delete_removes_one_document_only(serving, store) -> None:
    milvus.writer().delete_document(12, collection=serving)

    assert store.chunk_ids(12, collection=serving) == []
    assert store.count(serving) == 4
    assert _search(serving, "dense") == ["10#chunk-0", "10#chunk-1"]


@pytest.mark.lite3
def test_the_alias_switches_between_collections_and_is_never_dropped(serving, store) -> None:
    collections = milvus.collections()
    collections.point_alias(serving)
    collections.create("biz_t2", DIM)
    milvus.writer().replace_documents([], [_row("30#chunk-0")], collection="biz_t2")

    collections.point_alias("biz_t2")

    assert collections.alias_target() == "biz_t2"
    for name in (collections.alias, "biz_t2"):  # Milvus Lite would drop the target (B4)
        with pytest.raises(ValueError, match="refusing to drop"):
            collections.drop(name)
    collections.drop(serving)
    assert collections.names() == ["biz_t2"]
    assert _search("biz_t2", "dense") == ["30#chunk-0"]


def test_an_unreachable_milvus_is_an_error_never_an_empty_result() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = MilvusConnection(uri=f"http://127.0.0.1:{port}", timeout=1)

    with pytest.raises(VectorStoreUnavailable):
        down.call("list_collections", lambda c: c.list_collections())
    request = SearchRequest(query_text="x", query_vector=[1.0] * DIM, mode="hybrid", limit=5,
                            filters=SearchFilters(tenant_id=1, dataset_ids=(1,)))
    with pytest.raises(VectorStoreUnavailable):
        MilvusSearch(down, "biz").search(request)


@pytest.mark.django_db
def test_a_lookup_while_milvus_is_down_answers_503_unavailable(settings, make_key) -> None:
    from datasets.documents.services import dataset_create
    from retrieval.index.embedders import get_embedder
    from retrieval.index.versions import wanted_spec
    from retrieval.models import IndexVersion

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        settings.MILVUS_URI = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings.MILVUS_TIMEOUT_SECONDS = 1
    reset_connection()
    IndexVersion.objects.create(collection_name="biz_v1", status=IndexVersion.Status.ACTIVE,
                                **wanted_spec(get_embedder()))
    key, secret = make_key()
    dataset_create(tenant=key.tenant, name="ops")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    try:
        response = client.post("/api/tools/lookup_knowledge", {"query": "redis eviction"},
                               format="json")
    finally:
        reset_connection()

    assert response.status_code == 503
    assert response.json()["evidence_status"] == "UNAVAILABLE"
    assert response.json()["evidence"] == []
    assert "127.0.0.1" not in response.content.decode()  # no backend detail leaks


@pytest.mark.embedded
def test_the_embedded_milvus_lite_file_filters_and_replaces_like_the_server(store, db) -> None:
    assert milvus.collections().connection.is_local
    milvus.collections().create("biz_e1", DIM)
    milvus.writer().replace_documents([], [_row("10#chunk-0"),
                                           _row("20#chunk-0", tenant=2, dataset=3),
                                           _row("12#chunk-0")], collection="biz_e1")

    for mode in ("dense", "bm25", "hybrid"):
        assert _search("biz_e1", mode, excluded=(12,)) == ["10#chunk-0"]
    milvus.writer().replace_documents([10], [], collection="biz_e1")
    assert store.chunk_ids(10, collection="biz_e1") == []
    assert store.count("biz_e1") == 2


@pytest.mark.embedded
def test_a_closed_connection_leaves_the_milvus_lite_file_to_another_process(store, db) -> None:
    """Closing the client kept Milvus Lite's in-process server, and the lock on its file, until
    the process exited: no command could open the file after it."""
    milvus.collections().create("biz_e2", DIM)
    path = milvus.collections().connection.uri
    probe = ("import sys\nfrom retrieval.index.milvus.connection import MilvusConnection\n"
             "print(MilvusConnection(uri=sys.argv[1]).client().list_collections())")

    def other_process() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", probe, path], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    assert other_process().returncode != 0  # held by this process
    reset_connection()
    freed = other_process()
    assert freed.returncode == 0 and "biz_e2" in freed.stdout, freed.stderr
    assert store.count("biz_e2") == 0  # and this process opens it again


def test_upserts_are_calls_of_bounded_bytes_in_order(monkeypatch) -> None:
    """One call per 100 rows made a 2,000-row batch cost three times as much at 100,000 rows as
    at 20,000 (each call's cost grows with the collection): calls are bounded by bytes."""
    writing = sys.modules["retrieval.index.milvus.writer"]  # the package's `writer` is a function
    monkeypatch.setattr(writing, "UPSERT_BYTES", 1000)

    def entity(n: int, text: int) -> dict[str, object]:
        return {"id": str(n), "content": "x" * text, "search_text": "", "vector": [0.0] * 4}

    entities = [entity(0, 400), entity(1, 400), entity(2, 400), entity(3, 3000), entity(4, 10)]
    batches = list(writing._bounded(entities))
    # 416 bytes each (text and 4 floats), then one of 3,016 alone, however large.
    assert [[e["id"] for e in batch] for batch in batches] == [["0", "1"], ["2"], ["3"], ["4"]]


def test_searches_while_a_document_is_rewritten_all_succeed(store, db) -> None:
    """Milvus 2.5's engine failed a BM25 search that met a write (0.3 % of them)."""
    milvus.collections().create("biz_w", DIM)
    milvus.writer().replace_documents([], [_row(f"{n}#chunk-0") for n in range(10, 20)],
                                      collection="biz_w")
    deadline = time.monotonic() + 5
    searched: list[int] = []
    failures: list[BaseException] = []

    def rewrite() -> None:
        while time.monotonic() < deadline:
            row = _row("11#chunk-0", text=f"redis {len(searched)}")
            milvus.writer().replace_documents([11], [row], collection="biz_w")

    def search() -> None:
        while time.monotonic() < deadline:
            try:
                searched.append(len(_search("biz_w", "bm25", text="redis")))
            except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
                failures.append(exc)

    threads = [threading.Thread(target=rewrite), threading.Thread(target=search),
               threading.Thread(target=search)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == [] and len(searched) > 100


def test_a_row_milvus_refuses_is_a_permanent_error_not_a_transient_one(store, db) -> None:
    """A category over the field's 100 characters was retried as if Milvus were down."""
    from retrieval.index.milvus import VectorStoreRejected

    milvus.collections().create("biz_r", DIM)
    with pytest.raises(VectorStoreRejected, match="refused"):
        milvus.writer().replace_documents([], [_row("10#chunk-0", category="x" * 101)],
                                          collection="biz_r")


def test_metadata_filters_are_quoted_clauses_on_the_entitys_fields() -> None:
    from retrieval.types import MetadataFilter

    metadata = MetadataFilter(category=(INJECTION,), file_name=("a.md", "b.md"),
                              updated_after=10, updated_before=20)
    expr = filter_expression(SearchFilters(tenant_id=1, dataset_ids=(2,), metadata=metadata,
                                           access=PLATFORM))
    assert expr == ('tenant_id == 1 and dataset_id in [2] and '
                    'category in ["ops\\" or tenant_id == 2 or category == \\""] and '
                    'file_name in ["a.md", "b.md"] and updated_at >= 10 and updated_at < 20')


def test_a_calls_filters_are_clauses_anded_after_the_keys_scope_and_the_configs() -> None:
    from retrieval.types import CallFilters, MetadataFilter

    call = CallFilters(MetadataFilter(domain=(INJECTION,), updated_before=20), documents=(7, 9))
    expr = filter_expression(SearchFilters(tenant_id=1, dataset_ids=(2,), call=call,
                                           metadata=MetadataFilter(domain=("cache",)),
                                           withheld=Withheld(restricted=False)))
    assert expr == ('tenant_id == 1 and dataset_id in [2] and doc_id in [7, 9] and '
                    'domain in ["cache"] and '
                    'domain in ["ops\\" or tenant_id == 2 or category == \\""] and '
                    'updated_at < 20')


def test_a_collection_built_before_the_filter_fields_takes_writes_and_asks_for_a_rebuild(
        store, db) -> None:  # type: ignore[no-untyped-def]
    from retrieval.index.milvus.arms import IndexOutdated
    from retrieval.types import MetadataFilter

    collection_before_filter_fields("biz_old", DIM)

    milvus.writer().replace_documents([], [_row("10#chunk-0")], collection="biz_old")
    assert _search("biz_old", "dense") == ["10#chunk-0"]
    request = SearchRequest(query_text="redis", query_vector=[1.0, 0.0, 0.0, 0.0], mode="dense",
                            limit=5, filters=SearchFilters(
                                tenant_id=1, dataset_ids=(1,),
                                metadata=MetadataFilter(domain=("cache",))))
    with pytest.raises(IndexOutdated, match="built before chunks carried domain: rebuild it"):
        milvus.searcher("biz_old").search(request)


def _partitions(collection: str) -> list[str]:
    return sorted(milvus.collections().connection.client().list_partitions(collection))


def _in_partition(collection: str, partition: str) -> list[str]:
    rows = milvus.collections().connection.client().query(
        collection, filter="", partition_names=[partition], output_fields=["id"], limit=100)
    return sorted(str(row["id"]) for row in rows)


@pytest.mark.lite3
@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid", "milvus_hybrid"])
def test_a_tenants_rows_live_in_its_partition_and_its_searches_read_only_that(
        serving, mode) -> None:
    """Milvus Lite filters every row of the partitions it searches: naming the tenant's makes
    a lookup's cost follow its rows (docs/benchmarks.md). The filter stays, for tenants that
    share a partition past TENANT_PARTITIONS."""
    from retrieval.index.milvus.collections import TENANT_PARTITIONS

    assert _partitions(serving) == ["_default", "tenants_1", "tenants_2"]
    assert _in_partition(serving, "tenants_1") == ["10#chunk-0", "10#chunk-1", "11#chunk-0",
                                                   "12#chunk-0"]
    assert _in_partition(serving, "_default") == []
    # A tenant sharing tenant 1's partition is still another tenant.
    milvus.writer().replace_documents([30], [_row("30#chunk-0", tenant=1 + TENANT_PARTITIONS)],
                                      collection=serving)
    assert "30#chunk-0" in _in_partition(serving, "tenants_1")
    assert _search(serving, mode) == ["10#chunk-0", "10#chunk-1", "12#chunk-0"]
    assert _search(serving, mode, tenant=1 + TENANT_PARTITIONS, datasets=(1,)) == ["30#chunk-0"]
    # A tenant with no row yet: nothing found, no partition made by a search.
    assert _search(serving, mode, tenant=7, datasets=(9,)) == []
    assert "tenants_7" not in _partitions(serving)
    assert milvus.searcher(serving).fetch(SearchFilters(tenant_id=7, dataset_ids=(9,)),
                                          limit=5) == []


@pytest.mark.lite3
def test_a_rewritten_document_stays_in_its_tenants_partition(serving) -> None:
    milvus.writer().replace_documents([10], [_row("10#chunk-0", text="redis rewritten")],
                                      collection=serving)
    assert _in_partition(serving, "tenants_1") == ["10#chunk-0", "11#chunk-0", "12#chunk-0"]
    assert _in_partition(serving, "_default") == []
    hits = milvus.searcher(serving).fetch(SearchFilters(tenant_id=1, dataset_ids=(1,)),
                                          limit=5, ids=["10#chunk-0"])
    assert [hit.content for hit in hits] == ["10#chunk-0: redis rewritten"]


@pytest.mark.lite3
def test_a_partition_another_process_made_is_searched(serving) -> None:
    """This process knows tenant 5 had no partition; the worker then wrote its first rows."""
    from dataclasses import asdict

    from retrieval.index.milvus.writer import _entities

    assert _search(serving, "dense", tenant=5, datasets=(5,)) == []
    client = milvus.collections().connection.client()
    client.create_partition(serving, "tenants_5")
    row = _row("50#chunk-0", tenant=5, dataset=5)
    client.upsert(serving, _entities([row], frozenset(asdict(row))), partition_name="tenants_5")
    client.flush(serving)
    assert _search(serving, "dense", tenant=5, datasets=(5,)) == ["50#chunk-0"]


def test_a_dense_search_finds_the_exact_nearest_chunks(store, db) -> None:
    """The dense index's lists are all probed: with 16 of 128 probed, a search over a thousand
    chunks missed true neighbours (docs/benchmarks.md, the dense arm's recall)."""
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(1_500, 16)).astype(np.float32)
    milvus.collections().create("biz_exact", 16)
    milvus.writer().replace_documents([], [
        _row(f"{n}#chunk-0", vector=tuple(float(x) for x in vector))
        for n, vector in enumerate(vectors, 1)], collection="biz_exact")
    for query in rng.normal(size=(30, 16)).astype(np.float32):
        request = SearchRequest(query_text="", query_vector=[float(x) for x in query],
                                mode="dense", limit=10,
                                filters=SearchFilters(tenant_id=1, dataset_ids=(1,)))
        found = [hit.chunk_id for hit in milvus.searcher("biz_exact").search(request)]
        nearest = np.argsort(((vectors - query) ** 2).sum(axis=1))[:10]
        assert found == [f"{n + 1}#chunk-0" for n in nearest]


def test_a_filter_that_keeps_few_rows_still_returns_k_of_k(store, db) -> None:
    """A filter that keeps under 1 % of the rows (one small dataset among many rows) returns
    the k nearest of the rows it keeps, as numpy finds them, and BM25 every matching row up to
    k: an IVF search probing a few lists over such a filter returned 7 of 10 (issue 38)."""
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(3_000, 16)).astype(np.float32)
    small = set(range(0, 3_000, 120))  # 25 rows of dataset 2: 0.8 %
    milvus.collections().create("biz_few", 16)
    milvus.writer().replace_documents([], [
        _row(f"{n}#chunk-0", dataset=2 if n in small else 1,
             text="kafka consumer lag" if n % 60 == 0 else "redis eviction policy",
             vector=tuple(float(x) for x in vector))
        for n, vector in enumerate(vectors)], collection="biz_few")
    kept = np.array(sorted(small))
    filters = SearchFilters(tenant_id=1, dataset_ids=(2,))
    for query in rng.normal(size=(10, 16)).astype(np.float32):
        request = SearchRequest(query_text="", query_vector=[float(x) for x in query],
                                mode="dense", limit=10, filters=filters)
        found = [hit.chunk_id for hit in milvus.searcher("biz_few").search(request)]
        nearest = kept[np.argsort(((vectors[kept] - query) ** 2).sum(axis=1))[:10]]
        assert found == [f"{n}#chunk-0" for n in nearest]
    # BM25: of the kept rows, those that hold the query's terms (every other one here).
    request = SearchRequest(query_text="kafka consumer lag", query_vector=None, mode="bm25",
                            limit=10, filters=filters)
    found = {hit.chunk_id for hit in milvus.searcher("biz_few").search(request)}
    matching = {f"{n}#chunk-0" for n in small if n % 60 == 0}
    assert len(matching) > 10 and len(found) == 10 and found <= matching
    request = SearchRequest(query_text="kafka consumer lag", query_vector=[1.0] * 16,
                            mode="hybrid", limit=10, filters=filters)
    hybrid = milvus.searcher("biz_few").search(request)
    assert len(hybrid) == 10 and {h.chunk_id for h in hybrid} <= {f"{n}#chunk-0" for n in small}


def test_bm25_ranks_the_same_text_alike_whichever_embedder_built_the_index(store, db) -> None:
    """BM25 reads the analysed text alone: two indexes of the same chunks, built with vectors
    of another size and written in another order and other batches, rank every query alike
    with the same scores. Milvus Lite 3.x kept BM25's statistics per segment, and the same
    suite's BM25 arm scored 0.675 in one embedder's index and 0.630 in another's (issue 39)."""
    rng = np.random.default_rng(5)
    words = ("redis kafka 消费者 延迟 磁盘 证书 过期 replica lag timeout 内存 eviction 索引 "
             "deadlock 死锁 连接池 pool nginx 502 gateway 主从 同步").split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 30)))) for _ in range(400)]
    for name, dimension, order, batch in (("biz_bm25_small", 4, 1, 400),
                                          ("biz_bm25_large", 16, -1, 37)):
        milvus.collections().create(name, dimension)
        rows = [_row(f"{n}#chunk-0", text=text, vector=tuple(1.0 for _ in range(dimension)))
                for n, text in enumerate(texts, 1)][::order]
        for start in range(0, len(rows), batch):
            milvus.writer().replace_documents([], rows[start:start + batch], collection=name)

    def ranked(name: str, query: str) -> list[tuple[str, float]]:
        request = SearchRequest(query_text=query, query_vector=None, mode="bm25", limit=20,
                                filters=SearchFilters(tenant_id=1, dataset_ids=(1,)))
        return [(hit.chunk_id, round(hit.score, 4))
                for hit in milvus.searcher(name).search(request)]

    for query in ("kafka 消费者 延迟", "redis eviction", "证书过期 502", "死锁 deadlock 主从"):
        small, large = ranked("biz_bm25_small", query), ranked("biz_bm25_large", query)
        # Chunks of equal scores come in the order they were written: compare by score.
        assert len(small) == 20 and [s for _, s in small] == [s for _, s in large]
        assert {c: s for c, s in small if s > small[-1][1]} == {
            c: s for c, s in large if s > large[-1][1]}


@pytest.mark.embedded
def test_calls_at_once_on_a_milvus_lite_file_all_succeed(store, db) -> None:
    """Milvus Lite 3.x opened a collection on its first call, without a lock: calls at once
    opened one each, and all but one were forgotten with what was loaded or written into them
    (a lookup answered UNAVAILABLE as the web process's recovery wrote beside it)."""
    milvus.collections().create("biz_e3", DIM)
    milvus.writer().replace_documents([], [_row("10#chunk-0"), _row("11#chunk-0")],
                                      collection="biz_e3")
    failures: list[BaseException] = []
    calls = [lambda: _search("biz_e3", "hybrid")] * 4 + [
        lambda: milvus.writer().replace_documents([11], [_row("11#chunk-0")],
                                                  collection="biz_e3"),
        lambda: store.chunk_ids(10, collection="biz_e3")]
    start = threading.Barrier(len(calls))

    def at_once(call: Callable[[], object]) -> None:
        start.wait()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
            failures.append(exc)

    for _ in range(3):
        reset_connection()  # the file opens again, with none of its collections loaded
        threads = [threading.Thread(target=at_once, args=(call,)) for call in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == []
    assert store.chunk_ids(11, collection="biz_e3") == ["11#chunk-0"]
    reset_connection()
    assert _search("biz_e3", "dense") == ["10#chunk-0", "11#chunk-0"]


@pytest.mark.embedded
def test_a_process_loads_a_collection_before_its_first_search_without_an_error_logged(
        store, db, caplog) -> None:  # type: ignore[no-untyped-def]
    """Milvus Lite opens every collection released: a process's first search failed, and
    pymilvus logged an ERROR with its traceback on every start, before the retry loaded it."""
    milvus.collections().create("biz_l1", DIM)
    milvus.writer().replace_documents([], [_row("10#chunk-0")], collection="biz_l1")
    reset_connection()  # the file opens again: its collections released
    caplog.set_level("WARNING")

    assert _search("biz_l1", "hybrid") == ["10#chunk-0"]
    assert store.chunk_ids(10, collection="biz_l1") == ["10#chunk-0"]
    assert [r.getMessage()[:80] for r in caplog.records if r.levelname != "INFO"] == []

    # Released behind the connection's back (as a restarted server forgets): loaded again.
    milvus.collections().connection.client().release_collection("biz_l1")
    assert _search("biz_l1", "dense") == ["10#chunk-0"]
