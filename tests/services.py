"""Real services for the tests: a supervised Milvus Lite server and a Celery worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent


def wait_for_port(host: str, port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class MilvusLiteServer:
    """`milvus-lite server` with one worker thread: the setting under which no row was lost."""

    def __init__(self, uri: str, data_dir: Path, log: Path) -> None:
        parsed = urlparse(uri)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 19530
        self.data_dir = data_dir
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "milvus-lite"), "server", "--data-dir",
             str(self.data_dir), "--host", self.host, "--port", str(self.port),
             "--max-workers", "1"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
            # A shell that runs the suite in the background makes its children ignore
            # SIGINT, the server's clean stop: give it back the default.
            preexec_fn=_default_sigint)
        wait_for_port(self.host, self.port)

    def pause(self) -> None:
        """Hung: the process and its port stay, nothing answers (SIGSTOP)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT: the server's only clean shutdown (SIGTERM ends it like SIGKILL)."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class CeleryWorker:
    """A real worker process on the indexing queue, concurrency 1 (the single Milvus writer)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.write_text("")  # "ready." below must be this start's
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kbplatform", "worker", "--pool", "solo",
             "--concurrency", "1", "--queues", "indexing,celery", "--without-gossip",
             "--without-mingle", "--loglevel", "INFO"],
            cwd=ROOT, env={**os.environ, **self.env}, stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "ready." in self.log.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"the celery worker exited; see {self.log}")
            time.sleep(0.3)
        raise TimeoutError(f"the celery worker did not start; see {self.log}")

    def kill(self) -> None:
        """Dies mid-task, as an OOM kill or a lost machine does: nothing is acknowledged."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
