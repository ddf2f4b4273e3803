import json
import random
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.documents.evidence import EvidenceKey
from datasets.documents.services import chunks_replace, configured_chunking, tenant_get_or_create
from datasets.ingestion.parse import parse_markdown
from datasets.ingestion.pipeline import build_chunks
from datasets.models import Dataset, Document
from datasets.tenancy.keys import api_key_create
from evaluation.benchmarks import Timing, in_process_client, synthetic_text, timed_ms
from retrieval.lookup.fetch import FETCH_DEFAULT_CHARS, FETCH_MAX_CHARS

BENCH_DOC_BASE = 2**61  # doc ids of the bench documents, far from the random ones of uploads
SHAPES = {  # lines per section: a runbook's sections, and one document without headings
    "sections": 40,
    "one_section": 0,
}


class Command(BaseCommand):
    help = ("fetch_evidence latency over REST (its audit and canonical invocation committed) "
            "on a document of --lines lines, chunked as the settings chunk: asking "
            "random chunks of it, with the default max_chars and the most. Two documents: "
            "one with a heading every 40 lines, one without headings (one long section).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--lines", type=int, default=5000)
        parser.add_argument("--queries", type=int, default=200)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["lines"] < 10 or options["queries"] < 5:
            raise CommandError("--lines must be at least 10 and --queries at least 5")
        tenant = tenant_get_or_create(slug="bench")
        # An evaluation dataset: never part of a rebuild, a reconciliation or a sync.
        dataset, _ = Dataset.objects.get_or_create(tenant=tenant, name="bench_fetch",
                                                   defaults={"evaluation": True})
        _, secret = api_key_create(tenant=tenant, name="bench", datasets=[dataset])
        rows = [self.bench(dataset, secret, shape, options["lines"], options["queries"])
                for shape in SHAPES]
        if options["json"]:
            self.stdout.write(json.dumps({"fetch": rows}))
            return
        self.stdout.write(f"{'document':>12} {'chunks':>7} {'max_chars':>10} {'p50 ms':>7} "
                          f"{'p95 ms':>7} {'chars p50':>10}")
        for row in rows:
            for budget in row["budgets"]:
                self.stdout.write(f"{row['shape']:>12} {row['chunks']:>7} "
                                  f"{budget['max_chars']:>10} {budget['p50_ms']:>7} "
                                  f"{budget['p95_ms']:>7} {budget['chars_p50']:>10}")

    def bench(self, dataset: Dataset, secret: str, shape: str, lines: int, queries: int
              ) -> dict[str, Any]:
        document = self.document(dataset, shape, lines)
        client = in_process_client()
        rng = random.Random(lines)
        asked = [str(EvidenceKey(document.doc_key, rng.randrange(document.chunk_count)))
                 for _ in range(queries)]
        budgets = []
        for max_chars in (FETCH_DEFAULT_CHARS, FETCH_MAX_CHARS):
            chars: list[int] = []

            def fetch(i: int, max_chars: int = max_chars, chars: list[int] = chars) -> None:
                answer = client.post("/api/tools/fetch_evidence",
                                     {"document_id": asked[i], "max_chars": max_chars},
                                     content_type="application/json",
                                     HTTP_AUTHORIZATION=f"Bearer {secret}")
                if answer.status_code != 200:
                    raise CommandError(f"fetch failed: {answer.status_code} "
                                       f"{answer.content[:300]!r}")
                chars.append(len(answer.json()["text"]))

            for i in range(3):  # warm-up
                fetch(i)
            timing = Timing.of([timed_ms(fetch, i) for i in range(queries)])
            chars.sort()
            budgets.append({"max_chars": max_chars, "p50_ms": timing.p50, "p95_ms": timing.p95,
                            "chars_p50": chars[len(chars) // 2]})
        return {"shape": shape, "lines": lines, "chunks": document.chunk_count,
                "queries": queries, "budgets": budgets}

    def document(self, dataset: Dataset, shape: str, lines: int) -> Document:
        """The bench's document of this shape: its chunks written as indexing writes them
        (a fetch reads the database only)."""
        every = SHAPES[shape]
        rng = random.Random(every)
        body = ["# Bench runbook", ""]
        for n in range(lines - 2):
            if every and n % every == 0:
                body += [f"## Step {n // every}: {synthetic_text(rng, 4)}"]
            else:
                body += [synthetic_text(rng, 12)]
        raw = "\n".join(body).encode()
        parsed = parse_markdown(raw, file_name=f"{shape}.md",
                                max_bytes=settings.KB_MAX_UPLOAD_BYTES)
        drafts = build_chunks(parsed, chunking=configured_chunking(), redact=False)
        document, _ = Document.objects.update_or_create(
            dataset=dataset, doc_id=BENCH_DOC_BASE + list(SHAPES).index(shape),
            defaults={"source_path": f"{shape}.md", "file_name": f"{shape}.md",
                      "title": parsed.title, "status": Document.Status.READY,
                      "chunk_count": len(drafts), "content_hash": shape})
        chunks_replace(document_id=document.pk, drafts=drafts)
        return document
