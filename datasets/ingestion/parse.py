"""Parse an uploaded markdown file into a typed document: checks, frontmatter, title."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

from datasets.ingestion.limits import (
    FIELD_NAME,
    MAX_BUSINESS_KEY_CHARS,
    MAX_CATEGORY_BYTES,
    MAX_DOMAIN_CHARS,
    MAX_FIELD_VALUE_CHARS,
    MAX_FIELD_VALUES,
    MAX_FIELDS,
    MAX_FRONTMATTER_CHARS,
    MAX_FRONTMATTER_TITLE_CHARS,
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_LINES,
    MAX_MARKDOWN_TOKENS,
    MAX_OWNER_CHARS,
    MAX_TITLE_CHARS,
    shorten,
)
from datasets.ingestion.splitter import heading_text

# Share of control characters above which decoded text is treated as binary;
# a few ANSI colour escapes in a pasted log stay far below it.
_MAX_CONTROL_SHARE = 0.05
_ALLOWED_CONTROLS = frozenset("\t\n\r\f\v")
_KEYWORD_SEPARATORS = re.compile(r"[,，、]")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
# Frontmatter fields kept on the document as its own columns; the others are its `fields`.
KNOWN_FIELDS = frozenset({"title", "domain", "keywords", "category", "business_key",
                           "reviewed_at", "valid_until", "owner"})


class DocumentParseError(ValueError):
    """The uploaded file cannot be ingested; the message is shown to the API user."""


class DocumentTooLarge(DocumentParseError):
    """Within the upload limit, but with too many lines, markdown elements or chunks."""


class _BoundedTokens(list[Token]):
    """A token list that stops the parse once it holds MAX_MARKDOWN_TOKENS tokens."""

    def append(self, token: Token) -> None:
        if len(self) >= MAX_MARKDOWN_TOKENS:
            raise DocumentTooLarge(
                f"the document has more than {MAX_MARKDOWN_TOKENS:,} markdown elements "
                "(headings, paragraphs, list items, table cells); split it into several files"
            )
        super().append(token)


def _bound_tokens(state: StateCore) -> None:
    state.tokens = _BoundedTokens()


# The structure as the splitter reads it (tables, no inline pass), parsed once here to find
# the title and to reject, while parsing, a file dense with tiny blocks: a block of a byte or
# two costs hundreds of bytes of tokens (1.8 GB for 2 MB of "#" lines), so the upload limit
# alone does not bound memory. The later parses of the same body (by the transformers and
# the splitter) then stay within the bound too.
_MD = MarkdownIt("commonmark").enable("table").disable("inline")
_MD.core.ruler.before("block", "bound_tokens", _bound_tokens)


@dataclass(frozen=True)
class ParsedDocument:
    title: str
    body: str
    domain: str
    keywords: tuple[str, ...]
    category: str
    business_key: str
    # Its other frontmatter fields, each value as text: what a tenant's declared filters read.
    fields: dict[str, tuple[str, ...]] = field(default_factory=dict)
    first_line: int = 1  # the file's line `body` begins on (after the frontmatter)
    # How current it is, as its author says: when it was last reviewed, until when it holds,
    # who answers for it.
    reviewed_at: dt.date | None = None
    valid_until: dt.date | None = None
    owner: str = ""


def parse_markdown(raw: bytes, *, file_name: str, max_bytes: int,
                   stored: bool = False) -> ParsedDocument:
    """Validate and parse one markdown file; raise DocumentParseError on bad input.
    `stored`: text the platform took before (indexing it again): a field a later version
    checks (a `valid_until` that is no date, an owner too long) is left out, not refused, so
    that no document stored before can fail a rebuild."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    text = _decode(raw, max_bytes=max_bytes)
    metadata, body = _split_frontmatter(text)
    body = _LEADING_BLANK_LINES.sub("", body)
    first_line = text.count("\n", 0, len(text) - len(body)) + 1  # `body` ends the text
    body = body.rstrip()
    if not body.strip():
        raise DocumentParseError("the document has frontmatter but no markdown body after it")
    # Frontmatter first: its checks are cheap, the markdown parse is not.
    title = _bounded("title", _text_field(metadata, "title").strip(), MAX_FRONTMATTER_TITLE_CHARS)
    domain = _bounded("domain", _text_field(metadata, "domain").strip().lower(), MAX_DOMAIN_CHARS)
    keywords = _keywords(metadata.get("keywords"))
    category = _category(_text_field(metadata, "category").strip().lower())
    business_key = _bounded(
        "business_key", _business_key(metadata.get("business_key")), MAX_BUSINESS_KEY_CHARS
    )
    try:
        reviewed_at, valid_until = (_date(metadata, k) for k in ("reviewed_at", "valid_until"))
    except DocumentParseError:
        if not stored:
            raise
        reviewed_at = valid_until = None
    try:
        owner = _bounded("owner", _text_field(metadata, "owner").strip(), MAX_OWNER_CHARS)
    except DocumentParseError:
        if not stored:
            raise
        owner = ""
    tokens = _MD.parse(body)  # always: it is also the check on the number of blocks
    # A title written in the frontmatter is kept whole (or rejected above); one derived from
    # a heading or the file name is cut, as it was not written to be a title.
    title = title or _first_h1(tokens) or shorten(_stem(file_name), MAX_TITLE_CHARS)
    return ParsedDocument(
        title=title,
        body=body,
        domain=domain,
        keywords=keywords,
        category=category,
        business_key=business_key,
        fields=_fields(metadata),
        first_line=first_line,
        reviewed_at=reviewed_at,
        valid_until=valid_until,
        owner=owner,
    )


