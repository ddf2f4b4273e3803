"""Where a chunk is in the original file: the page, slide or sheet markers a converter writes.

A converter (datasets/ingestion/formats) marks where each page, slide or sheet begins with a
line of its own, `<!-- kb:page 3 -->`, `<!-- kb:slide 2 -->` or `<!-- kb:sheet Inventory -->`.
The pipeline takes the markers out of the text before it is split (an agent reads no marker)
and gives each chunk the location in effect where it begins: a chunk over two pages carries
the first.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

# Sheet names are Excel's (31 characters at most); a longer one is not a converter's marker.
# The marker's line and the blank lines after it are taken out.
_MARKER = re.compile(r"^<!-- kb:(?:(?P<kind>page|slide) (?P<number>[0-9]{1,6})"
                     r"|sheet (?P<sheet>[^\n]{1,100}?)) -->[ \t]*(?:\n[ \t]*(?=\n))*\n?",
                     re.MULTILINE)
_LABELS = {"page": "p. {}", "slide": "slide {}", "sheet": "sheet {}"}


@dataclass(frozen=True)
class Location:
    """A page or slide (a number from 1) or a sheet (its name)."""

    kind: str  # "page", "slide" or "sheet"
    value: int | str

    def as_dict(self) -> dict[str, int | str]:
        """As chunks and evidence carry it: {"page": 3}, {"slide": 2}, {"sheet": "Inventory"}."""
        return {self.kind: self.value}

    @classmethod
    def stored(cls, value: object) -> Location | None:
        """The location as_dict() stored (in a chunk's metadata), or None for anything else."""
        if not isinstance(value, dict) or len(value) != 1:
            return None
        [(kind, where)] = value.items()
        if kind in ("page", "slide") and isinstance(where, int) and not isinstance(where, bool):
            return cls(kind, where)
        if kind == "sheet" and isinstance(where, str):
            return cls(kind, where)
        return None

    def label(self) -> str:
        """As the breadcrumb shows it: "p. 3", "slide 2", "sheet Inventory"."""
        return _LABELS[self.kind].format(self.value)


@dataclass(frozen=True)
class Marked:
    """A text with its markers taken out, and where each stood (offsets into `text`)."""

    text: str
    offsets: tuple[int, ...]
    locations: tuple[Location, ...]

    def at(self, offset: int) -> Location | None:
        """The location in effect at `offset` of the text: the last marker at or before it.
        Text above the first marker (a title the converter wrote first) is on its page."""
        if not self.locations:
            return None
        return self.locations[max(bisect_right(self.offsets, offset) - 1, 0)]


def take_markers(text: str) -> Marked:
    """The text without its marker lines; a marker between two lines of text leaves an empty
    line, so that they stay two paragraphs."""
    parts: list[str] = []
    offsets: list[int] = []
    locations: list[Location] = []
    last = length = 0
    for match in _MARKER.finditer(text):
        before = text[last:match.start()]
        if match.start() > 0 and not text.endswith("\n\n", 0, match.start()):
            before += "\n"
        parts.append(before)
        length += len(before)
        last = match.end()
        offsets.append(length)
        sheet = match["sheet"]
        locations.append(Location("sheet", sheet) if sheet is not None
                         else Location(match["kind"], int(match["number"])))
    if not offsets:
        return Marked(text, (), ())
    parts.append(text[last:])
    return Marked("".join(parts), tuple(offsets), tuple(locations))
