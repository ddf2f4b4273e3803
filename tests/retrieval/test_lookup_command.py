"""`python manage.py lookup`: the agent's view by default, the internals with --trace."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from retrieval.models import RagConfig
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.conftest import CONTRACT_KEYS, EVIDENCE_KEYS, Imported

KAFKA_LAG = "kafka consumer group lag keeps growing"
INTERNAL = {"traces", "pack", "config", "hints", "filters", "retry", "timings_ms"}


def run(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("lookup", *args, stdout=out)
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


@pytest.mark.django_db
def test_default_output_is_the_agent_contract_without_internal_fields(acme: Imported) -> None:
    body = run(KAFKA_LAG, "--tenant", "acme")
    assert set(body) == CONTRACT_KEYS
    assert body["evidence_status"] == "READY"
    assert {acme.stem_of(e["document_id"]) for e in body["evidence"]} == {"kafka"}
    assert all(set(item) == EVIDENCE_KEYS for item in body["evidence"])
    text = json.dumps(body)
    assert not any(f'"{name}"' in text for name in (*INTERNAL, "raw_score", "quality"))


@pytest.mark.django_db
def test_trace_prints_the_internal_result_with_scores_and_stages(acme: Imported) -> None:
    result = run(KAFKA_LAG, "--tenant", "acme", "--trace", "--mode", "dense")
    assert INTERNAL <= set(result)
    assert result["mode"] == "dense" and result["evidence_status"] == "READY"
    assert result["hints"]["category_filter"] == "messaging"
    stages = [t["stage"] for t in result["traces"]]
    assert stages[0] == "transform" and "pack" in stages
    items = result["pack"]["items"]
    assert items and all({"raw_score", "quality", "evidence_key"} <= set(i["chunk"])
                         for i in items)
    assert {acme.stem_of(i["chunk"]["evidence_key"]) for i in items} == {"kafka"}
    assert result["config"]["return_n"] == 5


@pytest.mark.django_db
def test_dataset_and_tenant_arguments_are_checked(acme: Imported, acme_edge: Imported) -> None:
    body = run("nginx 502 bad gateway upstream connection refused", "--tenant", "acme",
               "--dataset", "edge")
    assert {acme_edge.stem_of(e["document_id"]) for e in body["evidence"]} == {"edge-502"}

    with pytest.raises(CommandError, match="no tenant"):
        run(KAFKA_LAG, "--tenant", "nobody")
    with pytest.raises(CommandError, match="no active dataset"):
        run(KAFKA_LAG, "--tenant", "acme", "--dataset", "missing")


@pytest.mark.django_db
def test_a_broken_stored_config_is_a_command_error_not_an_empty_answer(
        acme: Imported) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={}, changed_by="test")
    RagConfig.objects.filter(pk=config.pk).update(max_context_chars=300, max_excerpt_chars=900)
    out = StringIO()
    with pytest.raises(CommandError, match="RagConfigError"):
        call_command("lookup", KAFKA_LAG, "--tenant", "acme", stdout=out)
    assert json.loads(out.getvalue())["evidence_status"] == "UNAVAILABLE"
