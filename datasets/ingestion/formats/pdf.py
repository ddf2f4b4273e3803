"""PDF: the text layer of each page (pdfium), lines in a larger font as headings; a page
without a text layer OCR'd by tesseract."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from datasets.ingestion.formats.kinds import ConversionFailed, Converted, Limits
from datasets.ingestion.formats.markdown import heading, join_blocks, marker, plain_text

# A line is a heading when its font is this much larger than the body's (the size most of the
# document's characters have), it is short, and it has a letter; the largest size is "#".
_HEADING_FACTOR = 1.2
_MAX_HEADING_CHARS = 120
_MAX_HEADING_LEVEL = 3
_LINE_BREAKS = frozenset((10, 13))

Line = tuple[str, float]  # its text and its largest font size in points

# A page is rendered for OCR at 300 dpi, or smaller when that would pass this many pixels
# (a hostile MediaBox of 200 x 200 inches would be 3.6 billion pixels at 300 dpi).
_OCR_DPI = 300
_OCR_MAX_PIXELS = 25_000_000
_OCR_PAGE_TIMEOUT_SECONDS = 60
# tesseract puts a space between CJK characters; they are written without one.
_CJK = r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"
_CJK_SPACE = re.compile(f"(?<={_CJK}) (?={_CJK})")


def convert_pdf(raw: bytes, limits: Limits) -> Converted:
    try:
        document = pdfium.PdfDocument(raw)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ConversionFailed(
                "the PDF is encrypted with a password; upload it without the password"
            ) from exc
        raise ConversionFailed("the PDF is truncated or corrupt") from exc
    try:
        return _pages(document, limits)
    finally:
        document.close()


def _pages(document: pdfium.PdfDocument, limits: Limits) -> Converted:
    count = len(document)
    if count == 0:
        raise ConversionFailed("the PDF has no pages (its page tree is empty or corrupt)")
    if count > limits.max_pages:
        raise ConversionFailed(
            f"the PDF has {count:,} pages, more than {limits.max_pages:,} "
            "(KB_CONVERT_MAX_PAGES); split it"
        )
    pages: list[list[Line]] = []
    for index in range(count):
        page = document[index]
        textpage = page.get_textpage()
        pages.append(_lines(textpage))
        textpage.close()
        page.close()
    texts = _markdown_pages(pages)
    without_text = [number for number, text in enumerate(texts, start=1) if not text]
    notes: list[str] = []
    if without_text and limits.ocr:
        ocr_pages = without_text[: limits.max_ocr_pages]
        with tempfile.TemporaryDirectory(prefix="kb-ocr-") as tmp:
            for number in ocr_pages:
                texts[number - 1] = _ocr(document, number, Path(tmp))
        if ocr_pages:
            notes.append(f"{_pages_phrase(ocr_pages)} OCR'd (no text layer)")
        skipped = without_text[limits.max_ocr_pages :]
        if skipped:
            notes.append(
                f"{_pages_phrase(skipped)} not OCR'd: more than {limits.max_ocr_pages} pages "
                "without text (KB_CONVERT_MAX_OCR_PAGES)"
            )
    elif without_text:
        if len(without_text) == count:
            raise ConversionFailed("no text layer; OCR is not installed")
        notes.append(f"{_pages_phrase(without_text)} without a text layer (OCR is not installed)")
    if not any(texts):
        raise ConversionFailed("no text found on any page, not even by OCR")
    blocks = []
    for number, text in enumerate(texts, start=1):
        blocks.append(marker("page", number))
        blocks.append(text)
    return Converted(join_blocks(blocks), tuple(notes))


def _lines(textpage: pdfium.PdfTextPage) -> list[Line]:
    """The page's text lines, each with the largest font size of its visible characters."""
    lines: list[Line] = []
    codes: list[int] = []
    size = 0.0
    for index in range(textpage.count_chars()):
        code = pdfium_c.FPDFText_GetUnicode(textpage, index)
        if code in _LINE_BREAKS:
            if codes:
                lines.append((_decode(codes), size))
            codes, size = [], 0.0
            continue
        codes.append(code)
        if code > 32:
            size = max(size, round(pdfium_c.FPDFText_GetFontSize(textpage, index), 1))
    if codes:
        lines.append((_decode(codes), size))
    return lines


def _decode(codes: list[int]) -> str:
    """UTF-16 code units (pdfium's) as text; a lone surrogate becomes U+FFFD."""
    units = b"".join(min(code, 0xFFFF).to_bytes(2, "little") for code in codes)
    return units.decode("utf-16-le", errors="replace")


def _markdown_pages(pages: list[list[Line]]) -> list[str]:
    """Each page's markdown: its lines as plain text, those in a heading's font as headings."""
    weights: Counter[float] = Counter()
    for lines in pages:
        for text, size in lines:
            weights[size] += len(text.strip())
    body = weights.most_common(1)[0][0] if weights else 0.0
    heading_sizes = sorted(
        {size for lines in pages for text, size in lines if _is_heading(text, size, body)},
        reverse=True,
    )
    level = {size: min(rank, _MAX_HEADING_LEVEL) for rank, size in enumerate(heading_sizes, 1)}
    texts = []
    for lines in pages:
        blocks: list[str] = []
        paragraph: list[str] = []
        for text, size in lines:
            if _is_heading(text, size, body):
                blocks.append(plain_text("\n".join(paragraph)))
                paragraph = []
                blocks.append(heading(level[size], text))
            else:
                paragraph.append(text)
        blocks.append(plain_text("\n".join(paragraph)))
        texts.append("\n\n".join(block for block in blocks if block))
    return texts


def _is_heading(text: str, size: float, body: float) -> bool:
    stripped = text.strip()
    return (
        body > 0
        and size >= body * _HEADING_FACTOR
        and 0 < len(stripped) <= _MAX_HEADING_CHARS
        and any(char.isalpha() for char in stripped)
    )


def _ocr(document: pdfium.PdfDocument, number: int, tmp: Path) -> str:
    page = document[number - 1]
    width, height = page.get_size()  # points, 1/72 inch
    scale = _OCR_DPI / 72
    pixels = width * height * scale * scale
    if pixels > _OCR_MAX_PIXELS:
        scale *= (_OCR_MAX_PIXELS / pixels) ** 0.5
    bitmap = page.render(scale=scale, grayscale=True)
    image_path = tmp / f"page-{number}.png"
    bitmap.to_pil().save(image_path)
    bitmap.close()
    page.close()
    try:
        result = subprocess.run(
            ["tesseract", str(image_path), "stdout", "-l", "chi_sim+eng", "--psm", "3"],
            capture_output=True,
            timeout=_OCR_PAGE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ConversionFailed(
            f"OCR of page {number} took longer than {_OCR_PAGE_TIMEOUT_SECONDS} s"
        ) from exc
    finally:
        image_path.unlink(missing_ok=True)
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise ConversionFailed(f"OCR of page {number} failed: {detail[0][:200]}")
    return plain_text(_CJK_SPACE.sub("", result.stdout.decode("utf-8", errors="replace")))


def _pages_phrase(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:20])
    more = f" and {len(numbers) - 20} more" if len(numbers) > 20 else ""
    return f"page {shown}" if len(numbers) == 1 else f"pages {shown}{more}"
