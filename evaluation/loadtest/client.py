"""The agents' and the mutator's HTTP client."""

from __future__ import annotations

import http.client
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from retrieval.tools.registry import TOOLS

# What the agents call (retrieval/tools/registry.py): a lookup, the answer built on one
# (extractive unless a chat model is configured), and the guard of the ids they cite.
LOOKUP, ANSWER, GUARD = (next(t.path for t in TOOLS if t.name == name)
                         for name in ("lookup_knowledge", "rag_answer", "evidence_guard"))
TOOL_OF = {LOOKUP: "lookup_knowledge", ANSWER: "rag_answer", GUARD: "evidence_guard"}


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no HTTP answer (refused, reset, timed out)
    body: Any
    sent: float  # time.monotonic() before connecting
    received: float  # after the whole body was read


class Http:
    """One connection per request, as a fleet of short-lived agent calls makes them."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.port = port
        self.timeout = timeout

    def call(self, method: str, path: str, key: str, *, body: Any = None,
             upload: tuple[str, bytes] | None = None, timeout: float | None = None) -> Answer:
        headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
        payload: bytes | None = None
        if upload is not None:
            boundary = uuid.uuid4().hex
            name, raw = upload
            payload = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                       f'filename="{name}"\r\nContent-Type: text/markdown\r\n\r\n').encode() \
                + raw + f"\r\n--{boundary}--\r\n".encode()
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
        elif body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        client = http.client.HTTPConnection("127.0.0.1", self.port,
                                            timeout=timeout or self.timeout)
        sent = time.monotonic()
        try:
            client.request(method, path, body=payload, headers=headers)
            response = client.getresponse()
            raw_body, status = response.read(), response.status
        except (OSError, http.client.HTTPException):
            return Answer(0, None, sent, time.monotonic())
        finally:
            client.close()
        received = time.monotonic()
        try:
            parsed = json.loads(raw_body) if raw_body else None
        except ValueError:
            parsed = None
        return Answer(status, parsed, sent, received)
