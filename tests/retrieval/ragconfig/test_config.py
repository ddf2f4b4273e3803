"""RagConfigConverter: strict parsing, ranges, cross-field rules (no database)."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError

import pytest

from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.settings import SETTING_NAMES, RagSettings

convert = RagConfigConverter.to_settings


def errors_of(values: dict[str, object], **kwargs: object) -> dict[str, str]:
    with pytest.raises(RagConfigError) as info:
        convert(values, **kwargs)  # type: ignore[arg-type]
    return info.value.errors


def test_defaults_are_the_seed_values() -> None:
    s = convert({})
    # Seed 003 §2: each retriever fetches 20 (the seed's internal retriever), no score floor.
    assert (s.max_results, s.min_score, s.enable_query_transform) == (20, 0.0, False)
    assert s.query_transform_strategy == "REWRITE"
    assert s.enabled_retrievers == ("HYBRID",)  # seed 000 §6: hybrid (DESIGN.md)
    assert (s.retrieval_execution_mode, s.aggregation_strategy) == ("SIMPLE", "RANK")
    assert (s.enable_rerank, s.rerank_top_n) == (False, 5)
    assert (s.enable_quality_assessment, s.quality_threshold) == (False, 0.7)
    assert (s.enable_correction, s.max_retry_count) == (False, 2)
    assert dict(s.metadata_filters) == {}
    assert (s.enable_fallback, s.timeout_millis) == (True, 30000)
    assert (s.retrieve_k, s.return_n) == (20, 5)
    assert (s.neighbour_expansion, s.neighbour_window) == ("NONE", 1)
    # Fusion departs from the seed's plain RRF(60) by measurement (docs/benchmarks.md).
    assert (s.fusion_method, s.rrf_k, s.dense_weight, s.bm25_weight) == ("ADAPTIVE", 5, 0.3, 0.7)
    assert s.max_chunks_per_document == 2
    assert (s.reference_threshold, s.precise_threshold) == (0.35, 0.6)
    assert s.max_l2_distance is None  # the embedder's calibration
    assert convert({"max_l2_distance": ""}).max_l2_distance is None
    assert convert({"max_l2_distance": "0.5"}).max_l2_distance == 0.5
    assert (s.kb_scope, s.max_context_chars, s.max_excerpt_chars) == ("", 6000, 1500)


@pytest.mark.parametrize("raw, expected", [
    (True, True), (False, False), (1, True), (0, False), ("1", True), ("0", False),
    ("true", True), ("false", False), ("TRUE", True), (" False ", False), (" 1\n", True),
])
def test_accepted_boolean_spellings(raw: object, expected: bool) -> None:
    assert convert({"enable_rerank": raw}).enable_rerank is expected


@pytest.mark.parametrize("raw", [
    "yes please", "yes", "no", "on", "off", "", " ", 2, -1, 1.0, 0.0, None, [], "tru", "01",
])
def test_rejected_boolean_spellings_never_become_true(raw: object) -> None:
    errors = errors_of({"enable_fallback": raw})
    assert "enable_fallback" in errors


@pytest.mark.parametrize("raw, expected", [(7, 7), ("7", 7), (" 12 ", 12)])
def test_integers_accept_ints_and_digit_strings(raw: object, expected: int) -> None:
    assert convert({"return_n": raw}).return_n == expected


@pytest.mark.parametrize("raw", [True, False, 5.0, 5.5, "5.0", "five", "", None, "1e1"])
def test_integers_are_strict(raw: object) -> None:
    assert "return_n" in errors_of({"return_n": raw})


@pytest.mark.parametrize("raw, expected", [(0.5, 0.5), (1, 1.0), ("0.25", 0.25), (" .4 ", 0.4)])
def test_floats_accept_numbers_and_numeric_strings(raw: object, expected: float) -> None:
    assert convert({"quality_threshold": raw}).quality_threshold == expected


@pytest.mark.parametrize("raw", [True, "nan", float("nan"), float("inf"), "0.5x", "", None])
def test_floats_are_strict(raw: object) -> None:
    assert "quality_threshold" in errors_of({"quality_threshold": raw})


@pytest.mark.parametrize("name, raw", [
    ("return_n", 0), ("rrf_k", 0), ("retrieve_k", 0), ("retrieve_k", 201),
    ("max_chunks_per_document", 0), ("max_retry_count", -1), ("timeout_millis", 50),
    ("reference_threshold", -0.1), ("precise_threshold", 1.01), ("min_score", 2),
    ("max_l2_distance", 0), ("max_l2_distance", 4.5), ("max_context_chars", 100),
])
def test_ranges(name: str, raw: object) -> None:
    assert name in errors_of({name: raw})


def test_chat_model_settings_are_checked() -> None:
    s = convert({"chat_base_url": " https://llm.example.com/v1 ", "chat_model": "qwen2.5:7b",
                 "chat_api_key_env": "KB_CHAT_API_KEY_ACME", "chat_timeout_seconds": "2.5",
                 "chat_max_tokens": "400"})
    assert (s.chat_base_url, s.chat_model, s.chat_api_key_env) == (
        "https://llm.example.com/v1", "qwen2.5:7b", "KB_CHAT_API_KEY_ACME")
    assert (s.chat_timeout_seconds, s.chat_max_tokens) == (2.5, 400)
    assert convert({"chat_base_url": "", "chat_api_key_env": ""}).chat_base_url == ""
    errors = errors_of({"chat_base_url": "file:///etc/passwd", "chat_model": "a b",
                        # Only the tenant keys' variables: never DJANGO_SECRET_KEY and the like.
                        "chat_api_key_env": "DJANGO_SECRET_KEY",
                        "chat_timeout_seconds": -1, "chat_max_tokens": 10**6})
    assert set(errors) == {"chat_base_url", "chat_model", "chat_api_key_env",
                           "chat_timeout_seconds", "chat_max_tokens"}


def test_max_l2_distance_upper_bound_is_four() -> None:
    assert convert({"max_l2_distance": 4}).max_l2_distance == 4.0


def test_enums_are_checked_and_canonicalised() -> None:
    s = convert({"neighbour_expansion": "adjacent", "query_transform_strategy": "multi_query",
                 "retrieval_execution_mode": "parallel", "aggregation_strategy": "rank",
                 "enabled_retrievers": ["VECTOR", "BM25"]})
    assert (s.neighbour_expansion, s.query_transform_strategy) == ("ADJACENT", "MULTI_QUERY")
    assert (s.retrieval_execution_mode, s.aggregation_strategy) == ("PARALLEL", "RANK")
    errors = errors_of({"neighbour_expansion": "all", "aggregation_strategy": "SUM",
                        "query_transform_strategy": 1})
    assert set(errors) == {"neighbour_expansion", "aggregation_strategy",
                           "query_transform_strategy"}


def test_enabled_retrievers() -> None:
    several = {"retrieval_execution_mode": "PARALLEL"}
    assert convert({"enabled_retrievers": ["bm25", "VECTOR", "BM25"], **several}
                   ).enabled_retrievers == ("BM25", "VECTOR")
    assert convert({"enabled_retrievers": "VECTOR, HYBRID", **several}).enabled_retrievers == (
        "VECTOR", "HYBRID")
    bads: list[object] = [[], "", " , ", ["VECTOR", "GRAPH"], 3, [None]]
    for bad in bads:
        assert "enabled_retrievers" in errors_of({"enabled_retrievers": bad})


@pytest.mark.parametrize("mode, retrievers, ok", [
    ("SIMPLE", ["BM25"], True), ("SIMPLE", ["VECTOR", "BM25"], False),
    ("PARALLEL", ["VECTOR", "BM25"], True), ("PARALLEL", ["HYBRID"], False),
    ("SEQUENTIAL", ["BM25", "HYBRID"], True), ("SEQUENTIAL", ["VECTOR"], False),
    ("HYBRID", ["VECTOR", "BM25"], True), ("HYBRID", ["HYBRID"], False),
    ("HYBRID", ["VECTOR", "BM25", "HYBRID"], False),
])
def test_each_execution_mode_takes_the_retrievers_it_can_run(
        mode: str, retrievers: list[str], ok: bool) -> None:
    values = {"retrieval_execution_mode": mode, "enabled_retrievers": retrievers}
    if ok:
        assert convert(values).retrieval_execution_mode == mode
    else:
        assert set(errors_of(values)) == {"enabled_retrievers"}


def test_metadata_filters_whitelist_and_values() -> None:
    s = convert({"metadata_filters": {"category": "ops", "domain": ["cache", "db"]}})
    assert dict(s.metadata_filters) == {"category": "ops", "domain": ("cache", "db")}
    bads: list[object] = [
        {"tenant_id": "7"},  # server-side filters cannot be set by a user
        {"category": "x" * 201},
        {"domain": ["ok", 3]},
        {"domain": []},
        {"category": ""},
        ["category"],
        None,
    ]
    for bad in bads:
        assert "metadata_filters" in errors_of({"metadata_filters": bad}), bad


def test_metadata_filter_value_at_the_limit_is_accepted() -> None:
    assert convert({"metadata_filters": {"file_name": "x" * 200}}).metadata_filters


def test_unknown_keys_are_errors() -> None:
    errors = errors_of({"maxResults": 3, "return_n": 3})
    assert errors == {"maxResults": "unknown setting"}


def test_every_field_error_is_reported_at_once() -> None:
    errors = errors_of({"enable_rerank": "maybe", "return_n": 0, "kb_scope": 5})
    assert set(errors) == {"enable_rerank", "return_n", "kb_scope"}


@pytest.mark.parametrize("values, field", [
    ({"enable_correction": True}, "enable_correction"),
    ({"judge_translation": True, "translate_query": False}, "judge_translation"),
    ({"reference_threshold": 0.7, "precise_threshold": 0.6}, "reference_threshold"),
    ({"model_reference_threshold": 0.7, "model_precise_threshold": 0.6},
     "model_reference_threshold"),
    ({"retrieve_k": 4, "return_n": 5}, "retrieve_k"),
    ({"enable_rerank": True, "rerank_top_n": 30, "retrieve_k": 20}, "rerank_top_n"),
    ({"max_excerpt_chars": 7000, "max_context_chars": 6000}, "max_excerpt_chars"),
])
def test_cross_field_rules(values: dict[str, object], field: str) -> None:
    assert field in errors_of(values)


def test_cross_field_rules_pass_when_satisfied() -> None:
    s = convert({"enable_correction": "1", "enable_quality_assessment": "true",
                 "reference_threshold": 0.6, "precise_threshold": 0.6,
                 "retrieve_k": 5, "return_n": 5})
    assert s.enable_correction and s.enable_quality_assessment
    # rerank_top_n > retrieve_k is fine while rerank is off
    assert convert({"rerank_top_n": 50, "retrieve_k": 20}).rerank_top_n == 50


def test_cross_field_rules_see_the_base() -> None:
    base = convert({"enable_quality_assessment": True, "enable_correction": True})
    errors = errors_of({"enable_quality_assessment": False}, base=base)
    assert "enable_correction" in errors


def test_values_override_base() -> None:
    base = convert({"return_n": 3, "enabled_retrievers": ["VECTOR"]})
    s = convert({"return_n": 4}, base=base)
    assert (s.return_n, s.enabled_retrievers) == (4, ("VECTOR",))


def test_to_dict_is_json_safe_and_round_trips() -> None:
    s = convert({"enabled_retrievers": ["VECTOR", "BM25"], "retrieval_execution_mode": "HYBRID",
                 "metadata_filters": {"domain": ["a", "b"], "category": "c"}})
    data = RagConfigConverter.to_dict(s)
    assert set(data) == set(SETTING_NAMES)
    assert json.loads(json.dumps(data)) == data
    assert data["enabled_retrievers"] == ["VECTOR", "BM25"]
    assert data["metadata_filters"] == {"domain": ["a", "b"], "category": "c"}
    assert convert(data) == s


def test_settings_are_immutable() -> None:
    s = RagSettings()
    with pytest.raises(FrozenInstanceError):
        s.return_n = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.metadata_filters["category"] = "x"  # type: ignore[index]
