"""The retriever registry (seed 003 §6): what each retriever is, takes and promises.

A retriever declares its name, the parameters it accepts (type and default), whether one
instance may serve several threads and whether it may run beside others, its own timeout and
the listeners told when it starts, finishes or fails. Adding a retriever is one class with a
`spec` and one `registry.register(...)` (docs/retrieval-graph.md).

The registry also runs the calls as the specs promise (`submit`): thread-safe retrievers on one
shared pool, each retriever that is not on a single thread of its own (never two of its calls at
once, whatever instance its factory hands out), and every call may be given up (`abandon`) by
the lookup that waits for it, once it outlives its `timeout_s` or the lookup's deadline.

The "advanced" retriever wraps the whole graph for outside callers; the graph's own retrieval
node refuses it, so the graph never runs inside itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from retrieval.types import SearchFilters, SearchHit

# Thread-safe retrievers share this many threads. Milvus calls carry their own timeout
# (MILVUS_TIMEOUT_SECONDS), so a call given up at a lookup's deadline ends by itself.
SHARED_THREADS = 8
# A thread cannot be killed: a call given up after its own timeout_s may sleep on. While this
# many such calls of one thread-safe retriever still run, it is refused at once (RetrieverBusy)
# rather than let it take the shared threads; one that is not thread-safe has one thread, so a
# single one blocks it.
MAX_STRAYS = 2


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: object
    doc: str = ""


@dataclass(frozen=True)
class RetrieverSpec:
    name: str
    params: tuple[Param, ...] = ()
    thread_safe: bool = True  # one instance may serve concurrent calls
    parallel: bool = True  # may run beside other retrievers (PARALLEL mode)
    timeout_s: float | None = None  # None: only the graph's deadline bounds it
    needs_vector: bool = True  # the query must be embedded first
    advanced: bool = False  # wraps the whole graph: never inside the graph's retrieval node

    def arguments(self, given: Mapping[str, object]) -> dict[str, object]:
        """`given` checked against the declared parameters, defaults filled in."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise TypeError(f"{self.name} does not accept {', '.join(unknown)}")
        out: dict[str, object] = {}
        for param in self.params:
            value = given.get(param.name, param.default)
            if param.type is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            # bool is an int subclass: True is not a valid int or float here.
            if not isinstance(value, param.type) or (isinstance(value, bool)
                                                     and param.type is not bool):
                raise TypeError(f"{self.name}.{param.name} must be {param.type.__name__}")
            out[param.name] = value
        return out


@dataclass(frozen=True)
class RetrieverCall:
    """One retriever call: the query (with its vector when the retriever needs one)."""

    query: str
    vector: list[float] | None
    filters: SearchFilters
    limit: int
    arguments: Mapping[str, object] = field(default_factory=dict)
    distances: bool = True  # the dense distance of every hit is wanted (SearchRequest)
    bm25_terms: tuple[str, ...] = ()  # searched by BM25 only (SearchRequest)


class Retriever(Protocol):
    spec: ClassVar[RetrieverSpec]

    def retrieve(self, call: RetrieverCall) -> list[SearchHit]: ...


@dataclass(frozen=True)
class RetrieverEvent:
    kind: str  # "start" | "finish" | "error"
    retriever: str
    query: str
    elapsed_ms: float = 0.0
    hits: int = 0
    error: str = ""


Listener = Callable[[RetrieverEvent], None]


class NestedGraphError(LookupError):
    """An advanced retriever (the whole graph) was asked for inside the graph itself."""


class RetrieverTimeout(TimeoutError):
    """A call did not answer within its retriever's timeout_s: given up, its hits never used."""


class RetrieverBusy(RuntimeError):
    """Earlier calls of the retriever still run past their timeout_s: refused at once."""


class RetrieverRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., Retriever]] = {}
        self._specs: dict[str, RetrieverSpec] = {}
        self._lock = threading.Lock()
        self._shared = ThreadPoolExecutor(SHARED_THREADS, thread_name_prefix="kb-retriever")
        self._own: dict[str, ThreadPoolExecutor] = {}  # the single threads of the unsafe
        self._strays: dict[str, int] = {}  # calls still running past their timeout_s

    def register(self, spec: RetrieverSpec, factory: Callable[..., Retriever]) -> None:
        if spec.name in self._specs:
            raise ValueError(f"a retriever named {spec.name} is registered already")
        self._specs[spec.name] = spec
        self._factories[spec.name] = factory

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def spec(self, name: str) -> RetrieverSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise LookupError(f"no retriever named {name!r}") from None

    def inner(self, name: str, **dependencies: Any) -> Retriever:
        """A retriever for the graph's retrieval node; never an advanced one."""
        spec = self.spec(name)
        if spec.advanced:
            raise NestedGraphError(f"{name} runs the whole graph: it cannot run inside the "
                                   "graph's retrieval node")
        return self._factories[name](**dependencies)

    def outer(self, name: str, **dependencies: Any) -> Retriever:
        """Any retriever, for callers outside the graph."""
        self.spec(name)
        return self._factories[name](**dependencies)

    def submit(self, retriever: Retriever, call: RetrieverCall,
               listeners: Sequence[Listener]) -> RetrieverRun:
        """Start one call of `retriever` on the thread its spec allows; raises RetrieverBusy
        while too many of its earlier calls still run past their timeout_s."""
        spec = retriever.spec
        with self._lock:
            strays = self._strays.get(spec.name, 0)
            if strays >= (MAX_STRAYS if spec.thread_safe else 1):
                raise RetrieverBusy(f"{strays} earlier call(s) of {spec.name} still run past "
                                    f"its timeout_s of {spec.timeout_s} s")
            if not spec.thread_safe and spec.name not in self._own:
                self._own[spec.name] = ThreadPoolExecutor(1, thread_name_prefix=f"kb-{spec.name}")
            pool = self._shared if spec.thread_safe else self._own[spec.name]
        return RetrieverRun(retriever, call, listeners, pool, self._stray)

    def _stray(self, name: str, change: int) -> None:
        with self._lock:
            self._strays[name] = self._strays.get(name, 0) + change


class RetrieverRun:
    """One call of a retriever on a worker thread, which the lookup waiting for it may give up.

    A thread cannot be killed, so a call given up may go on in the background, but nothing it
    does reaches the lookup any more: its listeners hear that it was abandoned and nothing
    after, its hits are never read, and a call given up before it began never begins. Its own
    clock (`due`) starts when it is submitted: waiting for a thread is part of its time.
    """

    def __init__(self, retriever: Retriever, call: RetrieverCall,
                 listeners: Sequence[Listener], pool: ThreadPoolExecutor,
                 stray: Callable[[str, int], None]) -> None:
        self.name = retriever.spec.name
        self.query = call.query
        self.timeout_s = retriever.spec.timeout_s
        self.submitted = time.monotonic()
        self.due = None if self.timeout_s is None else self.submitted + self.timeout_s
        self._retriever, self._call, self._listeners = retriever, call, tuple(listeners)
        self._stray = stray
        self._state = threading.Lock()  # orders the call's events against abandon()
        self._began = self._ended = self._abandoned = self._straying = False
        self.future: Future[list[SearchHit]] = pool.submit(self._run)

    def _run(self) -> list[SearchHit]:
        with self._state:
            if self._abandoned:
                return []  # given up before it began: it never begins
            self._began = True
        try:
            return run_retriever(self._retriever, self._call, [self._relay])
        finally:
            with self._state:
                self._ended = True
                straying = self._straying
            if straying:
                self._stray(self.name, -1)

    def _relay(self, event: RetrieverEvent) -> None:
        with self._state:
            if self._abandoned:
                return
            self._ended = event.kind != "start"
            for listener in self._listeners:
                listener(event)

    def overdue(self, now: float) -> bool:
        return self.due is not None and now >= self.due

    def abandon(self, reason: str) -> bool:
        """Give the call up; False when it had already answered (then its answer stands)."""
        with self._state:
            if self._ended or self._abandoned:
                return False
            self._abandoned = True
            # Past its own timeout and still running: it counts against the retriever.
            self._straying = self._began and self.overdue(time.monotonic())
            if self._straying:
                self._stray(self.name, 1)
        elapsed = (time.monotonic() - self.submitted) * 1000
        for listener in self._listeners:
            listener(RetrieverEvent("error", self.name, self.query, elapsed,
                                    error=f"abandoned: {reason}"))
        return True


def run_retriever(retriever: Retriever, call: RetrieverCall,
                  listeners: Sequence[Listener]) -> list[SearchHit]:
    """Call `retriever`, telling `listeners` it started and how it ended."""
    name = retriever.spec.name
    for listener in listeners:
        listener(RetrieverEvent("start", name, call.query))
    started = time.perf_counter()
    try:
        hits = retriever.retrieve(call)
    except Exception as exc:
        elapsed = (time.perf_counter() - started) * 1000
        for listener in listeners:
            listener(RetrieverEvent("error", name, call.query, elapsed,
                                    error=f"{type(exc).__name__}: {exc}"))
        raise
    elapsed = (time.perf_counter() - started) * 1000
    for listener in listeners:
        listener(RetrieverEvent("finish", name, call.query, elapsed, hits=len(hits)))
    return hits
