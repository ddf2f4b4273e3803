"""The RAG node of an agent loop (seed 003 §5): a query by priority, datasets by target, then
the agentic graph — a named agent's, else its own.

- Query: the task's `query` parameter, else the intent's `rag_keywords` joined by spaces,
  else the user's input. None of them → NEEDS_INPUT naming what is missing.
- Datasets, of those the caller's key may read: `target_dataset_ids` exactly; else a target
  name that is empty, "全部" or "all" → all of them; else the name exactly, then the datasets
  whose name contains it (case, spaces, "-" and "_" aside). None → NO_KNOWLEDGE_BASE
  ("未配置知识库"), which is not EMPTY: there was nothing to search, not nothing found.
- Execution, among `agent` then `sub_agents`: the first that names one of the tenant's
  RagAgents (any case) is delegated to: the agentic graph with that agent's settings. Else the
  first whose name says it is a RAG agent (seed 003 §5: Agentic or RAG in its name —
  "AgenticRAG", "agenticrag", "ops-rag", "RagAgent"; a word that only holds the letters, like
  "storage", does not count) is: the agentic graph on the tenant's config, as that
  sub-agent. Names of the loop's other agents are passed over; with none, the node runs the
  agentic graph on the tenant's config itself.
- Result: the answer; else the evidence found, as delimited untrusted snippets; else what
  happened — with the structured block {confidence, iterations, target_datasets}.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from audit.types import InvocationRecord
from datasets.tenancy.permissions import Access
from retrieval.answers.agentic import AgenticOutcome, Route, agentic_answer, run_session
from retrieval.answers.answer import AnswerStatus
from retrieval.ragconfig.selectors import rag_agent_named
from retrieval.types import (
    CallFilters,
    EvidenceStatus,
    RelevanceLevel,
    SearchFilters,
    call_id,
)
from retrieval.untrusted import LABEL, sources_block

TOOL_NAME = "rag_node"
NO_KNOWLEDGE_BASE_TEXT = "未配置知识库"
ALL_DATASETS = frozenset({"", "全部", "all"})
_NAME_NOISE = re.compile(r"[\s_\-]+")
# The words of an agent's name: "AgenticRAG-ops" → Agentic, RAG, ops.
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


class NodeStatus(StrEnum):
    ANSWERED = "ANSWERED"
    NO_ANSWER = "NO_ANSWER"
    EMPTY = "EMPTY"
    UNAVAILABLE = "UNAVAILABLE"
    NO_KNOWLEDGE_BASE = "NO_KNOWLEDGE_BASE"  # no readable dataset matched the target
    NEEDS_INPUT = "NEEDS_INPUT"  # the task says nothing to look up


@dataclass(frozen=True)
class NodeInput:
    query: str = ""  # the task's `query` parameter
    rag_keywords: tuple[str, ...] = ()  # from intent recognition
    user_input: str = ""
    target_dataset_ids: tuple[int, ...] = ()
    target_dataset_name: str = ""
    agent: str = ""  # the task's agent parameter
    sub_agents: tuple[str, ...] = ()  # the loop agent's sub-agents
    tool_call_id: str = ""
    session_id: str = ""
    filters: CallFilters = CallFilters()  # what the node narrows its lookups to


@dataclass(frozen=True)
class DatasetRef:
    id: int
    name: str


@dataclass(frozen=True)
class NodeResult:
    status: NodeStatus
    text: str  # what the loop hands on: the answer, else the snippets, else why not
    tool_call_id: str
    session_id: str  # each lookup of the run is recorded under it, for the evidence guard
    query: str
    query_source: str  # "query", "rag_keywords", "user_input"; "" when there was none
    target_datasets: tuple[DatasetRef, ...] = ()
    selected_by: str = ""  # "ids", "all", "name", "contains"
    delegated_to: str = ""  # the agent's name, "" when the node ran the graph itself
    delegated_by: str = ""  # "rag_agent" (a RagAgent's name), "rag_word" (a RAG sub-agent's)
    missing: tuple[str, ...] = ()
    outcome: AgenticOutcome | None = None  # None: nothing ran

    def invocation(self, filters: SearchFilters) -> InvocationRecord:
        """The audit row of the call: the agentic run's, with how the node chose; when nothing
        ran, an EMPTY row saying why."""
        node = {"status": self.status.value, "query_source": self.query_source,
                "selected_by": self.selected_by, "delegated_to": self.delegated_to,
                "delegated_by": self.delegated_by,
                "target_datasets": [d.id for d in self.target_datasets]}
        if self.outcome is not None:
            record = self.outcome.invocation(filters)
            return replace(record, tool_name=TOOL_NAME, answer={**(record.answer or {}),
                                                                 "node": node})
        return InvocationRecord(
            tenant_id=filters.tenant_id, tool_call_id=self.tool_call_id,
            session_id=self.session_id,
            query=self.query, evidence_status=EvidenceStatus.EMPTY.value,
            relevance_level=RelevanceLevel.NONE.value, returned_count=0, config_version=None,
            error="", details={}, tool_name=TOOL_NAME,
            answer={"answer_status": self.status.value, "node": node})

    @property
    def structured(self) -> dict[str, Any]:
        outcome = self.outcome
        return {"confidence": outcome.confidence if outcome else 0.0,
                "iterations": outcome.state.iteration if outcome else 0,
                "target_datasets": [{"id": d.id, "name": d.name} for d in self.target_datasets]}


def node_query(node: NodeInput) -> tuple[str, str]:
    """The query and where it came from, by the seed's priority."""
    if node.query.strip():
        return node.query.strip(), "query"
    keywords = " ".join(k.strip() for k in node.rag_keywords if k.strip())
    if keywords:
        return keywords, "rag_keywords"
    if node.user_input.strip():
        return node.user_input.strip(), "user_input"
    return "", ""


