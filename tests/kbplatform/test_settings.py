"""Settings come from the environment through small strict parsers; secrets also from files."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

import kbplatform
from kbplatform.env import env_bool, env_int, env_list, env_str

SETTINGS_FILE = Path(kbplatform.__file__).parent / "settings.py"
ROOT = SETTINGS_FILE.parent.parent
PREFIXES = ("DJANGO_", "KB_", "CELERY_", "MILVUS_", "REDIS_", "DATABASE_")


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", " on "])
def test_env_bool_true(monkeypatch, raw) -> None:
    monkeypatch.setenv("KB_FLAG", raw)
    assert env_bool("KB_FLAG", False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_env_bool_false(monkeypatch, raw) -> None:
    monkeypatch.setenv("KB_FLAG", raw)
    assert env_bool("KB_FLAG", True) is False


def test_env_bool_unset_is_the_default(monkeypatch) -> None:
    monkeypatch.delenv("KB_FLAG", raising=False)
    assert env_bool("KB_FLAG", True) is True
    assert env_bool("KB_FLAG", False) is False


@pytest.mark.parametrize("raw", ["yes please", "2", "enabled", "t"])
def test_env_bool_refuses_anything_else(monkeypatch, raw) -> None:
    monkeypatch.setenv("KB_FLAG", raw)
    with pytest.raises(ImproperlyConfigured, match=f"KB_FLAG='{raw}' is not a boolean"):
        env_bool("KB_FLAG", False)


def test_env_int(monkeypatch) -> None:
    monkeypatch.setenv("KB_N", "12")
    assert env_int("KB_N", 3, minimum=1) == 12
    monkeypatch.setenv("KB_N", " ")
    assert env_int("KB_N", 3) == 3
    monkeypatch.setenv("KB_N", "twelve")
    with pytest.raises(ImproperlyConfigured, match="KB_N='twelve' is not an integer"):
        env_int("KB_N", 3)
    monkeypatch.setenv("KB_N", "0")
    with pytest.raises(ImproperlyConfigured, match="KB_N=0 must be at least 1"):
        env_int("KB_N", 3, minimum=1)


def test_env_list(monkeypatch) -> None:
    monkeypatch.setenv("KB_HOSTS", "kb.example.com, 10.0.0.5,, ")
    assert env_list("KB_HOSTS", ["x"]) == ["kb.example.com", "10.0.0.5"]
    monkeypatch.delenv("KB_HOSTS")
    assert env_list("KB_HOSTS", ["x"]) == ["x"]


def test_a_secret_is_read_from_the_file_named_by_NAME_FILE(monkeypatch, tmp_path) -> None:
    secret = tmp_path / "key"
    secret.write_text("s3cr3t-value\n")
    monkeypatch.setenv("KB_TOKEN", "from-the-variable")
    monkeypatch.setenv("KB_TOKEN_FILE", str(secret))

    assert env_str("KB_TOKEN") == "s3cr3t-value"  # the file wins, without its newline


def test_an_unreadable_secret_file_is_a_configuration_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KB_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="KB_TOKEN_FILE=.* cannot be read"):
        env_str("KB_TOKEN")


def _settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, Any]:
    """Execute kbplatform/settings.py afresh with exactly `env` for the project's variables."""
    for name in list(os.environ):
        if name.startswith(PREFIXES) and name != "DJANGO_SETTINGS_MODULE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KB_VAR_DIR", str(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE), run_name="settings_under_test")


def test_nothing_configured_means_the_embedded_demo(monkeypatch, tmp_path) -> None:
    first = _settings(monkeypatch, tmp_path)
    second = _settings(monkeypatch, tmp_path)

    assert first["DATABASES"]["default"]["ENGINE"] == "django.db.backends.sqlite3"
    assert first["DATABASES"]["default"]["NAME"] == str(tmp_path / "kbplatform.sqlite3")
    assert first["MILVUS_URI"] == str(tmp_path / "milvus.db")
    assert first["CELERY_TASK_ALWAYS_EAGER"] is True
    assert first["CACHES"]["default"]["BACKEND"].endswith("DatabaseCache")
    assert first["DEBUG"] is False
    assert "*" not in first["ALLOWED_HOSTS"]
    # A key generated once for this installation and shared by its processes (the web
    # process and the commands), never one from the repository.
    assert len(first["SECRET_KEY"]) >= 50 and first["SECRET_KEY"] == second["SECRET_KEY"]
    assert (tmp_path / "secret_key").read_text() == first["SECRET_KEY"]
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0  # the owner's only
    assert first["KB_SECRET_KEY_GENERATED"] is True