def frontmatter_fields(text: str) -> dict[str, tuple[str, ...]]:
    """A stored document's other frontmatter fields, as parse_markdown keeps them, without
    parsing its markdown (DocumentParseError when the frontmatter does not read)."""
    return _fields(_split_frontmatter(text)[0])


def _decode(raw: bytes, *, max_bytes: int) -> str:
    # Size first: it is cheap and protects every later step from huge inputs.
    if len(raw) > max_bytes:
        raise DocumentParseError(
            f"the file is {len(raw):,} bytes; the limit is {max_bytes:,} bytes"
        )
    if not raw.strip():
        raise DocumentParseError("the file is empty or contains only whitespace")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentParseError("the file is UTF-16 encoded; save it as UTF-8")
    # Before decoding, so that an image or a PDF is reported as binary, not as bad UTF-8.
    nul = raw.find(b"\x00")
    if nul != -1:
        raise DocumentParseError(
            f"the file looks binary (NUL byte at byte offset {nul}); "
            "upload a UTF-8 markdown text file"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DocumentParseError(
            f"the file is not valid UTF-8: invalid byte 0x{raw[exc.start]:02x} at byte offset "
            f"{exc.start} (line {line}); save it as UTF-8 (it may be GBK or Latin-1)"
        ) from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    controls = sum(
        1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in _ALLOWED_CONTROLS
    )
    if controls > _MAX_CONTROL_SHARE * len(text):
        raise DocumentParseError(
            f"the file looks binary: {controls} of its {len(text)} characters are control "
            "characters"
        )
    if not text.strip():
        raise DocumentParseError("the file is empty or contains only whitespace")
    lines = text.count("\n") + 1
    if lines > MAX_LINES:
        raise DocumentTooLarge(
            f"the file has {lines:,} lines; the limit is {MAX_LINES:,} lines: "
            "split it into several files"
        )
    return text


def _split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    # python-frontmatter's YAMLHandler is used directly rather than frontmatter.loads():
    # loads() silently drops a non-mapping frontmatter, raises TypeError on keys named
    # `content`/`handler` or non-string keys, and treats a leading `{` line as JSON.
    handler = YAMLHandler()
    if not handler.detect(text):
        return {}, text
    try:
        fm_text, body = handler.split(text)
    except ValueError:
        raise DocumentParseError(
            "the frontmatter opened with '---' on line 1 is never closed by a '---' line"
        ) from None
    if len(fm_text) > MAX_FRONTMATTER_CHARS:
        raise DocumentParseError(
            f"the frontmatter is {len(fm_text):,} characters long; the limit is "
            f"{MAX_FRONTMATTER_CHARS:,} characters"
        )
    try:
        loaded = handler.load(fm_text)
    except yaml.YAMLError as exc:
        raise DocumentParseError(f"malformed YAML frontmatter: {_yaml_problem(exc)}") from None
    except ValueError:
        # PyYAML converts unquoted numbers and dates itself and lets int() and date() fail.
        raise DocumentParseError(
            "malformed YAML frontmatter: a value is not a valid number or date (e.g. a number "
            "of thousands of digits, or month 13); quote it to keep it as text"
        ) from None
    if loaded is None:
        return {}, body
    if not isinstance(loaded, dict):
        raise DocumentParseError(
            f"the frontmatter must be a YAML mapping (key: value lines), got a {_type_name(loaded)}"
        )
    bad_keys = [key for key in loaded if not isinstance(key, str)]
    if bad_keys:
        raise DocumentParseError(f"frontmatter keys must be text, got {bad_keys[0]!r}")
    return loaded, body


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        # The split frontmatter starts with the rest of the opening '---' line, so the
        # mark's 0-based line index equals the 1-based line number in the file minus one.
        line = exc.problem_mark.line + 1
        return f"{exc.problem or exc.context or 'syntax error'} (line {line} of the file)"
    return str(exc)


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, dt.date):
        return "date"
    return type(value).__name__


