"""convert: each format's structure (headings, lists, tables), Chinese and English, and the
location markers the plumbing turns into a chunk's location."""

from __future__ import annotations

import re
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datasets.ingestion.formats import ConversionFailed, Format, convert
from datasets.ingestion.locations import take_markers
from datasets.ingestion.splitter import MarkdownSplitter
from tests.datasets.ingestion.formats import samples
from tests.datasets.ingestion.formats.markup import assert_text_and_safe_links

MARKERS = re.compile(r"^<!-- kb:(page|slide|sheet) (.+) -->$", re.MULTILINE)
needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None, reason="tesseract-ocr is not installed"
)


def markers(markdown: str) -> list[tuple[str, str]]:
    return MARKERS.findall(markdown)


def assert_both_languages(markdown: str) -> None:
    assert samples.ENGLISH in markdown
    assert samples.CHINESE in markdown


def test_docx_keeps_headings_lists_and_tables() -> None:
    markdown = convert(Format.DOCX, samples.docx_bytes()).markdown
    assert markdown.startswith(f"# {samples.TITLE}\n")
    assert "\n## 处理步骤\n" in markdown
    assert "- Check the dashboard\n- 检查告警\n" in markdown
    assert (
        "| Service | Owner |\n| --- | --- |\n| gateway | 支付组 |\n| ledger | Finance |"
    ) in markdown
    assert_both_languages(markdown)
    assert markers(markdown) == []


def test_pptx_has_a_section_and_a_marker_per_slide() -> None:
    markdown = convert(Format.PPTX, samples.pptx_bytes()).markdown
    assert markers(markdown) == [("slide", "1"), ("slide", "2")]
    assert f"<!-- kb:slide 1 -->\n\n## Slide 1: {samples.TITLE}\n" in markdown
    assert "<!-- kb:slide 2 -->\n\n## Slide 2: 值班表\n" in markdown
    assert f"- {samples.ENGLISH}\n- Check the dashboard\n- 检查告警" in markdown
    assert "| gateway | 支付组 |" in markdown


def test_xlsx_has_a_table_and_a_marker_per_sheet() -> None:
    markdown = convert(Format.XLSX, samples.xlsx_bytes()).markdown
    assert markers(markdown) == [("sheet", "Inventory"), ("sheet", "库存")]
    assert "## Inventory\n\n| Service | Owner |\n| --- | --- |\n| gateway | 支付组 |" in markdown
    # Whole numbers as written, not as floats.
    assert "| 服务器 | 12 |\n| Switch | 3.5 |" in markdown


def test_csv_is_one_table_in_utf8_or_gb18030() -> None:
    text = "服务,负责人\ngateway,支付组\n\"a, b\",\"x | y\"\n"
    for encoding in ("utf-8", "utf-8-sig", "gb18030"):
        markdown = convert(Format.CSV, text.encode(encoding)).markdown
        assert markdown == (
            "| 服务 | 负责人 |\n| --- | --- |\n| gateway | 支付组 |\n| a, b | x \\| y |\n"
        )


def test_html_keeps_the_main_content_and_drops_scripts_styles_and_navigation() -> None:
    markdown = convert(Format.HTML, samples.html_bytes()).markdown
    assert markdown.startswith(f"# {samples.TITLE}\n")
    assert "\n## 处理步骤\n" in markdown
    assert "- Check the dashboard\n- 检查告警" in markdown
    assert "| Service | Owner |\n| --- | --- |\n| gateway | 支付组 |" in markdown
    assert_both_languages(markdown)
    for chrome in ("tracking-script", "color: red", "About us", "Copyright footer"):
        assert chrome not in markdown


def test_html_keeps_identifiers_and_code_as_written() -> None:
    raw = (b"<html><body><h1>order_svc</h1><p>Set max_connections to 2*n.</p>"
           b'<pre><code class="language-sql">SELECT * FROM information_schema.processlist;\n'
           b"</code></pre><table><tr><th>path</th></tr><tr><td>C:\\temp</td></tr></table>"
           b"</body></html>")
    markdown = convert(Format.HTML, raw).markdown
    assert markdown.startswith("# order_svc\n\nSet max_connections to 2*n.\n")
    assert "```sql\nSELECT * FROM information_schema.processlist;\n```" in markdown
    assert "| C:\\temp |" in markdown


