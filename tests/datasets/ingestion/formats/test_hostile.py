"""Hostile files: each is refused or fails with a reason the uploader can act on, within the
child's bounds on memory, CPU and wall-clock time."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from datasets.ingestion.formats import ConversionFailed, Format, FormatRefused, convert, sniff
from tests.datasets.ingestion.formats import samples


def test_a_pdf_of_10000_pages_is_refused_by_the_page_cap() -> None:
    with pytest.raises(ConversionFailed, match=r"10,000 pages, more than 2,000 \(KB_CONVERT_MAX"):
        convert(Format.PDF, samples.many_pages_pdf(10_000))


def test_the_page_cap_is_the_setting(settings) -> None:
    settings.KB_CONVERT_MAX_PAGES = 2
    with pytest.raises(ConversionFailed, match="3 pages, more than 2"):
        convert(Format.PDF, samples.many_pages_pdf(3))
    with pytest.raises(ConversionFailed, match="3 slides, more than 2"):
        convert(Format.PPTX, samples.pptx_bytes(slides=3))


def test_a_pdf_with_a_page_tree_nested_100000_deep_fails_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(ConversionFailed, match="PDF file cannot be read"):
        convert(Format.PDF, samples.nested_pages_pdf(100_000))
    assert time.monotonic() - started < 10


def test_an_encrypted_pdf_fails_with_the_reason() -> None:
    with pytest.raises(ConversionFailed, match="encrypted with a password"):
        convert(Format.PDF, samples.encrypted_pdf())


def test_a_truncated_pdf_fails() -> None:
    raw = samples.pdf_bytes(pages=3)
    assert sniff("cut.pdf", raw[:3000]) is Format.PDF  # the head is a PDF's
    with pytest.raises(ConversionFailed, match="^the PDF is truncated or corrupt$"):
        convert(Format.PDF, raw[:3000])


def test_a_docx_whose_xml_is_cut_fails() -> None:
    raw = samples.with_members(samples.docx_bytes(), {"word/document.xml": b"<w:document"})
    # The reason, not the library's words (they go to the log).
    with pytest.raises(ConversionFailed, match="^the DOCX file cannot be read; it may be "
                       "truncated or corrupt$"):
        convert(Format.DOCX, raw)


def test_a_sheet_of_a_million_cells_stops_at_the_cell_cap() -> None:
    raw = samples.million_cell_xlsx()
    assert sniff("big.xlsx", raw) is Format.XLSX
    with pytest.raises(ConversionFailed, match=r"more than 200,000 cells \(KB_CONVERT_MAX_CELLS\)"):
        convert(Format.XLSX, raw)


def test_the_cell_cap_counts_csv_and_docx_tables(settings) -> None:
    settings.KB_CONVERT_MAX_CELLS = 5
    with pytest.raises(ConversionFailed, match="more than 5 cells"):
        convert(Format.CSV, samples.csv_bytes())
    with pytest.raises(ConversionFailed, match="more than 5 cells"):
        convert(Format.DOCX, samples.docx_bytes())


def test_a_converter_over_the_memory_limit_fails_with_the_limit(settings) -> None:
    # 120 MB of paragraphs in one document.xml: lxml's tree of it needs several GB. The ratio
    # check is lifted so that the file reaches the converter.
    settings.KB_CONVERT_MAX_ZIP_RATIO = 1_000_000
    settings.KB_CONVERT_MEMORY_MB = 384
    paragraphs = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>" * 3_500_000
    document = (b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/'
                b'main"><w:body>' + paragraphs + b"</w:body></w:document>")
    raw = samples.with_members(samples.docx_bytes(), {"word/document.xml": document})
    with pytest.raises(ConversionFailed, match=r"more than 384 MB of memory \(KB_CONVERT_MEMORY"):
        convert(Format.DOCX, raw)


def test_a_converter_over_the_cpu_limit_is_stopped(settings) -> None:
    settings.KB_CONVERT_MAX_CELLS = 10_000_000
    settings.KB_CONVERT_CPU_SECONDS = 1
    started = time.monotonic()
    with pytest.raises(ConversionFailed, match=r"more than 1 s of CPU time \(KB_CONVERT_CPU"):
        convert(Format.XLSX, samples.million_cell_xlsx())
    assert time.monotonic() - started < 10


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract-ocr is not installed")
def test_a_conversion_over_the_time_limit_is_killed_with_its_ocr(
    settings, monkeypatch, tmp_path: Path
) -> None:
    settings.KB_CONVERT_TIMEOUT_SECONDS = 1
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the child's files, to find them
    # 30 pages to OCR: several seconds on any machine (4 took under 2 s on a quiet one).
    raw = samples.pdf_bytes(pages=30, blank_pages=tuple(range(1, 31)))
    started = time.monotonic()
    with pytest.raises(ConversionFailed, match=r"longer than 1 s \(KB_CONVERT_TIMEOUT_SECONDS\)"):
        convert(Format.PDF, raw)
    assert time.monotonic() - started < 3
    # Nothing the child started (tesseract on a page image in its directory) is left running.
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(pid, tmp_path)]
    assert left == []


def _cmdline_has(pid: str, path: Path) -> bool:
    try:
        return str(path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_lying_extension_is_refused_before_any_child_runs() -> None:
    with pytest.raises(FormatRefused, match="named .xlsx but its content is a PDF"):
        sniff("book.xlsx", samples.many_pages_pdf(1))


def test_html_nested_100000_deep_fails_or_converts_within_bounds() -> None:
    raw = b"<html><body>" + b"<div>" * 100_000 + b"deep text" + b"</div>" * 100_000 + b"</body>"
    started = time.monotonic()
    try:
        markdown = convert(Format.HTML, raw).markdown
    except ConversionFailed as exc:
        assert "HTML" in str(exc)
    else:
        assert "deep text" in markdown
    assert time.monotonic() - started < 20


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract-ocr is not installed")
def test_a_child_killed_from_outside_says_so(monkeypatch, tmp_path: Path) -> None:
    # As the kernel's OOM killer would: the converting child gets SIGKILL while it OCRs.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    raw = samples.pdf_bytes(pages=4, blank_pages=(1, 2, 3, 4))

    def kill_the_child() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                if pid.isdigit() and _cmdline_has(pid, tmp_path) and _is_the_child(pid):
                    os.kill(int(pid), signal.SIGKILL)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_child)
    killer.start()
    with pytest.raises(ConversionFailed, match=r"killed \(SIGKILL\) before it finished"):
        convert(Format.PDF, raw)
    killer.join()


def _is_the_child(pid: str) -> bool:
    try:
        return b"datasets.ingestion.formats.child" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_two_conversions_at_once_do_not_mix() -> None:
    # Celery threads or two workers: each conversion has its own child and files.
    results: dict[str, str] = {}

    def run(name: str, fmt: Format, raw: bytes) -> None:
        results[name] = convert(fmt, raw).markdown

    threads = [
        threading.Thread(target=run, args=("docx", Format.DOCX, samples.docx_bytes())),
        threading.Thread(target=run, args=("xlsx", Format.XLSX, samples.xlsx_bytes())),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["docx"].startswith(f"# {samples.TITLE}")
    assert results["xlsx"].startswith("<!-- kb:sheet Inventory -->")
