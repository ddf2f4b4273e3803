"""markdown → frontmatter + body → transformers → locations → heading-aware splitter →
chunk drafts."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace

from datasets.documents.evidence import chunk_anchor
from datasets.ingestion.limits import MAX_CHUNKS_PER_DOCUMENT, MAX_SEARCH_TEXT_CHARS, shorten
from datasets.ingestion.locations import Location, take_markers
from datasets.ingestion.parse import DocumentTooLarge, ParsedDocument
from datasets.ingestion.splitter import BREADCRUMB_SEPARATOR, MarkdownSplitter, Segment
from datasets.ingestion.transformers import SecretRedactor, transform_document

# Stateless: one instance serves every document.
_REDACTOR = SecretRedactor()


@dataclass(frozen=True)
class Chunking:
    """How documents are cut (see MarkdownSplitter); an index keeps the one it was built with."""

    size: int
    overlap: int
    whole_document: int = 0

    def splitter(self) -> MarkdownSplitter:
        return MarkdownSplitter(chunk_size=self.size, chunk_overlap=self.overlap,
                                whole_document=self.whole_document)


@dataclass(frozen=True)
class ChunkDraft:
    index: int
    content: str  # the raw chunk text an agent reads
    breadcrumb: str  # the location first when there is one: "p. 3 > Section"
    # Title + Path + Content: the BM25 input and the embedding input, ≤ MAX_SEARCH_TEXT_CHARS.
    search_text: str
    location: Location | None = None  # the page, slide or sheet where the chunk begins
    overlap: int = 0  # characters it starts with that end the chunk before it
    # The lines of the file it spans, first and last (1-based): a file whose lines are its
    # text's (markdown); None for the others (a converted original).
    lines: tuple[int, int] | None = None
    # Its evidence id's content-addressed part (datasets/documents/evidence.py); "" for a
    # repeat of an earlier chunk's breadcrumb and text, served by its place: an anchor names
    # one chunk.
    anchor: str = ""


@dataclass(frozen=True)
class _Lines:
    """The file's line of each offset of the split text."""

    text: str  # the split text
    starts: tuple[int, ...]  # its line starts, as offsets
    numbers: tuple[int, ...]  # the file's line (1-based) of each of its lines

    @classmethod
    def of(cls, text: str, origins: tuple[int, ...], first_line: int) -> _Lines:
        starts = (0, *(n + 1 for n, char in enumerate(text) if char == "\n"))
        return cls(text, starts, tuple(first_line + origin for origin in origins))

    def find(self, start: int, content: str, after: int) -> int | None:
        """Where `content` stands in the text as it is: at `start`, where the splitter began
        it; else first at or after `after`, where the chunk before it ended less their
        overlap (the whole-document chunk, the pieces of a block too long for one chunk);
        None when the text does not hold it as it is (a re-fenced piece of a long code
        block, a heading cut short)."""
        after = max(after, 0)
        # Chunks follow each other in the text: one never begins before the end of the one
        # before it less their overlap (a later piece of a cut block keeps the block's start).
        if start >= after and self.text.startswith(content, start):
            return start
        found = self.text.find(content, after)
        return found if found >= 0 else None

    def span(self, start: int, content: str) -> tuple[int, int]:
        """The file's first and last lines of `content`, found at `start`."""
        last = start + max(len(content) - 1, 0)
        return (self.numbers[bisect_right(self.starts, start) - 1],
                self.numbers[bisect_right(self.starts, last) - 1])


def build_chunks(
    parsed: ParsedDocument,
    *,
    chunking: Chunking,
    redact: bool,
    max_chunks: int = MAX_CHUNKS_PER_DOCUMENT,
    numbered: bool = False,
) -> list[ChunkDraft]:
    """The chunks of one document; DocumentTooLarge when there would be over `max_chunks`.
    `numbered`: the parsed text is the file's (markdown), so each chunk says its lines."""
    body = transform_document(parsed.body, redactor=_REDACTOR if redact else None)
    marked = take_markers(body.text)
    lines = (_Lines.of(marked.text, body.origins, parsed.first_line)
             if numbered and body.origins and not marked.locations else None)
    splitter = chunking.splitter()
    drafts: list[ChunkDraft] = []
    anchors: set[str] = set()
    count = end = 0  # `end`: where the last chunk found ended in the text
    for segment in splitter.iter_split(marked.text):
        count += 1
        # Past the limit the segments are only counted, so the error can say by how much
        # the document is over without holding (or building search texts for) all of them.
        if count > max_chunks:
            continue
        draft = _draft(parsed.title, segment, marked.at(segment.start))
        anchor = chunk_anchor(draft.breadcrumb, draft.content)
        found = (lines.find(segment.start, segment.content, end - segment.overlap)
                 if lines else None)
        if found is not None:
            end = found + len(segment.content)
        drafts.append(replace(draft, anchor="" if anchor in anchors else anchor,
                              lines=lines.span(found, segment.content)
                              if lines and found is not None else None))
        anchors.add(anchor)
    if count > max_chunks:
        raise DocumentTooLarge(
            f"the document splits into {count:,} chunks; the limit is {max_chunks:,} per "
            "document: split it into several files"
        )
    return drafts


def _draft(title: str, segment: Segment, location: Location | None) -> ChunkDraft:
    breadcrumb = segment.breadcrumb
    if location is not None:
        breadcrumb = BREADCRUMB_SEPARATOR.join(p for p in (location.label(), breadcrumb) if p)
    return ChunkDraft(index=segment.index, content=segment.content, breadcrumb=breadcrumb,
                      search_text=search_text(title, breadcrumb, segment.content),
                      location=location, overlap=segment.overlap)


def search_text(title: str, breadcrumb: str, content: str) -> str:
    """Title + Path + Content, cut at the end to MAX_SEARCH_TEXT_CHARS."""
    return shorten("\n".join(part for part in (title, breadcrumb, content) if part),
                   MAX_SEARCH_TEXT_CHARS)
