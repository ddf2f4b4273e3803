"""Heading-aware markdown splitter: one breadcrumb per segment, code and tables kept whole."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markdown_it.tree import SyntaxTreeNode

from datasets.ingestion.blocks import cut_block
from datasets.ingestion.limits import (
    ELLIPSIS,
    MAX_ATOMIC_FACTOR,
    MAX_BREADCRUMB_CHARS,
    MAX_HEADING_CHARS,
    shorten,
)

# Blocks not cut below MAX_ATOMIC_FACTOR × chunk_size: a half code block or half table
# misleads the agent reading it. Above it they are cut at lines into blocks that stay valid.
_ATOMIC = frozenset({"fence", "code_block", "table"})
# Blocks whose children are blocks: an oversized list is cut between its items.
_CONTAINERS = frozenset({"bullet_list", "ordered_list", "list_item", "blockquote"})
# A match ends where the next sentence starts. "." needs whitespace after it so that
# "redis.conf" or "3.14" is not a boundary; CJK punctuation needs nothing.
_SENTENCE_END = re.compile(r"(?:[。！？；]|[.!?](?=\s))[\"'”’)）」』]*[ \t]*\n?|\n")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
BREADCRUMB_SEPARATOR = " > "
# Block structure only: the splitter reads spans, not inline markup, and without the inline
# pass a big document holds no child token per word of emphasis or code. Headings, the one
# place inline markup matters, are parsed on their own with _INLINE_PARSER.
_BLOCK_PARSER = MarkdownIt("commonmark").enable("table").disable("inline")
_INLINE_PARSER = MarkdownIt("commonmark")
# Only this multiple of a heading's limit is inline-parsed: markup (links, code spans)
# rarely quadruples a title, and a 1.5 MB heading must not be parsed whole to keep 200.
_MARKUP_ALLOWANCE = 4


@dataclass(frozen=True)
class Segment:
    index: int
    content: str
    breadcrumb: str
    headings: tuple[str, ...]
    # Where the segment begins in the (newline-normalised) text: what precedes it there (a
    # page marker the pipeline took out) says where it is. Overlap starts it before its cut.
    start: int = 0
    # How many characters it starts with that end the segment before it (the overlap): the
    # two joined say them once (fetch_evidence).
    overlap: int = 0


@dataclass(frozen=True)
class _Unit:
    """A span of the source packed whole; `atomic` spans are never cut or overlapped into.

    `text` is set on the pieces of an oversized code block or table: re-fenced text that is
    not in the source, packed as a piece of its own.
    """

    start: int
    end: int
    atomic: bool
    text: str | None = None


def inline_text(token: Token) -> str:
    """Plain text of an inline token (markup dropped), e.g. a heading's title."""
    parts: list[str] = []
    for child in token.children or ():
        if child.type in ("text", "code_inline", "image"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts).strip()


def heading_text(markdown: str, limit: int) -> str:
    """Plain text of a heading's inline markdown, cut to `limit` characters with "…"."""
    prefix = markdown[: limit * _MARKUP_ALLOWANCE]
    [inline] = _INLINE_PARSER.parseInline(prefix)
    return shorten(inline_text(inline), limit, cut=len(prefix) < len(markdown))


