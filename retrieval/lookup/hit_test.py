"""Hit test: does a question find its runbook, and does an off-topic one find nothing?

A question set is JSON lines (`knowledge_base/eval/questions.jsonl`): each question names the
source path of the one right runbook, or null when nothing in the knowledge base answers it.
The scoring works on the agent-facing answer (`RagResultProjector`'s dict), so the management
command (in process) and the tests (through the REST endpoint) measure the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from retrieval.lookup.project import RagResultProjector, trace_details
from retrieval.lookup.service import lookup_knowledge
from retrieval.types import SearchFilters, SearchMode

MAX_BYTES = 1_000_000
MAX_QUESTIONS = 2_000
KINDS = ("identifier", "mixed", "near-miss", "plain", "off-topic")
SPLITS = ("fit", "held-out")


class QuestionSetError(ValueError):
    """The question file is too big, or a line is not a valid question."""


@dataclass(frozen=True)
class Question:
    id: str
    query: str
    expect: str | None  # source path of the right runbook; None: off-topic, EMPTY is right
    kind: str
    split: str


def _question(number: int, line: str) -> Question:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise QuestionSetError(f"line {number}: not JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise QuestionSetError(f"line {number}: not a JSON object")
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
    """Read a question set; refuses more than MAX_BYTES or MAX_QUESTIONS, names a bad line."""
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
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(questions) == MAX_QUESTIONS:
            raise QuestionSetError(f"{path}: more than {MAX_QUESTIONS} questions")
        question = _question(number, line)
        if question.id in seen:
            raise QuestionSetError(f"line {number}: id {question.id!r} is used twice")
        seen.add(question.id)
        questions.append(question)
    if not questions:
        raise QuestionSetError(f"{path}: no questions")
    return questions


def questions_of_split(questions: Iterable[Question], split: str) -> list[Question]:
    return [q for q in questions if split == "all" or q.split == split]


@dataclass(frozen=True)
class Outcome:
    """One question and what the lookup answered (from the agent-facing dict)."""

    question: Question
    status: str  # READY | EMPTY | UNAVAILABLE
    relevance_level: str
    sources: tuple[str, ...]  # evidence sources, best first

    @classmethod
    def of(cls, question: Question, answer: dict[str, Any]) -> Outcome:
        return cls(question=question, status=str(answer["evidence_status"]),
                   relevance_level=str(answer["relevance_level"]),
                   sources=tuple(str(item["source"]) for item in answer["evidence"]))

    @property
    def first(self) -> bool:
        return bool(self.sources) and self.sources[0] == self.question.expect

    @property
    def anywhere(self) -> bool:
        return self.question.expect in self.sources

    @property
    def empty(self) -> bool:
        return self.status == "EMPTY"

    @property
    def got(self) -> str:
        """The top evidence's source, or the status when there is none."""
        return self.sources[0] if self.sources else self.status

    @property
    def hit(self) -> bool:
        """Right as a user sees it: the right runbook first, or EMPTY for off-topic."""
        return self.empty if self.question.expect is None else self.first


@dataclass(frozen=True)
class Tally:
    questions: int
    first: int  # on-topic: right runbook first
    anywhere: int  # on-topic: right runbook in the evidence
    empty: int  # off-topic: EMPTY (on-topic: EMPTY too, which is a miss)

    def as_json(self) -> dict[str, int]:
        return {"questions": self.questions, "first": self.first, "anywhere": self.anywhere,
                "empty": self.empty}


def _tally(outcomes: Sequence[Outcome]) -> Tally:
    return Tally(questions=len(outcomes), first=sum(o.first for o in outcomes),
                 anywhere=sum(o.anywhere for o in outcomes),
                 empty=sum(o.empty for o in outcomes))


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else "-"


