"""Does a runbook still come first when it is uploaded as DOCX, HTML, text or PDF instead of
markdown? The runbooks knowledge_base/eval/questions.jsonl asks about are converted by the test
itself (from their markdown) into each format, imported into a dataset of their own, converted
back by the platform and asked the on-topic questions through the hit test (evaluation/
hit_test.py): right runbook first must stay within 5 points of the markdown figure of the same
run (10 for PDF, whose text has no headings to split at).

The datasets are one tenant's, so that every format is asked under the same BM25 statistics
(Milvus Lite's are its segments', and a tenant's rows have a partition of their own): what is
compared is the conversion, not five corpora of 29 runbooks each (docs/benchmarks.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from django.conf import settings

from evaluation.hit_test import HitReport, hit_test_run
from evaluation.question_sets import Question, questions_load
from tests.datasets.builders import api_client, lookup
from tests.datasets.ingestion.office_files import docx_of, html_of, pdf_of, text_of
from tests.retrieval.conftest import MakeKey, import_runbooks

QUESTIONS = settings.KB_KNOWLEDGE_DIR / "eval" / "questions.jsonl"
FORMATS: dict[str, Callable[[str], bytes]] = {
    "md": str.encode, "docx": docx_of, "html": html_of, "txt": text_of, "pdf": pdf_of}
# Percentage points of right-runbook-first a format may lose against markdown.
TOLERANCE = {"docx": 5, "html": 5, "txt": 5, "pdf": 10}


def _in(fmt: str, source: str) -> str:
    return str(PurePosixPath(source).with_suffix(f".{fmt}"))


def _folder(root: Path, fmt: str, runbooks: set[str]) -> Path:
    folder = root / fmt
    for source in runbooks:
        target = folder / _in(fmt, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(FORMATS[fmt]((settings.KB_KNOWLEDGE_DIR / source).read_text()))
    return folder


def _asker(client: Any) -> Callable[[str], dict[str, Any]]:
    return lambda query: lookup(client, query)


def _first_rate(report: HitReport) -> float:
    on = report.on_topic
    return 100 * on.first / on.questions


@pytest.mark.embedded  # five imports of the runbooks: once is enough
def test_right_runbook_first_in_every_format_stays_near_markdown(
        store: Any, make_key: MakeKey, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    questions = [q for q in questions_load(QUESTIONS) if q.expect is not None]
    runbooks = {q.expect for q in questions if q.expect}
    # Every format in first, then the questions: each is asked under the same statistics.
    datasets = {fmt: import_runbooks(_folder(tmp_path, fmt, runbooks), tenant="q",
                                     dataset=fmt).dataset for fmt in FORMATS}
    rates: dict[str, float] = {}
    for fmt in FORMATS:
        client = api_client(make_key(tenant="q", datasets=(datasets[fmt],))[1])
        asked: list[Question] = [dataclasses.replace(q, expect=_in(fmt, q.expect or ""))
                                 for q in questions]
        report = hit_test_run(questions=asked, ask=_asker(client))
        rates[fmt] = _first_rate(report)
        with capsys.disabled():  # the figures belong in the CI log
            on = report.on_topic
            print(f"\nright runbook first, {fmt} ({settings.KB_EMBEDDER}): {on.first}/"
                  f"{on.questions} ({rates[fmt]:.0f} %), anywhere {on.anywhere}")
    for fmt, tolerance in TOLERANCE.items():
        assert rates[fmt] >= rates["md"] - tolerance, (fmt, rates)
