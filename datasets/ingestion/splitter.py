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

# Blocks that are never cut: a half code block or half table misleads the agent reading it.
_ATOMIC = frozenset({"fence", "code_block", "table"})
# Blocks whose children are blocks: an oversized list is cut between its items.
_CONTAINERS = frozenset({"bullet_list", "ordered_list", "list_item", "blockquote"})
# A match ends where the next sentence starts. "." needs whitespace after it so that
# "redis.conf" or "3.14" is not a boundary; CJK punctuation needs nothing.
_SENTENCE_END = re.compile(r"(?:[。！？；]|[.!?](?=\s))[\"'”’)）」』]*[ \t]*\n?|\n")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


@dataclass(frozen=True)
class Segment:
    index: int
    content: str
    breadcrumb: str
    headings: tuple[str, ...]


@dataclass(frozen=True)
class _Unit:
    """A span of the source packed whole; `atomic` spans are never cut or overlapped into."""

    start: int
    end: int
    atomic: bool


def inline_text(token: Token) -> str:
    """Plain text of an inline token (markup dropped), e.g. a heading's title."""
    parts: list[str] = []
    for child in token.children or ():
        if child.type in ("text", "code_inline", "image"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts).strip()


class MarkdownSplitter:
    """Split markdown into segments that never cross a heading.

    Each section (a heading and the blocks up to the next heading) is packed into pieces of
    at most `chunk_size` characters, cut at block boundaries, else at sentence boundaries,
    else (one unbroken run of text) hard-cut. The first piece of a section starts with its
    heading line; later pieces start with up to `chunk_overlap` characters of whole
    sentences or lines from the end of the previous piece.

    Fenced/indented code blocks and tables are never cut: one longer than `chunk_size`
    becomes its own oversized segment (with the heading if it opens its section). A heading
    whose section has no blocks of its own (e.g. directly followed by a sub-heading) yields
    no segment, so a document made only of headings yields [].
    """

    def __init__(self, *, chunk_size: int = 800, chunk_overlap: int = 100) -> None:
        if chunk_size < 100:
            raise ValueError(f"chunk_size must be at least 100, got {chunk_size}")
        if not 0 <= chunk_overlap < chunk_size // 2:
            raise ValueError(
                f"chunk_overlap must be in [0, {chunk_size // 2}), got {chunk_overlap}"
            )
        self._size = chunk_size
        self._overlap = chunk_overlap
        self._md = MarkdownIt("commonmark").enable("table")

    def split(self, markdown: str) -> list[Segment]:
        text = markdown.replace("\r\n", "\n").replace("\r", "\n")
        if not text.strip():
            return []
        source = _Source(text)
        root = SyntaxTreeNode(self._md.parse(text))
        # In document order and disjoint (a table cannot hold a fence), as _inside requires.
        protected = [
            source.span(node.map) for node in root.walk() if node.type in _ATOMIC and node.map
        ]
        segments: list[Segment] = []
        path: list[tuple[int, str]] = []
        for heading, body in _sections(root.children):
            head_span = None
            if heading is not None and heading.map is not None:
                level = int(heading.tag[1])
                while path and path[-1][0] >= level:
                    path.pop()
                path.append((level, _heading_title(heading)))
                head_span = source.span(heading.map)
            headings = tuple(title for _, title in path if title)
            for content in self._split_section(source, head_span, body, protected):
                segments.append(Segment(len(segments), content, " > ".join(headings), headings))
        return segments

    def _split_section(
        self,
        source: _Source,
        head_span: tuple[int, int] | None,
        body: Sequence[SyntaxTreeNode],
        protected: Sequence[tuple[int, int]],
    ) -> list[str]:
        if not body:
            return []
        # Leave room for the heading (and the blank lines after it) so the first piece fits.
        head_len = source.span(body[0].map)[0] - head_span[0] if head_span and body[0].map else 0
        max_unit = max(self._size - head_len, self._size // 2)
        units = [unit for node in body for unit in self._units(source, node, max_unit)]
        if not units:
            return []
        pieces: list[str] = []
        start = head_span[0] if head_span else units[0].start
        first = 0
        while first < len(units):
            last = first
            while last + 1 < len(units) and units[last + 1].end - start <= self._size:
                last += 1
            content = _LEADING_BLANK_LINES.sub("", source.text[start : units[last].end]).rstrip()
            if content:
                pieces.append(content)
            if last + 1 < len(units):
                start = self._overlap_start(
                    source.text, units[first : last + 1], units[last + 1], protected
                )
            first = last + 1
        return pieces

    def _units(self, source: _Source, node: SyntaxTreeNode, max_unit: int) -> list[_Unit]:
        if node.map is None:
            return []
        start, end = source.span(node.map)
        if node.type in _ATOMIC:
            return [_Unit(start, end, atomic=True)]
        if end - start <= max_unit:
            return [_Unit(start, end, atomic=False)] if end > start else []
        if node.type in _CONTAINERS:
            units = [u for child in node.children for u in self._units(source, child, max_unit)]
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
        self._starts = [0]
        for line in text.split("\n"):
            self._starts.append(self._starts[-1] + len(line) + 1)

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


def _heading_title(heading: SyntaxTreeNode) -> str:
    inline = heading.children[0].token if heading.children else None
    return inline_text(inline) if inline is not None else ""


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
