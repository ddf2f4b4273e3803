"""The API's JSON bodies: I-JSON (RFC 7493) at most MAX_DEPTH deep, or a 400 `parse_error`.

DRF's JSONParser hands any nesting to the standard decoder, whose recursion fails at about
1,000 levels (a RecursionError: a 500), and passes lone surrogates ("\\ud800") and 1e999
(infinity) on to code that cannot take them: UTF-8 encoders (the audit's query hash,
MariaDB's utf8mb4, the embedder) and numeric fields. The MCP endpoint reads its bodies with
the same function (retrieval/tools/mcp_http.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from itertools import accumulate
from typing import IO, Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

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


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser on json_loads."""

    def parse(self, stream: IO[bytes], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            return json_loads(stream.read())
        except JsonRefused as exc:
            raise ParseError(exc.message) from None
