import json
import random
from collections.abc import Callable
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from datasets.documents.evidence import EvidenceKey
from datasets.documents.services import dataset_documents_changed, tenant_get_or_create
from datasets.models import Dataset, Document
from datasets.tenancy.keys import api_key_create
from evaluation.benchmarks import (
    Timing,
    in_process_client,
    raw_hybrid_search,
    sigterm_as_interrupt,
    synthetic_text,
    timed_ms,
    unit_vectors,
)
from retrieval.index import milvus
from retrieval.index.embedders import CachedEmbedder, get_embedder
from retrieval.index.milvus.collections import TENANT_PARTITIONS
from retrieval.index.milvus.expressions import READERS_FIELD
from retrieval.index.milvus.writer import ChunkRow
from retrieval.index.models import IndexVersion
from retrieval.index.versions import wanted_spec
from retrieval.index.writer_lock import milvus_writer
from retrieval.ragconfig.settings import RagSettings
from retrieval.types import SearchFilters, Withheld

OTHER_TENANT = 10**12  # rows of "other tenants" that every filter must skip
BENCH_DOC_BASE = 2**60  # doc ids of the bench rows, far from the random ones of uploads
SERVED_BEFORE = "served_before"  # on the bench's version row: the versions to serve again
# Each row's domain is one of these: a call's `filters` naming one keeps a tenth of the rows.
DOMAINS = 10


def doc_base(size: int) -> int:
    """The doc id of the bench's row 0 at `size` (doc ids are unique across sizes)."""
    return BENCH_DOC_BASE + size * 2**24


def bench_readers(n: int) -> tuple[str, ...]:
    """Who may read row `n`'s document in the permission-filtered calls: every other one is
    restricted to a group of DOMAINS."""
    return (f"group:d{n // 2 % DOMAINS}",) if n % 2 == 0 else ()


