import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from evaluation.fusion_grid import fusion_grid
from evaluation.management.suite import add_suite_arguments, suite_of
from evaluation.suites import embedder_for, eval_index_load
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Every fusion candidate (RRF by k and weight, CONVEX by weight) beside each arm "
            "alone on a BEIR-format suite, from the same two lists per query, with the margin "
            "over the better arm.")

    def add_arguments(self, parser: CommandParser) -> None:
        add_suite_arguments(parser, depth_help="each arm's list (default 100)")

    def handle(self, *args: Any, **options: Any) -> None:
        suite = suite_of(options)

        def progress(message: str) -> None:
            self.stderr.write(f"[{suite.name}] {message}")

        embedder = embedder_for(options["embedder"])
        index = eval_index_load(suite=suite, embedder=embedder, progress=progress)
        rows = fusion_grid(suite=suite, index=index, embedder=embedder,
                           depth=options["depth"], max_queries=options["queries"],
                           progress=progress)
        best_arm = max(r.ndcg_at_10 for r in rows[:2])
        if options["json"]:
            self.stdout.write(json.dumps({"suite": suite.name, "embedder": embedder.name,
                                          "rows": [asdict(r) for r in rows]}))
            return
        self.stdout.write(f"suite {suite.name}  embedder {embedder.name}")
        self.stdout.write(f"  {'candidate':<34} nDCG@10  Recall@100  vs better arm")
        for row in rows:
            self.stdout.write(f"  {row.name:<34} {row.ndcg_at_10:.4f}   {row.recall_at_100:.4f}"
                              f"      {row.ndcg_at_10 - best_arm:+.4f}")
