"""`manage.py bench_convert [FILE ...] [--rounds 3] [--json]`."""

from __future__ import annotations

import json
import re
import time
from argparse import ArgumentParser
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from datasets.ingestion.formats import FormatRefused, sniff
from datasets.ingestion.formats.sandbox import run_child

_LOCATION = re.compile(r"^<!-- kb:(?:page|slide) ", re.MULTILINE)  # units: pages, slides


class Command(BaseCommand):
    help = ("Convert files as an upload would (sniff, then the child process under the "
            "KB_CONVERT_* limits) and print per file: outcome, seconds, MB/s, pages or slides "
            "per second, and the child's peak resident memory. Without FILE, it writes and "
            "measures its own set: one larger file per format and the hostile files of "
            "tests/datasets/ingestion/formats (needs the dev extras, for fpdf2).")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("files", nargs="*", type=Path)
        parser.add_argument("--rounds", type=int, default=3,
                            help="conversions per file; the fastest is reported (default 3)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, files: list[Path], rounds: int, **options: Any) -> None:
        if rounds < 1:
            raise CommandError("--rounds must be at least 1")
        cases = [(path.name, path.read_bytes) for path in files] or _generated()
        rows = [_measure(name, make(), rounds) for name, make in cases]
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        self.stdout.write(f"{'file':<28} {'MB':>6} {'s':>6} {'MB/s':>6} {'units/s':>8} "
                          f"{'peak MB':>8}  outcome")
        for row in rows:
            rate = f"{row['units_per_second']:.0f}" if row["units_per_second"] else "-"
            self.stdout.write(
                f"{row['file']:<28} {row['mb']:>6.2f} {row['seconds']:>6.2f} "
                f"{row['mb_per_second']:>6.2f} {rate:>8} {row['peak_rss_mb']:>8.0f}  "
                f"{row['outcome'][:90]}"
            )


def _measure(name: str, raw: bytes, rounds: int) -> dict[str, Any]:
    mb = len(raw) / 1e6
    try:
        fmt = sniff(name, raw)
    except FormatRefused as exc:
        started = time.perf_counter()
        for _ in range(rounds):
            try:
                sniff(name, raw)
            except FormatRefused:
                pass
        seconds = (time.perf_counter() - started) / rounds
        return {"file": name, "mb": mb, "seconds": seconds, "mb_per_second": mb / seconds,
                "units_per_second": None, "peak_rss_mb": 0.0, "outcome": f"refused: {exc}"}
    runs = [run_child(fmt, raw) for _ in range(rounds)]
    best = min(runs, key=lambda run: run.seconds)
    units = len(_LOCATION.findall(best.converted.markdown)) if best.converted else 0
    outcome = (f"ok, {len(best.converted.markdown):,} chars" if best.converted
               else f"failed: {best.error}")
    if best.converted and best.converted.notes:
        outcome += f" ({'; '.join(best.converted.notes)})"
    return {
        "file": name, "mb": mb, "seconds": best.seconds, "mb_per_second": mb / best.seconds,
        "units_per_second": units / best.seconds if units else None,
        "peak_rss_mb": max(run.peak_rss_bytes for run in runs) / 2**20, "outcome": outcome,
    }


def _generated() -> list[tuple[str, Callable[[], bytes]]]:
    try:
        from tests.datasets.ingestion.formats import samples
    except ImportError as exc:  # the tests' builders need the dev extras
        raise CommandError(f"no FILE given and the generated set cannot be built: {exc}") from exc

    def memory_docx() -> bytes:
        paragraphs = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>" * 3_500_000
        document = (b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/'
                    b'2006/main"><w:body>' + paragraphs + b"</w:body></w:document>")
        return samples.with_members(samples.docx_bytes(), {"word/document.xml": document})

    return [
        ("text-200p.pdf", lambda: samples.pdf_bytes(pages=200)),
        ("ocr-2p.pdf", lambda: samples.pdf_bytes(pages=2, blank_pages=(1, 2))),
        ("2000-paragraphs.docx", lambda: samples.docx_bytes(paragraphs=2000)),
        ("100-slides.pptx", lambda: samples.pptx_bytes(slides=100)),
        ("20000-rows.xlsx", lambda: samples.xlsx_bytes(rows=20_000)),
        ("page.html", samples.html_bytes),
        ("hostile-10000p.pdf", lambda: samples.many_pages_pdf(10_000)),
        ("hostile-nested.pdf", lambda: samples.nested_pages_pdf(100_000)),
        ("hostile-encrypted.pdf", samples.encrypted_pdf),
        ("hostile-truncated.pdf", lambda: samples.pdf_bytes(pages=3)[:3000]),
        ("hostile-1M-cells.xlsx", samples.million_cell_xlsx),
        ("hostile-bomb.docx", lambda: samples.with_members(
            samples.docx_bytes(), {"word/media/bomb.bin": bytes(100 << 20)})),
        ("hostile-macros.docx", lambda: samples.with_members(
            samples.docx_bytes(), {"word/vbaProject.bin": bytes(64)})),
        ("hostile-pdf-named.docx", lambda: samples.pdf_bytes(pages=1)),
        ("hostile-120MB-xml.docx", memory_docx),  # refused by its ratio before the memory
    ]
