"""One progress line for long commands: done/total, rate, ETA.

On a terminal it redraws one line; in a log (not a TTY) it writes a line every few seconds
and the last one, so a CI log shows progress without thousands of lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable

WIDTH = 24
LOG_EVERY_SECONDS = 5.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressBar:
    def __init__(self, write: Callable[[str], object], *, tty: bool, total: int,
                 unit: str) -> None:
        self.write = write
        self.tty = tty
        self.total = max(total, 0)
        self.unit = unit
        self.started = time.monotonic()
        self.finished = False
        self._last_log = 0.0
        self._width = 0

    def update(self, done: int, detail: str = "", *, rate_of: tuple[int, str] | None = None,
               ) -> None:
        """`rate_of=(count, unit)` shows a rate of something else than the bar's unit."""
        if self.finished:
            return
        self.finished = done >= self.total
        elapsed = time.monotonic() - self.started
        filled = WIDTH * done // self.total if self.total else WIDTH
        parts = [f"[{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{self.total} {self.unit}"]
        if detail:
            parts.append(detail)
        count, unit = rate_of or (done, self.unit)
        if elapsed >= 1 and count:
            parts.append(f"{count / elapsed:.1f} {unit}/s")
        if self.finished:
            parts.append(f"in {_duration(elapsed)}")
        elif done:
            parts.append(f"ETA {_duration(elapsed / done * (self.total - done))}")
        line = " · ".join(parts)
        if self.tty:
            self.write("\r" + line.ljust(self._width) + ("\n" if self.finished else ""))
            self._width = len(line)
        elif self.finished or elapsed - self._last_log >= LOG_EVERY_SECONDS:
            self._last_log = elapsed
            self.write(line + "\n")
