"""A tenant's synonym groups widen the BM25 query of its lookups: a question in one team's
words finds a runbook written in another's; the trace names the groups, never the question;
another tenant's groups never apply; a write is seen by the next lookup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from datasets.models import Tenant
from retrieval.lookup.project import trace_details
from retrieval.lookup.revisions import lookup_revisions
from retrieval.lookup.service import lookup_knowledge
from retrieval.lookup.synonyms import Synonyms, tenant_synonyms
from retrieval.ragconfig.synonyms import synonym_group_delete, synonym_group_save
from retrieval.types import LookupResult, SearchFilters
from tests.retrieval.conftest import NGINX, Imported, import_runbooks

REPLICA = """---
title: MySQL replication lag
domain: database
keywords: [mysql]
category: database
---
# MySQL replication lag

## When the replica falls behind

The replica applies the binlog slower than the primary writes it: check
Seconds_Behind_Source and the relay log on the replica.
"""

MARKER = "payrollzq7"
QUESTION = f"{MARKER} 从库挂了"


def test_the_other_terms_of_a_named_group_are_added_once() -> None:
    synonyms = Synonyms([("从库", "Replica", "slave"), ("证书", "certificate", "cert"),
                         ("go", "golang")])
    expansion = synonyms.expand("从库挂了，replica 还在吗")
    assert expansion.terms == ("slave",)  # "replica" is in the question already
    assert expansion.groups == ("从库 = Replica = slave",)
    # Latin terms on word boundaries: "google" does not name "go"; CJK as substrings.
    assert synonyms.expand("google certificates").groups == ()
    assert synonyms.expand("SSL证书过期").terms == ("certificate", "cert")
    assert not Synonyms([]) and not Synonyms([]).expand("从库").terms


@pytest.fixture
def ops(store: Any, db: None, tmp_path: Path) -> Imported:
    return import_runbooks(tmp_path / "acme", tenant="acme", dataset="ops",
                           files={"replica.md": REPLICA, "nginx.md": NGINX})


def bm25_lookup(data: Imported, query: str = QUESTION) -> LookupResult:
    return lookup_knowledge(filters=SearchFilters(tenant_id=data.tenant.pk,
                                                  dataset_ids=(data.dataset.pk,)),
                            query=query, mode="bm25")


def found(data: Imported, result: LookupResult) -> set[str | None]:
    return {data.stem_of(item.chunk.evidence_key) for item in result.pack.items}


def test_a_chinese_question_finds_an_english_runbook_through_its_tenants_group(
        ops: Imported) -> None:
    globex = Tenant.objects.create(slug="globex")
    synonym_group_save(tenant=globex, terms="从库 = replica", changed_by="ops")
    # Without a group of its own (another tenant's does not apply) BM25 has no term in common.
    without = bm25_lookup(ops)
    assert "replica" not in found(ops, without)
    assert all(trace.stage != "synonyms" for trace in without.traces)

    group = synonym_group_save(tenant=ops.tenant, terms="从库 = replica = slave",
                               changed_by="ops")
    result = bm25_lookup(ops)
    assert found(ops, result) == {"replica"}
    # The query shown is the question as asked: the terms went to BM25 only.
    assert result.query == QUESTION

    # The trace names the group (the tenant's own terms), never the question.
    stages = trace_details(result)["stages"]
    notes = [s["note"] for s in stages if s["stage"] == "synonyms"]
    assert notes == ["BM25 also searched the other terms of ['从库 = replica = slave']"]
    assert MARKER not in str(trace_details(result))

    # A delete is seen by the next lookup of this process.
    synonym_group_delete(group=group)
    assert "replica" not in found(ops, bm25_lookup(ops))


def test_the_groups_are_read_again_only_after_a_write(
        db: None, django_assert_num_queries: Any) -> None:
    tenant = Tenant.objects.create(slug="acme")

    def current() -> Synonyms:  # the revision read as a lookup reads it, then the groups
        return tenant_synonyms(tenant_id=tenant.pk,
                               revisions=lookup_revisions(tenant_id=tenant.pk, dataset_ids=()))

    with django_assert_num_queries(1):  # the revision: a tenant without groups has none
        assert not current()
    group = synonym_group_save(tenant=tenant, terms="从库 = replica", changed_by="ops")
    first = current()
    with django_assert_num_queries(1):  # unchanged: the revision only, the groups cached
        assert current() is first
    synonym_group_save(tenant=tenant, terms="从库 = replica = slave", group=group,
                       changed_by="ops")
    assert current().expand("从库").terms == ("replica", "slave")