def select_datasets(readable: Sequence[DatasetRef], *, ids: Sequence[int], name: str
                    ) -> tuple[tuple[DatasetRef, ...], str]:
    """The targeted datasets of `readable` and which rule chose them."""
    if ids:
        wanted = set(ids)
        return tuple(d for d in readable if d.id in wanted), "ids"
    target = name.strip()
    if target.casefold() in ALL_DATASETS:
        return tuple(readable), "all"
    exact = tuple(d for d in readable if d.name.casefold() == target.casefold())
    if exact:
        return exact, "name"
    needle = _NAME_NOISE.sub("", target.casefold())
    return tuple(d for d in readable if needle in _NAME_NOISE.sub("", d.name.casefold())), \
        "contains"


def rag_sub_agent(names: Sequence[str]) -> str:
    """The first of `names` that says it is a RAG agent, "" when none does: a word of it holds
    "agentic", or begins or ends with "rag" (any case)."""
    for name in names:
        words = [word.casefold() for word in _NAME_WORDS.findall(name)]
        if any("agentic" in w or w.startswith("rag") or w.endswith("rag") for w in words):
            return name.strip()
    return ""


def rag_node(*, tenant_id: int, readable: Sequence[DatasetRef], access: Access,
             node: NodeInput) -> NodeResult:
    call = call_id(node.tool_call_id)
    session = run_session(node.session_id)
    query, source = node_query(node)
    if not query:
        return NodeResult(NodeStatus.NEEDS_INPUT, "Say what to look up: give the task's query, "
                          "the intent's rag_keywords or the user's input.", call, session,
                          "", "", missing=("query",))
    targets, rule = select_datasets(readable, ids=node.target_dataset_ids,
                                    name=node.target_dataset_name)
    if not targets:
        return NodeResult(NodeStatus.NO_KNOWLEDGE_BASE, NO_KNOWLEDGE_BASE_TEXT, call, session,
                          query, source, selected_by=rule)
    names = (node.agent, *node.sub_agents)
    agent = rag_agent_named(tenant_id=tenant_id, names=names)
    delegated = agent.name if agent else rag_sub_agent(names)
    outcome = agentic_answer(
        filters=SearchFilters(tenant_id=tenant_id, dataset_ids=tuple(d.id for d in targets),
                              call=node.filters, access=access),
        query=query, tool_call_id=call, session_id=session,
        overrides=agent.overrides() if agent else None)
    by = "rag_agent" if agent else "rag_word" if delegated else ""
    return NodeResult(NodeStatus(outcome.status.value), _text(outcome), call, session, query,
                      source, targets, rule, delegated, by, outcome=outcome)


def _text(outcome: AgenticOutcome) -> str:
    if outcome.status is AnswerStatus.ANSWERED:
        return outcome.answer
    items = outcome.state.candidates.values()
    if items and outcome.status is not AnswerStatus.UNAVAILABLE:
        return (f"No answer was composed from the evidence found; the evidence ({LABEL}; "
                "cite a source by its id):\n"
                + sources_block((i["document_id"], i["title"], i["excerpt"]) for i in items))
    if outcome.status is AnswerStatus.UNAVAILABLE:
        return "The knowledge base is unavailable: retry later; this is not an empty result."
    if outcome.state.routes and outcome.state.routes[0]["route"] == Route.DIRECT.value:
        return "The question names nothing to look up in the knowledge base."
    return "Nothing relevant was found in the knowledge base."