class MarkdownSplitter:
    """Split markdown into segments that never cross a heading.

    Each section (a heading and the blocks up to the next heading) is packed into pieces of
    at most `chunk_size` characters, cut at block boundaries, else at sentence boundaries,
    else (one unbroken run of text) hard-cut. The first piece of a section starts with its
    heading line; later pieces start with up to `chunk_overlap` characters of whole
    sentences or lines from the end of the previous piece.

    Fenced/indented code blocks and tables up to MAX_ATOMIC_FACTOR × `chunk_size` are never
    cut: one longer than `chunk_size` becomes its own oversized segment (with the heading if
    it opens its section). A longer one is cut at line ends into segments that are each a
    valid block: a fence re-opened with its own fence line and closed, indented code
    re-indented, a table with its header rows repeated; a single overlong line is hard-cut.
    A heading whose section has no blocks of its own (e.g. directly followed by a
    sub-heading) yields no segment, so a document made only of headings yields [].

    Headings are cut to MAX_HEADING_CHARS (in breadcrumbs and in the heading line that opens
    a segment) and breadcrumbs to MAX_BREADCRUMB_CHARS, so no segment grows with the length
    of a heading.

    A document of at most `whole_document` characters that is one section (an abstract under
    its title, a note without headings) is one segment: cut for its length alone, each half
    would be judged on half of what it says. A short document with sections keeps them, the
    author's own units. 0 turns this off.
    """

    def __init__(self, *, chunk_size: int = 800, chunk_overlap: int = 100,
                 whole_document: int = 0) -> None:
        if chunk_size < 100:
            raise ValueError(f"chunk_size must be at least 100, got {chunk_size}")
        if not 0 <= chunk_overlap < chunk_size // 2:
            raise ValueError(
                f"chunk_overlap must be in [0, {chunk_size // 2}), got {chunk_overlap}"
            )
        if whole_document < 0:
            raise ValueError(f"whole_document must be at least 0, got {whole_document}")
        self._size = chunk_size
        self._overlap = chunk_overlap
        self._max_atomic = MAX_ATOMIC_FACTOR * chunk_size
        self._whole_document = whole_document

    def split(self, markdown: str) -> list[Segment]:
        return list(self.iter_split(markdown))

    def iter_split(self, markdown: str) -> Iterator[Segment]:
        """The segments of split(), one at a time: a caller can count or stop early."""
        text = markdown.replace("\r\n", "\n").replace("\r", "\n")
        if not text.strip():
            return
        whole = _LEADING_BLANK_LINES.sub("", text).rstrip()
        if len(whole) > self._whole_document:
            yield from self._pieces(text)
            return
        pieces = list(self._pieces(text))  # a short document: a few pieces at most
        if len({piece.headings for piece in pieces}) == 1:  # one section, cut for its length
            yield Segment(0, whole, pieces[0].breadcrumb, pieces[0].headings, pieces[0].start)
        else:
            yield from pieces

    def _pieces(self, text: str) -> Iterator[Segment]:
        source = _Source(text)
        root = SyntaxTreeNode(_BLOCK_PARSER.parse(text))
        # In document order and disjoint (a table cannot hold a fence), as _inside requires.
        protected = [
            source.span(node.map) for node in root.walk() if node.type in _ATOMIC and node.map
        ]
        index = 0
        path: list[tuple[int, str]] = []
        for heading, body in _sections(root.children):
            lead = ""
            lead_start: int | None = None
            if heading is not None and heading.map is not None:
                level = int(heading.tag[1])
                while path and path[-1][0] >= level:
                    path.pop()
                path.append((level, _heading_title(heading)))
                span = source.span(heading.map)
                lead = _heading_line(source.text, span, heading, level) + "\n\n"
                lead_start = span[0]
            headings = tuple(title for _, title in path if title)
            breadcrumb = _breadcrumb(headings)
            for start, content, overlap in self._split_section(source, lead, body, protected):
                first = lead_start if lead_start is not None else start
                yield Segment(index, content, breadcrumb, headings, first, overlap)
                lead_start = None
                index += 1

    def _split_section(
        self,
        source: _Source,
        lead: str,
        body: Sequence[SyntaxTreeNode],
        protected: Sequence[tuple[int, int]],
    ) -> list[tuple[int, str, int]]:
        """Pack a section's blocks into (start, piece, overlap); `lead` (its heading line)
        opens the first. `overlap`: how many characters the piece starts with that end the
        piece before it."""
        if not body:
            return []
        # Leave room for the heading so the first piece fits.
        max_unit = max(self._size - len(lead), self._size // 2)
        max_atomic = max(self._max_atomic - len(lead), self._max_atomic // 2)
        units = [u for node in body for u in self._units(source, node, max_unit, max_atomic)]
        if not units:
            return []
        pieces: list[tuple[int, str, int]] = []
        start = units[0].start
        first = 0
        repeated = ""  # the end of the piece before that this piece starts with
        while first < len(units):
            last = first
            cut_block = units[first].text
            if cut_block is not None:
                content = lead + cut_block
            else:
                while (
                    last + 1 < len(units)
                    and units[last + 1].text is None
                    and len(lead) + units[last + 1].end - start <= self._size
                ):
                    last += 1
                content = lead + source.text[start : units[last].end]
            content = _LEADING_BLANK_LINES.sub("", content).rstrip()
            if content:
                shared = bool(repeated) and content.startswith(repeated) and bool(pieces) \
                    and pieces[-1][1].endswith(repeated)
                pieces.append((start, content, len(repeated) if shared else 0))
            lead = ""
            repeated = ""
            if last + 1 < len(units):
                following = units[last + 1]
                # No overlap into or out of the pieces of a cut block: they are not source spans.
                start = (
                    self._overlap_start(source.text, units[first : last + 1], following, protected)
                    if cut_block is None and following.text is None
                    else following.start
                )
                end = units[last].end
                if start < end:
                    repeated = _LEADING_BLANK_LINES.sub("", source.text[start:end])
            first = last + 1
        return pieces

    def _units(
        self, source: _Source, node: SyntaxTreeNode, max_unit: int, max_atomic: int
    ) -> list[_Unit]:
        if node.map is None:
            return []
        start, end = source.span(node.map)
        if node.type in _ATOMIC:
            if end - start <= max_atomic:
                return [_Unit(start, end, atomic=True)]
            pieces = cut_block(source.text, node, start, end, max_atomic)
            return [_Unit(start, end, atomic=True, text=piece) for piece in pieces]
        if end - start <= max_unit:
            return [_Unit(start, end, atomic=False)] if end > start else []
        if node.type in _CONTAINERS:
            units = [
                unit
                for child in node.children
                for unit in self._units(source, child, max_unit, max_atomic)
            ]
            if units:
                return units
        return list(_sentence_units(source.text, start, end, max_unit))

    def _overlap_start(
        self,
        text: str,
        previous: Sequence[_Unit],
        following: _Unit,
        protected: Sequence[tuple[int, int]],
    ) -> int:
        """Where the next piece starts: the earliest sentence/line start that fits the overlap."""
        if self._overlap == 0:
            return following.start
        end = previous[-1].end
        candidates: list[int] = []
        for unit in previous:
            candidates.append(unit.start)
            if not unit.atomic:
                ends = _SENTENCE_END.finditer(text, unit.start, unit.end)
                candidates.extend(match.end() for match in ends)
        for start in sorted(candidates):
            if (
                previous[0].start < start < end  # never repeat the whole previous piece
                and end - start <= self._overlap
                and following.end - start <= self._size  # no overlap before an oversized block
                and not _inside(protected, start)
            ):
                return start
        return following.start


class _Source:
    """The text with its line offsets, to turn markdown-it line maps into character spans."""

    def __init__(self, text: str) -> None:
        self.text = text
        # Where each line starts, plus one past the end: the text is not copied into lines.
        newlines = (match.end() for match in re.finditer("\n", text))
        self._starts = [0, *newlines, len(text) + 1]

    def span(self, line_map: Sequence[int]) -> tuple[int, int]:
        begin, stop = line_map
        start, end = self._starts[begin], min(self._starts[stop] - 1, len(self.text))
        while end > start and self.text[end - 1].isspace():
            end -= 1
        return start, end


def _inside(spans: Sequence[tuple[int, int]], position: int) -> bool:
    """Whether position is strictly inside one of the sorted, disjoint spans."""
    i = bisect_right(spans, position, key=lambda span: span[0]) - 1
    return i >= 0 and spans[i][0] < position < spans[i][1]


def _heading_markdown(heading: SyntaxTreeNode) -> str:
    inline = heading.children[0].token if heading.children else None
    return inline.content if inline is not None else ""


def _heading_title(heading: SyntaxTreeNode) -> str:
    return heading_text(_heading_markdown(heading), MAX_HEADING_CHARS)


def _heading_line(text: str, span: tuple[int, int], heading: SyntaxTreeNode, level: int) -> str:
    """The heading as written, or, when longer than MAX_HEADING_CHARS, rebuilt and cut."""
    start, end = span
    if end - start <= MAX_HEADING_CHARS:
        return text[start:end]
    # Rebuilt as an ATX heading from its plain text: a setext underline or markup cut in
    # half would not survive a cut of the source line.
    marks = "#" * level + " "
    return marks + heading_text(_heading_markdown(heading), MAX_HEADING_CHARS - len(marks))


def _breadcrumb(headings: Sequence[str]) -> str:
    """The heading path; when too long, its first headings give way to "…"."""
    path = BREADCRUMB_SEPARATOR.join(headings)
    if len(path) <= MAX_BREADCRUMB_CHARS:
        return path
    # The deepest headings say most about a chunk; the top one is usually the title, which
    # the search text carries anyway.
    for first in range(1, len(headings)):
        path = BREADCRUMB_SEPARATOR.join((ELLIPSIS, *headings[first:]))
        if len(path) <= MAX_BREADCRUMB_CHARS:
            return path
    return shorten(headings[-1], MAX_BREADCRUMB_CHARS)


def _sections(
    nodes: Sequence[SyntaxTreeNode],
) -> Iterator[tuple[SyntaxTreeNode | None, list[SyntaxTreeNode]]]:
    """Top-level blocks grouped under their heading; the preamble has heading None."""
    heading: SyntaxTreeNode | None = None
    body: list[SyntaxTreeNode] = []
    for node in nodes:
        if node.type == "heading":
            if heading is not None or body:
                yield heading, body
            heading, body = node, []
        else:
            body.append(node)
    if heading is not None or body:
        yield heading, body


def _sentence_units(text: str, start: int, end: int, max_unit: int) -> Iterator[_Unit]:
    """Cut one oversized text block at sentence ends, hard-cutting overlong sentences."""
    cuts = [start, *(m.end() for m in _SENTENCE_END.finditer(text, start, end)), end]
    for a, b in pairwise(cuts):
        while b > a and text[b - 1].isspace():
            b -= 1
        while b - a > max_unit:
            window = text[a : a + max_unit]
            space = max(window.rfind(" "), window.rfind("\t"))
            # Prefer a word boundary, but not one that leaves a tiny piece.
            cut = a + space + 1 if space >= max_unit // 2 else a + max_unit
            piece_end = cut
            while piece_end > a and text[piece_end - 1].isspace():
                piece_end -= 1
            yield _Unit(a, piece_end, atomic=False)
            a = cut
        if b > a and text[a:b].strip():
            yield _Unit(a, b, atomic=False)
