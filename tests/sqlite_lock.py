"""Another process holding the embedded (SQLite) test database's write lock."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection


@contextmanager
def sqlite_locked(*, mode: str, seconds: float, timeout: float) -> Iterator[None]:
    """While the block runs, another process holds `BEGIN <mode>` (EXCLUSIVE, IMMEDIATE) on the
    test database for at most `seconds`, and this process waits at most `timeout` s for a lock;
    the process's own timeout is restored after."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        f"db.execute('BEGIN {mode}')\n"
        "print('locked', flush=True)\n"
        f"time.sleep({seconds})\n"), str(connection.settings_dict["NAME"])],
        stdout=subprocess.PIPE, text=True)
    connection.close()
    connection.settings_dict["OPTIONS"]["timeout"] = timeout
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()
        connection.close()
        connection.settings_dict["OPTIONS"]["timeout"] = settings.KB_DATABASE_TIMEOUT_SECONDS
