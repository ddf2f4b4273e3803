"""Speed benchmarks: lookup latency against a raw-pymilvus floor, ingest rate against the
embedder alone. Commands, not timed tests: `manage.py bench_lookup`, `manage.py bench_ingest`.
"""

from __future__ import annotations

import math
import random
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.test import Client

from retrieval.analysis import bm25_text
from retrieval.index.milvus.collections import BM25_SEARCH, DENSE_SEARCH, tenant_partitions
from retrieval.index.milvus.connection import MilvusConnection
from retrieval.index.milvus.expressions import filter_expression
from retrieval.index.milvus.imports import AnnSearchRequest, RRFRanker
from retrieval.types import SearchFilters

WORDS_EN = ("redis memory eviction latency replica lag mysql slow query index deadlock jvm heap "
            "gc pause thread dump kubernetes pod crashloop oomkilled node notready dns timeout "
            "tls certificate disk inode io nginx gateway kafka consumer rabbitmq queue backlog "
            "cpu load connection pool buffer cache partition leader vacuum bloat").split()
WORDS_ZH = ("内存 延迟 主从 慢查询 索引 死锁 堆 停顿 线程 容器 节点 解析 证书 磁盘 网关 消费 "
            "积压 负载 连接 缓存 分区 淘汰 超时 重启 告警 排查 处理 预防").split()


def synthetic_text(rng: random.Random, words: int = 60) -> str:
    """Mixed Chinese/English ops text with a Zipf-like word distribution."""
    vocabulary = WORDS_EN + WORDS_ZH
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    return " ".join(rng.choices(vocabulary, weights=weights, k=words))


def unit_vectors(rng: np.random.Generator, count: int,
                 dimension: int) -> npt.NDArray[np.float32]:
    vectors = rng.standard_normal((count, dimension)).astype(np.float32)
    unit: npt.NDArray[np.float32] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of the values at or below it."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Timing:
    p50: float
    p95: float

    @classmethod
    def of(cls, samples: list[float]) -> Timing:
        if not samples:
            return cls(0.0, 0.0)
        return cls(round(statistics.median(samples), 2), round(percentile(samples, 0.95), 2))


def timed_ms(call: Callable[[int], object], argument: int) -> float:
    started = time.perf_counter()
    call(argument)
    return (time.perf_counter() - started) * 1000


def raw_hybrid_search(connection: MilvusConnection, collection: str, *,
                      filters: SearchFilters, vector: list[float], text: str, k: int) -> None:
    """The floor: one raw pymilvus `hybrid_search` (RRF k=60) with the lookup's filters, in
    the tenant's partition as the lookup searches."""
    expr = filter_expression(filters)
    connection.client().hybrid_search(
        collection, [AnnSearchRequest([vector], "vector", DENSE_SEARCH, k, expr=expr),
                     AnnSearchRequest([bm25_text(text)], "sparse_vector", BM25_SEARCH, k,
                                      expr=expr)],
        RRFRanker(60), limit=k, output_fields=["id", "content", "metadata"],
        partition_names=tenant_partitions(connection, collection, filters.tenant_id))


def raw_arm_searches(connection: MilvusConnection, collection: str, *,
                     filters: SearchFilters, vector: list[float], text: str, k: int) -> None:
    """Milvus's own part of a default lookup: the two searches app fusion ranks from (dense,
    BM25) with the lookup's filters and partition, asking for ids only: no text, no fusion,
    nothing of the platform's work."""
    expr = filter_expression(filters)
    partitions = tenant_partitions(connection, collection, filters.tenant_id)
    client = connection.client()
    for data, field, params in (([vector], "vector", DENSE_SEARCH),
                                ([bm25_text(text)], "sparse_vector", BM25_SEARCH)):
        client.search(collection, data=data, anns_field=field, filter=expr, limit=k,
                      output_fields=["id"], search_params=params, partition_names=partitions)


def in_process_client() -> Client:
    """A Django test client for a benchmark run outside the test suite, sending a Host that
    ALLOWED_HOSTS names (the client's `testserver` is only a test run's)."""
    host = next((h for h in settings.ALLOWED_HOSTS if h and h[0] not in ".*"), "localhost")
    return Client(SERVER_NAME=host)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) ends a benchmark like Ctrl-C: what it started is
    stopped and what it changed restored, instead of orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
