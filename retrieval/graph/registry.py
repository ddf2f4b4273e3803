"""The retriever registry (seed 003 §6): what each retriever is, takes and promises.

A retriever declares its name, the parameters it accepts (type and default), whether one
instance may serve several threads and whether it may run beside others, its own timeout and
the listeners told when it starts, finishes or fails. Adding a retriever is one class with a
`spec` and one `registry.register(...)` (docs/retrieval-graph.md).

The "advanced" retriever wraps the whole graph for outside callers; the graph's own retrieval
node refuses it, so the graph never runs inside itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from retrieval.types import SearchFilters, SearchHit


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


class RetrieverRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., Retriever]] = {}
        self._specs: dict[str, RetrieverSpec] = {}

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
