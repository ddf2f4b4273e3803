"""The tools' REST views (one per tool of retrieval/tools/registry.py), their schemas and the
platform's index operations."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.validators import RegexValidator
from django.db import DatabaseError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.models import Channel
from datasets.models import ApiKey
from datasets.tenancy.keys import Caller, caller
from kbplatform.errors import ApiError, ErrorCode
from kbplatform.openapi import WHEN, ErrorSerializer, errors
from retrieval.tools.audit_once import AuditOnce
from retrieval.tools.registry import Tool
from retrieval.tools.schemas import FORMATS, tool_definitions


def _unavailable(component: str, contract: type[serializers.Serializer[Any]]
                 ) -> OpenApiResponse:
    return OpenApiResponse(
        PolymorphicProxySerializer(component_name=component,
                                   serializers=[contract, ErrorSerializer],
                                   resource_type_field_name=None),
        description="A backend failed: the contract with UNAVAILABLE (or the error shape "
                    "when the database is down).")


class ToolView(APIView):
    """A tool of the registry over REST; for an audited one, exactly one audit row per call:
    the answer writes its own, `handle_exception` a failure's, a 401 from `initial` included."""

    tool: Tool
    audit: AuditOnce

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.audit = AuditOnce(self.tool, channel=Channel.REST)
        super().initial(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> Response:
        self.audit.failed(exc, api_key=self._audit_key, payload=self._audit_payload)
        return super().handle_exception(exc)

    def _answer(self, request: Request, data: Any) -> Response:
        done = self.audit.run(caller(request), data)
        return Response(done.body, status=status.HTTP_503_SERVICE_UNAVAILABLE
                        if done.unavailable else status.HTTP_200_OK)

    def _audit_key(self) -> ApiKey | None:
        try:
            user = self.request.user  # authenticates now if a 406 came first; may fail again
        except (exceptions.APIException, DatabaseError):
            return None
        return user.api_key if isinstance(user, Caller) else None

    def _audit_payload(self) -> Mapping[str, Any] | None:
        try:
            data = self.request.data
        except exceptions.APIException:  # an unparsable body; the error is the one audited
            return None
        return data if isinstance(data, Mapping) else None


class ToolApi(ToolView):
    """A tool called with a JSON body (`method` "post")."""

    def post(self, request: Request, **path: str) -> Response:
        """`path`: the URL's own arguments, which a body cannot override."""
        data = request.data
        if path:
            data = {**data, **path} if isinstance(data, Mapping) else path
        return self._answer(request, data)


class ToolReadApi(ToolView):
    """A tool read by its URL (`method` "get"): the path's arguments are its input, and
    what a refused call is audited with. No HEAD: it would run the tool."""

    http_method_names = ["get", "options"]

    def get(self, request: Request, **path: str) -> Response:
        """`?user=` (and `?group=`, once each) name the person it is made for."""
        data: dict[str, Any] = dict(path)
        if "user" in request.query_params or "group" in request.query_params:
            data["on_behalf_of"] = {"user": request.query_params.get("user", ""),
                                    "groups": request.query_params.getlist("group")}
        return self._answer(request, data)

    def _audit_payload(self) -> Mapping[str, Any] | None:
        return dict(self.kwargs)


def _in_path(tool: Tool) -> list[OpenApiParameter]:
    """The input contract's fields as the path parameters they are (strings, each with its
    pattern), and `on_behalf_of` as query parameters: the tool schemas read a GET tool's
    input from them."""
    assert tool.contract is not None, f"{tool.name}: a GET tool takes its input from its path"
    return [*(OpenApiParameter(
        name, str, OpenApiParameter.PATH, description=str(field.help_text),
        pattern=next((re.compile(v.regex).pattern for v in field.validators
                      if isinstance(v, RegexValidator)), None))
        for name, field in tool.contract().fields.items() if name != "on_behalf_of"),
        *ON_BEHALF_OF]


# A GET tool's `on_behalf_of`, in its query.
ON_BEHALF_OF = (
    OpenApiParameter("user", str, description="The person the call is made for (a key that "
                     "may act for people): `on_behalf_of.user`."),
    OpenApiParameter("group", str, many=True, description="Their groups, once each: "
                     "`on_behalf_of.groups`."))


def tool_api(tool: Tool) -> type[ToolView]:
    """The REST view of `tool`, documented by its operation."""
    operation = tool.operation
    assert operation is not None, f"{tool.name} is not served here"
    answered: Any = OpenApiResponse(operation.output, description=operation.answered) \
        if operation.answered else operation.output
    failed = {503: _unavailable(operation.unavailable, operation.output)} \
        if operation.unavailable else {}
    described = {"e400": operation.e400} if operation.e400 else {}
    statuses = operation.errors
    if tool.contract is not None and "on_behalf_of" in tool.contract().fields:
        statuses = tuple(sorted({*statuses, 403}))
        described["e403"] = ("`on_behalf_of` (or `?user=` / `?group=`) from a key that may not "
                             "act for people (`forbidden`).")
    failures = errors(*statuses, **described) if operation.error is None else {
        status: OpenApiResponse(operation.error, description=described.get(f"e{status}",
                                                                            WHEN[status]))
        for status in statuses}
    name = "".join(word.title() for word in tool.name.split("_")) + "Api"  # LookupKnowledgeApi
    view = type(name, (ToolReadApi if tool.method == "get" else ToolApi,), {"tool": tool})
    read = tool.method == "get"  # its input is the URL's arguments
    documented = extend_schema(
        operation_id=tool.name, summary=operation.summary, description=operation.description,
        request=None if read else tool.contract, parameters=_in_path(tool) if read else None,
        responses={200: answered, **failed, **failures})
    return extend_schema_view(**{tool.method: documented})(view)


class _ToolFormatNegotiation(DefaultContentNegotiation):
    """`?format=` names a tool format here, not one of DRF's renderers: always JSON."""

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        json_renderer = next(iter(renderers))
        return json_renderer, json_renderer.media_type


class ToolSchemaApi(APIView):
    """The tool definitions for agent frameworks; readable without a key, like the OpenAPI
    schema they are generated from."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    content_negotiation_class = _ToolFormatNegotiation

    @extend_schema(
        operation_id="tool_schemas", summary="The tools' definitions for an agent", auth=[],
        description="Name, description (when to use it, how to cite) and the JSON Schema of "
                    "the input of every tool, as OpenAI function calling, Anthropic tool use "
                    "or MCP (with the result's schema) expect them.",
        parameters=[OpenApiParameter("format", str, enum=list(FORMATS), default="openai")],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="{tools: [...]}"),
                   **errors(400)})
    def get(self, request: Request) -> Response:
        fmt = request.query_params.get("format", "openai")
        if fmt not in FORMATS:
            raise ApiError(f"format must be one of {', '.join(FORMATS)}",
                           code=ErrorCode.INVALID_FORMAT)
        return Response({"format": fmt, "tools": tool_definitions(fmt)})
