"""Writes of the audit: one ToolInvocation row per tool call, and its retention."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from audit.models import (
    AnswerCheck,
    Channel,
    InvocationDataset,
    Outcome,
    Rating,
    ServedEvidence,
    ToolInvocation,
)
from audit.privacy import query_fingerprint, raw_queries, texts_hidden
from audit.types import InvocationRecord
from datasets.documents.selectors import document_of
from datasets.models import ApiKey, Document, Tenant
from datasets.tenancy.permissions import Access
from kbplatform.errors import ErrorCode, NotFound, raised_codes, raised_status

logger = logging.getLogger(__name__)

IDENT_MAX = 128  # tool_call_id / session_id column width
SESSION_ROWS = 10_000  # served rows a confirmation reads at most (a session's, one key's)
RANK_MAX = 32767  # a PositiveSmallIntegerField's bound, the same on every database
OUTCOME_OF_STATUS = {"READY": Outcome.OK, "EMPTY": Outcome.EMPTY,
                     "UNAVAILABLE": Outcome.UNAVAILABLE}


def invocation_record(*, api_key: ApiKey | None, latency_ms: float,
                      result: InvocationRecord | None = None,
                      payload: Mapping[str, Any] | None = None,
                      error: Exception | None = None,
                      tool_name: str = "lookup_knowledge", channel: str = Channel.REST) -> None:
    """Write the audit row of one tool call. Never raises: the audit must not break a lookup.
    `tool_name` names the tool of a failed call (an answered one carries its own); `channel`
    is "rest" or "mcp"."""
    try:
        row = _invocation_row(api_key=api_key, latency_ms=latency_ms, result=result,
                              payload=payload, error=error)
        row.tool_name = result.tool_name if result is not None else tool_name
        row.channel = channel
        served = _served_rows(row, result) if result is not None else []
        terms = result.topic_terms if result is not None else ()
        narrowed = result is not None and result.narrowed
        checked = result.checked if result is not None else None
        # One transaction (a savepoint inside the caller's: a failed insert must not poison
        # it): one commit for the three inserts. Each in autocommit cost a commit (an fsync on
        # MariaDB) each: 15.7 ms p50 against 8.0 ms this way (docs/benchmarks.md).
        with transaction.atomic():
            _save(row, served, terms, narrowed)
            if checked is not None and row.tenant_id is not None:
                AnswerCheck.objects.create(
                    invocation=row, tenant_id=row.tenant_id, config_id=row.config_id,
                    config_version=row.config_version, sentences=checked[0],
                    unsupported=checked[1], day=timezone.localtime(row.created_at).date())
    except Exception:
        logger.exception("audit: could not record tool call %r",
                         getattr(result, "tool_call_id", ""))


def _save(row: ToolInvocation, served: list[ServedEvidence], terms: Sequence[str],
          narrowed: bool) -> None:
    """The row, then the datasets its lookup searched (for the per-dataset figures), each
    with the call's topic terms and whether its own filters narrowed it (for the knowledge
    gaps page), and the evidence it served (for the cited rates): one INSERT each, whatever
    the counts."""
    row.save(force_insert=True)
    InvocationDataset.objects.bulk_create(
        InvocationDataset.of(row, pk, terms, narrowed) for pk in row.dataset_ids)
    for item in served:
        item.invocation = row
    ServedEvidence.objects.bulk_create(served)


def _served_rows(row: ToolInvocation, result: InvocationRecord) -> list[ServedEvidence]:
    """The READY evidence of the call in the order it was handed out (rank 1 first); what its
    own answer cited is cited from the start."""
    tenant_id = row.tenant_id  # the key's, as the row's
    if tenant_id is None or result.evidence_status != "READY" or row.outcome != Outcome.OK:
        return []
    cited = set(result.cited)
    day = timezone.localtime(row.created_at).date()
    rows: dict[str, ServedEvidence] = {}
    for item in result.ready:
        document_id = document_of(item.document_id)
        if document_id is None or item.document_id in rows:
            continue
        hit = item.document_id in cited
        rows[item.document_id] = ServedEvidence(
            tenant_id=tenant_id, dataset_id=item.dataset_id, document_id=document_id,
            evidence_key=item.document_id, rank=min(len(rows) + 1, RANK_MAX),
            tool_call_id=row.tool_call_id, session_id=row.session_id,
            config_id=row.config_id, config_version=row.config_version,
            experiment_id=row.experiment_id,
            experiment_arm=row.experiment_arm, day=day, cited=hit,
            cited_at=row.created_at if hit else None)
    return list(rows.values())


def evidence_cite(*, tenant_id: int, dataset_ids: Collection[int], evidence_keys: Sequence[str],
                  tool_call_id: str = "", session_id: str = "") -> int:
    """Mark evidence the guard confirmed as cited: of the call's served rows, or of the
    session's the latest that served each key. Counted once: a row already cited stays as it
    is, and two confirmations at once update it once (the UPDATE's own condition). The number
    of rows newly cited."""
    try:
        return _cite(tenant_id, dataset_ids, list(dict.fromkeys(evidence_keys)), tool_call_id,
                     session_id)
    except DatabaseError:  # the guard's answer stands; only its count is lost
        logger.exception("audit: could not record citations of %r", tool_call_id or session_id)
        return 0


def _cite(tenant_id: int, dataset_ids: Collection[int], evidence_keys: list[str],
          tool_call_id: str, session_id: str) -> int:
    if not evidence_keys or not (tool_call_id or session_id):
        return 0
    rows = ServedEvidence.objects.filter(tenant_id=tenant_id, dataset_id__in=dataset_ids,
                                         evidence_key__in=evidence_keys)
    rows = rows.filter(tool_call_id=tool_call_id) if tool_call_id \
        else rows.filter(session_id=session_id)
    # The latest call that served each key, as the guard reads a reused call id's latest call.
    latest: dict[str, int] = {}
    for key, pk in rows.order_by("-pk").values_list("evidence_key", "pk")[:SESSION_ROWS]:
        latest[key] = max(pk, latest.get(key, 0))
    if not latest:
        return 0
    return ServedEvidence.objects.filter(pk__in=latest.values(), cited=False).update(
        cited=True, cited_at=timezone.now())


def evidence_rate(*, tenant_id: int, api_key_id: int, dataset_ids: Collection[int],
                  access: Access, tool_call_id: str, evidence_keys: Sequence[str],
                  rating: Rating) -> list[str]:
    """Rate evidence served to the call `tool_call_id` of the key `api_key_id`, of documents
    `access` may read: every key must be such evidence, or nothing is rated (NotFound, code
    not_served, naming the others: a call of another key or tenant, or a document restricted
    to others, looks like one that served nothing). A new rating replaces the previous one.
    The rated keys."""
    keys = list(dict.fromkeys(evidence_keys))
    served = dict(ServedEvidence.objects.filter(
        tenant_id=tenant_id, tool_call_id=tool_call_id, dataset_id__in=dataset_ids,
        invocation__api_key_id=api_key_id, evidence_key__in=keys)
        .order_by("pk").values_list("evidence_key", "pk"))  # a reused call id: its latest call
    readers = dict(Document.objects.filter(
        dataset__tenant_id=tenant_id, doc_id__in={document_of(key) for key in served} - {None})
        .values_list("doc_id", "readers"))
    served = {key: pk for key, pk in served.items()
              if (doc := document_of(key)) is None or access.may_read(readers.get(doc))}
    missing = [key for key in keys if key not in served]
    if missing:
        raise NotFound("not evidence served to this key's call", code=ErrorCode.NOT_SERVED,
                       extra={"document_ids": missing})
    ServedEvidence.objects.filter(pk__in=served.values()).update(
        rating=rating, rated_at=timezone.now())
    return keys


def _invocation_row(*, api_key: ApiKey | None, latency_ms: float,
                    result: InvocationRecord | None, payload: Mapping[str, Any] | None,
                    error: Exception | None) -> ToolInvocation:
    row = ToolInvocation(
        api_key=api_key,
        tenant_id=api_key.tenant_id if api_key else result.tenant_id if result else None,
        latency_ms=round(latency_ms, 3) if math.isfinite(latency_ms) and latency_ms > 0 else 0.0)
    query: object = None
    if result is not None:
        row.tool_call_id = result.tool_call_id[:IDENT_MAX]
        row.session_id = result.session_id[:IDENT_MAX]
        row.outcome = OUTCOME_OF_STATUS[result.evidence_status]
        if result.answer and result.answer.get("answer_status") == "UNAVAILABLE":
            row.outcome = Outcome.UNAVAILABLE  # evidence found, but the answer could not be made
        row.evidence_status = result.evidence_status
        row.relevance_level = result.relevance_level
        row.returned_count = result.returned_count
        row.config_version = result.config_version
        row.config_id = result.config_id
        if result.experiment is not None:
            row.experiment_id, row.experiment_arm = result.experiment
        row.error = result.error[:200]
        row.details = {"retrievalDetails": result.details}
        row.dataset_ids = sorted(set(result.dataset_ids))
        if result.answer is not None:
            row.details["answer"] = result.answer
        query = result.query
    else:
        body = payload if isinstance(payload, Mapping) else {}
        row.tool_call_id = _ident(body.get("tool_call_id"))
        row.session_id = _ident(body.get("session_id"))
        row.outcome = _outcome(error)
        row.error = type(error).__name__ if error is not None else ""
        row.details = {"retrievalDetails": None, "failure": _failure(error)}
        query = body.get("query")
    # The key's tenant (loaded with the key): whether its callers' question text is kept.
    tenant = (api_key.tenant if api_key is not None else
              Tenant.objects.filter(pk=row.tenant_id).first() if row.tenant_id else None)
    kept = raw_queries(tenant).kept
    details, marked = texts_hidden(row.details)
    if not kept:
        row.details = details
    if isinstance(query, str):
        row.query_hash = query_fingerprint(query)
        row.query_length = len(query)
        if kept:
            row.query_text = query[:settings.KB_MAX_QUERY_CHARS]
    row.query_kept = kept and bool(row.query_text or marked)
    return row


def _ident(value: object) -> str:
    # Ids of a rejected body are kept only when they could be ids at all.
    return value if isinstance(value, str) and len(value) <= IDENT_MAX else ""


def _outcome(error: Exception | None) -> Outcome:
    status = raised_status(error)
    # By code too: DRF answers these 403 where no authenticator names a WWW-Authenticate.
    if status == 401 or raised_codes(error) in (ErrorCode.NOT_AUTHENTICATED,
                                                ErrorCode.AUTHENTICATION_FAILED):
        return Outcome.UNAUTHENTICATED
    if status == 403:
        return Outcome.FORBIDDEN
    if status == 503:
        return Outcome.UNAVAILABLE
    return Outcome.INVALID if 400 <= status < 500 else Outcome.ERROR


def _failure(error: Exception | None) -> dict[str, Any]:
    # Codes, never messages: an exception's text may quote the query or a backend's internals.
    return {"type": type(error).__name__ if error is not None else None,
            "status": raised_status(error), "codes": raised_codes(error)}


def tool_invocations_prune(*, older_than_days: int, batch_size: int = 1000) -> int:
    """Delete rows older than `older_than_days`, one short transaction per batch; the count."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    deleted = 0
    while True:
        ids = list(ToolInvocation.objects.filter(created_at__lt=cutoff).order_by()
                   .values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        with transaction.atomic():
            count, _ = ToolInvocation.objects.filter(pk__in=ids).delete()
        deleted += count


def raw_queries_erase(*, batch_size: int = 500) -> int:
    """Erase the question text kept past each tenant's retention (audit/privacy.py
    `raw_queries`): the `query_text` blanked and the texts made of it in the trace worded as
    their length and hash, one short transaction per batch; the count of calls. A tenant that
    no longer keeps raw queries has all of its text erased. Read from the index of the rows
    that hold any, whatever the table's size."""
    kept = ToolInvocation.objects.filter(query_kept=True)
    tenant_ids = list(kept.order_by().values_list("tenant_id", flat=True).distinct())
    tenants = Tenant.objects.in_bulk([pk for pk in tenant_ids if pk is not None])
    now = timezone.now()
    erased = 0
    for tenant_id in tenant_ids:
        rule = raw_queries(tenants.get(tenant_id) if tenant_id is not None else None)
        cutoff = now - timedelta(days=rule.days) if rule.kept else now
        rows = kept.filter(tenant_id=tenant_id, created_at__lt=cutoff)
        while True:
            batch = list(rows.order_by().only("pk", "details")[:batch_size])
            if not batch:
                break
            for row in batch:
                row.details, _ = texts_hidden(row.details)
                row.query_text, row.query_kept = "", False
            with transaction.atomic():
                ToolInvocation.objects.bulk_update(batch, ["details", "query_text",
                                                          "query_kept"])
            erased += len(batch)
    return erased