def test_pdf_has_the_text_layer_of_each_page_behind_its_marker() -> None:
    converted = convert(Format.PDF, samples.pdf_bytes(pages=2))
    assert markers(converted.markdown) == [("page", "1"), ("page", "2")]
    first, second = converted.markdown.split("<!-- kb:page 2 -->")
    # The lines in the larger font (18 pt over the body's 11 pt) are headings.
    assert first.startswith(f"<!-- kb:page 1 -->\n\n# {samples.TITLE}\n\n{samples.ENGLISH}\n")
    assert second.startswith("\n\n# Page 2\n\n")
    assert_both_languages(first)
    assert converted.notes == ()


@needs_tesseract
def test_a_pdf_page_without_text_is_ocrd_and_noted() -> None:
    converted = convert(Format.PDF, samples.pdf_bytes(pages=3, blank_pages=(2,)))
    page_two = converted.markdown.split("<!-- kb:page 2 -->")[1].split("<!-- kb:page 3 -->")[0]
    assert "Scanned maintenance notice" in page_two
    assert "扫描的维护通知" in page_two
    assert converted.notes == ("page 2 OCR'd (no text layer)",)


def test_without_ocr_a_pdf_without_text_fails_and_a_partial_one_is_noted(settings) -> None:
    settings.KB_OCR = "off"
    with pytest.raises(ConversionFailed, match="^no text layer; OCR is not installed$"):
        convert(Format.PDF, samples.pdf_bytes(pages=1, blank_pages=(1,)))
    converted = convert(Format.PDF, samples.pdf_bytes(pages=2, blank_pages=(2,)))
    assert converted.notes == ("page 2 without a text layer (OCR is not installed)",)
    assert markers(converted.markdown) == [("page", "1"), ("page", "2")]


@needs_tesseract
def test_with_no_ocr_page_allowed_the_pages_are_named_in_the_notes(settings) -> None:
    settings.KB_CONVERT_MAX_OCR_PAGES = 0
    converted = convert(Format.PDF, samples.pdf_bytes(pages=2, blank_pages=(2,)))
    assert converted.notes == (
        "page 2 not OCR'd: more than 0 pages without text (KB_CONVERT_MAX_OCR_PAGES)",
    )


def test_text_is_decoded_and_kept_as_paragraphs() -> None:
    text = "第一段\r\n仍是第一段\r\n\r\n\r\n# not a heading\nsecond paragraph\n"
    for encoding in ("utf-8", "utf-8-sig", "gb18030"):
        markdown = convert(Format.TEXT, text.encode(encoding)).markdown
        assert markdown == "第一段\n仍是第一段\n\n\\# not a heading\nsecond paragraph\n"


def test_text_that_is_neither_utf8_nor_gb18030_fails() -> None:
    with pytest.raises(ConversionFailed, match="neither UTF-8 nor GB18030"):
        convert(Format.TEXT, b"\x81\x20\xff\xfe")


@pytest.mark.parametrize(
    ("fmt", "raw"),
    [
        (Format.MARKDOWN, b"# T\n\n<!-- kb:page 9 -->\n\ntext\n"),
        (Format.TEXT, b"<!-- kb:page 9 -->\n"),
        (Format.HTML, b"<html><body><p>&lt;!-- kb:page 9 --&gt;</p><p>text</p></body></html>"),
        (Format.CSV, b"<!-- kb:page 9 -->\n"),
    ],
)
def test_a_documents_own_text_never_passes_for_a_location_marker(fmt, raw) -> None:
    markdown = convert(fmt, raw).markdown
    assert "kb:page 9" in markdown
    assert markers(markdown) == []


def test_a_docx_paragraph_never_passes_for_a_location_marker() -> None:
    from docx import Document

    document = Document()
    document.add_paragraph("<!-- kb:page 9 -->")
    raw = samples.io.BytesIO()
    document.save(raw)
    markdown = convert(Format.DOCX, raw.getvalue()).markdown
    assert "kb:page 9" in markdown and markers(markdown) == []


