"""Quality assessment of an evidence set without a model (seed 003 §3); the chat model's
judge (model_judge.py) gives the same shape.

score = 0.6 · top quality (the best chunk's dense distance on the embedder's calibrated scale:
        the same number the relevance thresholds read)
      + 0.25 · term coverage (the share of the query's words, identifiers and CJK bigrams found
        in the best chunk: what BM25 agrees with)
      + 0.15 · rank agreement (how far the returned order agrees with the dense distances)

Each part lies in [0, 1], so the score does too; the parts go to the trace.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from retrieval.analysis import normalize_text
from retrieval.types import ScoredChunk

WEIGHTS = {"top": 0.6, "coverage": 0.25, "agreement": 0.15}
_LATIN = re.compile(r"[0-9a-z_][0-9a-z_.+#\-]*[0-9a-z_+#]|[0-9a-z]")
_CJK = re.compile(r"[\u3400-\u9fff]+")
_MAX_TERMS = 64


class Quality(Protocol):
    """A grade in [0, 1] of one evidence set, and a better query when the grader has one."""

    @property
    def score(self) -> float: ...

    @property
    def correction(self) -> str: ...

    def note(self) -> str: ...


@dataclass(frozen=True)
class QualityScore:
    score: float
    top: float
    coverage: float
    agreement: float
    correction: str = ""  # the rules have no better query to offer

    def note(self) -> str:
        return (f"quality {self.score:.3f} (top {self.top:.3f}, coverage {self.coverage:.3f}, "
                f"agreement {self.agreement:.3f})")


def query_terms(query: str) -> set[str]:
    """Latin words and identifiers (≥ 2 chars, kept whole: v2.3, c++, 0x5d09) and CJK bigrams."""
    text = normalize_text(query)
    terms = {t for t in _LATIN.findall(text) if len(t) >= 2}
    for run in _CJK.findall(text):
        terms.update(run[i:i + 2] for i in range(max(len(run) - 1, 1)))
    return set(sorted(terms)[:_MAX_TERMS])


class QualityAssessor:
    def assess(self, query: str, chunks: Sequence[ScoredChunk]) -> QualityScore:
        if not chunks:
            return QualityScore(0.0, 0.0, 0.0, 0.0)
        best = chunks[0]
        top = max(c.quality for c in chunks)
        coverage = _coverage(query_terms(query), best)
        agreement = _agreement(chunks[:5])
        score = (WEIGHTS["top"] * top + WEIGHTS["coverage"] * coverage
                 + WEIGHTS["agreement"] * agreement)
        return QualityScore(round(score, 4), round(top, 4), round(coverage, 4),
                            round(agreement, 4))


def _coverage(terms: set[str], chunk: ScoredChunk) -> float:
    if not terms:
        return 0.0
    text = normalize_text(" ".join((chunk.title, chunk.breadcrumb, chunk.content)))
    return sum(1 for t in terms if t in text) / len(terms)


def _agreement(chunks: Sequence[ScoredChunk]) -> float:
    """The share of ordered pairs whose dense distances agree with their order (0.5: unknown)."""
    distances = [c.dense_l2 for c in chunks]
    if len(chunks) < 2:
        return 1.0 if distances and distances[0] is not None else 0.5
    agree = total = 0
    for i in range(len(distances)):
        for j in range(i + 1, len(distances)):
            a, b = distances[i], distances[j]
            if a is None or b is None:
                continue
            total += 1
            agree += a <= b
    return agree / total if total else 0.5
