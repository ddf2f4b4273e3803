"""`convert`: markdown and text in-process, every other format in a child process bounded in
address space, CPU time, output size and wall-clock time, killed with all it started."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings

from datasets.ingestion.formats.kinds import (
    SANDBOXED,
    ConversionFailed,
    Converted,
    Format,
    Limits,
)
from datasets.ingestion.formats.markdown import (
    MAX_MARKDOWN_CHARS,
    decode_text,
    defuse_markers,
    plain_text,
)

logger = logging.getLogger(__name__)

# The directory holding the `datasets` package: the child imports it from there.
_PROJECT_DIR = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class ChildRun:
    """One conversion in a child process, as measured (manage.py bench_convert)."""

    converted: Converted | None
    error: str | None
    peak_rss_bytes: int  # the child's (or tesseract's) peak resident memory
    seconds: float


def convert(fmt: Format, raw: bytes) -> Converted:
    """The file as markdown; ConversionFailed says why it cannot be."""
    if fmt is Format.MARKDOWN:
        return Converted(defuse_markers(decode_text(raw)))
    if fmt is Format.TEXT:
        return Converted(plain_text(decode_text(raw)) + "\n")
    result = run_child(fmt, raw)
    if result.converted is None:
        raise ConversionFailed(result.error or "the conversion failed")
    return result.converted


def limits() -> Limits:
    return Limits(
        max_pages=settings.KB_CONVERT_MAX_PAGES,
        max_cells=settings.KB_CONVERT_MAX_CELLS,
        ocr=settings.KB_OCR == "auto" and shutil.which("tesseract") is not None,
        max_ocr_pages=settings.KB_CONVERT_MAX_OCR_PAGES,
    )


def run_child(fmt: Format, raw: bytes) -> ChildRun:
    """Converts in `python -m datasets.ingestion.formats.child` (no shell), the bytes passed
    in a private temporary file and the answer read back as JSON."""
    if fmt not in SANDBOXED:
        raise ValueError(f"{fmt} converts in-process")
    memory_mb = settings.KB_CONVERT_MEMORY_MB
    timeout = settings.KB_CONVERT_TIMEOUT_SECONDS
    arguments = asdict(limits()) | {
        "format": fmt.value,
        "memory_bytes": memory_mb * 1024 * 1024,
        "cpu_seconds": settings.KB_CONVERT_CPU_SECONDS,
    }
    with tempfile.TemporaryDirectory(prefix="kb-convert-") as tmp:
        source, answer, errors = Path(tmp, "input"), Path(tmp, "answer.json"), Path(tmp, "stderr")
        source.write_bytes(raw)
        started = time.monotonic()
        with errors.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-E", "-m", "datasets.ingestion.formats.child",
                 json.dumps(arguments), str(source), str(answer)],
                cwd=_PROJECT_DIR,
                env=_child_environment(tmp),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # its own process group: killed with its tesseracts
                close_fds=True,
            )
            status, peak, timed_out = _wait(process, timeout)
        reply = None if timed_out or os.WIFSIGNALED(status) else _read_answer(answer)
        stderr_tail = _tail(errors, 2000)
        seconds = time.monotonic() - started
        if timed_out:
            return ChildRun(None, f"the conversion took longer than {timeout} s "
                            "(KB_CONVERT_TIMEOUT_SECONDS)", peak, seconds)
        if os.WIFSIGNALED(status):
            return ChildRun(None, _signal_reason(os.WTERMSIG(status), memory_mb), peak, seconds)
    if reply is None:
        logger.warning("%s conversion: no answer from the child (wait status %s) | %s",
                       fmt.value, status, stderr_tail)
        return ChildRun(None, "the converter stopped without an answer (exit status "
                        f"{os.WEXITSTATUS(status)})", peak, seconds)
    reported = reply.get("peak_rss_bytes")
    if isinstance(reported, int):
        peak = max(peak, reported)
    if "error" in reply:
        error = str(reply["error"])
        # What the library said, for the operator; the uploader gets the reason only.
        logger.info("%s conversion failed: %s | %s", fmt.value, error, stderr_tail)
        if error == "memory":
            error = (f"the conversion needed more than {memory_mb} MB of memory "
                     "(KB_CONVERT_MEMORY_MB); split the file")
        return ChildRun(None, error, peak, seconds)
    notes = reply.get("notes")
    notes = tuple(str(note) for note in notes) if isinstance(notes, list) else ()
    return ChildRun(Converted(str(reply["markdown"]), notes), None, peak, seconds)


def _child_environment(tmp: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": tmp,
        "TMPDIR": tmp,
        # tesseract and the BLAS under it run on one thread: the CPU limit counts them all.
        "OMP_THREAD_LIMIT": "1",
        "OMP_NUM_THREADS": "1",
    }


def _wait(process: subprocess.Popen[bytes], timeout: int) -> tuple[int, int, bool]:
    """Waits for the child up to `timeout` s, then kills its process group; returns its wait
    status, its peak resident memory in bytes, and whether it was killed for the time.

    The peak is the child's VmHWM, sampled while it runs and read once more when it ends:
    ru_maxrss would carry the parent's size over the exec, so it cannot be used.
    """
    deadline = time.monotonic() + timeout
    peak = 0
    interval = 0.005
    timed_out = False
    try:
        while True:
            peak = max(peak, _high_water_mark(process.pid))
            # Waited for without reaping: the group's id stays taken while it is killed.
            try:
                if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    break
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): judged by its answer
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(interval)
            interval = min(interval * 2, 0.05)
    finally:
        _kill_group(process.pid)
    try:
        _, status, _ = os.wait4(process.pid, 0)
    except ChildProcessError:
        status = 0
    process.returncode = os.waitstatus_to_exitcode(status)
    return status, peak, timed_out


def _high_water_mark(pid: int) -> int:
    """The process's peak resident memory in bytes (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_reason(number: int, memory_mb: int) -> str:
    if number == signal.SIGXCPU:
        return (f"the conversion used more than {settings.KB_CONVERT_CPU_SECONDS} s of CPU time "
                "(KB_CONVERT_CPU_SECONDS); split the file")
    if number == signal.SIGXFSZ:
        return "the converted text is too large; split the file"
    if number == signal.SIGKILL:
        # Not this module (a timeout is reported as such) nor the CPU limit (SIGXCPU first):
        # the kernel's OOM killer or an operator.
        return ("the converter was killed (SIGKILL) before it finished: the machine may be out "
                "of memory; try again later or split the file")
    name = signal.Signals(number).name
    return (f"the converter crashed ({name}): the file may be corrupt, or need more than "
            f"{memory_mb} MB of memory (KB_CONVERT_MEMORY_MB)")


def _tail(path: Path, size: int) -> str:
    with path.open("rb") as stream:
        stream.seek(max(path.stat().st_size - size, 0))
        return stream.read().decode(errors="replace")


def _read_answer(path: Path) -> dict[str, object] | None:
    try:
        if path.stat().st_size > MAX_MARKDOWN_CHARS * 4 + 65536:
            return None
        reply = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None