def _scalar_text(key: str, value: object) -> str:
    """A frontmatter scalar as text; containers and booleans are rejected."""
    if value is None:
        return ""
    if isinstance(value, bool):
        # YAML 1.1 reads yes/no/on/off as booleans, so the author's text is lost: ask to quote.
        raise DocumentParseError(
            f"frontmatter field {key!r} must be text, got a boolean; quote the value"
        )
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.date):  # datetime is a subclass of date
        return value.isoformat()
    raise DocumentParseError(f"frontmatter field {key!r} must be text, got a {_type_name(value)}")


def _date(metadata: dict[str, Any], key: str) -> dt.date | None:
    """A date field (`2026-03-01`, quoted or not; a date-time's day); None when absent."""
    value = metadata.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.strip()).date()
        except ValueError:
            pass
    raise DocumentParseError(f"frontmatter field {key!r} must be a date (YYYY-MM-DD), got "
                             f"{str(value)[:40]!r}")


def _text_field(metadata: dict[str, Any], key: str) -> str:
    return _scalar_text(key, metadata.get(key))


def _bounded(key: str, value: str, limit: int) -> str:
    # Rejected, not cut: a cut identifier or filter value would silently stop matching.
    if len(value) > limit:
        raise DocumentParseError(
            f"frontmatter field {key!r} is {len(value):,} characters long; "
            f"the limit is {limit:,} characters"
        )
    return value


def _category(value: str) -> str:
    # The Milvus VARCHAR(100) column counts bytes: 40 Chinese characters are 120 bytes.
    size = len(value.encode("utf-8"))
    if size > MAX_CATEGORY_BYTES:
        raise DocumentParseError(
            f"frontmatter field 'category' is {size:,} bytes in UTF-8 ({len(value):,} "
            f"characters); the limit is {MAX_CATEGORY_BYTES} bytes in UTF-8, e.g. "
            f"{MAX_CATEGORY_BYTES // 3} Chinese characters"
        )
    return value


def _business_key(value: object) -> str:
    if value is None:
        return ""
    # An identifier must survive exactly; YAML turns `0012` into 10 and `1:30` into 90.
    if not isinstance(value, str):
        raise DocumentParseError(
            f"frontmatter field 'business_key' must be a quoted string, got a "
            f"{_type_name(value)}; put the value in quotes so YAML keeps it exactly, "
            'e.g. business_key: "0012"'
        )
    return value.strip()


def _keywords(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items: list[Any]
    if isinstance(value, str):
        items = _KEYWORD_SEPARATORS.split(value)
    elif isinstance(value, list):
        items = value
    else:
        raise DocumentParseError(
            "frontmatter field 'keywords' must be a list or a comma-separated string, got a "
            f"{_type_name(value)}"
        )
    keywords: dict[str, None] = {}  # ordered and without duplicates
    for item in items:
        # Checked item by item, before anything is kept: YAML aliases can repeat one huge
        # string many times, and strip() copies it each time.
        keyword = _scalar_text("keywords", item).strip()
        if len(keyword) > MAX_KEYWORD_CHARS:
            raise DocumentParseError(
                f"a keyword in frontmatter field 'keywords' is {len(keyword):,} characters "
                f"long; the limit is {MAX_KEYWORD_CHARS} characters per keyword (it starts "
                f"{shorten(keyword[:40], 40, cut=True)!r})"
            )
        if keyword:
            keywords[keyword] = None
    if len(keywords) > MAX_KEYWORDS:
        raise DocumentParseError(
            f"frontmatter field 'keywords' has {len(keywords):,} keywords; "
            f"the limit is {MAX_KEYWORDS} keywords"
        )
    return tuple(keywords)


def _field_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float | dt.date):
        text = _scalar_text("", value).strip()
        return text if 0 < len(text) <= MAX_FIELD_VALUE_CHARS else None
    return None  # a mapping, a null: nothing to filter on


def _fields(metadata: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """The other fields, named by a lower-case identifier, each a scalar or a list of them,
    as text (MAX_FIELDS of them at most, in their order; what is past the bounds is left
    out)."""
    kept: dict[str, tuple[str, ...]] = {}
    for key, value in metadata.items():
        name = str(key).strip().lower()
        if name in KNOWN_FIELDS or name in kept or not FIELD_NAME.fullmatch(name):
            continue
        items = value if isinstance(value, list) else [value]
        texts = [text for item in items[:MAX_FIELD_VALUES]
                 if (text := _field_text(item)) is not None]
        if texts:
            kept[name] = tuple(dict.fromkeys(texts))
        if len(kept) == MAX_FIELDS:
            break
    return kept


def _first_h1(tokens: list[Token]) -> str:
    """The plain text of the first top-level H1, cut to MAX_TITLE_CHARS."""
    for position, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h1" and token.level == 0:
            # heading_text parses only a bounded prefix of a huge heading.
            return heading_text(tokens[position + 1].content, MAX_TITLE_CHARS)
    return ""


def _stem(file_name: str) -> str:
    # Browsers on Windows may send a full path with backslashes.
    name = PurePosixPath(file_name.replace("\\", "/")).name
    return PurePosixPath(name).stem or name or "untitled"
