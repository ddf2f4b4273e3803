"""Documents in other formats turned into markdown (STAND-IN until the convert branch lands:
markdown and plain text only, every other format refused)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath


class Format(StrEnum):
    MARKDOWN = "md"
    TEXT = "txt"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"
    PPTX = "pptx"
    XLSX = "xlsx"
    CSV = "csv"


SUFFIXES: Mapping[str, Format] = {
    ".md": Format.MARKDOWN, ".markdown": Format.MARKDOWN, ".txt": Format.TEXT,
    ".html": Format.HTML, ".htm": Format.HTML, ".pdf": Format.PDF, ".docx": Format.DOCX,
    ".pptx": Format.PPTX, ".xlsx": Format.XLSX, ".csv": Format.CSV,
}
_SUPPORTED = frozenset({Format.MARKDOWN, Format.TEXT})

CONVERTER_VERSION = "stand-in-1"


class FormatRefused(ValueError):
    """The file is refused at the door; str() is the user-facing reason."""


class ConversionFailed(ValueError):
    """The conversion failed; str() is the user-facing reason."""


@dataclass(frozen=True)
class Converted:
    markdown: str
    notes: tuple[str, ...]


def sniff(file_name: str, raw: bytes) -> Format:
    fmt = SUFFIXES.get(PurePosixPath(file_name).suffix.lower())
    if fmt is None:
        raise FormatRefused(f"{file_name!r}: this file type is not supported")
    if fmt not in _SUPPORTED:
        raise FormatRefused(f"{fmt.value} files are not supported yet")
    return fmt


def convert(fmt: Format, raw: bytes) -> Converted:
    if fmt not in _SUPPORTED:
        raise ConversionFailed(f"{fmt.value} files are not supported yet")
    try:
        return Converted(markdown=raw.decode("utf-8-sig"), notes=())
    except UnicodeDecodeError as exc:
        raise ConversionFailed("the file is not valid UTF-8") from exc
