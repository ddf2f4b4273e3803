"""The API's request bodies: bounded before they are read (a 413 `too_large`), and JSON ones
I-JSON (RFC 7493) at most MAX_DEPTH deep, or a 400 `parse_error`.

A JSON or form body has at most MAX_BODY_BYTES; a multipart one (an upload) the upload's
KB_MAX_UPLOAD_BYTES and MULTIPART_ROOM_BYTES for its headers and other fields. DRF's parsers
read a body whole, whatever its length: a 10 MB `dataset_ids` took seconds of CPU (22 s on
the issue's machine) before its 100-element refusal, and a file sent to any endpoint was
spooled to disk.

DRF's JSONParser hands any nesting to the standard decoder, whose recursion fails at about
1,000 levels (a RecursionError: a 500), and passes lone surrogates ("\\ud800") and 1e999
(infinity) on to code that cannot take them: UTF-8 encoders (the audit's query hash,
MariaDB's utf8mb4, the embedder) and numeric fields. The MCP endpoint reads its bodies with
the same function (retrieval/tools/mcp_http.py).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import accumulate
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework import parsers
from rest_framework.exceptions import ParseError

# A tool call's or a dataset's body is a question (KB_MAX_QUERY_CHARS) and a few ids and names
# (lists of at most 200), never a file; /mcp's JSON-RPC messages have the same bound
# (retrieval/tools/mcp_http.py).
MAX_BODY_BYTES = 256 * 1024
# A multipart body beyond its file: the parts' headers and the other fields (Django's
# DATA_UPLOAD_MAX_MEMORY_SIZE leaves them as much).
MULTIPART_ROOM_BYTES = 1024 * 1024
# A tool call's or a dataset's body is a few levels deep; 64 is far above any of them and far
# below the decoder's recursion limit.
MAX_DEPTH = 64
# The depth is counted on the bytes, strings (escapes included) taken out: brackets inside
# strings are text, and no byte of a multi-byte UTF-8 character is ASCII. Linear, and in C
# but for the running sum (about 0.1 s for a million brackets).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
# Only an escape can make a surrogate (raw ones are not UTF-8); after decoding, a pair is one
# character, so a surrogate left is a lone one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonRefused(ValueError):
    """Why a body is not one the API reads; names no part of the body."""

    @property
    def message(self) -> str:
        return f"The body is not JSON the API reads: {self}."


def json_loads(raw: bytes) -> Any:
    """The value of a JSON body, or JsonRefused."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 (byte {exc.start})") from None
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH:
        raise JsonRefused(f"nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except JsonRefused:
        raise
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:  # an integer of more digits than int() reads (4,300 by default)
        raise JsonRefused("a number has too many digits") from None
    if _SURROGATE_ESCAPE.search(raw) and any(_SURROGATE.search(s) for s in _strings(value)):
        raise JsonRefused("a string has a lone surrogate (\\ud800-\\udfff)")
    return value


def _no_constant(name: str) -> float:
    raise JsonRefused(f"{name} is not a JSON number")


def _finite(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise JsonRefused("a number is out of range")
    return number


def _strings(value: Any) -> Iterator[str]:
    """Every string of a decoded value, keys included (recursion bounded by MAX_DEPTH)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _refuse_longer(parser_context: Mapping[str, Any] | None, limit: int, what: str) -> None:
    """TooLarge (a 413) when the request declares a body longer than `limit`: refused before
    a byte is read (Django reads a body only as long as it is declared, none without)."""
    request = (parser_context or {}).get("request")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
    except ValueError:
        declared = 0
    if declared > limit:
        raise _too_large(f"{what} has at most {limit:,} bytes; this one has {declared:,}")


def _bounded_read(stream: IO[bytes], parser_context: Mapping[str, Any] | None,
                  limit: int, what: str) -> bytes:
    """The body, or TooLarge; never more than `limit` bytes read, whatever the stream."""
    _refuse_longer(parser_context, limit, what)
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise _too_large(f"{what} has at most {limit:,} bytes")
    return body


@contextmanager
def _django_bounds(what: str) -> Iterator[None]:
    """Django's own bounds on a form's parts, as the API's 413: DRF lets them through as
    exceptions of Django's, which answered 500."""
    try:
        yield
    except TooManyFieldsSent:
        raise _too_large(f"{what} has at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS:,} "
                         "fields (DATA_UPLOAD_MAX_NUMBER_FIELDS)") from None
    except TooManyFilesSent:
        raise _too_large(f"{what} has at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES:,} "
                         "files (DATA_UPLOAD_MAX_NUMBER_FILES)") from None
    except RequestDataTooBig:
        raise _too_large(f"the fields of {what} other than its files have at most "
                         f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes") from None


def _too_large(message: str) -> Exception:
    # Not at the top: kbplatform.errors imports DRF's views, whose APIView imports this module
    # (DEFAULT_PARSER_CLASSES).
    from kbplatform.errors import TooLarge

    return TooLarge(message)


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser on json_loads, the body bounded first."""

    def parse(self, stream: IO[bytes], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = _bounded_read(stream, parser_context, MAX_BODY_BYTES, "a JSON body")
        try:
            return json_loads(raw)
        except JsonRefused as exc:
            raise ParseError(exc.message) from None


class FormParser(parsers.FormParser):
    """DRF's form parser, the body bounded first (Django bounds the field count only)."""

    def parse(self, stream: IO[bytes], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = _bounded_read(stream, parser_context, MAX_BODY_BYTES, "a form body")
        with _django_bounds("a form body"):
            return super().parse(io.BytesIO(raw), media_type, parser_context)


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser, refused on its declared length before a byte is read: an
    upload's bound is KB_MAX_UPLOAD_BYTES, on every endpoint (Django spools a file of any
    size to disk otherwise)."""

    def parse(self, stream: IO[bytes], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        _refuse_longer(parser_context, settings.KB_MAX_UPLOAD_BYTES + MULTIPART_ROOM_BYTES,
                       f"a multipart body (a file of at most KB_MAX_UPLOAD_BYTES, "
                       f"{settings.KB_MAX_UPLOAD_BYTES:,} bytes, and the rest)")
        with _django_bounds("a multipart body"):
            return super().parse(stream, media_type, parser_context)
