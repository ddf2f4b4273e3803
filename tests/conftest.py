"""Fixtures: real Milvus (Milvus 2.5's engine, as a server or a Milvus Lite file), a real
Celery worker, builders for models."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from kbplatform.processes import CeleryWorker, MilvusEngineServer, MilvusServer, free_port
from tests.datasets.builders import api_client
from tests.worlds import WORLD, group, worlds

# The suite's processes never run the recovery by themselves (an embedded web process does,
# kbplatform/wsgi.py): a test that needs it starts it (tests/retrieval/index/test_recovery.py).
settings.KB_RECOVERY_IN_PROCESS = False
# Making a user hashes its password: about 0.4 s with the production hasher (PBKDF2, a million
# rounds), in each of the many tests that make an admin. The tests check who may do what, not
# the hash; the processes a test starts keep the production hasher.
settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

ROOT = Path(__file__).resolve().parent.parent


# The fixtures through which a test reaches what differs between the two runtimes: the
# database (and the cache table in it), Milvus, the worker, a runtime asked by name.
RUNTIME_FIXTURES = frozenset({
    "db", "transactional_db", "live_server", "django_db_reset_sequences",
    "django_db_serialized_rollback", "store", "milvus_server", "celery_worker", "runtime"})


def is_pure(item: pytest.Item) -> bool:
    """Neither marked for a runtime nor using the database, Milvus or the worker: the same
    test on both runtimes."""
    if any(item.get_closest_marker(name) for name in ("django_db", "integration", "embedded")):
        return False
    return not RUNTIME_FIXTURES & set(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # scripts/test.sh runs every test that touches the database, Milvus or the worker twice:
    # `-m "not embedded and not pure"` on the services, `-m "not integration"` on the embedded
    # defaults. A pure test (is_pure) is the same on both: the embedded run alone runs it. A run
    # without -m on the embedded defaults skips what needs a service instead of failing on it.
    embedded = not settings.MILVUS_URI.startswith("http")
    skip = pytest.mark.skip(reason="needs a production-only service (see the integration marker)")
    for item in items:
        if item.get_closest_marker("lite3"):
            item.add_marker(pytest.mark.integration)
        if embedded and "integration" in item.keywords:
            item.add_marker(skip)
        if is_pure(item):
            item.add_marker(pytest.mark.pure)
    group(items)  # the tests of a shared world one after the other (tests/worlds.py)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    worlds.leave(nextitem)  # after the test's own transaction and fixtures are gone


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if worlds.made:
        terminalreporter.write_line(
            f"shared worlds: {worlds.made} made for {worlds.tests} tests; "
            f"{len(worlds.dirtied)} made again after a test changed its Milvus "
            f"{worlds.dirtied if terminalreporter.verbosity > 0 else ''}")


@pytest.fixture(scope="session")
def shared_worlds(django_db_setup: Any, django_db_blocker: Any,
                  milvus_server: MilvusServer | None,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Where the shared worlds are made: the test database, and a Milvus of their own on the
    embedded runtime (the server on the services)."""
    folder = tmp_path_factory.mktemp("worlds")
    uri = settings.MILVUS_URI if milvus_server is not None else str(folder / "milvus.db")
    worlds.configure(folder=folder, blocker=django_db_blocker, milvus_uri=uri)
    yield
    worlds.close()


