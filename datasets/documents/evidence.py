"""Evidence ids: one chunk's identity, from the Milvus primary key to the id an agent cites
(DESIGN.md "Milvus collection", seed 000 §5), in two spellings.

- `{docId}#{anchor}`: what agents are served and cite. The anchor is the first 12 hex digits
  of the SHA-256 of the chunk's breadcrumb and text, so the id means the same text for as
  long as that text is in the document, whatever is edited elsewhere in it. Only the first
  chunk with a given breadcrumb and text has it (datasets/ingestion/pipeline.py): an anchor
  names exactly one chunk.
- `{docId}#chunk-{n}`: the chunk's place in its document, the Milvus primary key, and what a
  repeat of an earlier chunk and chunks indexed before anchors existed are served as.
  Accepted everywhere an id is given, meaning the document's chunk `n` as it is now.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import ClassVar

SEPARATOR = "#chunk-"
ANCHOR_DIGITS = 12
# Where an evidence id begins to be one in free text (a bracket holding one is a citation
# marker): either spelling's tail.
MARK = rf"#(?:chunk-\d|[0-9a-f]{{{ANCHOR_DIGITS}}}(?![0-9A-Za-z]))"


def chunk_anchor(breadcrumb: str, content: str) -> str:
    """The content-addressed part of a chunk's id."""
    digest = hashlib.sha256(f"{breadcrumb}\n{content}".encode()).hexdigest()
    return digest[:ANCHOR_DIGITS]


@dataclass(frozen=True)
class EvidenceKey:
    # Text: the key is built from a hit's metadata as stored, which need not be a number.
    doc_id: str
    chunk_index: int | None = None  # the positional spelling's n
    anchor: str = ""  # the content-addressed spelling's anchor (then chunk_index is None)

    # An id inside free text (a citation marker): no space, comma, semicolon or bracket in it.
    # It starts where a run of id characters starts (a lookbehind): tried from inside a run,
    # the scan is quadratic on a long one.
    IN_TEXT: ClassVar[str] = (rf"(?<![^\s,;\[\]#])[^\s,;\[\]#]+#(?:chunk-\d+"
                              rf"|[0-9a-f]{{{ANCHOR_DIGITS}}}(?![0-9A-Za-z]))")
    _WHOLE: ClassVar[re.Pattern[str]] = re.compile(
        rf"([^#]+)(?:{SEPARATOR}([0-9]+)|#([0-9a-f]{{{ANCHOR_DIGITS}}}))")

    def __post_init__(self) -> None:
        if (self.chunk_index is None) == (not self.anchor):
            raise ValueError("an evidence key is a chunk index or an anchor, one of them")

    def __str__(self) -> str:
        if self.anchor:
            return f"{self.doc_id}#{self.anchor}"
        return f"{self.doc_id}{SEPARATOR}{self.chunk_index}"

    @classmethod
    def served(cls, doc_id: str, chunk_index: int, anchor: str) -> EvidenceKey:
        """The id a chunk is served as: by its anchor, when it has one (see above)."""
        return cls(doc_id, anchor=anchor) if anchor else cls(doc_id, chunk_index)

    @classmethod
    def parse(cls, text: str) -> EvidenceKey | None:
        """The key `text` spells; None for anything else (a fallback key such as `vector:…`
        or `rank:…`, a forged id)."""
        match = cls._WHOLE.fullmatch(text)
        if not match:
            return None
        if match[3]:
            return cls(match[1], anchor=match[3])
        return cls(match[1], int(match[2]))

    @classmethod
    def require(cls, text: str) -> EvidenceKey:
        """`parse` for a key the platform wrote itself: a malformed one is a bug, raised."""
        key = cls.parse(text)
        if key is None:
            raise ValueError(f"not an evidence key: {text!r}")
        return key
