"""Writing markdown from extracted text: location markers, tables, plain-text paragraphs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from datasets.ingestion.formats.kinds import ConversionFailed

# The most markdown one conversion may produce: beyond it the document would be refused by
# the parser anyway (datasets/ingestion/limits.py: 100,000 lines, 2,000 chunks of ~800
# characters), so the child stops early instead of sending it back.
MAX_MARKDOWN_CHARS = 4_000_000

# A line the plumbing reads as a location: it must come only from a converter, never from
# the document's own text.
MARKER_LINE = re.compile(r"^[ \t]*<!--\s*kb:", re.MULTILINE)
# Lines of plain text that markdown would read as structure (a heading, a quote, a fence,
# raw HTML, a table row, a setext underline).
_STRUCTURE_START = re.compile(r"^([ \t]*)([#>|<]|`{3}|~{3}|=+[ \t]*$|-{3,}[ \t]*$)", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
# What in a document's text would open inline markup: `<` a tag, a comment or an autolink
# (raw HTML), `[` and `]` a link, an image or a link reference (or close a converter's link
# text early), "`" a code span (or end a converter's, whose text is not escaped); and a
# backslash that would escape the character after it (ASCII punctuation, or whatever text
# follows this one).
_INLINE_MARKUP = re.compile(r"\\(?=[!-/:-@\[-`{-~]|\Z)|[<\[\]`]")
# `<` as an entity, not `\<`: it stays text for a renderer that reads the excerpt as HTML.
_INLINE_ESCAPES = {"<": "&lt;", "[": "\\[", "]": "\\]", "`": "\\`", "\\": "\\\\"}


def literal(text: str) -> str:
    """A document's text as markdown that renders as that text and nothing else: no raw HTML
    and no link or image of its own, however text pieces are put side by side. Other
    characters stay as written (order_svc, 2*n, C:\\temp), as BM25 and agents read them."""
    return _INLINE_MARKUP.sub(lambda m: _INLINE_ESCAPES[m.group(0)], text)


def heading(level: int, text: str) -> str:
    """An ATX heading of `text` on one line."""
    return "#" * level + " " + literal(" ".join(text.split()))


def marker(kind: str, value: object) -> str:
    """The location line `<!-- kb:page 3 -->`; the value is on one line, as is."""
    text = " ".join(str(value).split())
    return f"<!-- kb:{kind} {text} -->"


def defuse_markers(markdown: str) -> str:
    """The document's own lines that look like a location marker, escaped."""
    return MARKER_LINE.sub(lambda m: m.group(0).replace("<", "\\<", 1), markdown)


def plain_text(text: str) -> str:
    """Plain text as markdown paragraphs: line ends normalised, blank runs collapsed, lines
    that markdown would read as structure and inline markup escaped (the text stays the
    text)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = "\n".join(literal(line.rstrip()) for line in text.split("\n"))
    text = _STRUCTURE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def cell(value: object) -> str:
    """One table cell: on one line, inline markup and pipes escaped (C:\\temp stays as
    written), whole numbers without '.0'."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    text = literal(" ".join(str(value).split()))
    return text.replace("|", "\\|")


def table(rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, the first row as its header; ragged rows padded."""
    width = max((len(row) for row in rows), default=0)
    if width == 0:
        return ""
    padded = [list(row) + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(padded[0]) + " |", "|" + " --- |" * width]
    lines.extend("| " + " | ".join(row) + " |" for row in padded[1:])
    return "\n".join(lines)


def join_blocks(blocks: Iterable[str]) -> str:
    return "\n\n".join(block for block in blocks if block.strip()) + "\n"


def decode_text(raw: bytes) -> str:
    """Text as UTF-8 (with or without a BOM), else GB18030 (a superset of GBK and GB2312)."""
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ConversionFailed("the text is neither UTF-8 nor GB18030; save it as UTF-8")
