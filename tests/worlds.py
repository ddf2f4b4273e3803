"""Shared worlds: an indexed corpus that many tests only read is made once, not per test.

A corpus (tests/retrieval/conftest.py: acme, globex, acme_edge) is a fixture that imports
runbooks and indexes them: database rows, a Milvus collection, about two seconds. The tests
that ask for the same corpora in the same order (their *world*) run one after the other
(`group`), and the world is made once for them, like Django's `setUpTestData`:

- the database: the world is made inside a transaction that is never committed; each test's
  own transaction (pytest-django's `db`) is a savepoint inside it, rolled back after the test;
- Milvus: the world's collections stay until the last test of the world; after each test they
  are compared with what the world made, and a test that wrote to them (an upload, a
  deactivation, a rebuild) leaves a world that is thrown away and made again for the next;
- the Redis cache (the services' runtime): put back as the world left it after each test
  (the canonical invocations are keyed by tenant id, which the tests of a world share).

A test that needs other connections to see its data (transactional_db, a web server thread, a
worker process) cannot share the uncommitted world: it makes its own corpora, as does a test
marked `own_world`. So does a test whose settings differ, when the world is entered, from
those the world was made with (a fixture that changed the chunking before the import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

WORLD = pytest.StashKey[tuple[str, ...]]()

# Fixtures under which a test's data must be committed for others to read it.
TRANSACTIONAL = frozenset({"transactional_db", "live_server", "django_db_reset_sequences",
                           "django_db_serialized_rollback"})


@dataclass(frozen=True)
class Corpus:
    name: str  # of its fixture
    module: str  # where its fixture is defined: another module's fixture of that name is not it
    needs: tuple[str, ...]  # corpora made before it (acme_edge is a second dataset of acme)
    make: Callable[[Path], Any]  # imports and indexes it under a folder of its own
    load: Callable[[Any], Any]  # what the fixture returns, afresh for each test, from make's

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"


CORPORA: dict[str, Corpus] = {}  # by key


def corpus(name: str, *, module: str, make: Callable[[Path], Any], load: Callable[[Any], Any],
           needs: tuple[str, ...] = ()) -> None:
    """Declare the fixture `name` of `module` a corpus that tests may share."""
    made = Corpus(name=name, module=module, needs=needs, make=make, load=load)
    CORPORA[made.key] = made


def _corpus(item: pytest.Item, name: str) -> Corpus | None:
    """The corpus the test's fixture `name` is, if it is one."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.get(name) if info is not None else None
    if not definitions:
        return None
    module = getattr(definitions[-1].func, "__module__", None)
    return CORPORA.get(f"{module}:{name}")


def world_of(item: pytest.Item) -> tuple[str, ...]:
    """The corpora the test asks for (keys), in the order its fixtures make them; () when it
    makes its own."""
    names = list(getattr(item, "fixturenames", ()))
    order: list[str] = []

    def add(found: Corpus) -> None:
        for need in found.needs:
            add(CORPORA[f"{found.module}:{need}"])
        if found.key not in order:
            order.append(found.key)

    for name in names:
        found = _corpus(item, name)
        if found is not None:
            add(found)
    if not order or TRANSACTIONAL & set(names) or item.get_closest_marker("own_world"):
        return ()
    marker = item.get_closest_marker("django_db")
    if marker is not None:
        from pytest_django.plugin import validate_django_db

        transaction, reset_sequences, databases, serialized, apps = validate_django_db(marker)
        if transaction or reset_sequences or serialized or apps is not None or (
                databases is not None and set(databases) - {"default"}):
            return ()
    return tuple(order)


def group(items: list[pytest.Item]) -> None:
    """Run the tests of each world one after the other, where the first of them ran."""
    worlds: dict[tuple[str, ...], list[pytest.Item]] = {}
    first = None
    rest = []
    for index, item in enumerate(items):
        key = world_of(item)
        item.stash[WORLD] = key
        if key:
            worlds.setdefault(key, []).append(item)
            first = index if first is None else first
        else:
            rest.append(item)
    if first is not None:
        items[:] = [*rest[:first], *(i for tests in worlds.values() for i in tests),
                    *rest[first:]]


def _settings_now() -> dict[str, Any]:
    """The settings a corpus is made with (MILVUS_URI: the world's own, tests/conftest.py;
    SETTINGS_MODULE reads None while a test overrides any setting)."""
    return {name: getattr(settings, name) for name in dir(settings)
            if name.isupper() and name not in ("MILVUS_URI", "SETTINGS_MODULE")}


