"""One Milvus client per process, and the one place where Milvus errors get their meaning.

A local path is a Milvus Lite file, which pymilvus opens by starting the milvus-lite wheel's
`milvus` program (Milvus 2.5's own engine) for this process; http(s):// is a server (the
demo's, Standalone, Distributed, Zilliz Cloud). Every call has a timeout; a failure is
VectorStoreUnavailable (a lookup answers UNAVAILABLE, a task retries) unless Milvus refused
the request itself (VectorStoreRejected: retrying cannot help).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import grpc
from django.conf import settings

from kbplatform.processes import lite3_folder, lite_file_lock
from retrieval.index.milvus.imports import LoadState, MilvusClient, MilvusException

if TYPE_CHECKING:
    from retrieval.index.milvus.collections import Layout

logger = logging.getLogger(__name__)

RELEASED = 101  # "collection not loaded"
# Milvus's "illegal argument" / "invalid parameter" codes (Lite, then Milvus 2.4+): the
# request itself is wrong (e.g. a value over a VARCHAR's max_length).
REJECTED = frozenset({6, 1100})
# Milvus 2.5's engine fails a BM25 search that meets a write changing the collection's BM25
# statistics (0.3 % of searches while one document was rewritten in a loop); the same search
# at once after it succeeded every time: it is tried once more.
RACED_A_WRITE = "Invalid sparse row: negative value"
# pymilvus pings idle channels every 10 s; the Milvus Lite server keeps gRPC's default policy
# (no ping without a call more often than every 5 min) and answers with GOAWAY "too many
# pings". pymilvus then finds its shared channel broken and the next connect fails.
#
# Reconnecting: gRPC waits 1 s after a failed connect, then 1.6 times longer each time, up
# to 120 s, so a channel found down for long retried rarely: lookups were UNAVAILABLE 12 s
# after Milvus returned from a 30 s outage. Every channel also shares one process-wide
# subchannel per address, in that backoff, so pymilvus's recovery (a new channel on each
# UNAVAILABLE) failed at once too. A channel of its own, and at most 1 s between attempts:
# lookups answer within a second of Milvus's return (tests/retrieval/index/test_reconnect.py).
_GRPC = {"grpc.keepalive_permit_without_calls": 0,
         "grpc.use_local_subchannel_pool": 1,
         "grpc.max_reconnect_backoff_ms": 1000}

T = TypeVar("T")


class VectorStoreUnavailable(Exception):
    """Milvus failed or cannot be reached; a lookup answers UNAVAILABLE, never 'no results'."""


class VectorStoreRejected(Exception):
    """Milvus refused the request as invalid: the same request will fail again."""


class VectorStoreLacks(VectorStoreRejected):
    """This Milvus does not implement the call (gRPC UNIMPLEMENTED): Milvus 2.5's engine as
    the milvus-lite 2.5.1 wheel serves it has no aliases. A capability, not a failure."""


def _unimplemented(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.UNIMPLEMENTED


class _UnimplementedIsAnAnswer(logging.Filter):
    """pymilvus logs every failed RPC as an ERROR with its traceback; an UNIMPLEMENTED one is
    how a server says it lacks a capability, which the caller handles (VectorStoreLacks)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "StatusCode.UNIMPLEMENTED" not in record.getMessage()


logging.getLogger("pymilvus.decorators").addFilter(_UnimplementedIsAnAnswer())


# Milvus Lite files whose engine this process started: {absolute path: (pid, the file's lock
# it holds)}. A forked child inherits the parent's engine (it reaches it on its socket) and must
# never stop it.
_lite_servers: dict[str, tuple[int, IO[str]]] = {}


def is_local(uri: str) -> bool:
    return not uri.startswith(("http://", "https://", "tcp://", "unix:"))