def test_an_empty_KB_VAR_DIR_is_the_default_and_nothing_lands_in_the_working_directory(
        monkeypatch, tmp_path) -> None:
    """An empty KB_VAR_DIR once meant the working directory: the embedded defaults wrote
    their generated secret_key at the root of the checkout, where it was committed."""
    monkeypatch.chdir(tmp_path)
    values = _settings(monkeypatch, tmp_path, KB_VAR_DIR="", DJANGO_SECRET_KEY="k" * 60)
    assert values["VAR_DIR"] == ROOT / "var"
    assert list(tmp_path.iterdir()) == []


def test_a_relative_KB_VAR_DIR_is_refused(monkeypatch, tmp_path) -> None:
    """Relative, it would follow each process's working directory: a web process and a
    worker started from two folders would keep two installations' data."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ImproperlyConfigured, match="KB_VAR_DIR='var' must be an absolute path"):
        _settings(monkeypatch, tmp_path, KB_VAR_DIR="var")
    assert list(tmp_path.iterdir()) == []


def test_production_settings_come_from_the_environment(monkeypatch, tmp_path) -> None:
    key_file = tmp_path / "secret_key"
    key_file.write_text("k" * 60 + "\n")

    values = _settings(monkeypatch, tmp_path,
                       DATABASE_URL="mysql://kb:pw@db.internal:3306/kb",
                       REDIS_URL="redis://cache.internal:6379/0",
                       MILVUS_URI="http://milvus.internal:19530",
                       DJANGO_SECRET_KEY_FILE=str(key_file),
                       DJANGO_ALLOWED_HOSTS="kb.example.com", KB_MAX_UPLOAD_BYTES="1000")

    database = values["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.mysql"
    assert (database["HOST"], database["NAME"], database["USER"]) == ("db.internal", "kb", "kb")
    # A statement waiting on another process's lock gives up (503) instead of hanging.
    assert database["OPTIONS"] == {"charset": "utf8mb4", "init_command":
                                   "SET SESSION lock_wait_timeout = 30, "
                                   "innodb_lock_wait_timeout = 30"}
    assert values["CACHES"]["default"]["BACKEND"].endswith("RedisCache")
    assert values["CELERY_BROKER_URL"] == "redis://cache.internal:6379/0"
    assert values["CELERY_TASK_ALWAYS_EAGER"] is False
    assert values["MILVUS_URI"] == "http://milvus.internal:19530"
    assert values["SECRET_KEY"] == "k" * 60
    assert values["ALLOWED_HOSTS"] == ["kb.example.com"]
    assert values["KB_MAX_UPLOAD_BYTES"] == 1000


@pytest.mark.parametrize(("env", "message"), [
    ({"DJANGO_DEBUG": "yes please"}, "DJANGO_DEBUG='yes please' is not a boolean"),
    ({"CELERY_TASK_ALWAYS_EAGER": "sometimes"}, "CELERY_TASK_ALWAYS_EAGER='sometimes'"),
    # Outside the embedded defaults a missing key stops the start: a key per process would
    # split sessions and the audit's query hashes between workers.
    ({"DATABASE_URL": "mysql://kb:pw@db/kb"}, "DJANGO_SECRET_KEY .* is required"),
    ({"DATABASE_URL": "postgres://kb@db/kb"}, "DATABASE_URL must be sqlite"),
    ({"KB_MAX_UPLOAD_BYTES": "0"}, "KB_MAX_UPLOAD_BYTES=0 must be at least 1"),
    ({"KB_CHUNK_SIZE": "big"}, "KB_CHUNK_SIZE='big' is not an integer"),
    ({"KB_WHOLE_DOCUMENT_CHARS": "5000"}, "KB_WHOLE_DOCUMENT_CHARS=5000 must be at most 3200"),
    ({"DJANGO_SECRET_KEY_FILE": "/nonexistent/kb/secret"}, "DJANGO_SECRET_KEY_FILE="),
], ids=["debug", "eager", "secret-required", "postgres", "upload-limit", "chunk-size",
        "whole-document", "secret-file"])
def test_a_bad_environment_stops_the_start_with_a_clear_message(monkeypatch, tmp_path, env,
                                                                message) -> None:
    with pytest.raises(ImproperlyConfigured, match=message.replace("(", r"\(")):
        _settings(monkeypatch, tmp_path, **env)


def test_a_milvus_lite_path_in_MILVUS_URI_works_for_every_command(tmp_path) -> None:
    """pymilvus reads MILVUS_URI itself when imported and accepted only http(s)://: the path
    the README documents crashed every manage.py command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    env.update(DJANGO_SETTINGS_MODULE="kbplatform.settings", KB_VAR_DIR=str(tmp_path),
               MILVUS_URI=str(tmp_path / "milvus.db"), CELERY_TASK_ALWAYS_EAGER="true")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout


def test_long_tasks_are_not_delivered_twice(monkeypatch, tmp_path) -> None:
    """With late acks, Redis hands an unacknowledged task to another worker after the
    visibility timeout (1 h by default): a long rebuild ran twice."""
    values = _settings(monkeypatch, tmp_path)
    assert values["CELERY_TASK_ACKS_LATE"] is True
    assert values["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"] >= 12 * 3600
    shorter = _settings(monkeypatch, tmp_path, KB_TASK_VISIBILITY_TIMEOUT_SECONDS="7200")
    assert shorter["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"] == 7200


def test_chunk_size_is_bounded(monkeypatch, tmp_path) -> None:
    with pytest.raises(ImproperlyConfigured, match="KB_CHUNK_SIZE=5000 must be at most 2000"):
        _settings(monkeypatch, tmp_path, KB_CHUNK_SIZE="5000")


def test_the_web_server_the_demo_starts_is_sized_by_two_settings(monkeypatch, tmp_path) -> None:
    values = _settings(monkeypatch, tmp_path)
    assert (values["KB_WEB_WORKERS"], values["KB_WEB_THREADS"]) == (1, 8)
    sized = _settings(monkeypatch, tmp_path, KB_WEB_WORKERS="2", KB_WEB_THREADS="4")
    assert (sized["KB_WEB_WORKERS"], sized["KB_WEB_THREADS"]) == (2, 4)
    with pytest.raises(ImproperlyConfigured, match="KB_WEB_WORKERS=0 must be at least 1"):
        _settings(monkeypatch, tmp_path, KB_WEB_WORKERS="0")


def test_the_local_model_runs_on_the_embedded_defaults_only_unless_told(monkeypatch,
                                                                        tmp_path) -> None:
    embedded = _settings(monkeypatch, tmp_path)
    assert embedded["KB_LOCAL_MODEL"] is True
    assert embedded["KB_LOCAL_MODEL_DIR"] == tmp_path / "models"
    assert (embedded["KB_LOCAL_MODEL_URL"], embedded["KB_LOCAL_MODEL_THREADS"]) == ("", 2)
    production = _settings(monkeypatch, tmp_path, DATABASE_URL="mysql://kb:pw@db/kb",
                           DJANGO_SECRET_KEY="k" * 60)
    assert production["KB_LOCAL_MODEL"] is False
    assert _settings(monkeypatch, tmp_path, KB_LOCAL_MODEL="off")["KB_LOCAL_MODEL"] is False


def test_an_operators_own_model_file_comes_with_its_sha256(monkeypatch, tmp_path) -> None:
    values = _settings(monkeypatch, tmp_path, KB_LOCAL_MODEL_PATH="/models/mine.gguf",
                       KB_LOCAL_MODEL_SHA256="AB" * 32)
    assert values["KB_LOCAL_MODEL_SHA256"] == "ab" * 32


