import json
from typing import Any

from django.core.management.base import CommandParser

from retrieval.evaluation import embedder_for, eval_index_load, evaluate, evaluation_overrides
from retrieval.management.overrides import add_override_arguments, parsed_overrides
from retrieval.management.store import StoreCommand
from retrieval.management.suite import add_suite_arguments, suite_of


class Command(StoreCommand):
    help = ("Measure retrieval quality on a BEIR-format suite (corpus.jsonl, queries.jsonl, "
            "qrels/test.tsv) through the platform's own ingestion and lookup.")

    def add_arguments(self, parser: CommandParser) -> None:
        add_suite_arguments(parser,
                            depth_help="retrieve-k and return-n for this run (default 100)")
        add_override_arguments(parser, mode_default="hybrid",
                               mode_help="the retrievers and how they run (shorthand for --set)")

    def handle(self, *args: Any, **options: Any) -> None:
        suite = suite_of(options)

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