class Command(BaseCommand):
    help = ("Lookup latency of the full REST call (its audit committed) against the floor "
            "measured in the same run: query embedding + one raw pymilvus hybrid_search with "
            "the same filters; and of the same call narrowed by its `filters` to one domain "
            f"of {DOMAINS}; and of calls made for a person while a share of the documents is "
            "restricted to readers against unfiltered ones. Its collection serves while it "
            "runs: run it where no one else looks up.")

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
        with sigterm_as_interrupt():  # a SIGTERM ends the run as Ctrl-C does: restored
            rows = [self.bench(size, options["queries"], options["share"]) for size in sizes]
        if len(rows) > 1:
            rows[-1]["p50_growth_vs_first"] = round(rows[-1]["rest_p50_ms"] /
                                                    rows[0]["rest_p50_ms"], 2)
        if options["json"]:
            self.stdout.write(json.dumps({"lookup": rows}))
            return
        self.stdout.write(f"{'chunks':>8} {'REST p50':>9} {'p95':>8} {'floor p50':>10} "
                          f"{'p95':>8} {'ratio p50':>10} {'filtered p50':>13} {'p95':>8} "
                          f"{'open p50':>9} {'person p50':>11} {'p95':>8}")
        for row in rows:
            self.stdout.write(
                f"{row['chunks']:>8} {row['rest_p50_ms']:>9} {row['rest_p95_ms']:>8} "
                f"{row['floor_p50_ms']:>10} {row['floor_p95_ms']:>8} {row['ratio_p50']:>10} "
                f"{row['filtered_p50_ms']:>13} {row['filtered_p95_ms']:>8} "
                f"{row.get('open_p50_ms', '-'):>9} {row.get('person_p50_ms', '-'):>11} "
                f"{row.get('person_p95_ms', '-'):>8}")
        if len(rows) > 1:
            self.stdout.write(f"REST p50 growth {sizes[0]} → {sizes[-1]}: "
                              f"{rows[-1]['p50_growth_vs_first']}x")

    def bench(self, size: int, queries: int, share: float) -> dict[str, Any]:
        tenant = tenant_get_or_create(slug="bench")
        # An evaluation dataset: never part of a rebuild, a reconciliation or a sync.
        dataset, _ = Dataset.objects.get_or_create(tenant=tenant, name=f"bench_{size}",
                                                   defaults={"evaluation": True})
        embedder = get_embedder()
        raw_embedder = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
        # One data collection per size and dimension: reused by the next run.
        collection = f"bench_{size}_domains_{embedder.dimension}d"
        self.fill(collection, size, share, tenant.pk, dataset, embedder.dimension)
        _, secret = api_key_create(tenant=tenant, name="bench", datasets=[dataset],
                                   acts_for_people=True)
        rng = random.Random(size)
        texts = [synthetic_text(rng, 6) + f" q{rng.random()}" for _ in range(queries)]
        filters = SearchFilters(tenant_id=tenant.pk, dataset_ids=(dataset.pk,),
                                withheld=Withheld(restricted=False))
        k = RagSettings().retrieve_k
        client = in_process_client()
        connection = milvus.collections().connection

        def rest(i: int, **narrowed: Any) -> None:
            answer = client.post("/api/tools/lookup_knowledge", {"query": texts[i], **narrowed},
                                 content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer {secret}")
            if answer.status_code != 200:
                raise CommandError(f"lookup failed: {answer.status_code} "
                                   f"{answer.content[:300]!r}")

        def filtered(i: int) -> None:
            rest(i, filters={"domain": [f"d{i % DOMAINS}"]})

        def person(i: int) -> None:
            # A member of one group of ten: the restricted documents of the nine others are
            # left out inside the Milvus filter.
            rest(i, on_behalf_of={"user": "bench", "groups": [f"d{i % DOMAINS}"]})

        def floor(i: int) -> None:
            raw_hybrid_search(connection, collection, filters=filters,
                              vector=raw_embedder.embed_query(texts[i]), text=texts[i], k=k)

        # Each REST call commits its audit and its canonical invocation, as a real one does;
        # so the bench collection serves, committed, for the run. The versions that served
        # before are written on its row and serve again afterwards: at its end, or at the
        # start of the next run when this one was killed.
        with transaction.atomic():
            leftover = IndexVersion.objects.filter(collection_name=collection).first()
            previous = list(IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE)
                            .exclude(collection_name=collection).values_list("pk", flat=True))
            if leftover is not None:
                previous += leftover.progress.get(SERVED_BEFORE, [])
                leftover.delete()
            IndexVersion.objects.filter(pk__in=previous).update(
                status=IndexVersion.Status.RETIRED)
            bench = IndexVersion.objects.create(collection_name=collection,
                                                status=IndexVersion.Status.ACTIVE,
                                                progress={SERVED_BEFORE: previous},
                                                **wanted_spec(embedder))
        try:
            for i in range(3):  # warm-up: models, connections, caches
                rest(i)
                floor(i)
                filtered(i)
            rest_ms, floor_ms, filtered_ms = [], [], []
            for i in range(queries):  # interleaved, so all see the same machine state
                floor_ms.append(timed_ms(floor, i))
                rest_ms.append(timed_ms(rest, i))
                filtered_ms.append(timed_ms(filtered, i))
            permissions = self.permissions(dataset, doc_base(size), queries, rest, person)
        finally:
            with transaction.atomic():
                bench.delete()
                IndexVersion.objects.filter(pk__in=previous).update(
                    status=IndexVersion.Status.ACTIVE)
        r, f, n = Timing.of(rest_ms), Timing.of(floor_ms), Timing.of(filtered_ms)
        return {"chunks": size, "rest_p50_ms": r.p50, "rest_p95_ms": r.p95,
                "floor_p50_ms": f.p50, "floor_p95_ms": f.p95,
                "ratio_p50": round(r.p50 / f.p50, 2),
                "filtered_p50_ms": n.p50, "filtered_p95_ms": n.p95,
                "filtered_vs_rest_p50": round(n.p50 / r.p50, 2), "queries": queries,
                "embedder": embedder.name, **permissions}

    def permissions(self, dataset: Dataset, base: int, queries: int,
                    open_call: Callable[[int], None], person: Callable[[int], None]
                    ) -> dict[str, Any]:
        """Calls made for a person while half the documents are restricted (to a group of ten
        each, their rows naming it as the indexing worker writes them), against unfiltered
        calls while none is: in alternating blocks of ten, the documents' readers set or
        cleared between blocks (the first call after, which renews the view, untimed)."""
        groups: dict[str, list[int]] = {}
        for doc_id in Document.objects.filter(dataset=dataset).values_list("doc_id", flat=True):
            for reader in bench_readers(doc_id - base):
                groups.setdefault(reader, []).append(doc_id)

        def readers(on: bool) -> None:
            for reader, doc_ids in groups.items():
                named = [reader] if on else []
                Document.objects.filter(dataset=dataset, doc_id__in=doc_ids).update(
                    readers=named, indexed_readers=named)
            dataset_documents_changed(dataset_id=dataset.pk)

        open_ms: list[float] = []
        person_ms: list[float] = []
        try:
            for block in range(0, queries, 10):
                for on, call, times in ((False, open_call, open_ms), (True, person, person_ms)):
                    readers(on)
                    call(block)
                    times.extend(timed_ms(call, i) for i in range(block, min(block + 10,
                                                                             queries)))
        finally:
            readers(False)
        o, p = Timing.of(open_ms), Timing.of(person_ms)
        return {"restricted_documents": sum(len(ids) for ids in groups.values()),
                "open_p50_ms": o.p50, "open_p95_ms": o.p95,
                "person_p50_ms": p.p50, "person_p95_ms": p.p95,
                "person_minus_open_p50_ms": round(p.p50 - o.p50, 2)}

    def fill(self, collection: str, size: int, share: float, tenant_id: int, dataset: Dataset,
             dimension: int) -> None:
        collections = milvus.collections()
        rng, vectors_rng = random.Random(7), np.random.default_rng(7)
        mine = [n for n in range(size) if rng.random() < share]
        documents = Document.objects.filter(dataset=dataset)
        base = doc_base(size)
        # Reused if it holds the rows, as the collections of this version lay them out.
        if collection in collections.names() and collections.count(collection) == size \
                and documents.count() == len(mine) \
                and collections.layout(collection).tenant_partitions == TENANT_PARTITIONS \
                and READERS_FIELD in collections.layout(collection).fields:
            collections.load(collection)
            return
        with milvus_writer():
            if collection in collections.names():
                collections.drop(collection)
            collections.create(collection, dimension)
        documents.delete()
        # The lookup serves a hit only if the database knows its document (the guard).
        Document.objects.bulk_create(
            [Document(dataset=dataset, doc_id=base + n, source_path=f"{n}.md",
                      file_name=f"{n}.md", status=Document.Status.READY) for n in mine],
            batch_size=2000)
        owned, batch = set(mine), 2000
        for start in range(0, size, batch):
            count = min(batch, size - start)
            vectors = unit_vectors(vectors_rng, count, dimension)
            rows = [ChunkRow(
                id=str(EvidenceKey(str(base + n), 0)),
                tenant_id=tenant_id if n in owned else OTHER_TENANT,
                dataset_id=dataset.pk if n in owned else OTHER_TENANT,
                doc_id=base + n, activated=True, category="", domain=f"d{n % DOMAINS}",
                readers=bench_readers(n),
                content=synthetic_text(rng), search_text=synthetic_text(rng),
                vector=vectors[offset].tolist(),
                metadata={"docId": str(base + n), "chunkIndex": 0,
                          "datasetId": str(dataset.pk)})
                for offset, n in enumerate(range(start, start + count))]
            milvus.writer().replace_documents([], rows, collection=collection)
            self.stderr.write(f"[bench {size}] inserted {start + count}/{size}")
        collections.load(collection)
