"""A document's language is known at ingestion (issue 37): set when it is stored or converted,
filled in for the documents stored before, and seen by the next lookup of its dataset."""

from __future__ import annotations

import importlib
import time
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from datasets.documents.services import dataset_documents_changed, document_store
from datasets.ingestion.conversion import document_convert
from datasets.ingestion.language import text_language
from datasets.models import Document
from datasets.tenancy.permissions import ANONYMOUS, PLATFORM, Access
from retrieval.lookup.l0 import documents_view
from retrieval.lookup.revisions import lookup_revisions
from tests.datasets.builders import markdown

ZH_RUNBOOK = """# Kafka 消费者积压排查

消费者组在某个分区上已提交的位点与最新位点之间的差值持续增长，说明消费速度跟不上生产速度。

```bash
kafka-consumer-groups.sh --bootstrap-server kafka-1:9092 --describe --group order-sync
kafka-consumer-groups.sh --reset-offsets --to-latest --group order-sync --topic orders
```

用 `kafka-consumer-groups.sh --describe` 查看 LAG 列，见 https://kafka.apache.org/documentation/
"""
EN_RUNBOOK = """# Nginx 502 Bad Gateway

Nginx answers 502 when the upstream refuses the connection; Chinese teams call it 网关错误.
Restart php-fpm and check that proxy_pass points at the port the application listens on.
"""


@pytest.mark.parametrize(("text", "language"), [
    (ZH_RUNBOOK, "zh"),  # its commands and URL are code, not English
    (EN_RUNBOOK, "en"),  # a Chinese term in English prose
    ("MySQL 从库延迟很大怎么排查", "zh"),
    ("kafka lag 怎么办", "zh"),  # Chinese grammar around an English name
    ("how do I restart a stuck kafka consumer", "en"),
    ("ERROR 1040", "en"),
    ("502 ?", ""),  # no letter of either language
    ("", ""),
])
def test_a_text_is_chinese_when_it_has_as_many_cjk_characters_as_english_words(
        text: str, language: str) -> None:
    assert text_language(text) == language


@pytest.mark.parametrize("text", ["`" * 2_000_000, "~" * 2_000_000, "````x\n```\n" * 200_000,
                                  "\n" * 2_000_000, "http://" * 300_000])
def test_the_language_of_the_largest_upload_is_known_in_linear_time(text: str) -> None:
    started = time.monotonic()
    text_language(text)
    # A backtracking pattern ran past ten minutes on the first of them.
    assert time.monotonic() - started < 3


@pytest.mark.django_db
def test_a_stored_document_has_its_language_and_the_lookup_view_sees_it(kb: Any) -> None:
    def store(name: str, raw: bytes) -> Document:
        return document_store(dataset=kb.dataset, file_name=name, raw=raw, queue=False,
                              max_bytes=settings.KB_MAX_UPLOAD_BYTES).document

    def languages() -> frozenset[str]:
        return documents_view(tenant_id=kb.tenant.pk, dataset_ids=[kb.dataset.pk],
                              revisions=lookup_revisions(tenant_id=kb.tenant.pk,
                                                         dataset_ids=[kb.dataset.pk])
                              ).languages(PLATFORM)

    assert store("nginx.md", EN_RUNBOOK.encode()).language == "en"
    assert languages() == {"en"}
    # A converted format has no text until the worker converts it: no language, then its own.
    notes = store("notes.txt", "磁盘满了：用 df -h 找到占用最大的目录，清理旧日志。".encode())
    assert notes.language == "" and languages() == {"en"}
    assert document_convert(document=notes)[0].language == "zh"
    assert Document.objects.get(pk=notes.pk).language == "zh"
    # The conversion changed what lookups know of the dataset: this process's view follows.
    assert languages() == {"en", "zh"}
    kafka = store("kafka.md", markdown("Kafka 消费者积压", {"症状": "消费者组的积压持续增长。"},
                                       domain="messaging", keywords=["consumer lag"]))
    assert kafka.language == "zh"
    # Read by one group only, it decides nothing for the others: a question is not translated
    # into a language only documents its caller may not read are in.
    Document.objects.filter(pk__in=[notes.pk, kafka.pk]).update(readers=["group:dba"])
    dataset_documents_changed(dataset_id=kb.dataset.pk)
    view = documents_view(tenant_id=kb.tenant.pk, dataset_ids=[kb.dataset.pk],
                          revisions=lookup_revisions(tenant_id=kb.tenant.pk,
                                                     dataset_ids=[kb.dataset.pk]))
    assert view.languages(ANONYMOUS) == view.languages(Access.person("bob", ["ops"])) == {"en"}
    assert view.languages(Access.person("ann", ["dba"])) == view.languages(PLATFORM) == {
        "en", "zh"}


@pytest.mark.django_db(transaction=True)
def test_documents_stored_before_get_their_language_from_their_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    migration = importlib.import_module("datasets.migrations.0017_document_language")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    before, after = [("datasets", "0016_source_max_page_bytes_upload_limit")], [
        ("datasets", "0017_document_language")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    tenant = old.get_model("datasets", "Tenant").objects.create(slug="old", name="old")
    dataset = old.get_model("datasets", "Dataset").objects.create(tenant=tenant, name="ops")
    texts = [ZH_RUNBOOK, EN_RUNBOOK, "", "how do I restart a stuck kafka consumer",
             "MySQL 从库延迟很大怎么排查"]
    documents = old.get_model("datasets", "Document").objects
    pks = [documents.create(dataset=dataset, source_path=f"{n}.md", file_name=f"{n}.md",
                            source_text=text, content_hash=str(n)).pk
           for n, text in enumerate(texts)]
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    new = executor.loader.project_state(after).apps.get_model("datasets", "Document")
    languages = dict(new.objects.values_list("pk", "language"))
    assert [languages[pk] for pk in pks] == ["zh", "en", "", "en", "zh"]
    call_command("migrate", verbosity=0)  # leave the schema as the other tests expect it
