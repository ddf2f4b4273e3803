"""Canonical invocations (seed 000 §2): what each tool call handed out as READY evidence.

The evidence guard reads them back: only evidence an agent really received as READY in this
invocation (or session) counts. Records live for KB_CANONICAL_TTL_SECONDS, in Redis when
REDIS_URL is set and otherwise in a table of their own. Never in a cache that evicts: a record
dropped early makes the guard deny evidence the agent did receive. Keys carry the tenant, so
one tenant never reads another's; a record keeps ids and dataset ids, never excerpts or the
query (a record lives its TTL, not a tenant's retention of raw queries).

What a call handed out, excerpts included, is kept beside it for the same TTL, always in the
database (EvidenceReplay: seven days of excerpts would crowd Redis's memory): its replay.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError
from django.utils import timezone
from redis.exceptions import RedisError

from audit.models import CanonicalInvocation, EvidenceReplay
from audit.types import InvocationRecord, ReadyEvidence
from kbplatform.errors import ServiceUnavailable

logger = logging.getLogger(__name__)

SESSION_LIMIT = 500  # tool calls remembered per session

P = ParamSpec("P")
R = TypeVar("R")


def _store_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """A down Redis (or database) is a failed backend: 503, never a 500, and never evidence
    handed out that the guard could not confirm afterwards."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (RedisError, DatabaseError, OSError) as exc:
            logger.warning("canonical store: %s failed: %r", fn.__name__, exc)
            raise ServiceUnavailable("the canonical invocation store is unavailable") from exc

    return wrapper


def canonical_document(record: InvocationRecord) -> dict[str, Any]:
    """The stored form: ids, status and version."""
    return {
        "tool_call_id": record.tool_call_id, "session_id": record.session_id,
        "evidence_status": record.evidence_status, "config_version": record.config_version,
        "ready": [[item.document_id, item.dataset_id] for item in record.ready],
    }


def _ready_of(document: dict[str, Any] | None) -> list[ReadyEvidence]:
    if not document:
        return []
    return [ReadyEvidence(str(doc), int(dataset)) for doc, dataset in document.get("ready", [])]


class _Backend(Protocol):
    def put(self, tenant_id: int, document: dict[str, Any], ttl: int) -> None: ...

    def call(self, tenant_id: int, tool_call_id: str) -> dict[str, Any] | None: ...

    def session(self, tenant_id: int, session_id: str) -> list[dict[str, Any]]: ...


class _RedisBackend:
    """Through Django's Redis cache: Redis evicts nothing that has a TTL under `noeviction`
    or `volatile-*` policies sized for it (docs/operations.md)."""

    @staticmethod
    def _key(tenant_id: int, kind: str, ident: str) -> str:
        return f"kb:{kind}:{tenant_id}:{ident}"

    def put(self, tenant_id: int, document: dict[str, Any], ttl: int) -> None:
        key = self._key(tenant_id, "canonical", document["tool_call_id"])
        cache.set(key, json.dumps(document, ensure_ascii=False), ttl)
        if document["session_id"]:
            try:
                self._session_append(tenant_id, document["session_id"], ttl, document)
            except Exception:
                # The call answers UNAVAILABLE: the guard must not confirm it by its id.
                cache.delete(key)
                raise

    def _session_append(self, tenant_id: int, session_id: str, ttl: int,
                        document: dict[str, Any]) -> None:
        """Give the call its own slot of the session, without a read-modify-write of a list.

        Agents make parallel tool calls: a shared list read and written back by each of them
        loses calls. The slot number comes from an atomic counter (INCR) and is claimed with
        `add`. The slot keeps what this call made READY, so a tool call id reused by another
        session never lends that session's evidence to this one.
        """
        counter = self._key(tenant_id, "session-n", session_id)
        for _ in range(32):
            cache.add(counter, 0, ttl)
            try:
                slot = cache.incr(counter)
            except ValueError:  # the counter expired between add and incr
                continue
            if cache.add(self._slot(tenant_id, session_id, slot), document, ttl):
                cache.touch(counter, ttl)
                return
        logger.error("canonical: no free slot for call %r of session %r",
                     document["tool_call_id"], session_id)

    def _slot(self, tenant_id: int, session_id: str, slot: int) -> str:
        return self._key(tenant_id, "session-call", f"{session_id}:{slot}")

    def call(self, tenant_id: int, tool_call_id: str) -> dict[str, Any] | None:
        raw = cache.get(self._key(tenant_id, "canonical", tool_call_id))
        return json.loads(raw) if raw else None

    def session(self, tenant_id: int, session_id: str) -> list[dict[str, Any]]:
        last = int(cache.get(self._key(tenant_id, "session-n", session_id)) or 0)
        keys = [self._slot(tenant_id, session_id, n)
                for n in range(max(1, last - SESSION_LIMIT + 1), last + 1)]
        found = cache.get_many(keys)
        return [found[k] for k in keys if isinstance(found.get(k), dict)]


