"""sniff: the format from the suffix and the content; refusals cheap and explained."""

from __future__ import annotations

import io
import zipfile

import pytest

from datasets.ingestion.formats import SUFFIXES, Format, FormatRefused, sniff
from tests.datasets.ingestion.formats import samples


@pytest.mark.parametrize(
    ("name", "make", "expected"),
    [
        ("runbook.docx", samples.docx_bytes, Format.DOCX),
        ("Deck.PPTX", samples.pptx_bytes, Format.PPTX),
        ("stock.xlsx", samples.xlsx_bytes, Format.XLSX),
        ("stock.csv", samples.csv_bytes, Format.CSV),
        ("page.htm", samples.html_bytes, Format.HTML),
        ("scan.pdf", lambda: samples.pdf_bytes(pages=1), Format.PDF),
        ("notes.txt", lambda: "值班记录\n".encode("gb18030"), Format.TEXT),
        ("notes.markdown", lambda: b"# Title\n", Format.MARKDOWN),
    ],
)
def test_the_format_is_the_suffix_when_the_content_agrees(name, make, expected) -> None:
    assert sniff(name, make()) is expected


def test_every_format_has_its_canonical_suffix() -> None:
    assert {SUFFIXES[f".{fmt.value}"] for fmt in Format} == set(Format)


@pytest.mark.parametrize(
    ("name", "make", "reason"),
    [
        ("run.docx", lambda: samples.pdf_bytes(pages=1), "named .docx but its content is a PDF"),
        ("runbook.pdf", samples.docx_bytes, "named .pdf but its content is a zip archive"),
        ("runbook.docx", samples.xlsx_bytes, "named .docx but its content is a .xlsx file"),
        ("notes.txt", samples.text_image_png, "named .txt but its content is a PNG image"),
        ("page.html", samples.docx_bytes, "named .html but its content is a zip archive"),
        ("data.xlsx", lambda: samples.zip_bytes({"a.txt": b"x"}), "a zip archive, not an Office"),
        ("run.exe", lambda: b"MZ", "unsupported file type '.exe'"),
        ("README", lambda: b"hello", r"unsupported file type '\(no suffix\)'"),
        ("old.doc", lambda: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "save it as .docx"),
        ("empty.pdf", lambda: b"", "the file is empty"),
        ("notes.txt", lambda: "文本".encode("utf-16"), r"UTF-16 text \(save it as UTF-8\)"),
        # A PDF begins with its header: one further in is not taken for one.
        ("scan.pdf", lambda: b"Header: value\n" + samples.pdf_bytes(pages=1),
         "named .pdf but its content is a binary file"),
    ],
)
def test_a_suffix_that_lies_or_is_unknown_is_refused(name, make, reason) -> None:
    with pytest.raises(FormatRefused, match=reason):
        sniff(name, make())


def pdf_first_docx() -> bytes:
    """A DOCX whose first member is a PDF, stored (not deflated): its header is at byte 30."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(samples.docx_bytes())) as source, \
            zipfile.ZipFile(out, "w") as target:
        target.writestr("word/embeddings/a.pdf", b"%PDF-1.7\n%%EOF\n")
        for item in source.infolist():
            target.writestr(item, source.read(item.filename))
    return out.getvalue()


@pytest.mark.parametrize(("name", "make"), [
    ("notes.txt", lambda: b"Every PDF starts with %PDF-1.7 and ends with %%EOF.\n"),
    ("files.csv", lambda: b"name,first bytes\nreport.pdf,%PDF-1.4\n"),
    ("page.html", lambda: b"<html><body><p>A PDF begins with <code>%PDF-</code>.</p></body>"),
    ("report.docx", pdf_first_docx),
])
def test_a_file_that_mentions_a_pdf_header_is_what_its_name_says(name, make) -> None:
    """A PDF's header is looked for where a PDF has it, at the start: text that quotes one in
    its first kilobyte is not refused as a PDF."""
    assert sniff(name, make()) is SUFFIXES[name[name.rindex("."):]]


def test_a_password_protected_office_file_is_refused_as_such() -> None:
    # Office keeps an encrypted DOCX as an OLE2 compound file with an EncryptedPackage stream.
    ole2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    raw = ole2 + b"\x00" * 100 + "EncryptedPackage".encode("utf-16-le")
    with pytest.raises(FormatRefused, match="password-protected"):
        sniff("secret.docx", raw)


@pytest.mark.parametrize("name", ["report.docm", "book.xlsm", "deck.pptm", "book.xlsb"])
def test_macro_enabled_suffixes_are_refused(name) -> None:
    with pytest.raises(FormatRefused, match="macro-enabled"):
        sniff(name, samples.docx_bytes())


def test_macros_inside_a_docx_are_refused() -> None:
    raw = samples.with_members(samples.docx_bytes(), {"word/vbaProject.bin": b"\x00" * 64})
    with pytest.raises(FormatRefused, match="contains macros"):
        sniff("report.docx", raw)


def test_a_zip_bomb_is_refused_without_inflating_it() -> None:
    # 100 MB of zeros deflates to ~100 KB: a ratio of ~1,000, under the total of 200 MB.
    bomb = samples.with_members(samples.docx_bytes(), {"word/media/bomb.bin": bytes(100 << 20)})
    assert len(bomb) < 1 << 20
    with pytest.raises(FormatRefused, match="zip bomb"):
        sniff("report.docx", bomb)


def test_the_declared_total_is_bounded(settings) -> None:
    settings.KB_CONVERT_MAX_UNPACKED_MB = 1
    raw = samples.with_members(
        samples.xlsx_bytes(), {"xl/media/big.bin": bytes(2 << 20)}, stored=True
    )
    with pytest.raises(FormatRefused, match="more than 1 MB"):
        sniff("book.xlsx", raw)


@pytest.mark.parametrize(("name", "make"), [
    ("a.docx", samples.docx_bytes), ("a.pptx", samples.pptx_bytes), ("a.xlsx", samples.xlsx_bytes),
])
def test_a_truncated_office_file_is_refused(name, make) -> None:
    raw = make()
    with pytest.raises(FormatRefused, match="truncated or corrupt"):
        sniff(name, raw[: len(raw) // 2])
