"""One error shape for the whole API: {"code", "message", "extra"} with the real status."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


class ErrorCode(StrEnum):
    """Every `code` the API answers with: the project's, its transports' and DRF's (as
    error_of passes them on). docs/api.md's error table lists them all."""

    # 400
    BAD_REQUEST = "bad_request"  # ApiError's default: a refusal without a code of its own
    INVALID = "invalid"  # a serializer's field errors, in extra.fields
    PARSE_ERROR = "parse_error"
    INVALID_REQUEST = "invalid_request"  # MCP: not a JSON-RPC 2.0 message
    CONFIRMATION_REQUIRED = "confirmation_required"
    INVALID_FORMAT = "invalid_format"
    UNKNOWN_DATASET = "unknown_dataset"
    MISSING_FILE = "missing_file"
    INVALID_FILE_NAME = "invalid_file_name"
    UNSUPPORTED_TYPE = "unsupported_type"
    INVALID_DOCUMENT = "invalid_document"
    INVALID_SOURCE = "invalid_source"  # a source's location, branch, sub-folder or globs
    # 401 (DRF's)
    NOT_AUTHENTICATED = "not_authenticated"
    AUTHENTICATION_FAILED = "authentication_failed"
    # 403
    FORBIDDEN = "forbidden"
    PERMISSION_DENIED = "permission_denied"  # DRF's, and Django's PermissionDenied
    INVALID_ORIGIN = "invalid_origin"  # MCP
    # 404
    NOT_FOUND = "not_found"
    NOT_SERVED = "not_served"  # rate_evidence: not evidence served to this key's call
    # 405, 406 (DRF's)
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"
    # 409
    DUPLICATE = "duplicate"
    OPERATION_RUNNING = "operation_running"
    # 413, 415, 421
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    INVALID_HOST = "invalid_host"  # MCP
    # 500, 503
    INTERNAL_ERROR = "internal_error"
    UNAVAILABLE = "unavailable"


class ApiError(exceptions.APIException):
    """An error the client is meant to read; `code` (an ErrorCode) is stable, `message` is for
    people. Services raise these; the exception handler turns them into responses."""

    status_code: int = status.HTTP_400_BAD_REQUEST
    default_code = ErrorCode.BAD_REQUEST

    def __init__(self, message: str, *, code: str | None = None, status_code: int | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail=message, code=code or self.default_code)
        if status_code is not None:
            self.status_code = status_code
        self.code = code or self.default_code
        self.extra = extra or {}


class ServiceUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = ErrorCode.UNAVAILABLE


class Forbidden(ApiError):
    status_code = status.HTTP_403_FORBIDDEN
    default_code = ErrorCode.FORBIDDEN


class TooLarge(ApiError):
    """A request (its body, an upload) over a size bound."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = ErrorCode.TOO_LARGE


class NotFound(ApiError):
    """Also what an object outside the caller's tenant or scope answers."""

    status_code = status.HTTP_404_NOT_FOUND
    default_code = ErrorCode.NOT_FOUND


def error_body(code: str, message: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    # A plain str, not the ErrorCode: the body is the same whichever encoder writes it.
    return {"code": str(code), "message": message, "extra": extra or {}}


def raised_status(exc: Exception | None) -> int:
    """The status `exc` was raised with (as the audit records a failed call): an API error's
    own, 500 for anything else."""
    return exc.status_code if isinstance(exc, exceptions.APIException) else 500


def raised_codes(exc: Exception | None) -> Any:
    """An API error's codes (a field error's are a dict of lists), None for anything else."""
    return exc.get_codes() if isinstance(exc, exceptions.APIException) else None


def as_api_exception(exc: Exception) -> Exception:
    # A locked or unreachable database is a failed backend, like a down Milvus.
    if isinstance(exc, DatabaseError):
        return ServiceUnavailable("the database is unavailable; try again shortly")
    # Django's own, as DRF's handler converts them.
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, PermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def error_of(exc: Exception) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the error body the API answers for `exc`: the REST API and the
    MCP server's tool errors say the same."""
    exc = as_api_exception(exc)
    if isinstance(exc, ApiError):
        return exc.status_code, error_body(exc.code, str(exc.detail), exc.extra)
    if isinstance(exc, exceptions.ValidationError):
        return exc.status_code, error_body(ErrorCode.INVALID, "The request is not valid.",
                                           {"fields": exc.detail})
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        return exc.status_code, error_body(str(code), str(exc.detail))
    return status.HTTP_500_INTERNAL_SERVER_ERROR, error_body(ErrorCode.INTERNAL_ERROR,
                                                              "Internal server error.")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DatabaseError):
        logger.warning("database error in %s: %r", context.get("view"), exc)
    exc = as_api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        # Unexpected: log with the traceback, never leak the exception text to the client.
        logger.exception("unhandled error in %s", context.get("view"))
        return Response(error_of(exc)[1], status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    response.data = error_of(exc)[1]
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: the error shape under /api/, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse(error_body(ErrorCode.NOT_FOUND, "No such endpoint."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: the error shape under /api/ (outside DRF's views), Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse(error_body(ErrorCode.INTERNAL_ERROR, "Internal server error."),
                            status=500)
    return defaults.server_error(request)
