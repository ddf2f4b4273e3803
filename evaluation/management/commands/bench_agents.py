import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluation.benchmarks import Timing
from evaluation.question_sets import QuestionSetError, questions_load
from kbplatform_client import KbClient, KbError

CHANNELS = ("rest", "mcp_http", "mcp_stdio")


class Command(BaseCommand):
    help = ("The same lookups over each agent channel of a running platform, interleaved: "
            "REST (kbplatform_client), MCP over streamable HTTP (/mcp) and MCP over stdio "
            "(manage.py mcp_server as a subprocess), official MCP clients; p50/p95 per "
            "channel and whether every channel handed out the same evidence.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000",
                            help="the web process (default the demo's)")
        parser.add_argument("--api-key-env", default="KB_API_KEY",
                            help="the variable holding a tool key (default KB_API_KEY)")
        parser.add_argument("--questions", type=Path,
                            default=settings.KB_KNOWLEDGE_DIR / "eval" / "questions.jsonl")
        parser.add_argument("--rounds", type=int, default=3,
                            help="times through the question set (default 3)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        key = os.environ.get(options["api_key_env"], "").strip()
        if not key:
            raise CommandError(f"set {options['api_key_env']} to a tool key of the platform "
                               f"at {options['url']}")
        try:
            queries = [q.query for q in questions_load(options["questions"])]
        except QuestionSetError as exc:
            raise CommandError(str(exc)) from exc
        if options["rounds"] < 1:
            raise CommandError("--rounds must be at least 1")
        try:
            samples, disagreements = anyio.run(_bench, options["url"].rstrip("/"), key,
                                               queries, options["rounds"],
                                               options["api_key_env"])
        except KbError as exc:
            raise CommandError(f"the platform refused: {exc}") from exc
        timings = {channel: Timing.of(samples[channel]) for channel in CHANNELS}
        report = {channel: {"p50_ms": t.p50, "p95_ms": t.p95,
                            "p50_vs_rest": round(t.p50 / timings["rest"].p50, 2)}
                  for channel, t in timings.items()}
        summary = {"calls_per_channel": len(samples["rest"]), "channels": report,
                   "disagreements": disagreements}
        if options["json"]:
            self.stdout.write(json.dumps(summary, ensure_ascii=False))
            return
        self.stdout.write(f"{'channel':<10} {'p50 ms':>8} {'p95 ms':>8} {'p50 vs REST':>12}")
        for channel, row in report.items():
            self.stdout.write(f"{channel:<10} {row['p50_ms']:>8} {row['p95_ms']:>8} "
                              f"{row['p50_vs_rest']:>12}")
        self.stdout.write(f"{summary['calls_per_channel']} calls per channel; queries whose "
                          f"evidence differed between channels: {len(disagreements)}")
        for query in disagreements[:10]:
            self.stdout.write(f"  differed: {query}")


Lookup = Callable[[str], Awaitable[dict[str, Any]]]


async def _bench(url: str, key: str, queries: list[str], rounds: int, key_env: str
                 ) -> tuple[dict[str, list[float]], list[str]]:
    from mcp import Client, ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    kb = KbClient(url, api_key=key)
    kb.tool_schemas()  # the platform answers, before any subprocess starts
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    stdio = StdioServerParameters(
        command=sys.executable, args=[str(settings.BASE_DIR / "manage.py"), "mcp_server",
                                      "--api-key-env", key_env],
        env={**os.environ, key_env: key})
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as web, \
            stdio_client(stdio) as (read, write), ClientSession(read, write) as pipe:
        await pipe.initialize()

        async def rest(query: str) -> dict[str, Any]:
            return dict(await anyio.to_thread.run_sync(kb.lookup, query))

        async def over(session: Any, query: str) -> dict[str, Any]:
            result = await session.call_tool("lookup_knowledge", {"query": query})
            return dict(result.structured_content or {})

        channels: dict[str, Lookup] = {
            "rest": rest, "mcp_http": lambda q: over(web, q), "mcp_stdio": lambda q: over(pipe, q)}
        for channel in channels.values():  # warm-up: models, connections, caches
            await channel(queries[0])
        samples: dict[str, list[float]] = {name: [] for name in CHANNELS}
        disagreements: list[str] = []
        for _ in range(rounds):
            for query in queries:  # interleaved: every channel sees the same machine state
                seen = set()
                for name, channel in channels.items():
                    started = time.perf_counter()
                    body = await channel(query)
                    samples[name].append((time.perf_counter() - started) * 1000)
                    seen.add((body.get("evidence_status"), tuple(
                        e["document_id"] for e in body.get("evidence", []))))
                if len(seen) > 1 and query not in disagreements:
                    disagreements.append(query)
    return samples, disagreements
