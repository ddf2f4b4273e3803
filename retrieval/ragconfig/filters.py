"""A call's `filters` as the tools take them (their contract, under metadata_filters' own
rules: call_filters in config.py), and the same for the commands and the admin's hit test."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.settings import api_settings

from datasets.ingestion.formats.kinds import Format
from datasets.ingestion.limits import FIELD_NAME
from datasets.models import MAX_FILTERABLE_FIELDS
from kbplatform.errors import ErrorCode
from kbplatform.fields import BoundedListField
from retrieval.ragconfig.config import call_filters
from retrieval.ragconfig.settings import MAX_FILTER_VALUE_CHARS, MAX_FILTER_VALUES
from retrieval.types import CallFilters


def _filter_values(what: str) -> BoundedListField:
    return BoundedListField(
        child=serializers.CharField(max_length=MAX_FILTER_VALUE_CHARS), required=False,
        min_length=1, max_length=MAX_FILTER_VALUES,
        help_text=f"Only documents whose {what} is one of these.")


class FieldFilters(serializers.DictField):
    """{field: [values]} on the frontmatter fields the tenant declared filterable; its size
    and names checked before its values."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=_filter_values("frontmatter field"), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            if not 0 < len(data) <= MAX_FILTERABLE_FIELDS:
                raise serializers.ValidationError(
                    f"1 to {MAX_FILTERABLE_FIELDS} fields, each with its values")
            if not all(isinstance(k, str) and FIELD_NAME.fullmatch(k) for k in data):
                raise serializers.ValidationError(
                    "field names are lower-case identifiers (a-z, 0-9, _)")
        return super().to_internal_value(data)


@extend_schema_serializer(component_name="LookupFilters")
class LookupFiltersInput(serializers.Serializer[CallFilters]):
    """Narrow the search when the task names what it is about: given documents (ids from
    earlier evidence), a folder or path, a format, frontmatter tags, category, domain or
    business key, a file name, or when the content changed. Every key given must match; a
    list's values are alternatives."""

    document_ids = BoundedListField(
        child=serializers.CharField(max_length=200), required=False, min_length=1,
        max_length=100, help_text="Only these documents: a `docId`, or an evidence id "
                                  "naming its document.")
    category = _filter_values("frontmatter category")
    domain = _filter_values("frontmatter domain")
    business_key = _filter_values("frontmatter business key")
    file_name = _filter_values("file name")
    # DRF takes declared fields off the class, so this does not shadow Field.source.
    source = BoundedListField(  # type: ignore[assignment]
        child=serializers.CharField(max_length=MAX_FILTER_VALUE_CHARS), required=False,
        min_length=1, max_length=MAX_FILTER_VALUES, help_text="Only documents whose source "
        "path starts with one of these (a folder `runbooks/db/`, a file's path).")
    format = BoundedListField(
        child=serializers.ChoiceField(choices=[f.value for f in Format]), required=False,
        min_length=1, max_length=len(Format), help_text="Only documents of these formats.")
    tags = BoundedListField(
        child=serializers.CharField(max_length=MAX_FILTER_VALUE_CHARS), required=False,
        min_length=1, max_length=MAX_FILTER_VALUES, help_text="Only documents whose "
        "frontmatter keywords hold one of these (case aside).")
    # As with `source`, DRF takes the field off the class: Serializer.fields stays its own.
    fields = FieldFilters(  # type: ignore[assignment]
        required=False, help_text="Only documents whose frontmatter field holds one of the "
        "values given (case aside), for each field given: fields the tenant declared "
        "filterable (list_datasets names them), e.g. {\"team\": [\"sre\"]}.")
    updated_after = serializers.CharField(
        required=False, max_length=64, help_text="Only documents whose content changed at or "
        "after this ISO 8601 date or date-time (UTC unless it says otherwise).")
    updated_before = serializers.CharField(
        required=False, max_length=64, help_text="Only documents whose content changed before "
        "this ISO 8601 date or date-time (UTC unless it says otherwise).")

    def to_internal_value(self, data: Any) -> Any:
        # An unknown key would otherwise be dropped, and the call would search unfiltered. One
        # error under a fixed name: the caller's keys go in its message (the answer), never in
        # its code (the audit keeps codes), and a few of them at most.
        keys = list(self._declared_fields)  # self.fields, as the type checker cannot see it
        if isinstance(data, Mapping) and (unknown := [k for k in data if k not in keys]):
            named = ", ".join(repr(str(key)[:40]) for key in unknown[:3])
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise serializers.ValidationError(
                {api_settings.NON_FIELD_ERRORS_KEY: [
                    f"not a filter: {named}{more} (allowed: {', '.join(keys)})"]},
                code=ErrorCode.INVALID)
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> Any:
        try:
            return call_filters(attrs)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc


def undeclared_refusal(filters: CallFilters, declared: Sequence[str]) -> str | None:
    """Why `filters` may not run for a tenant that declared `declared` filterable (a field it
    did not declare), else None."""
    undeclared = filters.match.undeclared(declared)
    if not undeclared:
        return None
    named = ", ".join(declared) if declared else "none"
    return (f"not a filterable field of this tenant: {', '.join(map(repr, undeclared))} "
            f"(declared: {named}; the tenant's admin page declares them)")


def filters_of(raw: object) -> CallFilters:
    """A call's `filters` as decoded JSON (None or {}: none), under the tools' own rules, for
    the commands, the admin's hit test and the questions of batch runs; ValueError naming
    what is wrong."""
    if raw is None or raw == {}:
        return CallFilters()
    data = LookupFiltersInput(data=raw)
    if not data.is_valid():
        raise ValueError(json.dumps(data.errors, ensure_ascii=False))
    filters: CallFilters = data.validated_data
    return filters


def filters_from(text: str) -> CallFilters:
    """A call's `filters` written as JSON ("": none), as filters_of reads them."""
    if not text.strip():
        return CallFilters()
    try:
        return filters_of(json.loads(text))
    except RecursionError:  # nested past Python's stack
        raise ValueError("nested too deeply") from None
