"""The supervisor of kbplatform/processes.py: what it starts does not outlive it, and runs
as it is told."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kbplatform.processes import (
    ROOT,
    GunicornServer,
    MilvusEngineServer,
    ServiceError,
    free_port,
)
from tests.conftest import wait_until

pytestmark = pytest.mark.embedded  # processes only, no service

SUPERVISOR = """
import sys, time
from pathlib import Path
from kbplatform.processes import Service

class Sleeper(Service):
    name = "sleeper"
    def argv(self):
        return [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]
    def ready(self):
        return "up" in self.log.read_text()

sleeper = Sleeper(Path(sys.argv[1]), own_session=True,
                  die_with_supervisor=sys.argv[2] == "yes")
sleeper.start()
print(sleeper.process.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not reaped by its new parent yet) counts as gone.
    return _stat(Path(f"/proc/{pid}/stat"))[0] != "Z"


def _stat(stat: Path) -> list[str]:
    """A process's /proc stat fields after its name: state, parent pid, …"""
    return stat.read_text().rsplit(") ", 1)[1].split()


@pytest.mark.parametrize("dies_with_it", [True, False], ids=["dies-with-it", "outlives-it"])
def test_a_service_dies_with_its_killed_supervisor_when_asked(tmp_path: Path,
                                                              dies_with_it: bool) -> None:
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(tmp_path / "log"), "yes" if dies_with_it else "no"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None
    child = int(supervisor.stdout.readline())
    try:
        supervisor.send_signal(signal.SIGKILL)  # no chance to stop anything itself
        supervisor.wait()
        if dies_with_it:
            wait_until(lambda: not _alive(child), timeout=10, what="the service to stop")
        else:  # the default: the test suite's services are stopped by their fixtures
            assert _alive(child)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_server_is_not_started_where_another_process_answers(tmp_path: Path) -> None:
    """A Milvus Lite server left by an interrupted run held the port: the new one failed to
    bind, the port answered, so it counted as started, and everything talked to the old one
    (with other data): a test that stopped "its" server found lookups still READY."""
    first = MilvusEngineServer(f"http://127.0.0.1:{free_port()}", tmp_path / "a" / "milvus.db",
                               tmp_path / "a.log")
    first.start()
    try:
        second = MilvusEngineServer(first.uri, tmp_path / "b" / "milvus.db", tmp_path / "b.log")
        with pytest.raises(ServiceError, match=r"answers already: another process"):
            second.start()
        assert second.process is None and not (tmp_path / "b" / "milvus.db").exists()
    finally:
        first.stop()
    second.start()  # free again: it starts
    second.stop()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(_stat(stat)[1])
        except OSError:  # gone meanwhile
            continue
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


def test_the_web_server_runs_the_workers_and_threads_it_is_given(tmp_path: Path) -> None:
    web = GunicornServer(free_port(), tmp_path / "web.log",
                         {"DJANGO_ALLOWED_HOSTS": "127.0.0.1"}, workers=2, threads=3)
    web.start()
    try:
        assert web.process is not None
        wait_until(lambda: len(_children(web.process.pid)) == 2, timeout=60)
        assert "Using worker: gthread" in web.log.read_text()
    finally:
        web.stop()