class _RedisState:
    """The cache's keys as the world left them, put back after each test."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.saved: dict[bytes, tuple[bytes, int]] = {}

    def save(self) -> None:
        keys = list(self.client.scan_iter(count=1000))
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
            pipe.pttl(key)
        found = pipe.execute()
        self.saved = {key: (found[2 * i], max(int(found[2 * i + 1]), 0))
                      for i, key in enumerate(keys) if found[2 * i] is not None}

    def put_back(self) -> None:
        self.client.flushdb()
        for key, (dumped, ttl) in self.saved.items():
            self.client.restore(key, ttl, dumped, replace=True)

    def close(self) -> None:
        self.client.close()


@dataclass
class World:
    key: tuple[str, ...]
    folder: Path
    blocker: Any
    milvus_uri: str
    settings: dict[str, Any] = field(default_factory=dict)
    milvus: Any = None  # what Milvus held when the world was made
    redis: _RedisState | None = None
    atomic: Any = None
    dirty: bool = False
    made: dict[str, Any] = field(default_factory=dict)  # what each corpus's make returned

    @contextmanager
    def milvus_connection(self) -> Iterator[Any]:
        from retrieval.index import milvus

        with override_settings(MILVUS_URI=self.milvus_uri):
            yield milvus.collections()

    def make(self) -> None:
        from django.core.cache import cache
        from django.db import transaction

        from retrieval.index.milvus.connection import reset_connection

        reset_connection()  # the connection of a test before was to its own Milvus
        self.settings = _settings_now()
        with self.blocker.unblock():
            if settings.REDIS_URL:
                cache.clear()
                self.redis = _RedisState(settings.REDIS_URL)
            self.atomic = transaction.atomic()
            self.atomic.__enter__()
            try:
                with override_settings(MILVUS_URI=self.milvus_uri):
                    for key in self.key:
                        self.made[key] = CORPORA[key].make(self.folder / CORPORA[key].name)
            except BaseException:
                self.close()
                raise
        self.milvus = self.milvus_state()
        if self.redis is not None:
            self.redis.save()

    def milvus_state(self) -> dict[str, Any]:
        with self.milvus_connection() as collections:
            state: dict[str, Any] = {"alias": collections.alias_target()}
            for name in sorted(collections.names()):
                rows = collections.connection.call("query", lambda c, name=name: c.query(
                    name, filter="", output_fields=["*"], limit=16384), collection=name)
                state[name] = sorted((sorted(row.items()) for row in rows), key=repr)
        return state

    def after_test(self) -> None:
        """Put the cache back; a test that changed the world's Milvus dirtied the world."""
        if self.redis is not None:
            self.redis.put_back()
        if self.milvus_state() != self.milvus:
            self.dirty = True

    def close(self) -> None:
        from django.db import transaction

        from retrieval.index.milvus.connection import reset_connection

        try:
            with self.blocker.unblock():
                if self.atomic is not None:
                    transaction.set_rollback(True)
                    self.atomic.__exit__(None, None, None)
                    self.atomic = None
        finally:
            with self.milvus_connection() as collections:
                client = collections.connection.client()
                if collections.alias_target():
                    client.drop_alias(collections.alias)
                for name in collections.names():
                    client.drop_collection(name)
            reset_connection()
            if self.redis is not None:
                self.redis.close()


class Worlds:
    """At most one world at a time: the one the running test shares."""

    def __init__(self) -> None:
        self.live: World | None = None
        self.made = 0
        self.tests = 0  # tests that shared a world
        self.dirtied: list[str] = []  # tests that changed their world's Milvus
        self.folder = Path()
        self.blocker: Any = None
        self.milvus_uri = ""

    def configure(self, *, folder: Path, blocker: Any, milvus_uri: str) -> None:
        self.folder, self.blocker, self.milvus_uri = folder, blocker, milvus_uri

    def enter(self, item: pytest.Item) -> None:
        key = item.stash.get(WORLD, ())
        live = self.live
        if live is not None and (live.key != key or live.dirty):
            self.close()
        if not key:
            return
        if self.live is None:
            assert self.blocker is not None, "the shared_worlds fixture configures the worlds"
            self.made += 1
            world = World(key=key, folder=self.folder / f"world-{self.made}",
                          blocker=self.blocker, milvus_uri=self.milvus_uri)
            world.make()
            self.live = world
        else:
            now, made = _settings_now(), self.live.settings
            differ = sorted(name for name in now.keys() | made.keys()
                            if now.get(name) != made.get(name))
            if differ:
                pytest.fail(f"{item.nodeid} changed {differ} before it entered its shared world "
                            f"{key}: mark it own_world (tests/worlds.py)", pytrace=False)

    def shares(self, item: pytest.Item) -> bool:
        key = item.stash.get(WORLD, ())
        return bool(key) and self.live is not None and self.live.key == key

    def after_test(self, item: pytest.Item) -> None:
        if self.shares(item):
            assert self.live is not None
            self.tests += 1
            self.live.after_test()
            if self.live.dirty:
                self.dirtied.append(item.nodeid)

    def leave(self, nextitem: pytest.Item | None) -> None:
        """Between two tests: the world goes when the next test does not share it."""
        live = self.live
        if live is not None and (live.dirty or nextitem is None
                                 or nextitem.stash.get(WORLD, ()) != live.key):
            self.close()

    def close(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.close()


worlds = Worlds()


def shared(request: pytest.FixtureRequest) -> Any:
    """The corpus of the requesting fixture in the world the test shares, afresh; None if the
    test makes its own."""
    if not worlds.shares(request.node):
        return None
    assert worlds.live is not None
    found = _corpus(request.node, request.fixturename)
    assert found is not None and found.key in worlds.live.made, request.fixturename
    return found.load(worlds.live.made[found.key])
