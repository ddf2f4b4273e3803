"""Every `code` the API answers with is an ErrorCode member, and docs/api.md lists them all."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.core import exceptions as django_exceptions
from django.db import OperationalError
from django.http import Http404
from rest_framework import exceptions

from kbplatform.errors import ErrorCode, error_of

ROOT = Path(__file__).resolve().parent.parent.parent
APPS = ("kbplatform", "datasets", "audit", "retrieval", "evaluation")
CODES = {code.value for code in ErrorCode}  # `"x" in ErrorCode` is a TypeError before 3.12


def _code_of(node: ast.expr | None) -> str | None:
    """A literal code, or ErrorCode.X as its value (a name that is no member as written);
    None for a value computed at run time (`code or self.default_code`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "ErrorCode"):
        return getattr(ErrorCode, node.attr, f"ErrorCode.{node.attr}")
    return None


def _codes_in(path: Path) -> set[tuple[str, str]]:
    """(code, where) for each `default_code = ...`, `code=...`, `error_body(code, ...)` and
    the MCP transport's `Refusal(status, code, ...)` of a module."""
    written: list[tuple[ast.expr | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "default_code" for t in targets):
                written.append((node.value, node.lineno))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
                node.func, "id", "")
            written += [(k.value, node.lineno) for k in node.keywords if k.arg == "code"]
            if name == "error_body" and node.args:
                written.append((node.args[0], node.lineno))
            if name == "Refusal" and len(node.args) > 1:
                written.append((node.args[1], node.lineno))
    return {(code, f"{path.relative_to(ROOT)}:{line}") for value, line in written
            if (code := _code_of(value)) is not None}


def _project_codes() -> set[tuple[str, str]]:
    return {found for app in APPS for path in sorted((ROOT / app).rglob("*.py"))
            if "migrations" not in path.parts for found in _codes_in(path)}


def test_every_code_the_views_and_services_use_is_an_error_code() -> None:
    found = _project_codes()
    strangers = sorted(where + ": " + code for code, where in found if code not in CODES)
    assert not strangers, "not ErrorCode members:\n" + "\n".join(strangers)
    # The scan reads what it should: ApiError subclasses, codes given inline, error_body's and
    # the MCP transport's.
    assert {ErrorCode.OPERATION_RUNNING, ErrorCode.INVALID_FORMAT, ErrorCode.INVALID_HOST,
            ErrorCode.NOT_FOUND, ErrorCode.INTERNAL_ERROR} <= {code for code, _ in found}


@pytest.mark.parametrize("exc", [
    exceptions.ValidationError({"query": ["This field is required."]}),
    exceptions.ParseError(), exceptions.NotAuthenticated(), exceptions.AuthenticationFailed(),
    exceptions.PermissionDenied(), exceptions.NotFound(), exceptions.MethodNotAllowed("PUT"),
    exceptions.NotAcceptable(), exceptions.UnsupportedMediaType("text/plain"),
    Http404(), django_exceptions.PermissionDenied(), OperationalError("locked"),
    RuntimeError("a bug"),
], ids=lambda exc: type(exc).__name__)
def test_what_error_of_passes_on_from_drf_and_django_is_an_error_code(exc: Exception) -> None:
    """No throttling is configured, so DRF's `throttled` never reaches a client."""
    assert error_of(exc)[1]["code"] in CODES


def test_the_error_table_of_docs_api_lists_every_code() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    table = text[text.index("| status | code | when |"):].split("\n\n", 1)[0]
    listed = [code for row in table.splitlines()[2:]
              for code in re.findall(r"`([a-z_]+)`", row.split("|")[2])]
    assert sorted(listed) == sorted(CODES)