@dataclass(frozen=True)
class HitReport:
    outcomes: tuple[Outcome, ...]

    @property
    def on_topic(self) -> Tally:
        return _tally([o for o in self.outcomes if o.question.expect is not None])

    @property
    def off_topic(self) -> Tally:
        return _tally([o for o in self.outcomes if o.question.expect is None])

    def by_kind(self) -> dict[str, Tally]:
        return {kind: _tally([o for o in self.outcomes if o.question.kind == kind])
                for kind in KINDS if any(o.question.kind == kind for o in self.outcomes)}

    @property
    def misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.hit]

    def as_json(self) -> dict[str, Any]:
        return {
            "on_topic": self.on_topic.as_json(),
            "off_topic": self.off_topic.as_json(),
            "by_kind": {kind: t.as_json() for kind, t in self.by_kind().items()},
            "misses": [{"id": o.question.id, "kind": o.question.kind, "query": o.question.query,
                        "expected": o.question.expect, "got": o.got,
                        "anywhere": o.anywhere, "status": o.status,
                        "relevance_level": o.relevance_level} for o in self.misses],
        }

    def lines(self) -> list[str]:
        on, off = self.on_topic, self.off_topic
        lines = [f"right runbook first:    {_rate(on.first, on.questions)}",
                 f"right runbook anywhere: {_rate(on.anywhere, on.questions)}",
                 f"off-topic EMPTY:        {_rate(off.empty, off.questions)}",
                 "by kind:"]
        for kind, t in self.by_kind().items():
            lines.append(f"  {kind:<10} " + (
                f"EMPTY {_rate(t.empty, t.questions)}" if kind == "off-topic" else
                f"first {_rate(t.first, t.questions)}, anywhere {_rate(t.anywhere, t.questions)}"))
        lines.append(f"misses ({len(self.misses)}):")
        for o in self.misses:
            where = " (found lower)" if o.anywhere and not o.first else ""
            lines.append(f"  {o.question.id} [{o.question.kind}] {o.question.query!r}: expected "
                         f"{o.question.expect or 'EMPTY'}, got {o.got}{where}, "
                         f"relevance {o.relevance_level}")
        return lines


Ask = Callable[[str], dict[str, Any]]


def hit_test_run(*, questions: Iterable[Question], ask: Ask) -> HitReport:
    """Ask every question (`ask` returns the agent-facing answer) and score the answers."""
    return HitReport(tuple(Outcome.of(q, ask(q.query)) for q in questions))


def lookup_asker(filters: SearchFilters, *, mode: SearchMode | None = None,
                 overrides: dict[str, Any] | None = None) -> Ask:
    """The in-process tool call: the tenant's serving config and index (with `mode` and
    `overrides` over the config, when given), the REST projection."""
    projector = RagResultProjector()

    def ask(query: str) -> dict[str, Any]:
        return projector.project(lookup_knowledge(filters=filters, query=query, mode=mode,
                                                  overrides=overrides))

    return ask


# --- one question in the admin's hit-testing page ------------------------------------------

@dataclass(frozen=True)
class HitTest:
    body: dict[str, Any]  # the agent-facing result, exactly as the REST tool returns it
    details: dict[str, Any]  # its retrievalDetails: stages, candidates, gate, pack, timings


def hit_test_question(*, tenant_id: int, dataset_ids: Sequence[int], query: str,
                      overrides: dict[str, Any] | None = None, version: int | None = None
                      ) -> HitTest:
    """One lookup as the tool runs it, with the serving config, or with every setting of
    `overrides` (an earlier `version`'s, or a draft's: version None); nothing is audited or
    stored."""
    result = lookup_knowledge(filters=SearchFilters(tenant_id=tenant_id,
                                                    dataset_ids=tuple(dataset_ids)),
                              query=query, overrides=overrides)
    if overrides is not None:
        result = replace(result, config_version=version)
    return HitTest(RagResultProjector().project(result), trace_details(result))


def compared(*sides: tuple[str, HitTest]) -> list[dict[str, Any]]:
    """Side by side: for each (label, hit test), its answer as JSON text and each piece of
    evidence with whether the other sides hand it out too, and at which rank."""
    ranks = [{e["document_id"]: n for n, e in enumerate(test.body["evidence"], 1)}
             for _, test in sides]
    columns = []
    for index, (label, test) in enumerate(sides):
        others = [r for i, r in enumerate(ranks) if i != index]
        columns.append({
            "label": label, "status": test.body["evidence_status"],
            "relevance_level": test.body["relevance_level"],
            "config_version": test.details.get("config_version"),
            "evidence": [{"document_id": e["document_id"], "source": e["source"], "rank": n,
                          "elsewhere": [r.get(e["document_id"]) for r in others],
                          "same": all(r.get(e["document_id"]) == n for r in others)}
                         for n, e in enumerate(test.body["evidence"], 1)]})
    return columns
