"""The child process that converts one file: `python -m datasets.ingestion.formats.child
LIMITS_JSON INPUT OUTPUT`. It bounds itself first (address space, CPU, file size), converts,
and writes {"markdown", "notes"} or {"error"} as JSON to OUTPUT; nothing else is trusted."""

from __future__ import annotations

import json
import resource
import sys
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path

from datasets.ingestion.formats.kinds import ConversionFailed, Converted, Format, Limits
from datasets.ingestion.formats.markdown import MAX_MARKDOWN_CHARS

Converter = Callable[[bytes, Limits], Converted]


def converter(fmt: Format) -> Converter:
    """The converter of a sandboxed format, imported only in the child."""
    if fmt is Format.PDF:
        from datasets.ingestion.formats.pdf import convert_pdf

        return convert_pdf
    if fmt is Format.DOCX:
        from datasets.ingestion.formats.office import convert_docx

        return convert_docx
    if fmt is Format.PPTX:
        from datasets.ingestion.formats.office import convert_pptx

        return convert_pptx
    if fmt is Format.XLSX:
        from datasets.ingestion.formats.sheets import convert_xlsx

        return convert_xlsx
    if fmt is Format.CSV:
        from datasets.ingestion.formats.sheets import convert_csv

        return convert_csv
    if fmt is Format.HTML:
        from datasets.ingestion.formats.html import convert_html

        return convert_html
    raise ConversionFailed(f"{fmt.value} is not converted in a child process")


def run(fmt: Format, raw: bytes, limits: Limits) -> dict[str, object]:
    """The child's answer for one file: the converted markdown, or the reason it failed."""
    try:
        converted = converter(fmt)(raw, limits)
    except ConversionFailed as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {"error": "memory"}
    except RecursionError:
        return {"error": f"the {fmt.value.upper()} file is nested too deeply to be read"}
    except (zipfile.BadZipFile, EOFError):
        traceback.print_exc()  # to the parent's log; the uploader gets the reason
        return {"error": f"the {fmt.value.upper()} file is truncated or corrupt"}
    except Exception:  # noqa: BLE001 - any library error is a file it cannot read
        traceback.print_exc()
        if _near_memory_limit():
            # A C library (lxml, pdfium) out of address space reports it as its own error.
            return {"error": "memory"}
        return {"error": f"the {fmt.value.upper()} file cannot be read; it may be truncated or "
                         "corrupt"}
    markdown = converted.markdown
    if len(markdown) > MAX_MARKDOWN_CHARS:
        return {
            "error": f"the converted text is over {MAX_MARKDOWN_CHARS:,} characters; split the file"
        }
    return {"markdown": markdown, "notes": list(converted.notes)}


def main(argv: list[str]) -> int:
    limits_json, input_path, output_path = argv
    settings = json.loads(limits_json)
    memory = settings.pop("memory_bytes")
    cpu = settings.pop("cpu_seconds")
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The answer file and OCR's page images; nothing larger is ever written.
    size = MAX_MARKDOWN_CHARS * 4 + 64 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    fmt = Format(settings.pop("format"))
    raw = Path(input_path).read_bytes()
    answer = run(fmt, raw, Limits(**settings))
    answer["peak_rss_bytes"] = _high_water_mark()
    Path(output_path).write_text(json.dumps(answer, ensure_ascii=False), encoding="utf-8")
    return 0


def _near_memory_limit() -> bool:
    """Whether this process's address space came within 5% of its RLIMIT_AS."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return False
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024 >= limit * 0.95
    return False


def _high_water_mark() -> int:
    """This process's peak resident memory in bytes, or its children's (tesseract) when
    larger, for the parent's measurements."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return max(int(line.split()[1]) * 1024, children)
    return children


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
