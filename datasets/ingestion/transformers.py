"""Document transformers: whitespace normalisation and secret redaction."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt

REDACTED = "[REDACTED]"

# Block structure only: normalisation needs where code blocks are, not inline markup.
_MD = MarkdownIt("commonmark").enable("table").disable("inline")
# NBSP, narrow NBSP and figure space become plain spaces; zero-width space, word joiner
# and a stray BOM are removed. ZWJ/ZWNJ are kept: emoji sequences and some scripts need them.
_SPACE_LIKE = str.maketrans({"\u00a0": " ", "\u202f": " ", "\u2007": " "})
_ZERO_WIDTH = str.maketrans({"\u200b": None, "\u2060": None, "\ufeff": None})


def normalize_whitespace(text: str) -> str:
    """Tidy whitespace outside fenced code; inside it only trailing spaces are removed.

    Outside code: tabs become spaces, NBSP-like spaces become spaces, zero-width spaces are
    dropped, trailing whitespace is removed and any run of blank lines becomes one blank line.
    Leading and trailing blank lines of the whole text are removed.
    """
    return normalized_lines(text)[0]


def normalized_lines(text: str) -> tuple[str, list[int]]:
    """normalize_whitespace's text, and for each of its lines the line of `text` it comes
    from (0-based): what a chunk's line range in the file is read from."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    in_code = [False] * len(lines)
    for token in _MD.parse(text):
        if token.type in ("fence", "code_block") and token.map is not None:
            for number in range(*token.map):
                in_code[number] = True

    out: list[str] = []
    origins: list[int] = []
    previous_blank = False
    for number, (line, code) in enumerate(zip(lines, in_code, strict=True)):
        if code:
            # Tabs may be significant in code (Makefiles, TSV), so only spaces are trimmed.
            out.append(line.rstrip(" "))
            origins.append(number)
            previous_blank = False
            continue
        line = line.translate(_ZERO_WIDTH).translate(_SPACE_LIKE).expandtabs(4).rstrip()
        if not line and previous_blank:
            continue
        previous_blank = not line
        out.append(line)
        origins.append(number)
    first = next((n for n, line in enumerate(out) if line), len(out))
    last = max((n for n, line in enumerate(out) if line), default=first - 1)
    return "\n".join(out[first:last + 1]), origins[first:last + 1]


class SecretRedactor:
    """Replace secret values with [REDACTED], keeping key names so the text stays readable.

    `extra_patterns` are regular expressions; when one has a group named `secret`, only
    that group is replaced, otherwise the whole match.
    """

    def __init__(self, *, extra_patterns: Sequence[str] = ()) -> None:
        self._extra: list[re.Pattern[str]] = []
        for pattern in extra_patterns:
            try:
                self._extra.append(re.compile(pattern))
            except re.error as exc:
                raise ValueError(f"invalid redaction pattern {pattern!r}: {exc}") from exc

    def redact(self, text: str) -> str:
        # Order matters: key blocks first, so `private_key: -----BEGIN ...` is handled whole.
        text = _PRIVATE_KEY.sub(_redact_private_key, text)
        text = _URL_CREDENTIALS.sub(_keep_group("prefix", "value"), text)
        text = _AUTHORIZATION.sub(_keep_group("prefix", "value"), text)
        text = _KEY_VALUE.sub(_redact_key_value, text)
        for pattern in _TOKEN_FORMATS:
            text = pattern.sub(REDACTED, text)
        for pattern in self._extra:
            text = pattern.sub(_redact_extra, text)
        return text


@dataclass(frozen=True)
class Transformed:
    text: str
    # For each line of `text`, the line of the input it comes from (0-based); empty when
    # redaction changed the number of lines (a private key's block taken out).
    origins: tuple[int, ...]


def transform_document(text: str, *, redactor: SecretRedactor | None) -> Transformed:
    """Normalise whitespace, then redact secrets when a redactor is given."""
    normalized, origins = normalized_lines(text)
    redacted = redactor.redact(normalized) if redactor is not None else normalized
    same_lines = redacted.count("\n") == normalized.count("\n")
    return Transformed(redacted, tuple(origins) if same_lines else ())


