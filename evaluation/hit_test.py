"""Hit test of a question set: does a question find its runbook, and does an off-topic one
find nothing?

The scoring works on the agent-facing answer (`RagToolResult`'s dict), so the management
command (in process) and the tests (through the REST endpoint) measure the same thing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datasets.ingestion.language import text_language
from datasets.models import Document
from evaluation.question_sets import KINDS, Question
from evaluation.suites import translation_outcome
from retrieval.chat import translation_model_for
from retrieval.lookup.graph.translate import QueryTranslator, direction_for
from retrieval.lookup.project import RagToolResult
from retrieval.lookup.service import lookup_knowledge, lookup_settings
from retrieval.ragconfig.config import RagConfigConverter
from retrieval.types import SearchFilters, SearchMode


@dataclass(frozen=True)
class Outcome:
    """One question and what the lookup answered (from the agent-facing dict)."""

    question: Question
    status: str  # READY | EMPTY | UNAVAILABLE
    relevance_level: str
    sources: tuple[str, ...]  # evidence sources, best first
    # On-topic: the question's language → its runbook's ("zh→en"); "" when either is unknown.
    direction: str = ""

    @classmethod
    def of(cls, question: Question, answer: dict[str, Any],
           languages: Mapping[str, str]) -> Outcome:
        expected = languages.get(question.expect or "", "")
        asked = text_language(question.query)
        return cls(question=question, status=str(answer["evidence_status"]),
                   relevance_level=str(answer["relevance_level"]),
                   sources=tuple(str(item["source"]) for item in answer["evidence"]),
                   direction=f"{asked}→{expected}" if asked and expected else "")

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

    def by_direction(self) -> dict[str, Tally]:
        """On-topic questions by their language and their runbook's: crossed ones (zh→en,
        en→zh) apart from those asked in the runbook's own language."""
        directions = sorted({o.direction for o in self.outcomes if o.direction})
        return {d: _tally([o for o in self.outcomes if o.direction == d]) for d in directions}

    @property
    def misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.hit]

    def as_json(self) -> dict[str, Any]:
        return {
            "on_topic": self.on_topic.as_json(),
            "off_topic": self.off_topic.as_json(),
            "by_kind": {kind: t.as_json() for kind, t in self.by_kind().items()},
            "by_direction": {d: t.as_json() for d, t in self.by_direction().items()},
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
        if self.by_direction():
            lines.append("by direction (the question's language → its runbook's):")
            for direction, t in self.by_direction().items():
                lines.append(f"  {direction:<10} first {_rate(t.first, t.questions)}, "
                             f"anywhere {_rate(t.anywhere, t.questions)}")
        lines.append(f"misses ({len(self.misses)}):")
        for o in self.misses:
            where = " (found lower)" if o.anywhere and not o.first else ""
            lines.append(f"  {o.question.id} [{o.question.kind}] {o.question.query!r}: expected "
                         f"{o.question.expect or 'EMPTY'}, got {o.got}{where}, "
                         f"relevance {o.relevance_level}")
        return lines


Ask = Callable[[str], dict[str, Any]]


def hit_test_run(*, questions: Iterable[Question], ask: Ask,
                 languages: Mapping[str, str] | None = None) -> HitReport:
    """Ask every question (`ask` returns the agent-facing answer) and score the answers;
    `languages` (a runbook's source → its language) splits them by direction."""
    return HitReport(tuple(Outcome.of(q, ask(q.query), languages or {}) for q in questions))


def translation_alone_asker(filters: SearchFilters, *, mode: SearchMode | None = None,
                            overrides: dict[str, Any] | None = None,
                            translations: Counter[str] | None = None) -> Ask:
    """`lookup_asker` of each question's translation in place of the question (`translate_query`
    off): how far the bridge to the other language reaches, apart from the lookup's choice
    between a question and its translation (docs/benchmarks.md, "Which search finds a crossed
    question's runbook"). The model, its budget (within half the call's time) and the
    documents' languages are those a lookup serves with, `mode` and `overrides` over the
    config (RagConfigError when they do not hold); a question not translated (the documents
    hold no other language, no model, a failure) is asked as itself. `translations` counts
    the questions that asked the model, by outcome."""
    served = lookup_settings(filters, mode=mode, overrides=overrides)
    translator = QueryTranslator(
        model=translation_model_for(RagConfigConverter.to_dict(served.settings)),
        tenant_id=filters.tenant_id)
    budget_ms = min(served.settings.translation_budget_ms, served.settings.timeout_millis // 2)
    ask = lookup_asker(filters, mode=mode, overrides={**(overrides or {}),
                                                      "translate_query": False})

    def asked(query: str) -> dict[str, Any]:
        direction = direction_for(query, served.languages)
        if direction is None:
            return ask(query)
        translation = translator.translate(query, direction, timeout_s=budget_ms / 1000)
        if translations is not None:
            translations[translation.outcome.value] += 1
        return ask(translation.text or query)

    return asked


def runbook_languages(filters: SearchFilters) -> dict[str, str]:
    """The language of each live document the lookups of `filters` search, by its source."""
    return dict(Document.objects.filter(
        dataset__tenant_id=filters.tenant_id, dataset_id__in=filters.dataset_ids,
        deleted=False).values_list("source_path", "language"))


def lookup_asker(filters: SearchFilters, *, mode: SearchMode | None = None,
                 overrides: dict[str, Any] | None = None,
                 translations: Counter[str] | None = None) -> Ask:
    """The in-process tool call: the tenant's serving config and index (with `mode` and
    `overrides` over the config, when given), the REST projection. `translations` counts the
    questions that asked a model for their translation, by outcome."""
    def ask(query: str) -> dict[str, Any]:
        result = lookup_knowledge(filters=filters, query=query, mode=mode, overrides=overrides)
        outcome = translation_outcome(result)
        if translations is not None and outcome:
            translations[outcome] += 1
        return RagToolResult.of(result).as_dict()

    return ask
