"""The recency prior (RagConfig.recency_half_life_days, off by default): of two runbooks that
answer alike, the one changed or reviewed lately comes first; off, a document's age changes
nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from audit.models import ToolInvocation
from datasets.documents.services import dataset_documents_changed
from datasets.documents.validity import Validity
from datasets.models import Document
from retrieval.lookup.graph.recency import RecencyPrior
from retrieval.ragconfig.services import rag_config_update
from tests.conftest import Kb
from tests.datasets.builders import lookup

QUESTION = "kafka consumer group offsets lag"
BODY = ("# Kafka consumer lag\n\nReset the consumer group's offsets with kafka-consumer-groups, "
        "then watch the lag fall.\n")


def _sources(answer: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(e["source"] for e in answer["evidence"]))


@pytest.mark.django_db
def test_an_older_runbook_gives_way_to_a_recent_one_only_with_the_prior_on(
        kb: Kb, ingest: Any) -> None:
    ingest(kb.dataset, "kafka/a.md", BODY.encode())
    ingest(kb.dataset, "kafka/b.md", BODY.replace("then watch", "and then watch").encode())
    before = _sources(lookup(kb.tool, QUESTION))
    assert len(before) == 2
    # The one that came first was last changed five years ago, its review as long ago.
    Document.objects.filter(source_path=before[0]).update(
        content_updated_at=timezone.now() - dt.timedelta(days=5 * 365))
    dataset_documents_changed(dataset_id=kb.dataset.pk)
    unweighted = lookup(kb.tool, QUESTION)
    assert _sources(unweighted) == before  # off by default: age is no signal

    rag_config_update(config=None, tenant=kb.tenant, values={"recency_half_life_days": 180},
                      changed_by="test")
    after = lookup(kb.tool, QUESTION, tool_call_id="call-recent")
    assert _sources(after) == before[::-1]
    # The order changed, not the judgement: the same relevance level.
    assert after["relevance_level"] == unweighted["relevance_level"]
    stages = ToolInvocation.objects.get(tool_call_id="call-recent").details[
        "retrievalDetails"]["stages"]
    [recency] = [s for s in stages if s["stage"] == "recency"]
    assert recency["note"] == "half-life 180 days"


@pytest.mark.pure
def test_the_prior_counts_three_quarters_at_a_half_life_never_below_half() -> None:
    today = dt.date(2026, 12, 6)

    def changed(days: int, reviewed: int | None = None) -> Validity:
        at = dt.datetime(2026, 12, 6, tzinfo=dt.UTC) - dt.timedelta(days=days)
        return Validity(at, today - dt.timedelta(days=reviewed) if reviewed is not None
                        else None)

    prior = RecencyPrior(100, {1: changed(0), 2: changed(100), 3: changed(10_000),
                               4: changed(300, reviewed=0), 5: changed(300, reviewed=-3000)},
                         today)
    # A review counts as a change, one dated after today as none; unknown: no penalty.
    assert [round(prior.weight(d), 3) for d in ("1", "2", "3", "4", "5", "99", "")] == [
        1.0, 0.75, 0.5, 1.0, round(0.5 + 0.5 * 0.5 ** 3, 3), 1.0, 1.0]
