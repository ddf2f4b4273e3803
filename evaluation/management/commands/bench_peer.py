"""The platform's lookup against the peer: a hand-written langchain-milvus hybrid retriever.

Both run on the same BEIR suite, the same offline embedder (USE), the same depth and the same
queries, on Milvus Lite in this process; rounds alternate peer and platform so that both meet
the same machine. The peer runs in its own virtualenv (it pins other versions): give its
interpreter and script. The platform's figure is `lookup_knowledge` — everything but HTTP,
the query embedded every time (no cache), the relevance gate off as in `evaluate`. The floor
is the same queries as raw pymilvus with the platform's filters: embed, one hybrid_search. The
engine figure is what no work of the platform's can go below: embed, then the two searches the
default fusion ranks from (dense, BM25), filtered, ids only; the platform's own share is its
p50 less that. The `milvus_hybrid` columns are the same lookup with HYBRID execution: one
`hybrid_search`, ranked by Milvus's RRF, whose cost the floor's single request bounds.
"""

import json
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from evaluation.benchmarks import Timing, raw_arm_searches, raw_hybrid_search, timed_ms
from evaluation.suites import (
    EvalIndex,
    Suite,
    SuiteError,
    embedder_for,
    eval_index_load,
    evaluate,
    load_suite,
)
from retrieval.index import milvus
from retrieval.index.embedders import CachedEmbedder, Embedder
from retrieval.management.store import StoreCommand

PEER_TIMEOUT_S = 3600


