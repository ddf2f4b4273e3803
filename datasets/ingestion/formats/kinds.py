"""The formats, their suffixes, the two ways a conversion says no, and its result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

# Bump when any converter's output changes: a rebuild then converts the originals again.
# 2: PDF lines in a larger font are headings; HTML text and table cells no longer escaped
# beyond what markdown needs (order_svc, not order\_svc), code fences keep their language.
# 3: XLSX and CSV tables keep only the rows and columns with a value; empty sheets left out;
# a document's text never markup (`<` as &lt;, brackets and backticks escaped); HTML links keep
# http(s), mailto and relative targets only.
CONVERTER_VERSION = "3"


class Format(StrEnum):
    """A format the platform ingests; the value is its canonical suffix."""

    MARKDOWN = "md"
    TEXT = "txt"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"
    PPTX = "pptx"
    XLSX = "xlsx"
    CSV = "csv"


SUFFIXES: Mapping[str, Format] = MappingProxyType(
    {f".{fmt.value}": fmt for fmt in Format} | {".markdown": Format.MARKDOWN, ".htm": Format.HTML}
)

# The formats converted in a child process; markdown and text are cheap and stay in-process.
SANDBOXED = frozenset(Format) - {Format.MARKDOWN, Format.TEXT}


class FormatRefused(ValueError):
    """The file is refused before conversion; str(exc) is the reason shown to the uploader."""


class ConversionFailed(ValueError):
    """The file could not be converted; str(exc) is the reason shown to the uploader."""


@dataclass(frozen=True)
class Converted:
    markdown: str  # what the splitter reads: headings, tables, lists, location markers
    notes: tuple[str, ...] = ()  # what the uploader should know, e.g. "pages 3, 5 OCR'd"


@dataclass(frozen=True)
class Limits:
    """What one conversion may take, from the KB_CONVERT_* settings; sent to the child."""

    max_pages: int  # PDF pages, PPTX slides
    max_cells: int  # XLSX and CSV cells, DOCX table cells
    ocr: bool  # OCR a PDF page without text (KB_OCR=auto and tesseract on PATH)
    max_ocr_pages: int
