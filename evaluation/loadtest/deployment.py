"""Which processes the load test runs and how they are wired: a broker, Milvus, a worker and
the web server of its own, on this process's database and cache — the demo's stack on SQLite,
production's on MariaDB."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from evaluation.loadtest import LoadTestError
from kbplatform.processes import (
    CeleryWorker,
    GunicornServer,
    MilvusEngineServer,
    RedisServer,
    Service,
    ServiceError,
    free_port,
)
from retrieval.index.milvus.collections import MilvusCollections
from retrieval.index.milvus.connection import MilvusConnection
from retrieval.index.versions import active_version

Progress = Callable[[str], None]


def database_url() -> str:
    """This process's database (in the test suite: the test database) as a DATABASE_URL."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(str(db['NAME'])).resolve()}"
    if connection.vendor != "mysql":
        raise LoadTestError(f"the load test runs on SQLite (the embedded default) or "
                            f"MariaDB/MySQL, not {connection.vendor}")
    user, password = quote(str(db["USER"] or ""), safe=""), quote(str(db["PASSWORD"] or ""),
                                                                    safe="")
    return (f"mysql://{user}:{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 3306}/"
            f"{db['NAME']}")


def described_stack() -> str:
    """Which deployment this process's database makes: the demo's or production's."""
    web = f"gunicorn {settings.KB_WEB_WORKERS} x {settings.KB_WEB_THREADS} threads"
    if connection.vendor == "sqlite":
        return f"demo stack: SQLite, Milvus 2.5's engine, a worker on a filesystem broker, {web}"
    return f"production stack: MariaDB, Redis, Milvus 2.5's engine, a worker, {web}"


def serve_active_version(uri: str) -> None:
    """The new Milvus is empty. When the database already serves an index version, give it
    that version's collection (empty) so that uploads are indexed as in production; without
    one, the first upload creates it. Nothing else writes yet: the worker is not started."""
    version = active_version()
    if version is None:
        return
    store = MilvusCollections(MilvusConnection(uri=uri, timeout=settings.MILVUS_TIMEOUT_SECONDS),
                              alias=settings.MILVUS_COLLECTION)
    try:
        store.create(version.collection_name, version.dimension)
        store.point_alias(version.collection_name)
    finally:
        store.connection.close()


@contextmanager
def deployment(workdir: Path, progress: Progress) -> Iterator[int]:
    """Broker, Milvus, worker and web on free ports of 127.0.0.1; the web port. Stopped in
    reverse order when the block ends, however it ends (Milvus last). On SQLite the demo's
    stack: no Redis, the broker a folder of the load test's own (as the demo's is of var/)."""
    milvus_port, web_port = free_port(), free_port()
    # Sessions of their own: a Ctrl-C reaches this command only, which stops them in order.
    milvus = MilvusEngineServer(f"http://127.0.0.1:{milvus_port}", workdir / "milvus.db",
                                workdir / "milvus.log", own_session=True)
    env = {"DATABASE_URL": database_url(), "MILVUS_URI": milvus.uri, "MILVUS_TOKEN": "",
           "CELERY_TASK_ALWAYS_EAGER": "false", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    # A broker of its own: a worker already on the shared broker's `indexing` queue (the test
    # suite's, a deployment's) would take these tasks and write them into its own Milvus.
    redis = None
    if connection.vendor == "sqlite":
        # The broker's folders (and the documents' files) under the load test's folder; this
        # process's secret key, not one generated there.
        env.update(CELERY_BROKER_URL="filesystem://", KB_VAR_DIR=str(workdir), REDIS_URL="",
                   DJANGO_SECRET_KEY=settings.SECRET_KEY)
    else:
        redis = RedisServer(free_port(), workdir, workdir / "redis.log", own_session=True)
        env.update(CELERY_BROKER_URL=f"{redis.url}/0",
                   REDIS_URL=settings.REDIS_URL or f"{redis.url}/1")
    worker = CeleryWorker(env, workdir / "worker.log", hostname=f"loadtest-{os.getpid()}@%h",
                          own_session=True)
    web = GunicornServer(web_port, workdir / "web.log", env, workers=settings.KB_WEB_WORKERS,
                         threads=settings.KB_WEB_THREADS, own_session=True)
    with ExitStack() as stack:

        def start(service: Service) -> None:
            stack.callback(service.stop)
            try:
                service.start()
            except ServiceError as exc:
                raise LoadTestError(str(exc)) from exc

        broker = f"redis (broker) :{redis.port}" if redis else "a filesystem broker"
        progress(f"starting {broker}, milvus :{milvus_port}, celery worker, gunicorn "
                 f":{web_port} — logs in {workdir}")
        if redis is not None:
            start(redis)
        start(milvus)
        serve_active_version(milvus.uri)
        start(worker)
        start(web)
        yield web_port
