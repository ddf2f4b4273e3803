"""The local processes a deployment runs on one machine, supervised: started with a log file,
waited for until ready, stopped with the signal each one needs.

Used by the demo (kbplatform/demo.py), the load test (`manage.py load_test`) and the test
suite's fixtures.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

from kbplatform.local_model import MODEL_ALIAS, LocalModelError, verify

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


class ServiceError(RuntimeError):
    """A process could not be started, exited while starting, or was not ready in time."""


class UnverifiedModel(ServiceError):
    """The local model's file is not the one its sha256 names: it is not loaded."""


def free_port() -> int:
    # The kernel hands out an unused port; gRPC would otherwise share a taken one silently.
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_for_port(host: str, port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(host, port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")
        time.sleep(0.2)


# A shell that runs us in the background makes its children ignore SIGINT, Milvus Lite's only
# clean stop. A preexec_fn could reset it, but it forces a fork() of this multithreaded
# process, and gRPC's fork handlers then abort or hang the child. So each service starts
# through a tiny launcher that gives SIGINT its default back and execs the command; asked to,
# it also has the kernel send the service a signal when its supervisor dies (kill -9, a closed
# terminal), so that nothing is left running without it.
_LAUNCHER = """
import ctypes, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
death_signal, supervisor = int(sys.argv[1]), int(sys.argv[2])
if death_signal:
    ctypes.CDLL(None, use_errno=True).prctl(1, death_signal)  # PR_SET_PDEATHSIG
    if os.getppid() != supervisor:  # it died before that took effect
        sys.exit(1)
os.execvp(sys.argv[3], sys.argv[3:])
"""


class Service:
    """One supervised process: `argv()` and `ready()` say what it is and when it serves."""

    name = "service"
    stop_signal: int = signal.SIGTERM

    def __init__(self, log: Path, env: Mapping[str, str] | None = None, *,
                 own_session: bool = False, die_with_supervisor: bool = False) -> None:
        self.log = log
        self.env = dict(env or {})  # on top of this process's environment
        # A session of its own: a Ctrl-C at the terminal reaches the supervisor only, which
        # then stops its processes in the order it chooses.
        self.own_session = own_session
        # The kernel stops it (with its clean-stop signal) if the supervisor dies first. Linux
        # sends it when the *thread* that started it ends: start it from the main thread.
        self.die_with_supervisor = die_with_supervisor
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def listens(self) -> tuple[str, int] | None:
        """(host, port) of a service that serves on a port: it is ready once the port
        answers, and never started where something answers already."""
        return None

    def ready(self) -> bool:
        address = self.listens()
        if address is None:
            raise NotImplementedError
        return port_open(*address)

    def start(self, timeout: float = 120.0, *,
              cancelled: Callable[[], bool] | None = None) -> None:
        """Runs it and waits until it is ready; `cancelled` (asked while waiting) gives up and
        stops it."""
        argv = self.argv()
        address = self.listens()
        if address is not None and port_open(*address):
            # It would fail to bind and be taken as ready: everything would then talk to the
            # other process (a server an interrupted run left behind, with other data).
            raise ServiceError(f"{self.name}: {address[0]}:{address[1]} answers already: "
                               "another process serves there; stop it first")
        try:
            with self.log.open("ab") as out:
                death_signal = self.stop_signal if self.die_with_supervisor else 0
                self.process = subprocess.Popen(
                    [sys.executable, "-c", _LAUNCHER, str(int(death_signal)), str(os.getpid()),
                     *argv], cwd=ROOT, env={**os.environ, **self.env},
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=self.own_session)
        except OSError as exc:
            raise ServiceError(f"{self.name}: cannot run {argv[0]} ({exc.strerror})") from exc
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None:
                code, self.process = self.process.returncode, None
                raise ServiceError(f"{self.name} exited with {code}; its log: {self.log}\n"
                                   f"{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise ServiceError(f"{self.name} did not start in {timeout:.0f} s; its log: "
                                   f"{self.log}\n{self.tail()}")
            if cancelled is not None and cancelled():
                self.stop()
                raise ServiceError(f"{self.name}: its start was cancelled")
            time.sleep(0.2)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def pause(self) -> None:
        """Hung: the process and its port stay, nothing answers (SIGSTOP)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self, sig: int | None = None) -> None:
        """The class's clean stop unless told another signal; SIGKILL after 30 s."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(self.stop_signal if sig is None else sig)
        process.send_signal(signal.SIGCONT)  # a paused process handles the signal once resumed
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Dies at once, as an OOM kill or a lost machine does: nothing is acknowledged."""
        self.stop(signal.SIGKILL)


class MilvusServer(Service):
    """A Milvus server process on (host, port) of `uri`, its data in `data` (a file or a
    folder, as the engine keeps it)."""

    def __init__(self, uri: str, data: Path, log: Path,
                 env: Mapping[str, str] | None = None, *, own_session: bool = False,
                 die_with_supervisor: bool = False) -> None:
        super().__init__(log, env, own_session=own_session,
                         die_with_supervisor=die_with_supervisor)
        parsed = urlparse(uri)
        self.host, self.port = parsed.hostname or HOST, parsed.port or 19530
        self.data = data

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def listens(self) -> tuple[str, int]:
        return self.host, self.port

    def publish(self) -> None:
        """Tell every process that would open the data file itself to connect to this server
        instead (a Milvus Lite file can be opened by one process only)."""
        _served_file(self.data).write_text(json.dumps(
            {"uri": self.uri, "pid": self.process.pid if self.process else None}))

    def stop(self, sig: int | None = None) -> None:
        _served_file(self.data).unlink(missing_ok=True)
        super().stop(sig)


def engine_lib() -> Path:
    """The folder of the `milvus` program and its libraries in the installed milvus-lite
    wheel (found, not imported: its package needs pkg_resources)."""
    spec = importlib.util.find_spec("milvus_lite")
    if spec is None or spec.origin is None:
        raise ServiceError("milvus-lite is not installed: bash scripts/setup.sh")
    return Path(spec.origin).parent / "lib"


class MilvusEngineServer(MilvusServer):
    """Milvus 2.5's own C++ engine (segcore, knowhere): the `milvus` program of the
    `milvus-lite==2.5.1` wheel serving one data file over gRPC, as the embedded default opens
    it in-process (pymilvus starts the same program on a local socket). While it serves, it
    holds the file's lock, the one an in-process open takes: no second engine opens it."""

    name = "milvus"
    _lock: IO[str] | None = None

    def argv(self) -> list[str]:
        self.data.parent.mkdir(parents=True, exist_ok=True)
        lib = engine_lib()
        # Its own libraries for it alone (the launcher's Python must not load the wheel's libm).
        return ["env", f"LD_LIBRARY_PATH={lib}", str(lib / "milvus"), str(self.data),
                f"{self.host}:{self.port}", "ERROR"]

    def start(self, timeout: float = 120.0, *,
              cancelled: Callable[[], bool] | None = None) -> None:
        self._lock = lite_file_lock(self.data)
        if self._lock is None:
            raise ServiceError(f"{self.name}: {self.data} is open in another process "
                               "(a Milvus Lite file opens in one process at a time)")
        try:
            super().start(timeout, cancelled=cancelled)
        except BaseException:
            self._unlock()
            raise

    def stop(self, sig: int | None = None) -> None:
        super().stop(sig)
        self._unlock()

    def _unlock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing the file releases its lock


def lite_file_lock(data: Path) -> IO[str] | None:
    """The lock milvus-lite takes on a data file (`.NAME.lock` beside it), held until the
    returned file is closed; None while another process holds it."""
    data.parent.mkdir(parents=True, exist_ok=True)
    held = (data.parent / f".{data.name}.lock").open("a")
    try:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.close()
        return None
    return held


def lite3_folder(path: str) -> str:
    """What to do with a Milvus Lite 3.x folder where Milvus 2.5's engine wants its file."""
    return (f"{path} is a folder of Milvus Lite 3.x, which Milvus 2.5's engine cannot open: "
            f"move it aside and rebuild the index from the database's text (`python manage.py "
            f"rebuild_hybrid_knowledge --confirm REBUILD`); scripts/demo.sh does both")


def _served_file(data: Path) -> Path:
    return data.with_name(data.name + ".server.json")


def served_uri(data: Path) -> str | None:
    """The URI of the running Milvus server that published `data`, if any."""
    try:
        served = json.loads(_served_file(data).read_text())
        os.kill(int(served["pid"]), 0)  # still running (a crash leaves the file behind)
        uri = urlparse(str(served["uri"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # ...and listening (a pid may be reused by another process after a crash).
    return uri.geturl() if uri.hostname and uri.port and port_open(uri.hostname, uri.port) \
        else None



class CeleryWorker(Service):
    """A worker on the indexing queue, concurrency 1 (the single Milvus writer)."""

    name = "celery worker"

    def __init__(self, env: Mapping[str, str], log: Path, *, hostname: str | None = None,
                 own_session: bool = False,
                 die_with_supervisor: bool = False) -> None:
        super().__init__(log, env, own_session=own_session,
                         die_with_supervisor=die_with_supervisor)
        self.hostname = hostname

    def argv(self) -> list[str]:
        named = ["--hostname", self.hostname] if self.hostname else []
        return [sys.executable, "-m", "celery", "-A", "kbplatform", "worker", "--pool", "solo",
                "--concurrency", "1", "--queues", "indexing,celery", "--without-gossip",
                "--without-mingle", *named, "--loglevel", "INFO"]

    def start(self, timeout: float = 120.0, *,
              cancelled: Callable[[], bool] | None = None) -> None:
        self.log.write_text("")  # "ready." below must be this start's
        super().start(timeout, cancelled=cancelled)

    def ready(self) -> bool:
        return "ready." in self.log.read_text(errors="replace")


class GunicornServer(Service):
    """The web application: gunicorn, `workers` processes of `threads` threads (the settings'
    KB_WEB_WORKERS and KB_WEB_THREADS, for the demo and the load test)."""

    name = "gunicorn"

    def __init__(self, port: int, log: Path, env: Mapping[str, str] | None = None, *,
                 workers: int, threads: int, own_session: bool = False,
                 die_with_supervisor: bool = False) -> None:
        super().__init__(log, env, own_session=own_session,
                         die_with_supervisor=die_with_supervisor)
        self.port = port
        self.workers, self.threads = workers, threads

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "gunicorn", "kbplatform.wsgi:application", "--bind",
                f"{HOST}:{self.port}", "--workers", str(self.workers), "--threads",
                str(self.threads), "--timeout", "120", "--graceful-timeout", "10"]

    def listens(self) -> tuple[str, int]:
        return HOST, self.port


class LocalModelServer(Service):
    """llama.cpp's OpenAI-compatible server (llama-cpp-python) on 127.0.0.1:`port`, serving one
    GGUF file as model "local". The file's sha256 is checked before each start: a file that is
    not the pinned one is never loaded. Ready once `/v1/models` answers (the model is loaded
    before the server listens)."""

    name = "local model"

    def __init__(self, model: Path, sha256: str, port: int, log: Path,
                 env: Mapping[str, str] | None = None, *, threads: int,
                 context_tokens: int = 2048, own_session: bool = False,
                 die_with_supervisor: bool = False) -> None:
        super().__init__(log, env, own_session=own_session,
                         die_with_supervisor=die_with_supervisor)
        self.model, self.sha256, self.port = model, sha256, port
        self.threads = threads
        # A question and its translation fit with room to spare; the KV cache is sized by it.
        self.context_tokens = context_tokens

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (KB_LOCAL_MODEL_URL)."""
        return f"http://{HOST}:{self.port}/v1"

    def argv(self) -> list[str]:
        threads = str(self.threads)
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model),
                "--model_alias", MODEL_ALIAS, "--host", HOST, "--port", str(self.port),
                "--n_threads", threads, "--n_threads_batch", threads,
                "--n_ctx", str(self.context_tokens),
                # A request that arrives while another streams must not cut it short.
                "--interrupt_requests", "false", "--verbose", "false"]

    def listens(self) -> tuple[str, int]:
        return HOST, self.port

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout: float = 300.0, *,
              cancelled: Callable[[], bool] | None = None) -> None:
        try:
            verify(self.model, self.sha256)
        except LocalModelError as exc:
            raise UnverifiedModel(f"{self.name}: {exc}") from None
        super().start(timeout, cancelled=cancelled)


class RedisServer(Service):
    """A private, memory-only redis-server (`redis-server` on PATH)."""

    name = "redis-server"

    def __init__(self, port: int, data_dir: Path, log: Path,
                 env: Mapping[str, str] | None = None, *, own_session: bool = False,
                 die_with_supervisor: bool = False) -> None:
        super().__init__(log, env, own_session=own_session,
                         die_with_supervisor=die_with_supervisor)
        self.port = port
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}"

    def argv(self) -> list[str]:
        return [shutil.which("redis-server") or "redis-server", "--bind", HOST, "--port",
                str(self.port), "--save", "", "--appendonly", "no", "--dir", str(self.data_dir)]

    def listens(self) -> tuple[str, int]:
        return HOST, self.port
