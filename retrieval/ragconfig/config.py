"""RAG configuration: one typed, validated value object and the strict converter into it.

Every path that turns stored or submitted values into settings (the admin form, the service,
the selector) goes through `RagConfigConverter`, so a front-end "0"/"1" or a stray "yes please"
is never read as a truthy boolean (seed 003 §3, RagConfigConverter).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from datasets.documents.evidence import EvidenceKey
from datasets.documents.selectors import db_id
from kbplatform.outbound import url_refusal
from retrieval.ragconfig.settings import (
    _TYPES,
    DATE_FILTER_KEYS,
    KNOBS,
    MAX_FILTER_VALUE_CHARS,
    MAX_FILTER_VALUES,
    METADATA_FILTER_KEYS,
    RETRIEVERS,
    SETTING_NAMES,
    FilterValue,
    RagSettings,
)
from retrieval.types import CallFilters, DocumentMatch, MetadataFilter


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


# A call's filters read from the documents' rows (retrieval/types.py DocumentMatch).
DOCUMENT_MATCH_KEYS = tuple(f.name for f in fields(DocumentMatch))


def call_filters(raw: Mapping[str, Any]) -> CallFilters:
    """A call's `filters`: the keys of metadata_filters under their own rules (one whitelist),
    and `document_ids`, each a document's id or one of its evidence ids. An id that could name
    no document is dropped (so a call of malformed ids only searches nothing); one of another
    tenant's documents matches nothing in the query: the two look alike. `raw` is the tool
    contract's validated data (ragconfig/filters.py); ValueError on what it leaves."""
    values = dict(raw)
    named = values.pop("document_ids", None)
    asked_fields = values.pop("fields", {})
    match = DocumentMatch(**{key: tuple(dict.fromkeys(values.pop(key)))
                             for key in DOCUMENT_MATCH_KEYS if key in values},
                          fields=tuple((name, tuple(dict.fromkeys(v.casefold() for v in items)))
                                       for name, items in asked_fields.items()))
    metadata = metadata_filter(_parse_filters(values)) if values else MetadataFilter()
    if named is None:
        return CallFilters(metadata, match=match)
    documents = []
    for item in named:
        key = EvidenceKey.parse(str(item))
        document = db_id(key.doc_id if key else str(item))
        if document is not None and document not in documents:
            documents.append(document)
    return CallFilters(metadata, tuple(documents), match)


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
    if s.judge_translation and not s.translate_query:
        errors["judge_translation"] = "requires translate_query"
    if s.reference_threshold > s.precise_threshold:
        errors["reference_threshold"] = (
            f"must not exceed precise_threshold ({s.precise_threshold})")
    if s.model_reference_threshold > s.model_precise_threshold:
        errors["model_reference_threshold"] = (
            f"must not exceed model_precise_threshold ({s.model_precise_threshold})")
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
