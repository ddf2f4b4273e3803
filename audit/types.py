"""What a tool call hands the audit: plain, JSON-ready values, no retrieval types."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

EVIDENCE_STATUSES = ("READY", "EMPTY", "UNAVAILABLE")
RELEVANCE_LEVELS = ("PRECISE", "REFERENCE", "NONE")


class DropReason(StrEnum):
    """Why the relevance gate did not keep a candidate, as its trace records it: the gate
    (retrieval/lookup/post_process.py) writes these, the audit admin reads them."""

    DUPLICATE = "duplicate"
    SAME_TEXT = "same_text"  # the text of a better-ranked kept chunk: in its `also_in`
    # Followed by the figures: "below:QUALITY" or "below:QUALITY/SUPPORT".
    BELOW = "below"
    PER_DOCUMENT = "per_document"
    RETURN_N = "return_n"


@dataclass(frozen=True)
class ReadyEvidence:
    """One evidence item an agent received as READY, with the dataset it came from."""

    document_id: str  # "{docId}#chunk-{n}"
    dataset_id: int


@dataclass(frozen=True)
class Replay:
    """What a call handed out, kept for its replay (GET /api/evidence/{tool_call_id}) as long
    as its canonical record: each piece of evidence exactly as the agent received it (JSON),
    with `revision`, the content hash of the document version it was read from."""

    index_version: int | None  # the index version that served; None: no index searched
    evidence: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class InvocationRecord:
    """One answered tool call (READY, EMPTY or UNAVAILABLE)."""

    tenant_id: int
    tool_call_id: str
    session_id: str
    query: str
    evidence_status: str  # one of EVIDENCE_STATUSES
    relevance_level: str  # one of RELEVANCE_LEVELS, as the agent saw it
    returned_count: int
    config_version: int | None
    error: str
    details: dict[str, Any]  # retrievalDetails, JSON-ready
    dataset_ids: tuple[int, ...] = ()  # the datasets the lookup searched
    ready: tuple[ReadyEvidence, ...] = field(default=())
    tool_name: str = "lookup_knowledge"
    answer: dict[str, Any] | None = None  # a RAG answer's generation: status, citations, usage
    experiment: tuple[int, str] | None = None  # (A/B test id, arm) of the config that served
    # What the call was about in words of the tenant's documents (never other query words):
    # the knowledge gaps page groups calls into topics by them (audit/gaps.py).
    topic_terms: tuple[str, ...] = ()
    # Of `ready`, the evidence the call's own answer cited, confirmed by the evidence guard.
    cited: tuple[str, ...] = ()
    # The config row (retrieval's RagConfig, by id) whose `config_version` served; None: the
    # built-in defaults. A version number alone names no config: a dataset's v3 is not the
    # tenant default's v3.
    config_id: int | None = None
    narrowed: bool = False  # the call's own `filters` narrowed its search
    # verify_answer's: (sentences checked, of them unsupported by what the call served).
    checked: tuple[int, int] | None = None
    replay: Replay | None = None  # what the call served, for its replay; None: nothing kept
