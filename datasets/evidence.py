"""The evidence key `{docId}#chunk-{n}`: one chunk's identity everywhere, from the Milvus
primary key to the id an agent cites (DESIGN.md "Milvus collection", seed 000 §5)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

SEPARATOR = "#chunk-"


@dataclass(frozen=True)
class EvidenceKey:
    # Text: the key is built from a hit's metadata as stored, which need not be a number.
    doc_id: str
    chunk_index: int

    # An id inside free text (a citation marker): no space, comma, semicolon or bracket in it.
    IN_TEXT: ClassVar[str] = rf"[^\s,;\[\]]+{SEPARATOR}\d+"
    _WHOLE: ClassVar[re.Pattern[str]] = re.compile(rf"([^#]+){SEPARATOR}([0-9]+)")

    def __str__(self) -> str:
        return f"{self.doc_id}{SEPARATOR}{self.chunk_index}"

    @classmethod
    def parse(cls, text: str) -> EvidenceKey | None:
        """The key `text` spells; None for anything else (a fallback key such as `vector:…`
        or `rank:…`, a forged id)."""
        match = cls._WHOLE.fullmatch(text)
        return cls(match[1], int(match[2])) if match else None

    @classmethod
    def require(cls, text: str) -> EvidenceKey:
        """`parse` for a key the platform wrote itself: a malformed one is a bug, raised."""
        key = cls.parse(text)
        if key is None:
            raise ValueError(f"not an evidence key: {text!r}")
        return key
