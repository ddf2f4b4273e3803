"""A lookup's set-up is one statement once its process has built it, and every change the
set-up depends on is seen by the next lookup: a config saved, a save rolled back, an A/B test
started by an update of its row alone, a document switched off, the serving version retired
(a synonym group written: test_synonyms.py); a config changed in the database by hand, within
ROW_MAX_AGE_SECONDS."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from datasets.documents.services import document_set_activation
from retrieval.index.models import IndexVersion
from retrieval.lookup.revisions import lookup_revisions
from retrieval.lookup.service import lookup_knowledge
from retrieval.ragconfig import selectors
from retrieval.ragconfig.drafts import experiment_start
from retrieval.ragconfig.models import RagConfig, RagConfigChange
from retrieval.ragconfig.services import rag_config_update
from retrieval.ragconfig.synonyms import synonym_group_save
from retrieval.types import LookupResult, SearchFilters
from tests.retrieval.conftest import Imported

KAFKA_LAG = "kafka consumer group lag keeps growing"


def run(data: Imported, query: str = KAFKA_LAG, **kwargs: Any) -> LookupResult:
    return lookup_knowledge(filters=SearchFilters(tenant_id=data.tenant.pk,
                                                  dataset_ids=(data.dataset.pk,)),
                            query=query, **kwargs)


@pytest.mark.django_db
def test_a_lookup_reads_its_set_up_in_one_statement(acme: Imported) -> None:
    rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 2},
                      changed_by="test")
    synonym_group_save(tenant=acme.tenant, terms="lag = backlog", changed_by="test")
    run(acme)  # builds what this process keeps
    with CaptureQueriesContext(connection) as queries:
        result = run(acme)
    assert result.evidence_status == "READY"
    # Beside the question's vector in the cache (a table of the embedded default, Redis on
    # a server): one statement.
    statements = [q["sql"] for q in queries.captured_queries if "kb:qvec:" not in q["sql"]]
    assert len(statements) == 1, statements

    revisions = lookup_revisions(tenant_id=acme.tenant.pk, dataset_ids=[acme.dataset.pk])
    assert [r[0] for r in revisions.datasets] == [acme.dataset.pk]
    assert [r.dataset_id for r in revisions.configs] == [None]
    assert revisions.synonyms and revisions.index is not None
    active = IndexVersion.objects.get(status=IndexVersion.Status.ACTIVE)
    assert (revisions.index.pk, revisions.index.collection) == (active.pk,
                                                                 active.collection_name)


@pytest.mark.django_db
def test_the_next_lookup_sees_every_change_its_set_up_depends_on(
        acme: Imported, monkeypatch: pytest.MonkeyPatch) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                               changed_by="test")
    assert len(run(acme).pack.items) == 1
    config = rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 2},
                               changed_by="test")
    assert len(run(acme).pack.items) == 2

    # A save rolled back leaves nothing behind: the next lookup runs with the row as it is.
    with pytest.raises(RuntimeError), transaction.atomic():
        rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 1},
                          changed_by="test")
        assert len(run(acme).pack.items) == 1
        raise RuntimeError("rolled back")
    assert len(run(acme).pack.items) == 2

    # An A/B test starts by an update of the row's experiment alone (drafts.py).
    experiment = experiment_start(
        change=RagConfigChange.objects.get(config=config, version=config.version - 1),
        share=50, started_by="test")
    routed = run(acme, session_id="s1").experiment
    assert routed is not None and routed[0] == experiment.pk

    # A change made in the database by hand, without `updated_at`: seen once the kept row
    # is older than ROW_MAX_AGE_SECONDS.
    RagConfig.objects.filter(pk=config.pk).update(return_n=1)
    assert len(run(acme).pack.items) == 2
    monkeypatch.setattr(selectors, "ROW_MAX_AGE_SECONDS", 0)
    assert len(run(acme).pack.items) == 1

    # A document switched off is not served by the next lookup.
    def served() -> set[str | None]:
        return {acme.stem_of(item.chunk.evidence_key) for item in run(acme).pack.items}

    assert "kafka" in served()
    document_set_activation(document=acme.documents["kafka"], activated=False)
    assert "kafka" not in served()

    # The serving version retired: nothing serves.
    IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE).update(
        status=IndexVersion.Status.RETIRED)
    assert run(acme).evidence_status == "EMPTY"
