"""A document as the index takes it, composed once (datasets/ingestion/compose.py): a document
converted now is parsed once, by its conversion, and split; one converted before is parsed from
its stored text; both give the same chunks."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.documents.services import configured_chunking, document_store
from datasets.ingestion import compose, conversion
from datasets.ingestion.compose import document_drafts
from tests.datasets.ingestion.office_files import html_of

pytestmark = pytest.mark.django_db

RUNBOOK = "# 磁盘写满\n\n## 处理\n\n清理 /var/log 下的旧日志，再确认 df -h。\n"


def test_a_document_converted_now_is_parsed_once(kb: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    document = document_store(dataset=kb.dataset, file_name="disk.html",
                              raw=html_of(RUNBOOK, title="磁盘写满"), max_bytes=1 << 20,
                              queue=False).document
    parses: list[bool] = []
    for module in (compose, conversion):
        parse = module.parse_markdown

        def counted(*args: Any, parse: Any = parse, **kwargs: Any) -> Any:
            parses.append(kwargs.get("stored", False))
            return parse(*args, **kwargs)

        monkeypatch.setattr(module, "parse_markdown", counted)
    converted_now = document_drafts(document=document, chunking=configured_chunking())
    assert parses == [False]  # the conversion's parse, not a second one
    document.refresh_from_db()
    assert document.title == "磁盘写满"
    stored = document_drafts(document=document, chunking=configured_chunking())
    assert parses == [False, True]  # converted before: its stored text, parsed once
    assert converted_now == stored and "df -h" in stored[-1].content