@pytest.fixture
def _shared_world(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.stash.get(WORLD, ()):
        request.getfixturevalue("shared_worlds")
    worlds.enter(request.node)
    yield
    worlds.after_test(request.node)


@pytest.fixture
def _django_db_helper(_shared_world: None, _django_db_helper: None) -> None:
    """pytest-django's (the test's transaction, or a flushed database), once the world the
    test shares is made: the test's transaction is then a savepoint inside the world's."""


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer | None]:
    """The services' Milvus: Milvus 2.5's own C++ engine (the `milvus` program of the
    milvus-lite 2.5.1 wheel) as a server, the nearest to a production server's engine and
    limits. Embedded: none (a Milvus Lite file, which this process opens: the same engine)."""
    if not settings.MILVUS_URI.startswith("http"):
        yield None
        return
    folder = tmp_path_factory.mktemp("milvus")
    server = MilvusEngineServer(settings.MILVUS_URI, folder / "milvus.db", folder / "server.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def lite3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """A Milvus Lite 3.x server (scripts/milvus-lite3.sh), for the tests marked lite3: what
    a Milvus server has and Milvus 2.5's engine as milvus-lite 2.5.1 serves it lacks (aliases,
    partitions, a collection's properties), which Milvus Lite 3.x has."""
    from tests.milvus import Lite3Server

    folder = tmp_path_factory.mktemp("milvus-lite3")
    server = Lite3Server(f"http://127.0.0.1:{free_port()}", folder / "data",
                         folder / "server.log")
    server.start()
    yield server
    server.stop()


def _embedder_settings() -> dict[str, Any]:
    """What the process-wide embedders are built from (the OpenAI one: an endpoint through
    the outbound policy; the offline models: nothing)."""
    return {name: getattr(settings, name) for name in dir(settings)
            if name.startswith(("KB_EMBEDD", "KB_OUTBOUND"))}


# The embedder settings of the run: embedders built with them are kept from test to test (the
# offline models take about a second to load), those of a test that changed them are not.
_RUN_EMBEDDER_SETTINGS = _embedder_settings()


@pytest.fixture
def store(milvus_server: MilvusServer | None, tmp_path: Path, settings: Any,
          request: pytest.FixtureRequest) -> Iterator[Any]:
    """A clean Milvus for the test, and a probe to read it; collections are dropped after.
    In a shared world (tests/worlds.py): the world's Milvus, which the world empties."""
    from retrieval.index import milvus
    from retrieval.index.embedders import reset_embedders
    from retrieval.index.milvus.connection import reset_connection
    from tests.milvus import MilvusProbe

    changed = _embedder_settings() != _RUN_EMBEDDER_SETTINGS
    if request.node.stash.get(WORLD, ()):
        request.getfixturevalue("shared_worlds")
        settings.MILVUS_URI = worlds.milvus_uri
        yield MilvusProbe()
        if changed or _embedder_settings() != _RUN_EMBEDDER_SETTINGS:
            reset_embedders()
        return
    if request.node.get_closest_marker("lite3"):
        settings.MILVUS_URI = request.getfixturevalue("lite3_server").uri
    elif milvus_server is None:
        settings.MILVUS_URI = str(tmp_path / "milvus.db")
    reset_connection()
    yield MilvusProbe()
    if changed or _embedder_settings() != _RUN_EMBEDDER_SETTINGS:
        reset_embedders()
    reset_connection()
    collections = milvus.collections()
    alias = collections.alias_target()
    client = collections.connection.client()
    if alias:
        client.drop_alias(collections.alias)
    for name in collections.names():
        client.drop_collection(name)
    reset_connection()


@pytest.fixture(scope="session")
def celery_worker(milvus_server: MilvusServer | None, django_db_setup: Any,
                  django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory,
                  ) -> Iterator[CeleryWorker]:
    """A worker process reading the test database; use with django_db(transaction=True)."""
    if milvus_server is None:
        pytest.skip("the embedded run has no worker")
    from kbplatform.celery import app

    url = database_url()
    app.control.purge()
    # A restarted worker re-syncs what a killed one left after 1 s (default 60 s). Its source
    # folders are a parent in a temporary folder (the default's is under the checkout's var/).
    worker = CeleryWorker({"DATABASE_URL": url, "CELERY_TASK_ALWAYS_EAGER": "false",
                           "KB_RECOVERY_GRACE_SECONDS": "1", "MILVUS_TIMEOUT_SECONDS": "3",
                           "KB_SOURCE_ROOTS": str(tmp_path_factory.mktemp("source-roots"))},
                          tmp_path_factory.mktemp("celery") / "worker.log")
    worker.start()
    yield worker
    worker.stop()


def database_url() -> str:
    """The test database as a DATABASE_URL, for the processes a test starts."""
    from urllib.parse import quote

    from django.db import connection

    db = connection.settings_dict
    if connection.vendor != "mysql":
        return f"sqlite:///{db['NAME']}"
    user, password = quote(str(db["USER"] or ""), safe=""), quote(str(db["PASSWORD"] or ""),
                                                                    safe="")
    return (f"mysql://{user}:{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 3306}/"
            f"{db['NAME']}")


def wait_until(predicate: Callable[[], bool], timeout: float = 120.0, what: str = "",
               interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def key_create(tenant: str = "acme", role: str = "tool",
               datasets: tuple[Any, ...] = ()) -> tuple[Any, str]:
    from datasets.documents.services import tenant_get_or_create
    from datasets.tenancy.keys import api_key_create

    return api_key_create(tenant=tenant_get_or_create(slug=tenant), role=role, datasets=datasets)


@pytest.fixture
def make_key(db: None) -> Callable[..., tuple[Any, str]]:
    return key_create


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


@pytest.fixture
def applied(eager_tasks: None, django_capture_on_commit_callbacks: Any) -> Callable[[], Any]:
    """`with applied(): ...` runs what the block enqueues, in this process, when it ends: the
    indexing worker's part of a request, in a test whose transaction never commits."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@dataclass
class Kb:
    tenant: Any
    dataset: Any
    admin: APIClient  # admin key of the tenant
    tool: APIClient  # tool key of the tenant (lookups)


@pytest.fixture
def kb(make_key: Callable[..., tuple[Any, str]]) -> Kb:
    from datasets.documents.services import dataset_create

    admin_key, admin_secret = make_key(role="admin")
    _, tool_secret = make_key(role="tool")
    dataset = dataset_create(tenant=admin_key.tenant, name="ops")
    return Kb(tenant=admin_key.tenant, dataset=dataset, admin=api_client(admin_secret),
              tool=api_client(tool_secret))


def document_ingest(dataset: Any, name: str, raw: bytes) -> Any:
    """Store a document and sync it in this process, as the indexing worker would."""
    from datasets.documents.services import document_store
    from retrieval.index.sync import document_sync

    outcome = document_store(dataset=dataset, file_name=name.rsplit("/", 1)[-1], raw=raw,
                             max_bytes=settings.KB_MAX_UPLOAD_BYTES, source_path=name,
                             replace=True)
    document_sync(document_id=outcome.document.pk)
    outcome.document.refresh_from_db()
    return outcome.document


@pytest.fixture
def ingest(store: Any) -> Callable[..., Any]:
    """Store a document and sync it in this process, as the indexing worker would."""
    return document_ingest


def _on_server() -> bool:
    return settings.MILVUS_URI.startswith("http")


# An unmarked test runs in both suites. BOTH_RUNTIMES also names the runtime in the test's id
# (services: MariaDB, Redis, Milvus Lite server; embedded: SQLite, DB cache, Milvus Lite file):
# each suite selects its own copy.
BOTH_RUNTIMES = pytest.mark.parametrize("runtime", [
    pytest.param("services", marks=pytest.mark.integration, id="services"),
    pytest.param("embedded", marks=pytest.mark.embedded, id="embedded"),
], indirect=True)


@pytest.fixture
def runtime(request: pytest.FixtureRequest) -> Iterator[str]:
    wanted = request.param
    if (wanted == "services") != _on_server():
        pytest.skip(f"this copy runs on the {wanted} runtime")
    yield wanted
