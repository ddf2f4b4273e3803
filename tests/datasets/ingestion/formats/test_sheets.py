"""XLSX and CSV as tables of what they hold: empty rows and columns left out, the work bounded
by the cells the file has (never by where they sit or what the sheet declares), and a sheet
without a value is no table."""

from __future__ import annotations

import io
import re

import pytest
from openpyxl import Workbook
from openpyxl.styles import Font

from datasets.ingestion.formats import ConversionFailed, Format, convert

MARKERS = re.compile(r"^<!-- kb:sheet (.+) -->$", re.MULTILINE)


def workbook(sheets: dict[str, dict[str, object]], *, styled: str = "") -> bytes:
    """A workbook of these sheets (cell reference -> value); `styled`, if given, is a cell of
    the first sheet that is bold but holds nothing (it is in the file, without a value)."""
    book = Workbook()
    for number, (title, cells) in enumerate(sheets.items()):
        sheet = book.active if number == 0 else book.create_sheet()
        assert sheet is not None
        sheet.title = title
        for reference, value in cells.items():
            sheet[reference] = value
        if styled and number == 0:
            sheet[styled].font = Font(bold=True)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_a_sheet_with_cells_at_a1_and_xfd1048576_is_a_two_by_two_table() -> None:
    """The issue's 4.7 kB workbook was 63 chunks of an empty table 16,384 columns wide."""
    raw = workbook({"Sparse": {"A1": "owner", "XFD1048576": "payments team"}})

    markdown = convert(Format.XLSX, raw).markdown

    assert markdown == ("<!-- kb:sheet Sparse -->\n\n## Sparse\n\n"
                        "| owner |  |\n| --- | --- |\n|  | payments team |\n")


def test_empty_rows_and_columns_between_values_are_left_out() -> None:
    raw = workbook({"Servers": {"B2": "host", "E2": "role", "B5": "db-01", "E5": "primary",
                                "B6": "db-02", "E6": "replica"}}, styled="Z200")

    markdown = convert(Format.XLSX, raw).markdown

    assert markdown == ("<!-- kb:sheet Servers -->\n\n## Servers\n\n"
                        "| host | role |\n| --- | --- |\n| db-01 | primary |\n"
                        "| db-02 | replica |\n")


def test_the_cell_cap_counts_the_cells_in_the_file_not_the_columns_they_sit_in() -> None:
    """300 rows of a value in A and one in XFD are 600 cells: as 300 rows of 16,384 columns
    they went over the cap (200,000) and the file was refused."""
    cells: dict[str, object] = {}
    for row in range(1, 301):
        cells[f"A{row}"] = f"host-{row}"
        cells[f"XFD{row}"] = f"rack {row}"

    markdown = convert(Format.XLSX, workbook({"Hosts": cells})).markdown

    assert "| host-1 | rack 1 |\n| --- | --- |\n| host-2 | rack 2 |\n" in markdown
    assert "| host-300 | rack 300 |\n" in markdown


def test_values_spread_over_a_table_larger_than_the_cap_fail_with_the_reason(settings) -> None:
    settings.KB_CONVERT_MAX_CELLS = 100
    diagonal = {f"{column}{row}": "x" for row, column in enumerate("ABCDEFGHIJK", start=1)}

    with pytest.raises(ConversionFailed, match=r"11 rows and 11 columns.*more than 100 cells "
                                               r"\(KB_CONVERT_MAX_CELLS\)"):
        convert(Format.XLSX, workbook({"Diagonal": diagonal}))


def test_an_empty_sheet_among_others_is_left_out_and_named_in_the_notes() -> None:
    raw = workbook({"Servers": {"A1": "host", "A2": "db-01"}, "Blank": {},
                    "Only styled": {}})

    converted = convert(Format.XLSX, raw)

    assert MARKERS.findall(converted.markdown) == ["Servers"]
    assert "Blank" not in converted.markdown
    assert converted.notes == ("sheets without a value, left out: Blank, Only styled",)


def test_a_workbook_without_a_value_fails_with_the_reason() -> None:
    raw = workbook({"Sheet": {"C3": ""}, "Other": {}}, styled="XFD1048576")

    with pytest.raises(ConversionFailed, match="^no sheet of the workbook holds a value$"):
        convert(Format.XLSX, raw)


def test_a_csv_is_trimmed_as_a_sheet_is() -> None:
    raw = b"name" + b"," * 16_383 + b"\n" + b"," * 16_383 + b"owner\n" + b",,\n"

    assert convert(Format.CSV, raw).markdown == "| name |  |\n| --- | --- |\n|  | owner |\n"


def test_a_csv_without_a_value_fails_with_the_reason() -> None:
    with pytest.raises(ConversionFailed, match="^the CSV holds no value$"):
        convert(Format.CSV, b",,,\n\n , ,\n")
