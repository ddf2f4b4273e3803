"""Fixtures: real Milvus Lite (server or file), a real Celery worker, builders for models."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.services import CeleryWorker, MilvusLiteServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any) -> None:
    """The test database, plus the cache table of the embedded (no Redis) configuration."""
    from django.core.management import call_command

    with django_db_blocker.unblock():
        call_command("createcachetable", verbosity=0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The integration run has a server and a worker; the embedded run only has a file.
    embedded = not settings.MILVUS_URI.startswith("http")
    skip = pytest.mark.skip(reason="needs the Milvus Lite server and a Celery worker")
    for item in items:
        if embedded and "integration" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusLiteServer | None]:
    if not settings.MILVUS_URI.startswith("http"):
        yield None  # embedded: a Milvus Lite file opened in this process
        return
    folder = tmp_path_factory.mktemp("milvus")
    server = MilvusLiteServer(settings.MILVUS_URI, folder / "data", folder / "server.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def store(milvus_server: MilvusLiteServer | None, tmp_path: Path,
          settings: Any) -> Iterator[Any]:
    """The process's store on a clean Milvus; collections are dropped afterwards."""
    from retrieval.store import get_store, reset_store

    if milvus_server is None:
        settings.MILVUS_URI = str(tmp_path / "milvus.db")
    reset_store()
    store = get_store()
    yield store
    alias = store.alias_target()
    for name in store.collections():
        if name != alias:
            store.drop_collection(name)
    if alias:
        store.client().drop_alias(store.alias)
        store.client().drop_collection(alias)
    reset_store()


@pytest.fixture(scope="session")
def celery_worker(milvus_server: MilvusLiteServer | None, django_db_setup: Any,
                  django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory,
                  ) -> Iterator[CeleryWorker]:
    """A worker process reading the test database; use with django_db(transaction=True)."""
    if milvus_server is None:
        pytest.skip("the embedded run has no worker")
    from kbplatform.celery import app

    db = settings.DATABASES["default"]
    url = f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    app.control.purge()
    worker = CeleryWorker({"DATABASE_URL": url, "CELERY_TASK_ALWAYS_EAGER": "false"},
                          tmp_path_factory.mktemp("celery") / "worker.log")
    worker.start()
    yield worker
    worker.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what or predicate}")


@pytest.fixture
def make_key(db: None) -> Callable[..., tuple[Any, str]]:
    from datasets.auth import api_key_create
    from datasets.services import tenant_get_or_create

    def build(tenant: str = "acme", role: str = "tool", datasets: tuple[Any, ...] = ()):
        return api_key_create(tenant=tenant_get_or_create(slug=tenant), role=role,
                              datasets=datasets)

    return build


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Run tasks in this process (the embedded mode) for tests that do not need a worker."""
    from kbplatform.celery import app

    before = app.conf.task_always_eager
    # The app reads settings with the CELERY namespace: the key is CELERY_TASK_ALWAYS_EAGER.
    app.conf.CELERY_TASK_ALWAYS_EAGER = True
    assert app.conf.task_always_eager
    yield
    app.conf.CELERY_TASK_ALWAYS_EAGER = before
