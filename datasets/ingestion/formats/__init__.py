"""Uploaded documents of other formats (PDF, DOCX, PPTX, XLSX, CSV, HTML, text) as markdown.

`sniff` names a file's format from its suffix and its content, cheaply; `convert` turns it
into the markdown the splitter reads, in a child process under resource limits. The markdown
marks where a page, slide or sheet begins with a line of its own (`<!-- kb:page 3 -->`).
"""

from datasets.ingestion.formats.kinds import (
    CONVERTER_VERSION,
    SUFFIXES,
    ConversionFailed,
    Converted,
    Format,
    FormatRefused,
)
from datasets.ingestion.formats.sandbox import convert
from datasets.ingestion.formats.sniff import sniff

__all__ = [
    "CONVERTER_VERSION",
    "SUFFIXES",
    "ConversionFailed",
    "Converted",
    "Format",
    "FormatRefused",
    "convert",
    "sniff",
]