class _TableBackend:
    """One row per call: parallel calls insert, nothing is read and written back."""

    def put(self, tenant_id: int, document: dict[str, Any], ttl: int) -> None:
        now = timezone.now()
        CanonicalInvocation.objects.create(
            tenant_id=tenant_id, tool_call_id=document["tool_call_id"],
            session_id=document["session_id"], record=document, created_at=now,
            expires_at=now + timedelta(seconds=ttl))

    @staticmethod
    def _live(tenant_id: int) -> Any:
        return CanonicalInvocation.objects.filter(tenant_id=tenant_id,
                                                  expires_at__gt=timezone.now())

    def call(self, tenant_id: int, tool_call_id: str) -> dict[str, Any] | None:
        # A reused tool call id means its latest call, as a key overwritten in Redis does.
        row = self._live(tenant_id).filter(tool_call_id=tool_call_id).order_by("-id").first()
        return row.record if row else None

    def session(self, tenant_id: int, session_id: str) -> list[dict[str, Any]]:
        rows = (self._live(tenant_id).filter(session_id=session_id).order_by("-id")
                .values_list("record", flat=True)[:SESSION_LIMIT])
        return list(reversed(list(rows)))


def _backend() -> _Backend:
    return _RedisBackend() if settings.REDIS_URL else _TableBackend()


@_store_errors
def canonical_store(record: InvocationRecord) -> None:
    """The call's canonical record, and its replay when it keeps one: the replay's row is
    written (committed) first and deleted again when the record cannot be stored, so the
    guard never confirms a call that has no replay, nor a replay outlives a refused call."""
    ttl = settings.KB_CANONICAL_TTL_SECONDS
    replay = None
    if record.replay is not None:
        now = timezone.now()
        replay = EvidenceReplay.objects.create(
            tenant_id=record.tenant_id, tool_call_id=record.tool_call_id,
            evidence_status=record.evidence_status, config_version=record.config_version,
            index_version=record.replay.index_version, dataset_ids=list(record.dataset_ids),
            evidence=list(record.replay.evidence), created_at=now,
            expires_at=now + timedelta(seconds=ttl))
    try:
        _backend().put(record.tenant_id, canonical_document(record), ttl)
    except Exception:
        if replay is not None:
            _forget(replay)
        raise


def _forget(replay: EvidenceReplay) -> None:
    try:
        EvidenceReplay.objects.filter(pk=replay.pk).delete()
    except DatabaseError:  # the database is failing too: the call answers UNAVAILABLE
        logger.warning("canonical: the replay of %r is kept, its record is not",
                       replay.tool_call_id)


@_store_errors
def replayed(*, tenant_id: int, tool_call_id: str) -> EvidenceReplay | None:
    """The replay of the tenant's call `tool_call_id` while it is kept (a reused id: its
    latest call, as for the guard); None: no such call, or expired."""
    return (EvidenceReplay.objects.filter(tenant_id=tenant_id, tool_call_id=tool_call_id,
                                          expires_at__gt=timezone.now())
            .order_by("-id").first())


@_store_errors
def canonical_get(*, tenant_id: int, tool_call_id: str) -> dict[str, Any] | None:
    return _backend().call(tenant_id, tool_call_id)


@_store_errors
def session_tool_calls(*, tenant_id: int, session_id: str) -> list[str]:
    calls = (str(d["tool_call_id"]) for d in _backend().session(tenant_id, session_id))
    return list(dict.fromkeys(calls))


@_store_errors
def served_ready(*, tenant_id: int, tool_call_id: str = "", session_id: str = ""
                 ) -> list[ReadyEvidence]:
    """Every READY evidence item of the invocation (or session), first served first, each
    once. Scope and liveness are the caller's to check."""
    backend = _backend()
    documents = ([backend.call(tenant_id, tool_call_id)] if tool_call_id
                 else backend.session(tenant_id, session_id))
    found: dict[str, ReadyEvidence] = {}
    for document in documents:
        for item in _ready_of(document):
            found.setdefault(item.document_id, item)
    return list(found.values())


def ready_evidence(*, tenant_id: int, document_ids: Iterable[str], tool_call_id: str = "",
                   session_id: str = "") -> dict[str, int | None]:
    """For each asked document id: the dataset it came from when it was READY evidence of
    the invocation (or session), else None. Scope and liveness are the caller's to check."""
    ready = {item.document_id: item.dataset_id for item in served_ready(
        tenant_id=tenant_id, tool_call_id=tool_call_id, session_id=session_id)}
    return {document_id: ready.get(document_id) for document_id in document_ids}


def canonical_prune() -> int:
    """Delete expired table records and replays (Redis expires its own); the count."""
    deleted = 0
    for model in (CanonicalInvocation, EvidenceReplay):
        while True:
            ids = list(model.objects.filter(expires_at__lte=timezone.now())
                       .order_by().values_list("pk", flat=True)[:1000])
            if not ids:
                break
            deleted += model.objects.filter(pk__in=ids).delete()[0]
    return deleted
