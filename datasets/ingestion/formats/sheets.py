"""XLSX and CSV: one markdown table per sheet of the rows and columns that hold a value, the
first such row as its header; a sheet without a value is no table."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from typing import Any

import openpyxl
from openpyxl.worksheet._reader import WorkSheetParser

from datasets.ingestion.formats.kinds import ConversionFailed, Converted, Limits
from datasets.ingestion.formats.markdown import (
    cell,
    decode_text,
    heading,
    join_blocks,
    marker,
    table,
)

_CSV_DELIMITERS = ",;\t|"
_CSV_SNIFF_BYTES = 16_384

# (row, column, value) of one cell the file holds, numbered from 1.
Cell = tuple[int, int, object]


class _Budget:
    """KB_CONVERT_MAX_CELLS, counted twice over a whole file: the cells it holds (read or
    not, empty or not), and the cells of the tables made of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.read = 0
        self.tabled = 0

    def take_read(self, count: int) -> None:
        self.read += count
        if self.read > self.limit:
            raise ConversionFailed(
                f"the file has more than {self.limit:,} cells (KB_CONVERT_MAX_CELLS); "
                "split it or keep the part that matters"
            )

    def take_table(self, rows: int, columns: int, where: str) -> None:
        self.tabled += rows * columns
        if self.tabled > self.limit:
            raise ConversionFailed(
                f"{where} spreads its values over {rows:,} rows and {columns:,} columns: "
                f"tables of more than {self.limit:,} cells (KB_CONVERT_MAX_CELLS); move the "
                "values together or split the file"
            )


def convert_xlsx(raw: bytes, limits: Limits) -> Converted:
    workbook = openpyxl.load_workbook(io.BytesIO(raw), read_only=True, data_only=True)
    try:
        budget = _Budget(limits.max_cells)
        blocks: list[str] = []
        empty: list[str] = []
        for sheet in workbook.worksheets:
            rows = _table_rows(_sheet_cells(sheet), budget, f"the sheet {sheet.title!r}")
            if not rows:
                empty.append(sheet.title)
                continue
            blocks.append(marker("sheet", sheet.title))
            blocks.append(heading(2, sheet.title))
            blocks.append(table(rows))
    finally:
        workbook.close()
    if not blocks:
        raise ConversionFailed("no sheet of the workbook holds a value")
    notes = (f"sheets without a value, left out: {', '.join(empty)}",) if empty else ()
    return Converted(join_blocks(blocks), notes)


def _sheet_cells(sheet: Any) -> Iterator[Cell]:
    """The cells the sheet's XML holds, as openpyxl's reader parses them, but without the
    padding its iter_rows adds: a cell at XFD1048576 made it yield a million empty rows and a
    row of 16,384 cells. (A sheet's declared dimension is not read at all.) The reader and
    the read-only sheet's attributes are openpyxl's own, of the version pyproject.toml pins."""
    workbook = sheet.parent
    with sheet._get_source() as source:
        parser = WorkSheetParser(source, sheet._shared_strings,
                                 data_only=True, epoch=workbook.epoch,
                                 date_formats=workbook._date_formats,
                                 timedelta_formats=workbook._timedelta_formats)
        for row, cells in parser.parse():
            if not cells:
                yield row, 0, None  # a row without cells is still read: it counts as one
            for found in cells:
                yield row, found["column"], found["value"]


def convert_csv(raw: bytes, limits: Limits) -> Converted:
    text = decode_text(raw)
    try:
        dialect: type[csv.Dialect] = csv.Sniffer().sniff(
            text[:_CSV_SNIFF_BYTES], delimiters=_CSV_DELIMITERS
        )
    except csv.Error:
        dialect = csv.excel
    records = csv.reader(io.StringIO(text), dialect)
    try:
        rows = _table_rows(_csv_cells(records), _Budget(limits.max_cells), "the CSV")
    except csv.Error as exc:
        raise ConversionFailed(f"the CSV cannot be read: {exc}") from exc
    if not rows:
        raise ConversionFailed("the CSV holds no value")
    return Converted(join_blocks([table(rows)]))


def _csv_cells(records: Iterable[list[str]]) -> Iterator[Cell]:
    for row, values in enumerate(records, start=1):
        if not values:
            yield row, 0, None
        for column, value in enumerate(values, start=1):
            yield row, column, value


def _table_rows(cells: Iterable[Cell], budget: _Budget, where: str) -> list[list[str]]:
    """The table of the rows and columns that hold a value, in the file's order; the work
    and the memory are bounded by the cells read, each counted against the budget."""
    values: dict[int, dict[int, str]] = {}
    for row, column, value in cells:
        budget.take_read(1)
        text = cell(value)
        if text:
            values.setdefault(row, {})[column] = text
    if not values:
        return []
    columns = sorted({column for row in values.values() for column in row})
    budget.take_table(len(values), len(columns), where)
    return [[found.get(column, "") for column in columns]
            for _, found in sorted(values.items())]