_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
    # The body may not contain "-----", which keeps the scan linear on hostile input.
    # A truncated block without its END line is still a secret: take its base64 lines.
    r"(?:(?:(?!-----)[\s\S])*-----END (?P=kind)-----|(?:\n[ \t]*[A-Za-z0-9+/=]{16,})*)"
)
_URL_CREDENTIALS = re.compile(
    # A lookbehind, not \b: "a.a.a..." would otherwise start a scan at every letter.
    r"(?P<prefix>(?<![a-zA-Z0-9+.\-])[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*:)"
    r"(?P<value>[^\s@/]+)(?=@)"
)
_AUTHORIZATION = re.compile(
    r"(?P<prefix>\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
    r"(?:bearer|basic|token)[ \t]+)(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
_SECRET_KEY_WORDS = (
    r"passwd|password|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key"
    r"|密码|口令|密钥|秘钥|令牌|私钥"
)
# The key must END with a secret word ("DB_PASSWORD", "数据库密码") and be followed directly by
# a separator (markdown bold allowed: "**密码**："), so "password policy", "token bucket" or
# "max_tokens: 500" are left alone.
# Unquoted values stop at delimiters of query strings, connection strings and Chinese prose.
_KEY_VALUE = re.compile(
    r"(?P<key>(?<![\w.\-])[\"']?[\w.\-]*(?:" + _SECRET_KEY_WORDS + r")(?:\*\*)?[\"']?)"
    r"(?P<sep>[ \t]*[:=：](?:\*\*)?[ \t]*)"
    r"(?:(?P<quote>[\"'])(?P<quoted>(?:(?!(?P=quote))[^\n])*)(?P=quote)"
    r"|(?P<value>[^\s\"'`=<>&;,()\[\]{}，。；、（）][^\s\"'`<>&;,()\[\]{}，。；、（）]*))",
    re.IGNORECASE,
)
_TOKEN_FORMATS = (
    re.compile(r"(?<![\w-])sk-[A-Za-z0-9_\-]{20,}"),  # OpenAI / Anthropic style keys
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),  # GitHub tokens
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack tokens
    re.compile(r"\beyJ[\w\-]{8,}\.eyJ[\w\-]{8,}\.[\w\-]{8,}"),  # JWTs
)


def _is_placeholder(value: str) -> bool:
    # References such as $DB_PASSWORD, ${TOKEN} or {{ vault_pw }} are not secrets, and
    # they tell an agent where the secret lives.
    return value.startswith(("$", "<", "{{", "%(", "-----")) or set(value) <= set("*•.")


def _redact_private_key(match: re.Match[str]) -> str:
    """The block as BEGIN, [REDACTED], END, in as many lines as it had: the lines below it
    keep their numbers (evidence's line ranges are the file's)."""
    kind = match.group("kind")
    lines = match.group(0).count("\n")
    parts = [f"-----BEGIN {kind}-----", REDACTED, f"-----END {kind}-----"]
    if lines < 2:
        return " ".join(parts) if lines == 0 else f"{parts[0]} {parts[1]}\n{parts[2]}"
    return f"{parts[0]}\n{parts[1]}" + "\n" * (lines - 1) + parts[2]


def _keep_group(prefix: str, value: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        if _is_placeholder(match.group(value)):
            return match.group(0)
        return match.group(prefix) + REDACTED

    return replace


def _redact_key_value(match: re.Match[str]) -> str:
    head = match.group("key") + match.group("sep")
    quoted = match.group("quoted")
    if quoted is not None:
        if not quoted or _is_placeholder(quoted):
            return match.group(0)
        quote = match.group("quote")
        return f"{head}{quote}{REDACTED}{quote}"
    if _is_placeholder(match.group("value")):
        return match.group(0)
    return head + REDACTED


def _redact_extra(match: re.Match[str]) -> str:
    if not match.group(0):  # a pattern that can match "" must not insert text everywhere
        return ""
    if "secret" in match.re.groupindex and match.group("secret") is not None:
        start, end = match.span("secret")
        offset = match.start()
        whole = match.group(0)
        return whole[: start - offset] + REDACTED + whole[end - offset :]
    return REDACTED