class MilvusConnection:
    def __init__(self, *, uri: str, token: str = "", timeout: float = 10.0) -> None:
        self.uri = uri
        self.timeout = timeout
        self._token = token
        self._client: MilvusClient | None = None
        self._lock = threading.Lock()
        self._loading = threading.Lock()
        # What collections.py learnt of each collection (kept until it is created or dropped).
        self.layouts: dict[str, Layout] = {}
        self.partitions: dict[str, frozenset[str]] = {}
        # Collections (or aliases) this client found loaded, or loaded itself.
        self.loaded: set[str] = set()
        # False once the server answered that it has no aliases (collections.py).
        self.aliases = True

    def forget(self, collection: str) -> None:
        self.layouts.pop(collection, None)
        self.partitions.pop(collection, None)
        self.loaded.discard(collection)

    @property
    def is_local(self) -> bool:
        return is_local(self.uri)

    def client(self) -> MilvusClient:
        with self._lock:
            if self._client is None:
                held = self._file_lock() if self.is_local else None
                try:
                    self._client = MilvusClient(uri=self.uri, token=self._token,
                                                timeout=self.timeout, grpc_options=_GRPC)
                except Exception as exc:  # pymilvus raises several unrelated types here
                    if held is not None:
                        held.close()  # closing releases the lock
                    if self.is_local and "Open local milvus failed" in str(exc):
                        raise VectorStoreUnavailable(_file_in_use(self.uri)) from exc
                    raise VectorStoreUnavailable(
                        f"cannot connect to Milvus: {type(exc).__name__}") from exc
                if held is not None:
                    _lite_servers[os.path.abspath(self.uri)] = (os.getpid(), held)
                # The connection is tried before any call (and Milvus Lite 3.x opened a
                # collection on its first call, without a lock: calls at once each opened one,
                # and all but the last were forgotten; listing opened them one at a time).
                try:
                    self._client.list_collections(timeout=self.timeout)
                except Exception as exc:
                    self._close()
                    raise VectorStoreUnavailable(
                        f"cannot list Milvus's collections: {type(exc).__name__}") from exc
            return self._client

    def _file_lock(self) -> IO[str] | None:
        """The local file's lock, taken before pymilvus takes it (in this process, so its own
        then succeeds beside ours): refused the lock itself, milvus-lite deletes the lock file
        on its way out, and the next open started a second engine on a file another process
        serves. Held until the engine stops (`_close`); None where this process runs the
        file's engine already."""
        path = os.path.abspath(self.uri)
        if os.path.isdir(path):
            raise VectorStoreUnavailable(lite3_folder(path))
        if path in _lite_servers:
            return None
        held = lite_file_lock(Path(path).resolve())
        if held is None:
            raise VectorStoreUnavailable(_file_in_use(path))
        return held

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            self.loaded.clear()
            path = os.path.abspath(self.uri)
            started = _lite_servers.get(path) if self.is_local else None
            if started is not None and started[0] == os.getpid():
                # Closing the client leaves the file's `milvus` program running until this
                # process exits: the file stays locked against every other process, with its
                # loaded collections. Stop it: the file is free.
                from milvus_lite.server_manager import server_manager_instance

                server_manager_instance.release_server(path)
                del _lite_servers[path]
                started[1].close()

    def call(self, what: str, fn: Callable[[MilvusClient], T], *,
             collection: str | None = None) -> T:
        """Run `fn(client)` with the error meaning above, `collection` loaded first.

        Milvus Lite opens every collection released: the first call a process made on one
        failed, and pymilvus logged that as an ERROR with its traceback, before the retry
        below loaded it. So the load state of `collection` is asked once per client, and the
        collection loaded when it is not. A collection found released later all the same
        (the server restarted and forgot what was loaded) is loaded and the call tried again.
        """
        try:
            client = self.client()
            if collection is not None and collection not in self.loaded:
                with self._loading:  # once per collection, not once per thread
                    if collection not in self.loaded:
                        self._load(client, collection)
            try:
                return fn(client)
            except MilvusException as exc:
                if RACED_A_WRITE in str(exc.message):
                    return fn(client)
                if exc.code != RELEASED or collection is None:
                    raise
                client.load_collection(collection, timeout=self.timeout)
                return fn(client)
        except (VectorStoreUnavailable, VectorStoreRejected):
            raise
        except MilvusException as exc:
            logger.warning("milvus %s failed: %s", what, exc)
            if exc.code in REJECTED:
                raise VectorStoreRejected(f"Milvus refused {what}: {exc.message}") from exc
            raise VectorStoreUnavailable(f"Milvus {what} failed: {exc.message}") from exc
        except Exception as exc:  # grpc and connection errors surface with their own types
            if _unimplemented(exc):
                raise VectorStoreLacks(f"this Milvus does not implement {what}") from exc
            logger.warning("milvus %s failed: %r", what, exc)
            raise VectorStoreUnavailable(f"Milvus {what} failed: {type(exc).__name__}") from exc

    def _load(self, client: MilvusClient, collection: str) -> None:
        state = client.get_load_state(collection, timeout=self.timeout)["state"]
        if state == LoadState.NotExist:  # the call itself fails, with Milvus's own words
            return
        if state != LoadState.Loaded:  # NotLoad, or Loading: load_collection waits for it
            client.load_collection(collection, timeout=self.timeout)
        self.loaded.add(collection)

    def options(self) -> dict[str, Any]:
        return {"timeout": self.timeout}


def _file_in_use(path: str) -> str:
    return (f"the Milvus Lite file {path} is open in another process (a file opens in one "
            f"process at a time): stop that process, or serve the file to every process "
            f"(`python manage.py serve_milvus`; the demo, scripts/demo.sh, serves var/milvus.db "
            f"itself), or set MILVUS_URI to a Milvus server's http://HOST:PORT")


_connections: dict[int, MilvusConnection] = {}
_connections_lock = threading.Lock()


def get_connection() -> MilvusConnection:
    """One connection per process (a forked worker must not reuse its parent's gRPC channel)."""
    pid = os.getpid()
    with _connections_lock:
        connection = _connections.get(pid)
        if connection is None:
            connection = MilvusConnection(uri=settings.MILVUS_URI, token=settings.MILVUS_TOKEN,
                                          timeout=settings.MILVUS_TIMEOUT_SECONDS)
            _connections.clear()
            _connections[pid] = connection
        return connection


def reset_connection() -> None:
    """Close the process's client: tests and commands that switch MILVUS_URI call this."""
    with _connections_lock:
        for connection in _connections.values():
            connection.close()
        _connections.clear()
