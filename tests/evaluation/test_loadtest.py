"""The load test: its checks catch what they must, and at CI size the platform passes them.

The full size is a command (`manage.py load_test`, docs/reliability.md "Load test").
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command

from datasets.models import Tenant
from evaluation.loadtest.fleet import TENANTS
from evaluation.loadtest.ledger import Ledger, Observation, Owner, ToolKey, check

A1, A2, B1 = Owner(tenant=1, dataset=11), Owner(tenant=1, dataset=12), Owner(tenant=2, dataset=21)
A_ALL = ToolKey("a/*", "secret", tenant=1, datasets=(11, 12))
A_ONE = ToolKey("a/one", "secret", tenant=1, datasets=(11,))


def ledger_of(**owners: Owner) -> Ledger:
    ledger = Ledger()
    for doc_id, owner in owners.items():
        ledger.add(doc_id, owner, ("marker",))
    return ledger


def answer(key: ToolKey, *doc_ids: str, sent: float = 10.0, received: float = 11.0,
           requested: tuple[int, ...] = (), probe: bool = False, status: int = 200,
           ) -> Observation:
    return Observation(key=key, requested=requested, probe=probe, status=status,
                       evidence_status="READY", doc_ids=doc_ids, sent=sent, received=received)


def test_evidence_of_another_tenant_or_outside_the_scope_is_a_leak() -> None:
    ledger = ledger_of(a1=A1, a2=A2, b1=B1)

    found = check([answer(A_ALL, "a1", "a2"), answer(A_ALL, "b1"), answer(A_ONE, "a2"),
                   answer(A_ALL, "a2", requested=(11,)), answer(A_ALL, "unknown")], ledger)

    assert len(found.out_of_scope) == 4
    assert "a/* (datasets [11, 12]) got document b1 of tenant 2 dataset 21" in found.out_of_scope
    assert not found.deactivated and not found.deleted


def test_a_probe_outside_the_scope_must_be_refused() -> None:
    refused = answer(A_ONE, requested=(12,), probe=True, status=400)
    answered = answer(A_ONE, requested=(12,), probe=True, status=200)

    assert check([refused], ledger_of()).out_of_scope == []
    assert len(check([answered], ledger_of()).out_of_scope) == 1


def test_a_document_off_for_the_whole_request_is_a_leak_one_switched_during_it_is_not() -> None:
    ledger = ledger_of(a1=A1, a2=A2)
    ledger.switched_off("a1", at=5.0, deleted=False)  # the deactivation's answer arrived at 5
    ledger.switched_on("a1", at=20.0)  # the reactivation left at 20
    ledger.switched_off("a2", at=5.0, deleted=True)

    found = check([answer(A_ALL, "a1", sent=6, received=7),  # off all along: a leak
                   answer(A_ALL, "a1", sent=4, received=6),  # sent before the switch
                   answer(A_ALL, "a1", sent=19, received=21),  # answered after the switch back
                   answer(A_ALL, "a2", sent=30, received=31)], ledger)

    assert found.deactivated == ["a/* got deactivated document a1"]
    assert found.deleted == ["a/* got deleted document a2"]
    assert found.out_of_scope == []


def run_load_test(agents: str) -> dict[str, Any]:
    out = io.StringIO()
    # Raises CommandError on any leak, 5xx, failed mutation or failed indexing job.
    call_command("load_test", agents=agents, seconds=10, documents=6, json=True, stdout=out)
    report: dict[str, Any] = json.loads(out.getvalue())

    assert report["leaks"] == {"out_of_scope": 0, "deactivated": 0, "deleted": 0}
    assert report["errors"]["http_5xx"] == 0 and report["errors"]["transport"] == 0
    assert report["lookups"] >= 40, report
    # The checks had something to check: answers with evidence, lookups that named documents
    # switched off at the time, and a mutator that really switched documents off.
    assert report["answers"].get("READY", 0) >= report["lookups"] // 5, report
    assert report["asked_for_off"] > 0, report
    assert report["mutations"].get("deactivate", 0) + report["mutations"].get("delete", 0) > 0
    assert report["probes"] > 0 and report["errors"]["probe_not_refused"] == 0
    assert not Tenant.objects.filter(slug__in=TENANTS).exists()
    # Every agent count in turn, each tool's figures apart, the machine's CPU.
    assert [phase["agents"] for phase in report["phases"]] == [int(n) for n in agents.split(",")]
    for phase in report["phases"]:
        assert set(phase["tools"]) == {"lookup_knowledge", "rag_answer", "evidence_guard"}
        assert all(t["calls"] > 0 and 0 < t["p50"] <= t["p95"] <= t["p99"] <= t["max"]
                   for t in phase["tools"].values()), phase
        assert 0 < phase["cpu_busy_percent"] <= 100
    return report


@pytest.mark.integration  # MariaDB; starts a Milvus server, a worker, gunicorn and a Redis
@pytest.mark.django_db(transaction=True)
def test_lookups_under_load_serve_nothing_out_of_scope_or_switched_off() -> None:
    assert run_load_test("4")["stack"].startswith("production stack")


@pytest.mark.embedded  # SQLite: the demo's stack, a filesystem broker, no Redis
@pytest.mark.django_db(transaction=True)
def test_the_demo_stack_under_load_serves_nothing_out_of_scope_or_switched_off() -> None:
    assert run_load_test("1,4")["stack"].startswith("demo stack")
