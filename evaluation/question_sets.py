"""Question sets, read by one parser in two formats.

The hit-test file (`knowledge_base/eval/questions.jsonl`, for `manage.py hit_test` and
`bench_agents`): JSON lines whose objects have exactly `id`, `query`, `expect` (the source path
of the one right runbook, or null when nothing in the knowledge base answers it), `kind` and
`split`.

A batch hit test's set, as people upload or paste it in the admin: JSON lines or CSV. JSON
lines: one object per line with `query` (or `question`), an optional `id`, and the expected
documents as `expected` (a list, one string, or null) or `expect` (as in the hit-test file;
other keys are ignored), and optionally the question's `filters`, as an agent's call gives
them (docs/api.md). CSV: a header row naming a `query` (or `question`) column, optional `id`,
`expected` and `filters` (JSON) columns; several expected documents are separated by `|`. An
expected document is a source path (`web/nginx-502.md`) or a document id; none means
off-topic: the right answer is EMPTY.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from django.conf import settings

from retrieval.ragconfig.filters import filters_of, undeclared_refusal
from retrieval.types import CallFilters

MAX_BYTES = 1_000_000
MAX_QUESTIONS = 2_000
MAX_EXPECTED = 20
MAX_EXPECTED_CHARS = 500
MAX_ID_CHARS = 200
KINDS = ("identifier", "mixed", "near-miss", "plain", "off-topic")
SPLITS = ("fit", "held-out")


class QuestionSetError(ValueError):
    """Not a question set: what is wrong, and on which line."""


@dataclass(frozen=True)
class Question:
    """A question of the hit-test file."""

    id: str
    query: str
    expect: str | None  # source path of the right runbook; None: off-topic, EMPTY is right
    kind: str
    split: str


@dataclass(frozen=True)
class BatchQuestion:
    id: str
    query: str
    expected: tuple[str, ...]  # empty: off-topic
    filters: dict[str, Any] = field(default_factory=dict)  # its call's, as given (checked)

    def as_json(self) -> dict[str, Any]:
        row = {"id": self.id, "query": self.query, "expected": list(self.expected)}
        return {**row, "filters": self.filters} if self.filters else row

    @classmethod
    def of_json(cls, row: dict[str, Any]) -> BatchQuestion:
        return cls(id=row["id"], query=row["query"], expected=tuple(row["expected"]),
                   filters=row.get("filters") or {})

    @cached_property
    def narrowed(self) -> CallFilters:
        """What its lookup narrows to (read once)."""
        return filters_of(self.filters)


def undeclared_question(questions: Iterable[BatchQuestion], declared: list[str]) -> str | None:
    """Why a set may not run for a tenant that declared `declared` filterable (a question
    filtering on a field it did not declare), else None."""
    for question in questions:
        refusal = undeclared_refusal(question.narrowed, declared)
        if refusal:
            return f"question {question.id}: {refusal}"
    return None


def _text(value: str) -> bool:
    """Text a database stores: JSON may carry lone surrogates ("\\ud800"), UTF-8 cannot."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def _expected(line: int, raw: object) -> tuple[str, ...]:
    if raw is None or raw == "":
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise QuestionSetError(f"line {line}: expected must be a document's source path or "
                               "id, a list of them, or empty")
    if not all(_text(i) for i in items):
        raise QuestionSetError(f"line {line}: an expected document is not valid Unicode text")
    cleaned = tuple(dict.fromkeys(i.strip() for i in items if i.strip()))
    if len(cleaned) > MAX_EXPECTED:
        raise QuestionSetError(f"line {line}: more than {MAX_EXPECTED} expected documents")
    if any(len(i) > MAX_EXPECTED_CHARS for i in cleaned):
        raise QuestionSetError(f"line {line}: an expected document of more than "
                               f"{MAX_EXPECTED_CHARS} characters")
    return cleaned


def _question(line: int, row: dict[str, Any]) -> BatchQuestion:
    query = row.get("query", row.get("question"))
    if not isinstance(query, str) or not query.strip():
        raise QuestionSetError(f"line {line}: no query (a `query` or `question` field)")
    if not _text(query):
        raise QuestionSetError(f"line {line}: the query is not valid Unicode text")
    if len(query) > settings.KB_MAX_QUERY_CHARS:
        raise QuestionSetError(f"line {line}: the query is longer than "
                               f"{settings.KB_MAX_QUERY_CHARS} characters")
    raw_id = row.get("id")
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        raise QuestionSetError(f"line {line}: id must be a string or a number")
    question_id = str(raw_id).strip() if raw_id is not None else ""
    if len(question_id) > MAX_ID_CHARS or not _text(question_id):
        raise QuestionSetError(f"line {line}: an id must be text of {MAX_ID_CHARS} characters "
                               "at most")
    expected = row["expected"] if "expected" in row else row.get("expect")
    return BatchQuestion(id=question_id, query=query.strip(),
                         expected=_expected(line, expected), filters=_filters(line, row))


