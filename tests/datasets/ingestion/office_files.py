"""Documents in other formats, made by the tests themselves (no file is downloaded or checked
in): PDF with the CJK font Debian ships, DOCX, PPTX, XLSX, HTML and text, from markdown."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping, Sequence

from docx import Document as DocxDocument
from fpdf import FPDF
from markdown_it import MarkdownIt
from openpyxl import Workbook
from pptx import Presentation

CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"
_FRONTMATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def body_of(markdown: str) -> str:
    """The markdown without its frontmatter (no other format carries one)."""
    return _FRONTMATTER.sub("", markdown.replace("\r\n", "\n"), count=1)


def blocks(markdown: str) -> Iterator[tuple[int, str]]:
    """(heading level, text) for headings, (0, text) for every other block, code kept as is."""
    lines, fence = body_of(markdown).split("\n"), False
    paragraph: list[str] = []
    for line in lines:
        if line.startswith("```"):
            fence = not fence
            continue
        heading = None if fence else _HEADING.match(line)
        if heading or (not line.strip() and not fence):
            if paragraph:
                yield 0, "\n".join(paragraph)
                paragraph = []
            if heading:
                yield len(heading[1]), heading[2].strip()
            continue
        paragraph.append(line)
    if paragraph:
        yield 0, "\n".join(paragraph)


def _pdf() -> FPDF:
    pdf = FPDF()
    pdf.add_font("cjk", fname=CJK_FONT)
    pdf.set_auto_page_break(True, margin=15)
    return pdf


def pdf_pages(pages: Sequence[str]) -> bytes:
    """One page per text, in order."""
    pdf = _pdf()
    for text in pages:
        pdf.add_page()
        pdf.set_font("cjk", size=12)
        pdf.multi_cell(0, 7, text)
    return bytes(pdf.output())


def pdf_of(markdown: str) -> bytes:
    """Headings larger, paragraphs as text; pages break where the text fills them."""
    pdf = _pdf()
    pdf.add_page()
    for level, text in blocks(markdown):
        pdf.set_font("cjk", size=20 - 2 * level if level else 11)
        pdf.multi_cell(0, 9 if level else 6, text.replace("`", ""))
        pdf.ln(3)
    return bytes(pdf.output())


def docx_of(markdown: str) -> bytes:
    document = DocxDocument()
    for level, text in blocks(markdown):
        if level:
            document.add_heading(text, level=min(level, 9))
        else:
            document.add_paragraph(text.replace("`", ""))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def html_of(markdown: str, *, title: str = "") -> bytes:
    body = MarkdownIt("commonmark").enable("table").render(body_of(markdown))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            f"</head><body>{body}</body></html>").encode()


def text_of(markdown: str) -> bytes:
    """Plain text: the headings' marks and the code fences dropped."""
    return "\n\n".join(text for _, text in blocks(markdown)).encode()


def pptx_slides(slides: Sequence[tuple[str, str]]) -> bytes:
    """One slide per (title, body)."""
    deck = Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_sheets(sheets: Mapping[str, Sequence[Sequence[object]]]) -> bytes:
    """One sheet per name, its rows as given (the first one the header)."""
    book = Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()
