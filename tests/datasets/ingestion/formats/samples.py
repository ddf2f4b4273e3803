"""Real files of each format, built by the libraries that write them, for the converter tests.

Each sample holds the same knowledge: a heading, an English and a Chinese paragraph, a list and
a table, so a test can check that a converter keeps the structure and both languages.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
TITLE = "Payment gateway runbook"
ENGLISH = "Restart the payment gateway when the error rate stays above five percent."
CHINESE = "当支付网关错误率持续高于百分之五时，重启支付网关。"
ITEMS = ("Check the dashboard", "检查告警")
TABLE = (("Service", "Owner"), ("gateway", "支付组"), ("ledger", "Finance"))


def docx_bytes(*, paragraphs: int = 0) -> bytes:
    from docx import Document

    document = Document()
    document.add_heading(TITLE, level=1)
    document.add_paragraph(ENGLISH)
    document.add_heading("处理步骤", level=2)
    document.add_paragraph(CHINESE)
    for item in ITEMS:
        document.add_paragraph(item, style="List Bullet")
    table = document.add_table(rows=len(TABLE), cols=len(TABLE[0]))
    for r, row in enumerate(TABLE):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    for n in range(paragraphs):
        document.add_paragraph(f"{ENGLISH} {CHINESE} ({n})")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_bytes(*, slides: int = 2) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = TITLE
    body = slide.placeholders[1].text_frame
    body.text = ENGLISH
    for item in ITEMS:
        body.add_paragraph().text = item
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "值班表"
    shape = slide.shapes.add_table(len(TABLE), 2, Inches(1), Inches(2), Inches(6), Inches(2))
    for r, row in enumerate(TABLE):
        for c, value in enumerate(row):
            shape.table.cell(r, c).text = value
    for n in range(slides - 2):
        extra = presentation.slides.add_slide(presentation.slide_layouts[1])
        extra.shapes.title.text = f"Slide {n + 3}"
        extra.placeholders[1].text_frame.text = f"{ENGLISH} {CHINESE}"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def xlsx_bytes(*, rows: int = 0) -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Inventory"
    for row in TABLE:
        sheet.append(list(row))
    second = workbook.create_sheet("库存")
    second.append(["物品", "数量"])
    second.append(["服务器", 12])
    second.append(["Switch", 3.5])
    for n in range(rows):
        second.append([f"item {n} 物品", n])
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def csv_bytes() -> bytes:
    return "\n".join(",".join(row) for row in TABLE).encode() + b"\n"


def html_bytes() -> bytes:
    items = "".join(f"<li>{item}</li>" for item in ITEMS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{value}</td>" for value in row) + "</tr>" for row in TABLE[1:]
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{TITLE}</title>
<style>body {{ color: red }}</style><script>var secret = "tracking-script";</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About us</a></nav>
<main><h1>{TITLE}</h1><p>{ENGLISH}</p><h2>处理步骤</h2><p>{CHINESE}</p><ul>{items}</ul>
<table><thead><tr><th>Service</th><th>Owner</th></tr></thead><tbody>{rows}</tbody></table>
</main><footer>Copyright footer text</footer></body></html>""".encode()


def pdf_bytes(*, pages: int = 2, blank_pages: tuple[int, ...] = ()) -> bytes:
    """A PDF with a text layer in the CJK font; pages in `blank_pages` (1-based) hold an
    image of text only (for OCR)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_font("wqy", fname=str(CJK_FONT))
    for number in range(1, pages + 1):
        pdf.add_page()
        if number in blank_pages:
            pdf.image(io.BytesIO(text_image_png()), x=10, y=10, w=180)
            continue
        pdf.set_font("wqy", size=18)
        pdf.cell(0, 12, TITLE if number == 1 else f"Page {number}", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("wqy", size=11)
        pdf.multi_cell(0, 8, ENGLISH, new_x="LMARGIN", new_y="NEXT")
        pdf.multi_cell(0, 8, CHINESE, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def text_image_png() -> bytes:
    """A PNG of two lines of text (English and Chinese), as a scanner would make."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (1600, 300), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(CJK_FONT), 48)
    draw.text((40, 40), "Scanned maintenance notice", font=font, fill=0)
    draw.text((40, 150), "扫描的维护通知", font=font, fill=0)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def raw_pdf(objects: list[bytes]) -> bytes:
    """A PDF of these objects (1-based: object 1 is the catalog), with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    size = len(objects) + 1
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def many_pages_pdf(pages: int) -> bytes:
    """A PDF of `pages` pages that all draw one shared line of text."""
    first_page = 5
    kids = b" ".join(b"%d 0 R" % (first_page + n) for n in range(pages))
    stream = b"BT /F1 12 Tf 72 720 Td (Hello page) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R " \
           b"/Resources << /Font << /F1 3 0 R >> >> >>"
    objects.extend([page] * pages)
    return raw_pdf(objects)


def nested_pages_pdf(depth: int) -> bytes:
    """A PDF whose page tree nests `depth` levels of /Pages nodes around its one page."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        number = 2 + level
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % (number + 1))
    objects.append(b"<< /Type /Page /MediaBox [0 0 612 792] >>")
    return raw_pdf(objects)


def encrypted_pdf() -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(0, 10, "Confidential runbook")
    return bytes(pdf.output())


def with_members(raw: bytes, members: dict[str, bytes], *, stored: bool = False) -> bytes:
    """The OOXML file `raw` with these members added or replaced."""
    out = io.BytesIO()
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(io.BytesIO(raw)) as source, zipfile.ZipFile(out, "w", method) as target:
        for item in source.infolist():
            if item.filename not in members:
                target.writestr(item.filename, source.read(item.filename))
        for name, data in members.items():
            target.writestr(name, data)
    return out.getvalue()


def million_cell_xlsx() -> bytes:
    """A workbook whose one sheet holds 1,000 rows of 1,000 cells, stored (not deflated) so
    that it is not refused as a zip bomb first."""
    row = b"<c><v>1</v></c>" * 1000
    rows = b"".join(b'<row r="%d">' % n + row + b"</row>" for n in range(1, 1001))
    sheet = (b'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.'
             b'openxmlformats.org/spreadsheetml/2006/main"><sheetData>' + rows
             + b"</sheetData></worksheet>")
    return with_members(xlsx_bytes(), {"xl/worksheets/sheet1.xml": sheet}, stored=True)