def _filters(line: int, row: dict[str, Any]) -> dict[str, Any]:
    """The question's `filters`, checked as a call's are (a CSV cell holds their JSON)."""
    raw = row.get("filters")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError) as exc:
            raise QuestionSetError(f"line {line}: filters are not JSON") from exc
    if raw is None or raw == {}:
        return {}
    if not isinstance(raw, dict):
        raise QuestionSetError(f"line {line}: filters are a JSON object")
    try:
        filters_of(raw)
    except ValueError as exc:
        raise QuestionSetError(f"line {line}: filters: {exc}"[:500]) from exc
    return raw


def _json_lines(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line's object, with its line number."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise QuestionSetError(f"line {number}: not JSON ({exc.msg})") from exc
        except (ValueError, RecursionError) as exc:  # a number too long, nesting too deep
            raise QuestionSetError(f"line {number}: not a question ({exc})"[:300]) from exc
        if not isinstance(row, dict):
            raise QuestionSetError(f"line {number}: not a JSON object")
        yield number, row


def _unique(seen: set[str], line: int, question_id: str) -> None:
    if question_id in seen:
        raise QuestionSetError(f"line {line}: id {question_id!r} is used twice")
    seen.add(question_id)


def _csv_rows(text: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    try:
        columns = {(name or "").strip().lower() for name in reader.fieldnames or []}
        if not columns & {"query", "question"}:
            raise QuestionSetError("line 1: a CSV needs a header row with a `query` column "
                                   "(and optionally `id`, `expected` and `filters`)")
        for row in reader:
            values = {(k or "").strip().lower(): v for k, v in row.items() if k is not None}
            if not any((v or "").strip() for v in values.values() if isinstance(v, str)):
                continue
            expected = values.get("expected") or values.get("expect") or ""
            values["expected"] = expected.split("|")
            rows.append((reader.line_num, values))
    except csv.Error as exc:
        raise QuestionSetError(f"line {reader.line_num}: not CSV ({exc})") from exc
    return rows


def question_set_parse(raw: bytes) -> list[BatchQuestion]:
    """The questions of an uploaded or pasted set; QuestionSetError names the first problem.
    Questions without an id are numbered q1, q2, … by their place in the set."""
    if len(raw) > MAX_BYTES:
        raise QuestionSetError(f"{len(raw)} bytes: a question set may have {MAX_BYTES} at most")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QuestionSetError("not UTF-8 text") from exc
    if not text.strip():
        raise QuestionSetError("no questions")
    rows = list(_json_lines(text)) if text.lstrip()[0] in "{[" else _csv_rows(text)
    if not rows:
        raise QuestionSetError("no questions")
    if len(rows) > MAX_QUESTIONS:
        raise QuestionSetError(f"{len(rows)} questions: a set may have {MAX_QUESTIONS} at most")
    questions: list[BatchQuestion] = []
    seen: set[str] = set()
    for place, (line, row) in enumerate(rows, 1):
        question = _question(line, row)
        if not question.id:
            question = replace(question, id=f"q{place}")
        _unique(seen, line, question.id)
        questions.append(question)
    return questions


def _file_question(number: int, row: dict[str, Any]) -> Question:
    fields = {"id", "query", "expect", "kind", "split"}
    if set(row) != fields:
        raise QuestionSetError(f"line {number}: the keys must be exactly {sorted(fields)}")
    if not (isinstance(row["id"], str) and row["id"].strip()):
        raise QuestionSetError(f"line {number}: id must be a non-empty string")
    if not (isinstance(row["query"], str) and row["query"].strip()):
        raise QuestionSetError(f"line {number}: query must be a non-empty string")
    if row["kind"] not in KINDS:
        raise QuestionSetError(f"line {number}: kind must be one of {', '.join(KINDS)}")
    if row["split"] not in SPLITS:
        raise QuestionSetError(f"line {number}: split must be one of {', '.join(SPLITS)}")
    off_topic = row["kind"] == "off-topic"
    if off_topic != (row["expect"] is None) or not (
            row["expect"] is None or isinstance(row["expect"], str) and row["expect"].strip()):
        raise QuestionSetError(f"line {number}: expect must be null exactly when kind is "
                               "off-topic, else a runbook's source path")
    return Question(id=row["id"], query=row["query"].strip(), expect=row["expect"],
                    kind=row["kind"], split=row["split"])


def questions_load(path: Path) -> list[Question]:
    """Read a hit-test file; refuses more than MAX_BYTES or MAX_QUESTIONS, names a bad line."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise QuestionSetError(f"{path}: cannot read it ({exc.strerror})") from exc
    if size > MAX_BYTES:
        raise QuestionSetError(f"{path}: {size} bytes, more than the {MAX_BYTES} allowed")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise QuestionSetError(f"{path}: not UTF-8") from exc
    questions: list[Question] = []
    seen: set[str] = set()
    for number, row in _json_lines(text):
        if len(questions) == MAX_QUESTIONS:
            raise QuestionSetError(f"{path}: more than {MAX_QUESTIONS} questions")
        question = _file_question(number, row)
        _unique(seen, number, question.id)
        questions.append(question)
    if not questions:
        raise QuestionSetError(f"{path}: no questions")
    return questions


def questions_of_split(questions: Iterable[Question], split: str) -> list[Question]:
    return [q for q in questions if split == "all" or q.split == split]