def test_a_pdf_with_only_an_owner_password_converts() -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_encryption(owner_password="owner")  # no password to open it, only to edit it
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(0, 10, "Owner only")
    assert convert(Format.PDF, bytes(pdf.output())).markdown == "<!-- kb:page 1 -->\n\nOwner only\n"


def test_without_tesseract_on_path_a_pdf_without_text_fails(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # KB_OCR=auto, but no tesseract to run
    with pytest.raises(ConversionFailed, match="^no text layer; OCR is not installed$"):
        convert(Format.PDF, samples.pdf_bytes(pages=1, blank_pages=(1,)))


HOSTILE_TEXT = ("Run <script>alert(1)</script> then [the fix](javascript:alert(2)) and "
                "<javascript:alert(3)> `x` \\[y](data:text/html,z) <!-- c --> <img src=x>")


def hostile_documents() -> dict[Format, bytes]:
    """A file of each converted format whose text (headings, paragraphs, lists, tables,
    titles) spells HTML and markdown links with unsafe targets."""
    from docx import Document
    from fpdf import FPDF
    from openpyxl import Workbook
    from pptx import Presentation

    document = Document()
    document.add_heading(HOSTILE_TEXT, level=1)
    document.add_paragraph(HOSTILE_TEXT)
    document.add_paragraph(HOSTILE_TEXT, style="List Bullet")
    document.add_table(rows=1, cols=1).cell(0, 0).text = HOSTILE_TEXT
    docx_out = samples.io.BytesIO()
    document.save(docx_out)

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = HOSTILE_TEXT
    slide.placeholders[1].text_frame.text = HOSTILE_TEXT
    slide.notes_slide.notes_text_frame.text = HOSTILE_TEXT
    pptx_out = samples.io.BytesIO()
    presentation.save(pptx_out)

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "<b>Hosts <i> (sheet)"
    sheet.append(["header", HOSTILE_TEXT])
    xlsx_out = samples.io.BytesIO()
    book.save(xlsx_out)

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=20)
    pdf.cell(0, 12, "<b>Heading</b> [x](javascript:y)", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("helvetica", size=10)
    pdf.multi_cell(0, 6, HOSTILE_TEXT + " " + "Body text of the page. " * 8)

    csv_text = f'header,other\n"{HOSTILE_TEXT}",x\n'
    return {Format.TEXT: HOSTILE_TEXT.encode(), Format.CSV: csv_text.encode(),
            Format.DOCX: docx_out.getvalue(), Format.PPTX: pptx_out.getvalue(),
            Format.XLSX: xlsx_out.getvalue(), Format.PDF: bytes(pdf.output())}


HOSTILE_DOCUMENTS = hostile_documents()


@pytest.mark.parametrize("fmt", HOSTILE_DOCUMENTS, ids=str)
def test_no_documents_text_becomes_markup_or_an_unsafe_link(fmt) -> None:
    """HTML embedded in a Word paragraph, a cell, a slide's title is the document's text: it
    stays text in every format's markdown, as the HTML converter keeps a page's."""
    # What the splitter reads: the converter's location markers taken out.
    markdown = take_markers(convert(fmt, HOSTILE_DOCUMENTS[fmt]).markdown).text

    assert "alert(1)" in markdown and "the fix" in markdown  # the text is kept...
    assert_text_and_safe_links(markdown)  # ... as text


TEXT_FRAGMENTS = st.sampled_from([
    "<script>", "</script>", "alert(1)", "[", "]", "(", ")", "\\", "`", "```", "javascript:",
    "&lt;", "&#60;", "!", ":", "<", ">", "\n", " ", "x", "<!--", "-->", "|", "# ", "- ",
    "<https://example.com>", "Restart it. ", "a b c d e f g h i j k l m n o p ",
])


@settings(max_examples=200, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXT_FRAGMENTS, min_size=1, max_size=60))
def test_no_arrangement_of_text_makes_markup_in_any_chunk(fragments) -> None:
    """Plain text (as TXT, DOCX, PPTX and PDF text is written) is text in the converted
    markdown and in every chunk of it, wherever a cut falls."""
    markdown = convert(Format.TEXT, "".join(fragments).encode()).markdown
    assert_text_and_safe_links(markdown)
    for segment in MarkdownSplitter(chunk_size=100, chunk_overlap=20).split(markdown):
        assert_text_and_safe_links(segment.content)
