"""The command-line twins beside the demo: a Milvus Lite file opens in one process only, so
the demo (or `manage.py serve_milvus`) serves var/milvus.db with Milvus 2.5's engine and
publishes it; every command of the checkout connects to that server. A file held by anything
else is a clear message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbplatform.processes import ROOT, MilvusEngineServer, free_port
from tests.conftest import database_url, wait_until

pytestmark = pytest.mark.embedded


def manage(var: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "MILVUS_URI"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**clean, "KB_VAR_DIR": str(var), "DATABASE_URL": database_url(),
                               **env})


def milvus_uri(var: Path) -> str:
    done = manage(var, "shell", "-c", "from django.conf import settings; "
                                      "print(settings.MILVUS_URI)")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MilvusEngineServer]:
    served = MilvusEngineServer(f"http://127.0.0.1:{free_port()}", tmp_path / "milvus.db",
                                tmp_path / "milvus.log")
    served.start()
    yield served
    served.stop()


@pytest.mark.django_db(transaction=True)
def test_a_published_server_is_what_every_command_reaches(tmp_path: Path,
                                                          server: MilvusEngineServer) -> None:
    assert milvus_uri(tmp_path) == str(tmp_path / "milvus.db")  # not published yet

    server.publish()
    assert milvus_uri(tmp_path) == server.uri

    server.stop()
    assert not (tmp_path / "milvus.db.server.json").exists()
    assert milvus_uri(tmp_path) == str(tmp_path / "milvus.db")


def test_a_publication_left_by_a_dead_server_is_ignored(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "milvus.db.server.json").write_text(
        json.dumps({"uri": "http://127.0.0.1:1", "pid": int(dead)}))
    assert milvus_uri(tmp_path) == str(tmp_path / "milvus.db")

    # A live pid (reused by another process after a crash) that serves nothing there.
    (tmp_path / "milvus.db.server.json").write_text(
        json.dumps({"uri": f"http://127.0.0.1:{free_port()}", "pid": os.getpid()}))
    assert milvus_uri(tmp_path) == str(tmp_path / "milvus.db")


@pytest.mark.django_db(transaction=True)
def test_a_file_held_by_another_process_is_a_message_saying_what_to_do(
        tmp_path: Path, server: MilvusEngineServer) -> None:
    done = manage(tmp_path, "rebuild_hybrid_knowledge", "--confirm", "REBUILD",
                  MILVUS_URI=str(tmp_path / "milvus.db"))  # the server holds it, unpublished

    assert done.returncode == 1
    assert "is open in another process" in done.stderr
    assert "scripts/demo.sh" in done.stderr and "MILVUS_URI to a Milvus server" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_milvus_serves_the_file_to_every_command_until_interrupted(tmp_path: Path) -> None:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if k != "MILVUS_URI"}
    served = subprocess.Popen([sys.executable, "manage.py", "serve_milvus", "--port", str(port)],
                              cwd=ROOT, env={**clean, "KB_VAR_DIR": str(tmp_path)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        published = tmp_path / "milvus.db.server.json"
        wait_until(lambda: published.exists() or served.poll() is not None, timeout=60,
                   what="the publication")
        assert milvus_uri(tmp_path) == f"http://127.0.0.1:{port}"
        again = manage(tmp_path, "serve_milvus", "--port", str(free_port()))
        assert again.returncode == 1 and "served already" in again.stderr
    finally:
        served.send_signal(signal.SIGINT)
        output = served.communicate(timeout=60)[0]
    assert served.returncode == 0, output
    assert f"at http://127.0.0.1:{port}" in output
    assert not (tmp_path / "milvus.db.server.json").exists()
    assert milvus_uri(tmp_path) == str(tmp_path / "milvus.db")
