"""What the audit keeps of the evidence a call served (audit/services.py): ranks in the order
handed out, nothing for a call that served nothing, and a citation counted once — also when
two confirmations of the same evidence arrive at once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from audit.models import ServedEvidence
from audit.services import evidence_cite, invocation_record
from audit.types import InvocationRecord, ReadyEvidence
from datasets.models import Dataset, Tenant

DOC = 2**61 + 7  # a doc_id as datasets.models.new_doc_id makes them


def record(tenant: Tenant, dataset: Dataset, *, call: str, status: str = "READY",
           keys: tuple[str, ...] = (), cited: tuple[str, ...] = ()) -> InvocationRecord:
    return InvocationRecord(
        tenant_id=tenant.pk, tool_call_id=call, session_id="s", query="q",
        evidence_status=status, relevance_level="PRECISE", returned_count=len(keys),
        config_version=3, error="", details={}, dataset_ids=(dataset.pk,),
        ready=tuple(ReadyEvidence(key, dataset.pk) for key in keys), experiment=(9, "control"),
        cited=cited)


def world() -> tuple[Tenant, Dataset]:
    tenant = Tenant.objects.create(slug="t-served", name="t")
    return tenant, Dataset.objects.create(tenant=tenant, name="d")


@pytest.mark.django_db
def test_the_served_evidence_is_kept_in_order_with_the_calls_version_and_arm() -> None:
    tenant, dataset = world()
    keys = (f"{DOC}#chunk-3", f"{DOC}#chunk-1", "not-an-evidence-key", f"{DOC}#chunk-3",
            f"{DOC + 2}#chunk-0")
    invocation_record(api_key=None, latency_ms=1.0,
                      result=record(tenant, dataset, call="c1", keys=keys,
                                    cited=(f"{DOC}#chunk-1",)))
    invocation_record(api_key=None, latency_ms=1.0,
                      result=record(tenant, dataset, call="c2", status="EMPTY"))
    rows = list(ServedEvidence.objects.order_by("rank").values_list(
        "evidence_key", "rank", "document_id", "cited", "config_version", "experiment_arm"))
    assert rows == [(f"{DOC}#chunk-3", 1, DOC, False, 3, "control"),
                    (f"{DOC}#chunk-1", 2, DOC, True, 3, "control"),
                    (f"{DOC + 2}#chunk-0", 3, DOC + 2, False, 3, "control")]


@pytest.mark.django_db(transaction=True)
def test_two_confirmations_at_once_count_once() -> None:
    tenant, dataset = world()
    keys = tuple(f"{DOC}#chunk-{n}" for n in range(5))
    invocation_record(api_key=None, latency_ms=1.0,
                      result=record(tenant, dataset, call="c1", keys=keys))
    counts: list[int] = []
    barrier = threading.Barrier(4)

    def confirm() -> None:
        try:
            barrier.wait()
            counts.append(evidence_cite(tenant_id=tenant.pk, dataset_ids=[dataset.pk],
                                        evidence_keys=keys, tool_call_id="c1"))
        finally:
            connection.close()

    threads = [threading.Thread(target=confirm) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == len(keys)
    assert ServedEvidence.objects.filter(cited=True).count() == len(keys)
    # Another tenant's or another dataset's confirmation cites nothing.
    assert evidence_cite(tenant_id=tenant.pk + 1, dataset_ids=[dataset.pk],
                         evidence_keys=keys, tool_call_id="c1") == 0
