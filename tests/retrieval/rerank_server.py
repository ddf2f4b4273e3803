"""A real local HTTP server speaking the rerank protocol, scripted for tests.

`POST /v1/rerank {model, query, documents, top_n}` → `{"results": [{index, relevance_score}]}`.
It scores a document by how often it holds `favourite` (a word the test chooses), so a test
knows the order it must see; `behaviour` switches it to one of a reranker's failure modes.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from typing import Any

from tests.retrieval.scripted_server import ScriptedServer, serving


class RerankServer(ScriptedServer):
    def __init__(self) -> None:
        super().__init__()
        self.favourite = ""
        self.behaviour = "ok"  # ok | slow | 401 | 500 | not_json | no_results | bad_index
        self.delay_s = 2.0

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        documents = body["documents"]
        scores = [d.lower().count(self.favourite.lower()) + 1 / (i + 2)
                  for i, d in enumerate(documents)]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:body["top_n"]]
        results: list[dict[str, Any]] = [{"index": i, "relevance_score": scores[i]}
                                         for i in order]
        if self.behaviour == "slow":
            time.sleep(self.delay_s)
        if self.behaviour == "401":
            return 401, b'{"error": {"message": "invalid api key"}}'
        if self.behaviour == "500":
            return 500, b'{"error": "boom"}'
        if self.behaviour == "not_json":
            return 200, b"<html>gateway</html>"
        if self.behaviour == "no_results":
            return 200, json.dumps({"data": results}).encode()
        if self.behaviour == "bad_index":
            results[0]["index"] = len(documents) + 3
        return 200, json.dumps({"model": body["model"], "results": results}).encode()


def rerank_server(*, allowed: bool = True) -> AbstractContextManager[RerankServer]:
    return serving(RerankServer(), allowed=allowed)
