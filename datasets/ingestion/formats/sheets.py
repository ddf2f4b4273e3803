"""XLSX and CSV: one markdown table per sheet, the first non-empty row as its header."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

import openpyxl

from datasets.ingestion.formats.kinds import ConversionFailed, Converted, Limits
from datasets.ingestion.formats.markdown import cell, decode_text, join_blocks, marker, table

_CSV_DELIMITERS = ",;\t|"
_CSV_SNIFF_BYTES = 16_384


def convert_xlsx(raw: bytes, limits: Limits) -> Converted:
    workbook = openpyxl.load_workbook(io.BytesIO(raw), read_only=True, data_only=True)
    try:
        left = limits.max_cells
        blocks: list[str] = []
        for sheet in workbook.worksheets:
            # The declared dimension may lie ("A1:XFD1048576"); rows are read as they are.
            sheet.reset_dimensions()  # type: ignore[union-attr]
            rows, left = _rows(sheet.iter_rows(values_only=True), left, limits.max_cells)
            blocks.append(marker("sheet", sheet.title))
            blocks.append(f"## {' '.join(sheet.title.split())}")
            blocks.append(table(rows))
        return Converted(join_blocks(blocks))
    finally:
        workbook.close()


def convert_csv(raw: bytes, limits: Limits) -> Converted:
    text = decode_text(raw)
    try:
        dialect: type[csv.Dialect] = csv.Sniffer().sniff(
            text[:_CSV_SNIFF_BYTES], delimiters=_CSV_DELIMITERS
        )
    except csv.Error:
        dialect = csv.excel
    try:
        rows, _ = _rows(csv.reader(io.StringIO(text), dialect), limits.max_cells, limits.max_cells)
    except csv.Error as exc:
        raise ConversionFailed(f"the CSV cannot be read: {exc}") from exc
    return Converted(join_blocks([table(rows)]))


def _rows(
    source: Iterable[Iterable[object]], left: int, limit: int
) -> tuple[list[list[str]], int]:
    """The non-empty rows as cell texts, trailing empty cells dropped; counts cells against
    what is `left` of the limit, read or not, so a sheet of a million empty cells stops too."""
    rows: list[list[str]] = []
    for values in source:
        row = []
        for value in values:
            left -= 1
            row.append(cell(value))
        if left < 0:
            raise ConversionFailed(
                f"the file has more than {limit:,} cells (KB_CONVERT_MAX_CELLS); "
                "split it or keep the part that matters"
            )
        while row and not row[-1]:
            row.pop()
        if row:
            rows.append(row)
    return rows, left
