"""The relevance model: how likely a candidate chunk is evidence for the question, from every
signal the gate has on it (issue 39).

A dense distance alone cannot tell a near-domain question no runbook answers from one a
runbook in the other language answers (docs/benchmarks.md, "Why a cross-lingual question
loses in the hybrid"). The model reads the distance beside the question's words and
identifiers in the chunk, the BM25 arm's match, the chunk's place, how much of the pool its
document holds and whether it is in the question's language: a logistic regression, one per
embedder (the distance means something else in each), its coefficients a JSON file beside
this module, fitted by `manage.py fit_relevance` from the `fit` halves of labelled question
sets (never a held-out half). Its probability is the chunk's quality under the config's
`relevance_gate` MODEL, against `model_reference_threshold` and `model_precise_threshold`,
and orders the first ten candidates under `relevance_order` (docs/benchmarks.md, "The
relevance model"; `fit_relevance --check`: what its probability means on held-out halves).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np

from datasets.ingestion.language import UNKNOWN, text_language
from retrieval.analysis import normalize_text
from retrieval.lexical import QueryTerms

MODELS_DIR = Path(__file__).with_name("relevance_models")
# The candidates the model judges, in the store's order: the pool the signals describe (a
# document's share of it). Candidates further down are not evidence under the model.
PLACES = 10
# Ridge on the standardised coefficients: a few hundred questions fit ten of them.
L2_PENALTY = 1.0


@dataclass(frozen=True)
class ChunkSignals:
    """What the lookup knows of one candidate, each a number the model weighs."""

    dense_quality: float  # the calibrated dense distance (0 when not known)
    term_coverage: float  # the share of the question's content terms in the chunk's text
    heading_coverage: float  # … in its title and breadcrumb
    bm25_match: float  # 1 when the BM25 arm returned it
    identifiers_found: float  # the share of the question's identifiers in it (0: none asked)
    identifiers_missing: float  # how many of them it lacks
    inverse_place: float  # 1 / its place in the store's order
    # (The share of the judged pool its document holds − the share each of the pool's
    # documents would hold if they shared it evenly) × dense_quality: a pool crowded by one
    # far document (a long one, for a question no runbook answers) counts little, and a pool
    # of one document (a small dataset: the document always holds all of it) nothing.
    document_share_quality: float
    other_language: float  # 1 when it is written in the other language than the question
    other_language_quality: float  # other_language × dense_quality

    def vector(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in FEATURES)


FEATURES = tuple(f.name for f in fields(ChunkSignals))  # a model file names them in this order


@dataclass(frozen=True)
class CandidateText:
    """A candidate as the signals read it."""

    document: str  # its document (the evidence key when it names none)
    text: str  # its title, breadcrumb and content through normalize_text
    headings: str  # its title and breadcrumb
    language: str  # text_language of its content
    dense_quality: float
    bm25_match: bool


def pool_signals(question: str, terms: QueryTerms, candidates: Sequence[CandidateText]
                 ) -> list[ChunkSignals]:
    """The signals of the first PLACES candidates (in the store's order)."""
    judged = candidates[:PLACES]
    language = text_language(question)
    documents = [c.document for c in judged]
    even = 1.0 / len(set(documents)) if documents else 0.0
    identifiers = len(terms.identifiers)
    signals = []
    for place, candidate in enumerate(judged, start=1):
        found = len(terms.identifiers_in(candidate.text)) if identifiers else 0
        other = float(language != UNKNOWN and candidate.language not in (UNKNOWN, language))
        signals.append(ChunkSignals(
            dense_quality=candidate.dense_quality,
            term_coverage=terms.coverage(candidate.text),
            heading_coverage=terms.coverage(normalize_text(candidate.headings)),
            bm25_match=float(candidate.bm25_match),
            identifiers_found=found / identifiers if identifiers else 0.0,
            identifiers_missing=float(identifiers - found),
            inverse_place=1.0 / place,
            document_share_quality=(documents.count(candidate.document) / len(judged) - even)
            * candidate.dense_quality,
            other_language=other,
            other_language_quality=other * candidate.dense_quality))
    return signals


@dataclass(frozen=True)
class RelevanceModel:
    """A logistic regression over standardised signals."""

    embedder: str
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    fitted_on: dict[str, Any]  # the question sets, split and counts: how to refit it

    def probability(self, signals: ChunkSignals) -> float:
        z = self.bias + sum(w * (x - m) / s for w, x, m, s in zip(
            self.weights, signals.vector(), self.mean, self.scale, strict=True))
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    @cached_property
    def fingerprint(self) -> str:
        """Which fit this is, as the trace names it: the start of its file's sha256 (worked
        out once: every post-processing round of a lookup names it)."""
        return hashlib.sha256(self.as_json().encode()).hexdigest()[:8]

    @classmethod
    def of_json(cls, text: str) -> RelevanceModel:
        raw = json.loads(text)
        model = cls(embedder=str(raw["embedder"]), features=tuple(raw["features"]),
                    mean=tuple(map(float, raw["mean"])), scale=tuple(map(float, raw["scale"])),
                    weights=tuple(map(float, raw["weights"])), bias=float(raw["bias"]),
                    fitted_on=dict(raw["fitted_on"]))
        if model.features != FEATURES or not (
                len(model.mean) == len(model.scale) == len(model.weights) == len(FEATURES)):
            raise ValueError(f"a relevance model of other signals: {model.features}")
        return model


def model_path(embedder: str) -> Path:
    """The file of an embedder's model: its name with each '/' a '-'."""
    return MODELS_DIR / f"{embedder.replace('/', '-')}.json"


# The settings each gate reads its thresholds from: (reference, precise).
THRESHOLDS = {"DISTANCE": ("reference_threshold", "precise_threshold"),
              "MODEL": ("model_reference_threshold", "model_precise_threshold")}


def gate_in_force(relevance_gate: str, embedder: str) -> tuple[str, RelevanceModel | None]:
    """The gate that judges under a config's `relevance_gate` — DISTANCE or MODEL, a key of
    THRESHOLDS — and its model (None: the distance judges, as for an embedder without a
    fitted model)."""
    model = model_for(embedder) if relevance_gate == "MODEL" else None
    return ("DISTANCE" if model is None else "MODEL"), model


@cache
def model_for(embedder: str) -> RelevanceModel | None:
    """The embedder's fitted model, None when none was fitted for it (the gate then reads
    the distance)."""
    path = model_path(embedder)
    return RelevanceModel.of_json(path.read_text(encoding="utf-8")) if path.exists() else None


def fit(embedder: str, rows: Sequence[tuple[ChunkSignals, bool]],
        fitted_on: dict[str, Any]) -> RelevanceModel:
    """Penalised maximum likelihood by Newton's method: deterministic for the same rows."""
    x = np.array([s.vector() for s, _ in rows], dtype=np.float64)
    y = np.array([label for _, label in rows], dtype=np.float64)
    if not (0 < y.sum() < len(y)):
        raise ValueError("fitting needs both relevant and irrelevant candidates")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    penalty = L2_PENALTY * np.diag([0.0] + [1.0] * len(FEATURES))
    w = np.zeros(z.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        step = np.linalg.solve((z * (p * (1 - p))[:, None]).T @ z + penalty,
                               z.T @ (p - y) + penalty @ w)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return RelevanceModel(
        embedder=embedder, features=FEATURES, mean=tuple(round(float(v), 6) for v in mean),
        scale=tuple(round(float(v), 6) for v in scale), bias=round(float(w[0]), 6),
        weights=tuple(round(float(v), 6) for v in w[1:]),
        fitted_on={**fitted_on, "candidates": len(rows), "relevant": int(y.sum())})


# The probability bins a reliability report compares: [0, 0.1), [0.1, 0.2) … [0.9, 1].
RELIABILITY_BINS = 10


@dataclass(frozen=True)
class Reliability:
    """Whether a model's probability means what it says, on labelled candidates it was not
    fitted on: of the candidates it gives about p, about p should be relevant."""

    candidates: int
    relevant: int
    brier: float  # the mean squared error of the probability
    log_loss: float
    auc: float | None  # the chance a relevant candidate gets more than an irrelevant one
    calibration_error: float  # |mean probability − share relevant| of each bin, by its size
    bins: tuple[tuple[float, float, float, int], ...]  # (from, mean probability, share, size)


def reliability(model: RelevanceModel, rows: Sequence[tuple[ChunkSignals, bool]]
                ) -> Reliability:
    """The model's probabilities of `rows` against their labels."""
    return reliability_of([model.probability(s) for s, _ in rows], [label for _, label in rows])


def reliability_of(probabilities: Sequence[float], labels: Sequence[bool]) -> Reliability:
    """Probabilities against labels, in RELIABILITY_BINS equal bins (1.0 in the last)."""
    if not probabilities:
        raise ValueError("no candidate to check the model on")
    p = np.array(probabilities, dtype=np.float64)
    y = np.array(labels, dtype=np.float64)
    clipped = np.clip(p, 1e-12, 1 - 1e-12)  # a probability of exactly 0 or 1 has a finite loss
    index = np.minimum((p * RELIABILITY_BINS).astype(int), RELIABILITY_BINS - 1)
    table = []
    error = 0.0
    for b in range(RELIABILITY_BINS):
        inside = index == b
        if inside.any():
            mean, share = float(p[inside].mean()), float(y[inside].mean())
            table.append((b / RELIABILITY_BINS, round(mean, 4), round(share, 4),
                          int(inside.sum())))
            error += inside.sum() / len(p) * abs(mean - share)
    return Reliability(
        candidates=len(p), relevant=int(y.sum()),
        brier=round(float(((p - y) ** 2).mean()), 4),
        log_loss=round(float(-(y * np.log(clipped) + (1 - y) * np.log(1 - clipped)).mean()), 4),
        auc=_auc(p, y), calibration_error=round(error, 4), bins=tuple(table))


def _auc(p: np.ndarray, y: np.ndarray) -> float | None:
    """The Mann-Whitney statistic from the probabilities' ranks, ties counting half; None
    with one kind of candidate only."""
    relevant = int(y.sum())
    irrelevant = len(y) - relevant
    if not relevant or not irrelevant:
        return None
    _, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # 1-based, ties their mean
    above = ranks[y == 1].sum() - relevant * (relevant + 1) / 2
    return round(float(above / (relevant * irrelevant)), 4)


# What `fit_relevance` records of each post-processing a lookup runs: the candidates' sources
# and signals. Unset (None) outside it: a lookup records nothing.
_recording: ContextVar[list[list[tuple[str, ChunkSignals]]] | None] = ContextVar(
    "relevance_recording", default=None)


@contextmanager
def recording() -> Iterator[list[list[tuple[str, ChunkSignals]]]]:
    """Within it, each judged pool of the lookups this thread runs, as (source, signals)."""
    pools: list[list[tuple[str, ChunkSignals]]] = []
    token = _recording.set(pools)
    try:
        yield pools
    finally:
        _recording.reset(token)


def record(pool: list[tuple[str, ChunkSignals]]) -> None:
    pools = _recording.get()
    if pools is not None:
        pools.append(pool)


def recording_active() -> bool:
    return _recording.get() is not None