@pytest.mark.parametrize(("env", "message"), [
    ({"KB_LOCAL_MODEL": "maybe"}, "KB_LOCAL_MODEL='maybe' is not a boolean"),
    ({"KB_LOCAL_MODEL_NAME": "gpt-5"}, "KB_LOCAL_MODEL_NAME='gpt-5' is not a known model: "
                                       "qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b"),
    ({"KB_LOCAL_MODEL_PATH": "/models/mine.gguf"}, "KB_LOCAL_MODEL_PATH and "
                                                   "KB_LOCAL_MODEL_SHA256 go together"),
    ({"KB_LOCAL_MODEL_SHA256": "ab" * 32}, "go together"),
    ({"KB_LOCAL_MODEL_PATH": "mine.gguf", "KB_LOCAL_MODEL_SHA256": "ab" * 32},
     "KB_LOCAL_MODEL_PATH='mine.gguf' must be an absolute path"),
    ({"KB_LOCAL_MODEL_PATH": "/m.gguf", "KB_LOCAL_MODEL_SHA256": "md5:abc"},
     "must be a sha256: 64 hexadecimal digits"),
    ({"KB_LOCAL_MODEL_PATH": "/m.gguf", "KB_LOCAL_MODEL_SHA256": "ab" * 32,
      "KB_LOCAL_MODEL_NAME": "qwen2.5-coder-0.5b-instruct"}, "name two models"),
    ({"KB_LOCAL_MODEL_DIR": "models"}, "KB_LOCAL_MODEL_DIR='models' must be an absolute path"),
    ({"KB_LOCAL_MODEL_THREADS": "0"}, "KB_LOCAL_MODEL_THREADS=0 must be at least 1"),
    ({"KB_LOCAL_MODEL_URL": "127.0.0.1:8091"}, "KB_LOCAL_MODEL_URL='127.0.0.1:8091' must start"),
    ({"KB_LOCAL_MODEL_TIMEOUT_SECONDS": "0"}, "KB_LOCAL_MODEL_TIMEOUT_SECONDS=0 must be at"),
], ids=["switch", "name", "path-alone", "sha-alone", "relative-path", "not-a-sha256",
        "two-models", "relative-dir", "threads", "url", "timeout"])
def test_a_local_model_setting_that_makes_no_sense_stops_the_start(monkeypatch, tmp_path, env,
                                                                   message) -> None:
    with pytest.raises(ImproperlyConfigured, match=message.replace("(", r"\(")):
        _settings(monkeypatch, tmp_path, **env)


def test_a_command_in_another_shell_reaches_the_demos_local_model(monkeypatch, tmp_path) -> None:
    """The demo gives its web and worker the server's URL, and publishes it beside the data for
    the commands started elsewhere (as it does its Milvus Lite server's); a stale publication
    (its demo gone) counts for nothing."""
    from kbplatform.local_model import publish

    publish(tmp_path, url="http://127.0.0.1:8091/v1", state="loading", detail="")
    values = _settings(monkeypatch, tmp_path, KB_OUTBOUND_ALLOWED_HOSTS="llm.internal")
    assert values["KB_LOCAL_MODEL_URL"] == "http://127.0.0.1:8091/v1"
    assert values["KB_OUTBOUND_ALLOWED_HOSTS"] == ["llm.internal", "127.0.0.1:8091"]
    assert _settings(monkeypatch, tmp_path, KB_LOCAL_MODEL="false")["KB_LOCAL_MODEL_URL"] == ""

    (tmp_path / "local-model.json").write_text(
        (tmp_path / "local-model.json").read_text().replace(f'"pid": {os.getpid()}',
                                                             '"pid": 999999999'))
    values = _settings(monkeypatch, tmp_path)
    assert values["KB_LOCAL_MODEL_URL"] == "" and values["KB_OUTBOUND_ALLOWED_HOSTS"] == []
