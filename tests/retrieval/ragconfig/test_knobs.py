"""One declaration per RagConfig knob: the column, the converter and the database constraints
agree with what RagSettings declares."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import models

from retrieval.ragconfig.config import RagConfigConverter
from retrieval.ragconfig.models import RagConfig
from retrieval.ragconfig.settings import KNOBS, SETTING_NAMES, RagSettings
from retrieval.types import SearchFilters, SearchRequest

D = RagSettings()


def _column(name: str) -> models.Field[Any, Any]:
    return RagConfig._meta.get_field(name)  # type: ignore[return-value]


@pytest.mark.parametrize("name", SETTING_NAMES)
def test_every_setting_is_a_column_that_can_hold_what_the_converter_accepts(name: str) -> None:
    column, declared, default = _column(name), KNOBS[name], getattr(D, name)
    assert column.help_text == declared.help
    stored = column.get_default()
    assert (list(default) if isinstance(default, tuple) else default) == stored or (
        name == "metadata_filters" and stored == dict(default))
    if isinstance(default, bool):
        assert isinstance(column, models.BooleanField)
    elif isinstance(default, int):
        assert declared.bounds is not None and declared.bounds[0] >= 0
        assert isinstance(column, models.PositiveIntegerField)
    elif isinstance(default, float) or default is None:
        assert declared.bounds is not None
        assert isinstance(column, models.FloatField) and column.null == (default is None)
    elif isinstance(default, str):
        assert isinstance(column, models.CharField)
        assert [value for value, _ in column.choices or []] == list(declared.choices)
        assert all(len(choice) <= column.max_length for choice in declared.choices)  # type: ignore[operator]
    else:
        assert isinstance(column, models.JSONField)


def _bounded() -> list[tuple[str, float]]:
    return [(name, value) for name, declared in KNOBS.items() if declared.bounds
            for value in declared.bounds]


def _checks() -> list[models.CheckConstraint]:
    return [c for c in RagConfig._meta.constraints if isinstance(c, models.CheckConstraint)]


def _row(**values: Any) -> dict[str, Any]:
    return {**{name: _column(name).get_default() for name in SETTING_NAMES}, **values}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), _bounded())
def test_the_database_stores_every_value_the_converter_accepts(name: str, value: float) -> None:
    row = _row(**{name: value})
    try:
        RagConfigConverter.to_settings(row)
    except ValueError:
        return  # a cross-field rule (retrieve_k < return_n): the converter's own message
    refused = [c.name for c in _checks() if not _holds(c, row)]
    assert refused == [], f"{name}={value} passes the converter"


@pytest.mark.django_db
@pytest.mark.parametrize("constraint", _checks(), ids=lambda c: c.name)
def test_each_constraint_guards_a_bound_of_the_converter(
        constraint: models.CheckConstraint) -> None:
    # Just past a declared bound of a field it names, the constraint refuses what the
    # converter refuses: it checks the same range, not another one.
    named = {lookup.split("__")[0] for lookup in _lookups(constraint.condition)}
    past = [(name, low - (1 if isinstance(low, int) else 0.1)) for name in named
            if (bounds := KNOBS[name].bounds) for low in (bounds[0],)]
    past += [(name, KNOBS[name].bounds[1] + 0.1) for name in named  # type: ignore[index]
             if isinstance(getattr(D, name), float)]
    refused = [(name, value) for name, value in past
               if not _holds(constraint, _row(**{name: value}))]
    assert refused, f"{constraint.name} refuses nothing past the bounds of {sorted(named)}"
    for name, value in refused:
        with pytest.raises(ValueError):
            RagConfigConverter.to_settings(_row(**{name: value}))


def _holds(constraint: models.CheckConstraint, row: dict[str, Any]) -> bool:
    try:
        constraint.validate(RagConfig, RagConfig(**row))  # type: ignore[attr-defined]
    except ValidationError:
        return False
    return True


def _lookups(condition: Any) -> list[str]:
    found: list[str] = []
    for child in condition.children:
        found += _lookups(child) if hasattr(child, "children") else [child[0]]
    return found


@pytest.mark.parametrize("name", ["fusion_method", "rrf_k", "dense_weight", "bm25_weight"])
def test_a_search_request_that_names_no_fusion_fuses_with_the_settings_defaults(
        name: str) -> None:
    request = SearchRequest(query_text="q", query_vector=None, mode="hybrid", limit=5,
                            filters=SearchFilters(tenant_id=1, dataset_ids=(1,)))
    default = RagConfig._meta.get_field(name).get_default()
    assert getattr(request, name) == getattr(D, name) == default
