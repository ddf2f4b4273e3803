"""The reranker behind the graph's RerankPort: an HTTP reranker speaking the common protocol.

`POST {KB_RERANK_BASE_URL}/rerank {model, query, documents, top_n}` answered by
`{"results": [{"index": i, "relevance_score": s}, ...]}` is what self-hosted rerank servers
expose (Jina, Xinference, vLLM, LocalAI, TEI's OpenAI-style route). Every failure — no answer
in time, a refused key, a body that is not that shape — raises RerankError with a reason a
person can act on; the graph then falls back or answers UNAVAILABLE, never reorders blindly.
The call goes through the outbound policy (kbplatform/outbound.py): a refused address, a closed
port, a name that does not resolve are one "could not be reached".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
from django.conf import settings

from kbplatform import outbound

# Bounds of one call: what is sent (a chunk is at most 4× the chunk size) and read back.
MAX_DOCUMENT_CHARS = 8000
MAX_RESPONSE_BYTES = 1 << 20


class RerankError(RuntimeError):
    """The reranker failed; the message names why (never the key)."""


@dataclass(frozen=True)
class RankedDocument:
    index: int  # into the documents sent
    score: float


class HttpReranker:
    name = "http"

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout_s: float) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError("the reranker's base URL must start with http:// or https://")
        self.url = base_url.rstrip("/") + "/rerank"
        self.api_key = api_key
        self.model = model
        self.timeout_s = timeout_s

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int,
               timeout_s: float) -> list[RankedDocument]:
        """The best `top_n` documents, best first."""
        if not documents:
            return []
        body = json.dumps({"model": self.model, "query": query, "top_n": top_n,
                           "documents": [d[:MAX_DOCUMENT_CHARS] for d in documents]}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        timeout = max(min(self.timeout_s, timeout_s), 0.001)
        try:
            with outbound.deadline(timeout):  # in total: a trickled answer is cut there too
                response = outbound.client(max_response_bytes=MAX_RESPONSE_BYTES).post(
                    self.url, content=body, headers=headers, timeout=timeout)
        except (httpx2.ConnectError, httpx2.InvalidURL):  # InvalidURL: e.g. 0177.0.0.1
            raise RerankError("the reranker could not be reached") from None
        except httpx2.TimeoutException:
            raise RerankError(f"the reranker did not answer within {timeout:.2f} s") from None
        except httpx2.ReadError:  # a connection reset mid-answer, or an answer over the bound
            raise RerankError(f"the reranker's answer was cut (reset, or over "
                              f"{MAX_RESPONSE_BYTES} bytes)") from None
        except httpx2.HTTPError as exc:
            raise RerankError(f"the reranker's connection failed: {type(exc).__name__}") from None
        if response.status_code in (401, 403):
            raise RerankError(f"the reranker refused the API key ({response.status_code})")
        if not response.is_success:  # a redirect too: it is not followed
            raise RerankError(f"the reranker answered HTTP {response.status_code}")
        return parse_results(response.content, n_documents=len(documents), top_n=top_n)


def parse_results(raw: bytes, *, n_documents: int, top_n: int) -> list[RankedDocument]:
    """The answer's results, checked: each index once and in range, each score a number."""
    try:
        payload: Any = json.loads(raw)
    except ValueError:
        raise RerankError("the reranker's answer is not JSON") from None
    results = payload.get("results") if isinstance(payload, dict) else None
    if not isinstance(results, list):
        raise RerankError("the reranker's answer has no results list")
    ranked: dict[int, float] = {}
    for item in results:
        if not isinstance(item, dict):
            raise RerankError("the reranker's answer is malformed: a result is not an object")
        index, score = item.get("index"), item.get("relevance_score", item.get("score"))
        if (not isinstance(index, int) or isinstance(index, bool)
                or not 0 <= index < n_documents or index in ranked):
            raise RerankError(f"the reranker's answer is malformed: index {index!r}")
        if (not isinstance(score, int | float) or isinstance(score, bool)
                or not math.isfinite(score)):
            raise RerankError(f"the reranker's answer is malformed: score {score!r}")
        ranked[index] = float(score)
    best = sorted(ranked.items(), key=lambda pair: -pair[1])[:top_n]
    return [RankedDocument(index, score) for index, score in best]


def configured_reranker() -> HttpReranker | None:
    """The reranker of KB_RERANK_BASE_URL, or None when none is configured."""
    if not settings.KB_RERANK_BASE_URL:
        return None
    return HttpReranker(base_url=settings.KB_RERANK_BASE_URL,
                        api_key=settings.KB_RERANK_API_KEY, model=settings.KB_RERANK_MODEL,
                        timeout_s=settings.KB_RERANK_TIMEOUT_SECONDS)