class Command(StoreCommand):
    help = ("Lookup latency and quality against the peer (langchain-milvus hybrid, RRF k=60, "
            "over Milvus Lite) on one suite, embedder USE, depths and rounds interleaved.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--suite", required=True, help="folder of a BEIR-format suite")
        parser.add_argument("--lang", choices=["en", "zh"], required=True,
                            help="the peer's BM25 analyzer: standard (en) or jieba (zh)")
        parser.add_argument("--peer-python", required=True,
                            help="the interpreter of the peer's virtualenv")
        parser.add_argument("--peer-script", required=True,
                            help="langchain_milvus_baseline.py")
        parser.add_argument("--depths", default="20,100")
        parser.add_argument("--queries", type=int, default=300)
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            depths = [int(d) for d in options["depths"].split(",") if d.strip()]
            suite = load_suite(Path(options["suite"]))
        except (ValueError, SuiteError) as exc:
            raise CommandError(str(exc)) from exc
        if not depths or not all(10 <= d <= 200 for d in depths):
            raise CommandError("--depths takes depths between 10 and 200, e.g. 20,100")
        if options["queries"] < 10 or options["rounds"] < 1:
            raise CommandError("--queries must be at least 10 and --rounds at least 1")
        for path in (options["peer_python"], options["peer_script"]):
            if not Path(path).is_file():
                raise CommandError(f"{path} does not exist")

        def progress(message: str) -> None:
            self.stderr.write(f"[{suite.name}] {message}")

        embedder = embedder_for("use")
        raw = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
        index = eval_index_load(suite=suite, embedder=embedder, progress=progress)
        rows = []
        for number in range(1, options["rounds"] + 1):
            for depth in depths:
                progress(f"round {number}, depth {depth}: peer")
                peer = self.peer(options, depth)
                progress(f"round {number}, depth {depth}: platform")
                ours = evaluate(suite=suite, index=index, embedder=raw, mode="hybrid",
                                depth=depth, max_queries=options["queries"],
                                progress=lambda _: None)
                progress(f"round {number}, depth {depth}: platform, one request")
                one_request = evaluate(suite=suite, index=index, embedder=raw,
                                       mode="milvus_hybrid", depth=depth,
                                       max_queries=options["queries"], progress=lambda _: None)
                progress(f"round {number}, depth {depth}: raw floor")
                floor = self.floor(suite, index, raw, depth, options["queries"],
                                   raw_hybrid_search)
                progress(f"round {number}, depth {depth}: the engine's searches")
                engine = self.floor(suite, index, raw, depth, options["queries"],
                                    raw_arm_searches)
                rows.append({
                    "round": number, "depth": depth, "queries": ours.queries,
                    "floor_p50_ms": floor.p50,
                    "platform_vs_floor_p50": round(ours.latency_ms["p50"] / floor.p50, 2),
                    "engine_p50_ms": engine.p50,
                    "engine_vs_peer_p50": round(engine.p50 / peer["latency_ms_p50"], 2),
                    "peer_p50_ms": peer["latency_ms_p50"], "peer_p95_ms": peer["latency_ms_p95"],
                    "platform_p50_ms": ours.latency_ms["p50"],
                    "platform_p95_ms": ours.latency_ms["p95"],
                    "ratio_p50": round(ours.latency_ms["p50"] / peer["latency_ms_p50"], 2),
                    "peer_ndcg@10": peer["ndcg@10"],
                    "platform_ndcg@10": ours.metrics["ndcg@10"],
                    "milvus_hybrid_p50_ms": one_request.latency_ms["p50"],
                    "milvus_hybrid_vs_peer_p50": round(
                        one_request.latency_ms["p50"] / peer["latency_ms_p50"], 2),
                    "milvus_hybrid_ndcg@10": one_request.metrics["ndcg@10"]})
        summary = {depth: statistics.median(r["ratio_p50"] for r in rows if r["depth"] == depth)
                   for depth in depths}
        if options["json"]:
            self.stdout.write(json.dumps({"suite": suite.name, "rows": rows,
                                          "median_ratio_p50": summary}))
            return
        self.stdout.write(f"{'round':>5} {'depth':>5} {'peer p50':>9} {'p95':>7} "
                          f"{'platform p50':>13} {'p95':>7} {'ratio':>6} {'floor p50':>10} "
                          f"{'vs floor':>9} {'engine p50':>11} {'vs peer':>8} "
                          f"{'peer nDCG':>10} {'platform nDCG':>14} {'1-request p50':>14} "
                          f"{'vs peer':>8} {'1-request nDCG':>15}")
        for r in rows:
            self.stdout.write(
                f"{r['round']:>5} {r['depth']:>5} {r['peer_p50_ms']:>9} {r['peer_p95_ms']:>7} "
                f"{r['platform_p50_ms']:>13} {r['platform_p95_ms']:>7} {r['ratio_p50']:>6} "
                f"{r['floor_p50_ms']:>10} {r['platform_vs_floor_p50']:>9} "
                f"{r['engine_p50_ms']:>11} {r['engine_vs_peer_p50']:>8} "
                f"{r['peer_ndcg@10']:>10} {r['platform_ndcg@10']:>14} "
                f"{r['milvus_hybrid_p50_ms']:>14} {r['milvus_hybrid_vs_peer_p50']:>8} "
                f"{r['milvus_hybrid_ndcg@10']:>15}")
        for depth, ratio in summary.items():
            self.stdout.write(f"depth {depth}: platform p50 / peer p50, median of rounds: "
                              f"{ratio:.2f}")

    @staticmethod
    def floor(suite: Suite, index: EvalIndex, embedder: Embedder, depth: int, queries: int,
              search: Callable[..., None]) -> Timing:
        """The same queries as raw pymilvus: embed, then `search` with the lookup's filters."""
        connection = milvus.collections().connection
        texts = [suite.queries[q] for q in suite.queries if q in suite.qrels][:queries]

        def one(i: int) -> None:
            search(connection, index.collection, filters=index.filters,
                   vector=embedder.embed_query(texts[i]), text=texts[i], k=depth)

        one(0)  # warm-up
        return Timing.of([timed_ms(one, i) for i in range(len(texts))])

    def peer(self, options: dict[str, Any], depth: int) -> dict[str, Any]:
        command = [options["peer_python"], options["peer_script"], "--suite", options["suite"],
                   "--lang", options["lang"], "--queries", str(options["queries"]),
                   "--mode", "hybrid", "--k", str(depth)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=PEER_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(f"the peer did not finish in {PEER_TIMEOUT_S} s") from exc
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise CommandError(f"the peer failed ({done.returncode}): {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(lines[-1])
        return result
