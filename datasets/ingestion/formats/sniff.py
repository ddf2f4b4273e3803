"""Which format a file is, from its suffix and its first bytes; refusing what must not be opened.

Cheap on any input: the content is judged by its magic bytes, and a DOCX, XLSX or PPTX by its
zip's central directory (member names and declared sizes), without inflating a member.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath

from django.conf import settings

from datasets.ingestion.formats.kinds import SUFFIXES, Format, FormatRefused

_MACRO_SUFFIXES = frozenset(
    {".docm", ".dotm", ".xlsm", ".xltm", ".xlsb", ".pptm", ".potm", ".ppsm"}
)
_LEGACY_SUFFIXES = {".doc": ".docx", ".xls": ".xlsx", ".ppt": ".pptx"}
# The part each OOXML format's [Content_Types].xml names as its main document.
_OOXML_MAIN_PART = {
    Format.DOCX: "word/document.xml",
    Format.XLSX: "xl/workbook.xml",
    Format.PPTX: "ppt/presentation.xml",
}
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Office keeps a password-protected DOCX/XLSX/PPTX as an OLE2 file with this stream.
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_BINARY_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"\x1f\x8b": "a gzip archive",
    b"Rar!": "a RAR archive",
    b"7z\xbc\xaf": "a 7-Zip archive",
    b"\x7fELF": "a program",
    b"MZ": "a program",
}
# A member smaller than this is never a bomb whatever its ratio (XML compresses ~10x).
_RATIO_FLOOR_BYTES = 1024 * 1024
_MAX_ZIP_MEMBERS = 10_000
_TEXT_PROBE_BYTES = 8192


def sniff(file_name: str, raw: bytes) -> Format:
    """The format by suffix and content; FormatRefused says why a file cannot be taken."""
    suffix = PurePosixPath(file_name.replace("\\", "/")).suffix.lower()
    if suffix in _MACRO_SUFFIXES:
        raise FormatRefused(
            f"macro-enabled Office files ({suffix}) are not accepted; save it without macros "
            "(.docx, .xlsx, .pptx)"
        )
    if suffix in _LEGACY_SUFFIXES:
        raise FormatRefused(
            f"the old Office format {suffix} is not supported; save it as "
            f"{_LEGACY_SUFFIXES[suffix]}"
        )
    fmt = SUFFIXES.get(suffix)
    if fmt is None:
        accepted = ", ".join(sorted(SUFFIXES))
        shown = suffix or "(no suffix)"
        raise FormatRefused(f"unsupported file type {shown!r}; accepted: {accepted}")
    if not raw:
        raise FormatRefused("the file is empty")
    content = _content_kind(raw)
    if fmt in _OOXML_MAIN_PART:
        if content != "zip":
            raise _lying(suffix, content)
        _check_ooxml(fmt, suffix, raw)
    elif fmt is Format.PDF:
        if content != "pdf":
            raise _lying(suffix, content)
    elif content != "text":
        raise _lying(suffix, content)
    return fmt


def _content_kind(raw: bytes) -> str:
    """'pdf', 'zip', 'text', or a description of another binary content; every magic is
    matched at offset 0."""
    # The PDF spec (ISO 32000-1, annex H) lets a reader find the header anywhere in the first
    # 1,024 bytes, but the files writers make start with it, and libmagic and the WHATWG MIME
    # sniffing standard look only there. Looking further took text, CSV or HTML that quotes a
    # header (and a DOCX holding a PDF as its first member) for a PDF; a PDF with bytes before
    # its header is refused with a reason its uploader can act on.
    if raw.startswith(b"%PDF-"):
        return "pdf"
    if raw.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if raw.startswith(_OLE2):
        if _ENCRYPTED_PACKAGE in raw:
            return "a password-protected Office file"
        return "an old Office (.doc/.xls/.ppt) file"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (save it as UTF-8)"
    for magic, name in _BINARY_MAGIC.items():
        if raw.startswith(magic):
            return name
    probe = raw[:_TEXT_PROBE_BYTES]
    if b"\x00" in probe:
        return "a binary file"
    return "text"


def _lying(suffix: str, content: str) -> FormatRefused:
    described = {"pdf": "a PDF", "zip": "a zip archive", "text": "plain text"}.get(content, content)
    if content.startswith("a password-protected"):
        return FormatRefused(
            "the file is password-protected; remove the password and upload it again"
        )
    return FormatRefused(f"the file is named {suffix} but its content is {described}")


def _check_ooxml(fmt: Format, suffix: str, raw: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise FormatRefused(
            f"the {suffix} file is truncated or corrupt (its zip directory cannot be read)"
        ) from exc
    if len(members) > _MAX_ZIP_MEMBERS:
        raise FormatRefused(f"the {suffix} file holds more than {_MAX_ZIP_MEMBERS:,} parts")
    names = {member.filename for member in members}
    if "[Content_Types].xml" not in names:
        raise FormatRefused(
            f"the file is named {suffix} but it is a zip archive, not an Office file"
        )
    if any(name.lower().endswith("vbaproject.bin") for name in names):
        raise FormatRefused(
            "the file contains macros (vbaProject.bin); save it without macros and upload it again"
        )
    main_part = _OOXML_MAIN_PART[fmt]
    if main_part not in names:
        other = next((f for f, part in _OOXML_MAIN_PART.items() if part in names), None)
        actual = f"a .{other.value} file" if other else "another Office file"
        raise FormatRefused(f"the file is named {suffix} but its content is {actual}")
    max_total = settings.KB_CONVERT_MAX_UNPACKED_MB * 1024 * 1024
    max_ratio = settings.KB_CONVERT_MAX_ZIP_RATIO
    total = 0
    for member in members:
        total += member.file_size
        if total > max_total:
            raise FormatRefused(
                f"the {suffix} file unpacks to more than {settings.KB_CONVERT_MAX_UNPACKED_MB} MB "
                "(KB_CONVERT_MAX_UNPACKED_MB)"
            )
        if (
            member.file_size > _RATIO_FLOOR_BYTES
            and member.file_size > max_ratio * max(member.compress_size, 1)
        ):
            raise FormatRefused(
                f"the {suffix} file looks like a zip bomb: {member.filename} inflates "
                f"{member.file_size // max(member.compress_size, 1):,} times "
                f"(limit {max_ratio}, KB_CONVERT_MAX_ZIP_RATIO)"
            )
