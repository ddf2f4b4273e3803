import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from evaluation.answers import evaluate_answers
from evaluation.management.overrides import add_override_arguments, parsed_overrides
from evaluation.management.suite import add_suite_arguments, suite_of
from evaluation.suites import (
    EvalIndex,
    Progress,
    Suite,
    embedder_for,
    eval_index_load,
    evaluate,
    evaluation_overrides,
    translations_line,
)
from retrieval.chat import configured_chat_model
from retrieval.index.embedders import Embedder
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Measure retrieval quality on a BEIR-format suite (corpus.jsonl, queries.jsonl, "
            "qrels/test.tsv) through the platform's own ingestion and lookup.")

    def add_arguments(self, parser: CommandParser) -> None:
        add_suite_arguments(parser,
                            depth_help="retrieve-k and return-n for this run (default 100)")
        add_override_arguments(parser, mode_default="hybrid",
                               mode_help="the retrievers and how they run (shorthand for --set)")
        parser.add_argument("--answers", action="store_true",
                            help="measure the RAG answer instead (queries with gold answers, "
                                 "e.g. CMRC 2018): with the chat model of KB_CHAT_BASE_URL, "
                                 "else extractive; the agent's own settings")

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
        if options["answers"]:
            self._answers(suite, index, embedder, options, progress)
            return
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
        self.stdout.write(f"  translation {translations_line(report.translations)}")

    def _answers(self, suite: Suite, index: EvalIndex, embedder: Embedder,
                 options: dict[str, Any], progress: Progress) -> None:
        if not suite.answers:
            raise CommandError(f"no query of {suite.name} carries gold answers "
                               "(metadata.answers)")
        if options["set"] or options["mode"] != "hybrid":
            raise CommandError("--answers measures the agent's own settings: no --set or --mode")
        report = evaluate_answers(suite=suite, index=index, embedder=embedder,
                                  model=configured_chat_model(), max_queries=options["queries"],
                                  progress=progress)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), ensure_ascii=False))
            return
        self.stdout.write(f"suite {report.suite}  answers by {report.generator}  embedder "
                          f"{report.embedder}  queries {report.queries}")
        for name, value in report.metrics.items():
            self.stdout.write(f"  {name:<20} {value:.4f}")
        self.stdout.write(f"  latency     p50 {report.latency_ms['p50']} ms, "
                          f"p95 {report.latency_ms['p95']} ms")
