import json
import random
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import Client
from django.test.utils import override_settings
from pymilvus import AnnSearchRequest, RRFRanker

from datasets.auth import api_key_create
from datasets.models import Dataset
from datasets.services import tenant_get_or_create
from retrieval.analysis import bm25_text
from retrieval.benchmarks import Timing, synthetic_text, timed_ms, unit_vectors
from retrieval.config import RagSettings
from retrieval.embedders import CachedEmbedder, get_embedder
from retrieval.store import (
    ChunkRow,
    MilvusHybridKnowledgeStore,
    filter_expression,
    get_store,
    reset_store,
)
from retrieval.types import SearchFilters

OTHER_TENANT = 10**12  # rows of "other tenants" that every filter must skip


class Command(BaseCommand):
    help = ("Lookup latency of the full REST call against the floor measured in the same run: "
            "query embedding + one raw pymilvus hybrid_search with the same filters.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="10000,100000",
                            help="comma-separated chunk counts (default 10000,100000)")
        parser.add_argument("--queries", type=int, default=100)
        parser.add_argument("--share", type=float, default=0.2,
                            help="share of the rows that the caller's filter matches")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            sizes = [int(s) for s in options["sizes"].split(",") if s.strip()]
        except ValueError as exc:
            raise CommandError("--sizes takes integers, e.g. 10000,100000") from exc
        if not sizes or min(sizes) < 100 or options["queries"] < 5:
            raise CommandError("sizes must be at least 100 and --queries at least 5")
        rows = [self.bench(size, options["queries"], options["share"]) for size in sizes]
        if len(rows) > 1:
            rows[-1]["p50_growth_vs_first"] = round(rows[-1]["rest_p50_ms"] /
                                                    rows[0]["rest_p50_ms"], 2)
        if options["json"]:
            self.stdout.write(json.dumps({"lookup": rows}))
            return
        self.stdout.write(f"{'chunks':>8} {'REST p50':>9} {'p95':>8} {'floor p50':>10} "
                          f"{'p95':>8} {'ratio p50':>10}")
        for row in rows:
            self.stdout.write(
                f"{row['chunks']:>8} {row['rest_p50_ms']:>9} {row['rest_p95_ms']:>8} "
                f"{row['floor_p50_ms']:>10} {row['floor_p95_ms']:>8} {row['ratio_p50']:>10}")
        if len(rows) > 1:
            self.stdout.write(f"REST p50 growth {sizes[0]} → {sizes[-1]}: "
                              f"{rows[-1]['p50_growth_vs_first']}x")

    def bench(self, size: int, queries: int, share: float) -> dict[str, Any]:
        alias = f"bench_{size}"
        tenant = tenant_get_or_create(slug="bench")
        dataset, _ = Dataset.objects.get_or_create(tenant=tenant, name=alias,
                                                   defaults={"evaluation": True})
        embedder = get_embedder()
        raw_embedder = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
        with override_settings(MILVUS_COLLECTION=alias):
            reset_store()
            try:
                store = get_store()
                # One data collection per size and dimension: reused by the next run.
                self.fill(store, f"{alias}_data_{embedder.dimension}d", size, share, tenant.pk,
                          dataset.pk, embedder.dimension)
                _, secret = api_key_create(tenant=tenant, name="bench", datasets=[dataset])
                rng = random.Random(size)
                texts = [synthetic_text(rng, 6) + f" q{rng.random()}" for _ in range(queries)]
                filters = SearchFilters(tenant_id=tenant.pk, dataset_ids=(dataset.pk,))
                k = RagSettings().retrieve_k
                client = Client()

                def rest(i: int) -> None:
                    answer = client.post("/api/tools/lookup_knowledge", {"query": texts[i]},
                                         content_type="application/json",
                                         HTTP_AUTHORIZATION=f"Bearer {secret}")
                    if answer.status_code != 200:
                        raise CommandError(f"lookup failed: {answer.status_code} "
                                           f"{answer.content[:300]!r}")

                def floor(i: int) -> None:
                    vector = raw_embedder.embed_query(texts[i])
                    expr = filter_expression(filters)
                    store.client().hybrid_search(
                        alias, [AnnSearchRequest([vector], "vector", {"metric_type": "L2",
                                                 "params": {"nprobe": 16}}, k, expr=expr),
                                AnnSearchRequest([bm25_text(texts[i])], "sparse_vector",
                                                 {"metric_type": "BM25"}, k, expr=expr)],
                        RRFRanker(60), limit=k, output_fields=["id", "content", "metadata"])

                for i in range(3):  # warm-up: models, connections, the store's caches
                    rest(i)
                    floor(i)
                rest_ms, floor_ms = [], []
                for i in range(queries):  # interleaved, so both see the same machine state
                    floor_ms.append(timed_ms(floor, i))
                    rest_ms.append(timed_ms(rest, i))
            finally:
                reset_store()
        r, f = Timing.of(rest_ms), Timing.of(floor_ms)
        return {"chunks": size, "rest_p50_ms": r.p50, "rest_p95_ms": r.p95,
                "floor_p50_ms": f.p50, "floor_p95_ms": f.p95,
                "ratio_p50": round(r.p50 / f.p50, 2), "queries": queries,
                "embedder": embedder.name}

    def fill(self, store: MilvusHybridKnowledgeStore, collection: str, size: int, share: float,
             tenant_id: int, dataset_id: int, dimension: int) -> None:
        if collection in store.collections() and store.count(collection) == size:
            store.point_alias(collection)
            store.load(collection)
            return
        if collection in store.collections():
            store.drop_collection(collection)
        store.create_collection(collection, dimension)
        rng, vectors_rng = random.Random(7), np.random.default_rng(7)
        batch = 2000
        for start in range(0, size, batch):
            count = min(batch, size - start)
            vectors = unit_vectors(vectors_rng, count, dimension)
            rows = []
            for offset in range(count):
                n = start + offset
                mine = rng.random() < share
                rows.append(ChunkRow(
                    id=f"{n}#chunk-0", tenant_id=tenant_id if mine else OTHER_TENANT,
                    dataset_id=dataset_id if mine else OTHER_TENANT, doc_id=n, activated=True,
                    category="", content=synthetic_text(rng), search_text=synthetic_text(rng),
                    vector=vectors[offset].tolist(), metadata={"docId": str(n), "chunkIndex": 0}))
            store.upsert(rows, collection=collection)
            self.stderr.write(f"[bench {size}] inserted {start + count}/{size}")
        store.point_alias(collection)
        store.load(collection)
        if settings.DEBUG:
            self.stderr.write("DEBUG is on: timings include query logging")
