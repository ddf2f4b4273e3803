"""Drop-in evidence backends for other agent stacks, each the same scoped, audited, gated
lookup in another's shape: Dify's External Knowledge API (`POST …/retrieval`) and OpenAI's
vector-store search (`POST …/vector_stores/{id}/search`). Their knowledge base / vector store
is a dataset of the key, by id or by name; their errors are in each one's own shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from datasets.documents.selectors import db_id, readable_datasets
from datasets.ingestion.limits import FIELD_NAME
from datasets.tenancy.keys import Caller
from kbplatform.errors import ErrorCode, NotFound
from retrieval.lookup.project import Evidence, LookupViews
from retrieval.lookup.service import Trim, lookup_scope, served_lookup
from retrieval.ragconfig.filters import LookupFiltersInput
from retrieval.tools.calls import ToolCall
from retrieval.tools.registry import Operation, Tool
from retrieval.tools.rendering import json_text
from retrieval.tools.views import ToolApi, tool_api
from retrieval.types import CallFilters, EvidenceStatus

FIELDS = ("category", "domain", "business_key", "file_name")  # frontmatter, and file name
UPDATED = "updated_at"  # when a document's content last changed
_DATES = ("updated_after", "updated_before")
MAX_CONDITIONS = 10


def _knowledge(who: Caller, name: str) -> int:
    """The dataset a knowledge base / vector store id names: a dataset of the key's lookups,
    by id, else by name; NotFound otherwise (another tenant's as one that does not exist)."""
    readable = readable_datasets(caller=who)
    pk = db_id(name)
    found = next((d for d, _ in readable if d == pk), None) or next(
        (d for d, dataset in readable if dataset == name), None)
    if found is None:
        raise NotFound(f"no knowledge base {name!r} this key may read")
    return found


def _field_key(name: object) -> str | None:
    """The key under which a condition on `name` is kept: a built-in filter's own, or
    `fields.<name>` for a field the tenant may have declared filterable (lookup_scope refuses
    one it did not); None for no name a filter could have."""
    if name in FIELDS:
        return str(name)
    if isinstance(name, str) and FIELD_NAME.fullmatch(name) and name not in (UPDATED,
                                                                             "document_id"):
        return f"fields.{name}"
    return None


def _narrowed(asked: dict[str, Any]) -> CallFilters:
    """The conditions as a call's `filters`, under the tools' own contract (its keys, its
    bounds: at most 50 values of 200 characters, 100 documents)."""
    declared = {key.removeprefix("fields."): values for key, values in asked.items()
                if key.startswith("fields.")}
    asked = {key: values for key, values in asked.items() if not key.startswith("fields.")}
    data = LookupFiltersInput(data={**asked, "fields": declared} if declared else asked)
    if not data.is_valid():
        raise serializers.ValidationError(data.errors)
    filters: CallFilters = data.validated_data
    return filters


def _epoch_or_iso(value: Any) -> str | None:
    """A date as the filters take it: ISO 8601 as given, epoch seconds converted; None for
    anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC).isoformat()
        except (OverflowError, OSError, ValueError):
            return None
    return None


def _served(who: Caller, knowledge: str, query: str, narrowed: CallFilters, trim: Trim
            ) -> tuple[LookupViews, list[tuple[float, Evidence]]]:
    """The lookup, what `trim` keeps of it (only that is recorded, for the guard and the
    audit), and (score, evidence) of each item: the gate's calibrated quality, 0-1."""
    filters = lookup_scope(caller=who, requested=[_knowledge(who, knowledge)],
                           narrowed=narrowed)
    served = served_lookup(filters=filters, query=query, trim=trim)
    items = served.result.pack.items if served.view.evidence else ()
    return served, [(round(item.chunk.quality, 4), evidence)
                    for item, evidence in zip(items, served.view.evidence, strict=True)]


# --- Dify: POST {endpoint}/retrieval ------------------------------------------------------------

@extend_schema_serializer(component_name="DifyRetrievalSetting")
class DifyRetrievalSettingInput(serializers.Serializer[dict[str, Any]]):
    top_k = serializers.IntegerField(min_value=1, max_value=100)
    score_threshold = serializers.FloatField(min_value=0.0, max_value=1.0)


@extend_schema_serializer(component_name="DifyRetrieval")
class DifyRetrievalInput(serializers.Serializer[dict[str, Any]]):
    knowledge_id = serializers.CharField(max_length=100, help_text="A dataset of the key, by "
                                         "id or by name.")
    query = serializers.CharField(max_length=settings.KB_MAX_QUERY_CHARS)
    retrieval_setting = DifyRetrievalSettingInput()
    metadata_condition = serializers.JSONField(
        required=False, allow_null=True, help_text="{logical_operator, conditions: [{name, "
        "comparison_operator, value}]}: `is`/`in` on category, domain, business_key, "
        "file_name, document_id or a field the tenant declared filterable; `after`/`before` "
        "on updated_at (ISO 8601 or epoch seconds). "
        "`or` joins one condition. Null, or no conditions: no narrowing.")

    def validate_retrieval_setting(self, value: dict[str, Any]) -> Trim:
        return Trim(limit=value["top_k"], min_quality=value["score_threshold"])

    def validate_metadata_condition(self, value: Any) -> CallFilters:
        if value is None or isinstance(value, Mapping) and value.get("conditions") is None:
            return CallFilters()  # what Dify sends when nothing narrows the search
        if not isinstance(value, Mapping) or not isinstance(value["conditions"], list):
            raise serializers.ValidationError("an object with `conditions`, a list")
        conditions = value["conditions"]
        if len(conditions) > MAX_CONDITIONS:
            raise serializers.ValidationError(f"at most {MAX_CONDITIONS} conditions")
        if value.get("logical_operator") not in (None, "and", "or") or (
                value.get("logical_operator") == "or" and len(conditions) > 1):
            raise serializers.ValidationError("conditions are joined by `and` (`or` only "
                                              "joins one)")
        asked: dict[str, Any] = {}
        for condition in conditions:
            key, values = _dify_condition(condition)
            if key in asked:
                raise serializers.ValidationError(f"one condition per field: {key!r} twice")
            asked[key] = values
        return _narrowed(asked)


def _dify_condition(condition: Any) -> tuple[str, Any]:
    """(filters key, value) of one Dify condition; a ValidationError for one we cannot keep
    (ignored, it would widen the search)."""
    if not isinstance(condition, Mapping):
        raise serializers.ValidationError("each condition is an object")
    name, operator = condition.get("name"), condition.get("comparison_operator")
    value = condition.get("value")
    key = "document_ids" if name == "document_id" else _field_key(name)
    if key is not None and operator in ("is", "in"):
        values = [value] if operator == "is" else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise serializers.ValidationError(f"{name} {operator}: a string (is) or a list of "
                                              "strings (in)")
        return key, values
    when = _epoch_or_iso(value)
    if name == UPDATED and operator in ("after", "before") and when is not None:
        return f"updated_{operator}", when
    raise serializers.ValidationError(
        f"not a condition this knowledge base filters by: {str(name)[:40]!r} "
        f"{str(operator)[:20]!r} (is / in on {', '.join((*FIELDS, 'document_id'))} or a "
        f"field the tenant declared filterable; after / before on {UPDATED}, a date or "
        "epoch seconds)")


@dataclass(frozen=True)
class DifyArgs:
    knowledge_id: str
    query: str
    retrieval_setting: Trim  # top_k, score_threshold
    metadata_condition: CallFilters = CallFilters()


@extend_schema_serializer(component_name="DifyRecord")
class DifyRecordOutput(serializers.Serializer[dict[str, Any]]):
    content = serializers.CharField(help_text="The excerpt. Retrieved text: untrusted data.")
    score = serializers.FloatField(help_text="The gate's calibrated quality of the chunk, 0-1.")
    title = serializers.CharField(allow_blank=True)
    metadata = serializers.DictField(help_text="document_id (cite it), source, breadcrumb, "
                                     "location, commit, also_in, tool_call_id.")


@extend_schema_serializer(component_name="DifyError")
class DifyErrorOutput(serializers.Serializer[dict[str, Any]]):
    error_code = serializers.IntegerField(help_text="1001 no Bearer key, 1002 a key refused, "
                                          "2001 no such knowledge base; else the HTTP status.")
    error_msg = serializers.CharField()


@extend_schema_serializer(component_name="DifyRetrievalResult")
class DifyRetrievalOutput(serializers.Serializer[dict[str, Any]]):
    records = DifyRecordOutput(many=True)


def dify_retrieval_call(who: Caller, args: DifyArgs) -> ToolCall:
    served, scored = _served(who, args.knowledge_id, args.query, args.metadata_condition,
                             args.retrieval_setting)
    record = replace(served.record, tool_name="dify_retrieval")
    if served.view.evidence_status is EvidenceStatus.UNAVAILABLE:
        return ToolCall({"error_code": 503, "error_msg": "the knowledge base is unavailable: "
                         "retry later"}, record, unavailable=True)
    return ToolCall({"records": [
        {"content": e.excerpt, "score": score, "title": e.title or e.source,
         "metadata": _metadata(e, served.view.tool_call_id)} for score, e in scored]}, record)


def _metadata(evidence: Evidence, tool_call_id: str) -> dict[str, Any]:
    return {"document_id": evidence.document_id, "source": evidence.source,
            "breadcrumb": evidence.breadcrumb, "location": evidence.location,
            "commit": evidence.commit,
            "also_in": [copy.document_id for copy in evidence.also_in],
            "tool_call_id": tool_call_id}


DIFY = Tool(
    "dify_retrieval", "Dify's External Knowledge API.", "/api/dify/retrieval",
    dify_retrieval_call, json_text, DifyRetrievalInput, DifyArgs, audited=True,
    operation=Operation(
        "Dify's External Knowledge API",
        "Register `{base}/api/dify` in Dify as an external knowledge API with a tool key, and "
        "a dataset's id or name as the knowledge id. lookup_knowledge with the key's scope "
        "and config; its READY evidence as records. Errors as Dify reads them: "
        "{error_code, error_msg} — 1001 no Bearer key (403), 1002 a key refused (403), "
        "2001 no such knowledge base for the key (404); otherwise the HTTP status.",
        DifyRetrievalOutput, errors=(400, 403, 404, 413, 415, 503), error=DifyErrorOutput))


def _dify_error(status: int, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    code = body.get("code")
    if code == ErrorCode.NOT_AUTHENTICATED:
        return 403, {"error_code": 1001, "error_msg": "Invalid Authorization header format. "
                     "Expected 'Bearer <api-key>' format."}
    if code == ErrorCode.AUTHENTICATION_FAILED:
        return 403, {"error_code": 1002, "error_msg": "Authorization failed"}
    if code == ErrorCode.NOT_FOUND:
        return 404, {"error_code": 2001, "error_msg": "The knowledge does not exist"}
    return status, {"error_code": status, "error_msg": _message(body)}


# --- OpenAI: POST {base_url}/vector_stores/{vector_store_id}/search ---------------------------

@extend_schema_serializer(component_name="VectorStoreSearch")
class VectorSearchInput(serializers.Serializer[dict[str, Any]]):
    vector_store_id = serializers.CharField(max_length=100, help_text="The path's (a body's "
                                            "is replaced): a dataset of the key, by id or name.")
    query = serializers.JSONField(help_text="A string, or a list of strings searched as one.")
    max_num_results = serializers.IntegerField(min_value=1, max_value=50, default=10)
    filters = serializers.JSONField(required=False, help_text=(
        "A comparison filter {type, key, value} or a compound {type: and|or, filters}: eq / in "
        "on category, domain, business_key, file_name or a field the tenant declared "
        "filterable; gte / lt on updated_at (epoch seconds "
        "or ISO 8601); `or` of eq / in on one key."))
    ranking_options = serializers.JSONField(required=False, help_text="{ranker, "
                                            "score_threshold}: the threshold is kept.")
    rewrite_query = serializers.BooleanField(default=False, help_text="Accepted; the lookup "
                                             "analyses every query its own way.")

    def validate_query(self, value: Any) -> str:
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not texts or not all(
                isinstance(t, str) for t in texts):
            raise serializers.ValidationError("a string or a list of strings")
        query = " ".join(t.strip() for t in texts).strip()
        if not query or len(query) > settings.KB_MAX_QUERY_CHARS:
            raise serializers.ValidationError(
                f"1 to {settings.KB_MAX_QUERY_CHARS:,} characters")
        return query

    def validate_filters(self, value: Any) -> CallFilters:
        return _narrowed(_openai_filter(value, top=True))

    def validate_ranking_options(self, value: Any) -> float:
        threshold = value.get("score_threshold", 0.0) if isinstance(value, Mapping) else None
        if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise serializers.ValidationError("an object whose score_threshold is 0-1")
        return float(threshold)


def _openai_filter(value: Any, *, top: bool) -> dict[str, Any]:
    """A filters object as call_filters' keys; a ValidationError for one we cannot keep."""
    if not isinstance(value, Mapping):
        raise serializers.ValidationError("a filter is an object")
    kind = value.get("type")
    if kind in ("and", "or") and top:
        parts = value.get("filters")
        if not isinstance(parts, list) or not 0 < len(parts) <= MAX_CONDITIONS:
            raise serializers.ValidationError(f"`filters`: 1 to {MAX_CONDITIONS} filters")
        asked: dict[str, Any] = {}
        for part in parts:
            for key, values in _openai_filter(part, top=False).items():
                if kind == "or" and key not in _DATES and (
                        not asked or key in asked):
                    asked[key] = [*asked.get(key, []), *values]
                elif kind == "and" and key not in asked:
                    asked[key] = values
                else:
                    raise serializers.ValidationError(
                        "`and` joins filters of different keys, `or` eq / in on one key")
        return asked
    field, operator, operand = value.get("key"), kind, value.get("value")
    named = _field_key(field)
    if named is not None and operator in ("eq", "in"):
        values = [operand] if operator == "eq" else operand
        if isinstance(values, list) and all(isinstance(v, str) for v in values):
            return {named: values}
    when = _epoch_or_iso(operand)
    if field == UPDATED and operator in ("gte", "lt") and when is not None:
        return {"updated_after" if operator == "gte" else "updated_before": when}
    raise serializers.ValidationError(
        f"not a filter this vector store keeps: {str(field)[:40]!r} {str(operator)[:10]!r} "
        f"(eq / in on {', '.join(FIELDS)} or a field the tenant declared filterable; gte / "
        f"lt on {UPDATED})")


@dataclass(frozen=True)
class VectorSearchArgs:
    vector_store_id: str
    query: str
    max_num_results: int = 10
    filters: CallFilters = CallFilters()
    ranking_options: float = 0.0  # of the ranking options, the score threshold kept
    rewrite_query: bool = False


@extend_schema_serializer(component_name="VectorStoreSearchContent")
class VectorSearchContentOutput(serializers.Serializer[dict[str, Any]]):
    type = serializers.ChoiceField(choices=["text"])
    text = serializers.CharField(help_text="The excerpt. Retrieved text: untrusted data.")


@extend_schema_serializer(component_name="VectorStoreSearchHit")
class VectorSearchHitOutput(serializers.Serializer[dict[str, Any]]):
    file_id = serializers.CharField(help_text="The evidence id (`<docId>#<anchor>`): cite it.")
    filename = serializers.CharField()
    score = serializers.FloatField(help_text="The gate's calibrated quality, 0-1.")
    attributes = serializers.DictField(help_text="title, breadcrumb, commit, tool_call_id.")
    content = VectorSearchContentOutput(many=True)


@extend_schema_serializer(component_name="OpenAIErrorDetail")
class OpenAIErrorDetailOutput(serializers.Serializer[dict[str, Any]]):
    message = serializers.CharField()
    type = serializers.CharField()
    param = serializers.CharField(allow_null=True)
    code = serializers.CharField(allow_null=True, help_text="The API's own error code.")


@extend_schema_serializer(component_name="OpenAIError")
class OpenAIErrorOutput(serializers.Serializer[dict[str, Any]]):
    error = OpenAIErrorDetailOutput()


@extend_schema_serializer(component_name="VectorStoreSearchResult")
class VectorSearchOutput(serializers.Serializer[dict[str, Any]]):
    object = serializers.ChoiceField(choices=["vector_store.search_results.page"])
    search_query = serializers.ListField(child=serializers.CharField(), help_text="The "
                                         "query searched, as OpenAI lists it.")
    # DRF takes declared fields off the class, so this does not shadow Serializer.data.
    data = VectorSearchHitOutput(many=True)  # type: ignore[assignment]
    has_more = serializers.BooleanField()
    next_page = serializers.CharField(allow_null=True)


def vector_search_call(who: Caller, args: VectorSearchArgs) -> ToolCall:
    served, scored = _served(who, args.vector_store_id, args.query, args.filters,
                             Trim(limit=args.max_num_results, min_quality=args.ranking_options))
    record = replace(served.record, tool_name="vector_store_search")
    if served.view.evidence_status is EvidenceStatus.UNAVAILABLE:
        return ToolCall(_openai_error(503, "the vector store is unavailable: retry later"),
                        record, unavailable=True)
    return ToolCall({"object": "vector_store.search_results.page", "search_query": [args.query],
                     "data": [{"file_id": e.document_id, "filename": e.source, "score": score,
                               "attributes": {"title": e.title, "breadcrumb": e.breadcrumb,
                                              "commit": e.commit,
                                              "tool_call_id": served.view.tool_call_id},
                               "content": [{"type": "text", "text": e.excerpt}]}
                              for score, e in scored],
                     "has_more": False, "next_page": None}, record)


VECTOR_SEARCH = Tool(
    "vector_store_search", "OpenAI's vector-store search.",
    "/api/openai/vector_stores/{vector_store_id}/search", vector_search_call, json_text,
    VectorSearchInput, VectorSearchArgs, audited=True,
    operation=Operation(
        "OpenAI's vector-store search",
        "For OpenAI's SDK with `base_url` `{base}/api/openai` and a tool key: "
        "`client.vector_stores.search(dataset id or name, query=…)`. lookup_knowledge with "
        "the key's scope and config; its READY evidence as results, one page. Errors as "
        "OpenAI's: {error: {message, type, param, code}}.",
        VectorSearchOutput, errors=(400, 401, 404, 413, 415, 503), error=OpenAIErrorOutput))


def _openai_error(status: int, message: str, code: str = "") -> dict[str, Any]:
    kind = ("server_error" if status >= 500 else
            {401: "authentication_error", 403: "permission_error",
             404: "not_found_error"}.get(status, "invalid_request_error"))
    return {"error": {"message": message, "type": kind, "param": None,
                      "code": code or None}}


def _message(body: Mapping[str, Any]) -> str:
    """The API's error as one line of text (the fields at fault as JSON)."""
    extra = body.get("extra")
    fields = extra.get("fields") if isinstance(extra, dict) else None
    named = f": {json.dumps(fields, ensure_ascii=False)}" if fields else ""
    return f"{body.get('message', '')}{named}"


# --- the views -----------------------------------------------------------------------------------

def _shaped(tool: Tool, shape: Callable[[int, Mapping[str, Any]], tuple[int, dict[str, Any]]]
            ) -> type[ToolApi]:
    """`tool`'s REST view, whose errors (audited once, a refused key included, by ToolApi)
    are in the other stack's shape, with the API's headers (Retry-After, WWW-Authenticate)."""
    base = tool_api(tool)

    def handle_exception(self: ToolApi, exc: Exception) -> Response:
        response = base.handle_exception(self, exc)
        response.status_code, response.data = shape(response.status_code, response.data)
        return response

    return type(base.__name__, (base,), {"handle_exception": handle_exception})


BACKENDS = (DIFY, VECTOR_SEARCH)  # REST only: no MCP tool, no tool schema
DifyApi = _shaped(DIFY, _dify_error)
VectorSearchApi = _shaped(VECTOR_SEARCH, lambda status, body: (
    status, _openai_error(status, _message(body), str(body.get("code", "")))))
