import json
import random
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.documents.services import (
    configured_chunking,
    document_delete,
    document_store,
    tenant_get_or_create,
)
from datasets.ingestion.parse import parse_markdown
from datasets.ingestion.pipeline import build_chunks
from datasets.models import Dataset, Document, Job
from evaluation.benchmarks import synthetic_text
from kbplatform.celery import app
from retrieval.index.embedders import CachedEmbedder, get_embedder


def synthetic_markdown(rng: random.Random, number: int, sections: int) -> bytes:
    parts = [f"---\ntitle: Synthetic runbook {number}\ndomain: bench\ncategory: bench\n---\n",
             f"# Synthetic runbook {number}\n"]
    for section in range(sections):
        parts.append(f"\n## Step {section + 1}\n\n{synthetic_text(rng, 110)}。\n")
    return "".join(parts).encode("utf-8")


class Command(BaseCommand):
    help = ("Ingest rate end to end (upload → task → chunks, embeddings, Milvus, DB) against the "
            "embedder alone on the same texts in the same run. Needs a Celery worker on the "
            "indexing queue unless tasks run eagerly.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--documents", type=int, default=20)
        parser.add_argument("--sections", type=int, default=6)
        parser.add_argument("--timeout", type=int, default=900, help="seconds to wait")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["documents"] < 1 or options["sections"] < 1:
            raise CommandError("--documents and --sections must be at least 1")
        # Fresh text every run: the embedding cache must not make the platform look fast.
        rng = random.Random(time.time_ns())
        docs = [synthetic_markdown(rng, n, options["sections"])
                for n in range(options["documents"])]
        tenant = tenant_get_or_create(slug="bench")
        dataset = Dataset.objects.create(tenant=tenant, name=f"ingest-{time.time_ns()}")
        get_embedder().embed_query("warm-up")  # load the model before any clock starts
        try:
            platform = self.platform(dataset, docs, options["timeout"])
            alone = self.embedder_alone(docs)
        finally:
            for document in Document.objects.filter(dataset=dataset, deleted=False):
                document_delete(document=document)
            # The rows go once the worker has taken the chunks out of Milvus.
            deadline = time.monotonic() + options["timeout"]
            while any(d.sync_pending for d in Document.objects.filter(dataset=dataset)) \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            Document.objects.filter(dataset=dataset).delete()
            dataset.delete()
        row = {"documents": len(docs), "chunks": platform["chunks"],
               "platform_chunks_per_s": platform["rate"], "embedder_chunks_per_s": alone,
               "ratio": round(platform["rate"] / alone, 2), "eager": platform["eager"],
               "embedder": get_embedder().name}
        if options["json"]:
            self.stdout.write(json.dumps({"ingest": row}))
            return
        self.stdout.write(f"{row['chunks']} chunks in {row['documents']} documents "
                          f"({'in-process' if row['eager'] else 'Celery worker'}), "
                          f"{row['embedder']}")
        self.stdout.write(f"  platform  {row['platform_chunks_per_s']:>8} chunks/s")
        self.stdout.write(f"  embedder  {row['embedder_chunks_per_s']:>8} chunks/s")
        self.stdout.write(f"  ratio     {row['ratio']:>8}")

    def platform(self, dataset: Dataset, docs: list[bytes], timeout: int) -> dict[str, Any]:
        started = time.perf_counter()
        jobs = [document_store(dataset=dataset, file_name=f"bench-{n}.md", raw=raw,
                               max_bytes=settings.KB_MAX_UPLOAD_BYTES).job
                for n, raw in enumerate(docs)]
        ids = [job.pk for job in jobs if job is not None]
        deadline = time.monotonic() + timeout
        while True:
            statuses = list(Job.objects.filter(pk__in=ids).values_list("status", flat=True))
            if all(s in (Job.Status.SUCCEEDED, Job.Status.FAILED) for s in statuses):
                break
            if time.monotonic() > deadline:
                raise CommandError("the indexing jobs did not finish in time: is a worker "
                                   "running on the indexing queue?")
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
        failed = Job.objects.filter(pk__in=ids, status=Job.Status.FAILED).first()
        if failed:
            raise CommandError(f"indexing failed: {failed.error}")
        chunks = sum(Document.objects.filter(dataset=dataset).values_list("chunk_count",
                                                                          flat=True))
        return {"chunks": chunks, "rate": round(chunks / elapsed, 1),
                "eager": bool(app.conf.task_always_eager)}

    def embedder_alone(self, docs: list[bytes]) -> float:
        embedder = get_embedder()
        raw = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
        batches = [[d.search_text for d in build_chunks(
            parse_markdown(doc, file_name="b.md", max_bytes=len(doc) + 1),
            chunking=configured_chunking(), redact=settings.KB_REDACT_SECRETS)] for doc in docs]
        started = time.perf_counter()
        for batch in batches:  # one call per document, as the indexing task makes
            raw.embed_documents(batch)
        elapsed = time.perf_counter() - started
        return round(sum(len(b) for b in batches) / elapsed, 1)
