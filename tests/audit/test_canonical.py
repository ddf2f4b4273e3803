"""The canonical invocation store under parallel tool calls, on the real cache (Redis)."""

from __future__ import annotations

import secrets
import threading
import uuid
from dataclasses import replace

import pytest

from audit.canonical import canonical_store, ready_evidence, session_tool_calls
from retrieval.types import ContextPack, PackedEvidence
from tests.retrieval.builders import chunk, lookup_result

pytestmark = pytest.mark.integration


def test_parallel_calls_of_one_session_are_all_remembered() -> None:
    """Agents call tools in parallel: every call of the session must count for the guard."""
    tenant = secrets.randbelow(10**9) + 10**9  # a tenant no other test writes to
    session = f"s-{uuid.uuid4().hex}"
    calls = [f"call-{n}-{uuid.uuid4().hex}" for n in range(8)]
    results = [
        replace(lookup_result(), tool_call_id=call, session_id=session,
                pack=ContextPack(items=(PackedEvidence(chunk(f"{n + 1}#chunk-0"), "text",
                                                       False),),
                                 total_chars=4, truncated=False))
        for n, call in enumerate(calls)]
    start = threading.Barrier(len(results))

    def store(result: object) -> None:
        start.wait()  # finish together, as parallel requests of one agent step do
        canonical_store(tenant_id=tenant, result=result)  # type: ignore[arg-type]

    threads = [threading.Thread(target=store, args=(r,)) for r in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(session_tool_calls(tenant_id=tenant, session_id=session)) == sorted(calls)
    evidence = [f"{n + 1}#chunk-0" for n in range(len(calls))]
    verdicts = ready_evidence(tenant_id=tenant, session_id=session, document_ids=evidence)
    assert verdicts == dict.fromkeys(evidence, True)
