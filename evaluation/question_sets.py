"""Question sets of a batch hit test, as people upload or paste them: JSON lines or CSV.

JSON lines: one object per line with `query` (or `question`), an optional `id`, and the
expected documents as `expected` (a list, one string, or null) or `expect` (the hit-test file
format of knowledge_base/eval/questions.jsonl; other keys are ignored). CSV: a header row naming
a `query` (or `question`) column, optional `id` and `expected` columns; several expected
documents are separated by `|`. An expected document is a source path (`web/nginx-502.md`) or
a document id; none means off-topic: the right answer is EMPTY.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

MAX_BYTES = 1_000_000
MAX_QUESTIONS = 2_000
MAX_EXPECTED = 20
MAX_EXPECTED_CHARS = 500
MAX_ID_CHARS = 200


class QuestionSetError(ValueError):
    """Not a question set: what is wrong, and on which line."""


@dataclass(frozen=True)
class BatchQuestion:
    id: str
    query: str
    expected: tuple[str, ...]  # empty: off-topic

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "query": self.query, "expected": list(self.expected)}

    @classmethod
    def of_json(cls, row: dict[str, Any]) -> BatchQuestion:
        return cls(id=row["id"], query=row["query"], expected=tuple(row["expected"]))


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
                         expected=_expected(line, expected))


def _json_lines(text: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
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
        rows.append((number, row))
    return rows


def _csv_rows(text: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    try:
        columns = {(name or "").strip().lower() for name in reader.fieldnames or []}
        if not columns & {"query", "question"}:
            raise QuestionSetError("line 1: a CSV needs a header row with a `query` column "
                                   "(and optionally `id` and `expected`)")
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
    rows = _json_lines(text) if text.lstrip()[0] in "{[" else _csv_rows(text)
    if not rows:
        raise QuestionSetError("no questions")
    if len(rows) > MAX_QUESTIONS:
        raise QuestionSetError(f"{len(rows)} questions: a set may have {MAX_QUESTIONS} at most")
    questions: list[BatchQuestion] = []
    seen: set[str] = set()
    for place, (line, row) in enumerate(rows, 1):
        question = _question(line, row)
        if not question.id:
            question = BatchQuestion(f"q{place}", question.query, question.expected)
        if question.id in seen:
            raise QuestionSetError(f"line {line}: id {question.id!r} is used twice")
        seen.add(question.id)
        questions.append(question)
    return questions
