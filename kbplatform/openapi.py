"""What the OpenAPI schema (drf-spectacular) needs beyond the views: the API-key schemes and
the one error shape, documented for every error status an endpoint can answer."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_serializer
from rest_framework import serializers


class ApiKeySchemes(OpenApiAuthenticationExtension):
    """datasets.tenancy.keys.ApiKeyAuthentication accepts either header: two schemes, either one."""

    target_class = "datasets.tenancy.keys.ApiKeyAuthentication"
    name = ["bearerAuth", "apiKeyAuth"]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {"type": "http", "scheme": "bearer", "bearerFormat": "kb_<prefix>_<secret>",
             "description": "`Authorization: Bearer <key>`. Keys are created in the admin or "
                            "with `manage.py create_api_key`; roles: tool, admin, platform."},
            {"type": "apiKey", "in": "header", "name": "X-API-Key",
             "description": "The same key in the `X-API-Key` header."},
        ]

    def get_security_requirement(self, auto_schema: Any) -> list[dict[str, list[str]]]:
        # A list of requirements means "any one of them" (a dict would mean "all of them").
        return [{"bearerAuth": []}, {"apiKeyAuth": []}]


@extend_schema_serializer(component_name="Error")
class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """kbplatform.errors.error_body: every error of the API, with the real HTTP status."""

    code = serializers.CharField(help_text="Stable, for programs: invalid, not_found, "
                                           "forbidden, not_authenticated, duplicate, ...")
    message = serializers.CharField(help_text="For people.")
    extra = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Details: `fields` (the invalid fields and why) for a 400 `invalid`, "
                  "`job_id` for a 409 `operation_running`; otherwise empty.")


WHEN = {
    400: "The request is not valid (`extra.fields` names the fields for code `invalid`).",
    401: "No API key, or a wrong or revoked one.",
    403: "The API key's role may not do this.",
    404: "It does not exist, or it is outside the API key's tenant or scope.",
    409: "A conflict with the current state.",
    413: "The body is over its bound: 256 KiB of JSON or form; KB_MAX_UPLOAD_BYTES and 1 MiB "
         "of multipart.",
    415: "The body's Content-Type is not one this operation accepts.",
    503: "A backend (database, vector store, embedder, Redis) is unavailable; try again.",
}


def errors(*statuses: int, **described: str) -> dict[int, OpenApiResponse]:
    """The error shape for each status; `described` overrides the wording (`e409="..."`)."""
    return {status: OpenApiResponse(ErrorSerializer,
                                    description=described.get(f"e{status}", WHEN[status]))
            for status in statuses}


def path_id(name: str, description: str) -> OpenApiParameter:
    """A `<str:...>` URL segment: any text without a slash (an unknown one is a 404)."""
    return OpenApiParameter(name, OpenApiTypes.STR, OpenApiParameter.PATH,
                            description=description, pattern=r"^[^/]+$")


def body_bounds(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A postprocessing hook: every operation that takes a body may answer 413 (its parser
    bounds the body before reading it), whether its view lists it or not."""
    error = {"content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/Error"}}}, "description": WHEN[413]}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if "requestBody" in operation:
                operation.setdefault("responses", {}).setdefault("413", error)
    return result
