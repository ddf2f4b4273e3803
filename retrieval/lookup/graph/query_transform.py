"""Query transformation without a model (seed 003 §3): REWRITE, EXPAND, DECOMPOSE, MULTI_QUERY.

Deterministic rules on the query and the L0 index (the documents' frontmatter), so that a
lookup transforms the same query the same way every time. The LLM-backed strategies of the
answers issue implement the same port (retrieval/lookup/graph/ports.py).

- REWRITE strips the words of asking (请问, 怎么办, "how do I", "please") that carry no topic;
  identifiers, codes and versions are kept exactly.
- EXPAND adds the frontmatter keywords of the domains the query matched, and the other
  language's word for the ops terms it contains (超时 ⇄ timeout).
- DECOMPOSE searches each sub-question: split on question marks, semicolons and conjunctions.
- MULTI_QUERY searches the original, rewritten and expanded queries; the aggregation stage
  fuses their results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from audit.privacy import audited_text
from retrieval.analysis import contains_term, normalize_text
from retrieval.lookup.transform import L0Index
from retrieval.types import QueryHints

MAX_QUERIES = 4  # each one is an embedding and a search per retriever
MAX_ADDED_TERMS = 8
MIN_PART_CHARS = 2

# Words of asking, not of the topic. Longest first, so that 怎么办 goes before 怎么.
_ZH_FILLER = sorted((
    "请问 请帮我 帮我 我想知道 想知道 能不能 可以 怎么办 怎么处理 "
    "如何处理 怎么解决 如何解决 怎么排查 如何排查 该怎么 应该 怎么 如何 "
    "为什么 是什么 什么 一下 吗 呢 吧 啊"
).split(), key=len, reverse=True)
_EN_FILLER = frozenset((
    "how", "do", "does", "did", "i", "we", "you", "can", "could", "should", "would", "what",
    "why", "is", "are", "was", "the", "a", "an", "to", "please", "tell", "me", "about",
    "there", "any", "way", "it", "my", "our",
))
_EDGE_PUNCTUATION = "?？!！,，。.:：;；"

# Ops vocabulary both ways: Chinese runbooks are searched in English and the other way round.
_SYNONYMS: tuple[tuple[str, str], ...] = (
    ("超时", "timeout"), ("延迟", "latency"), ("内存", "memory"), ("磁盘", "disk"),
    ("连接", "connection"), ("证书", "certificate"), ("过期", "expired"), ("慢查询", "slow query"),
    ("死锁", "deadlock"), ("索引", "index"), ("主从", "replication"), ("重启", "restart"),
    ("日志", "log"), ("告警", "alert"), ("集群", "cluster"), ("缓存", "cache"),
    ("数据库", "database"), ("网络", "network"), ("丢包", "packet loss"), ("线程", "thread"),
    ("堆", "heap"), ("垃圾回收", "garbage collection"), ("消费者", "consumer"), ("积压", "backlog"),
    ("权限", "permission"), ("配置", "configuration"), ("扩容", "scale out"), ("崩溃", "crash"),
)

_SENTENCES = re.compile(r"[?？;；。!！\n]+")
_ZH_CONJUNCTIONS = re.compile(r"(?:并且|而且|以及|同时|另外|此外|还有)")
_EN_CONJUNCTIONS = re.compile(r"\b(?:and also|and then|as well as|additionally|also)\b", re.I)
_EN_AND = re.compile(r"\band\b", re.I)


@dataclass(frozen=True)
class TransformedQuery:
    queries: tuple[str, ...]
    note: str


def rewrite(query: str) -> str:
    """The query without the words of asking; the original when nothing would be left."""
    text = query
    for filler in _ZH_FILLER:
        text = text.replace(filler, " ")
    # Whitespace-separated words: an identifier (0x5d09, v2.3, ERR_X) is one and stays whole.
    words = (w.strip(_EDGE_PUNCTUATION) for w in text.split())
    out = " ".join(w for w in words if w and w.lower() not in _EN_FILLER)
    return out if len(out) >= MIN_PART_CHARS else query.strip()


def expansion_terms(query: str, hints: QueryHints, index: L0Index) -> tuple[str, ...]:
    """Terms to add: the matched domains' keywords, then translations of the ops terms."""
    text = normalize_text(query)
    added: dict[str, str] = {}
    candidates = list(index.domain_keywords(hints.domains))
    for zh, en in _SYNONYMS:
        if zh in text:
            candidates.append(en)
        elif contains_term(text, en):
            candidates.append(zh)
    for term in candidates:
        key = normalize_text(term)
        if key not in added and not contains_term(text, key) and key not in text:
            added[key] = term
    return tuple(added.values())[:MAX_ADDED_TERMS]


def decompose(query: str) -> tuple[str, ...]:
    """Sub-questions: split on sentence ends and conjunctions (an "and" only between clauses
    of three words or more: "Redis and MySQL" stays one question)."""
    parts: list[str] = []
    for sentence in _SENTENCES.split(query):
        for piece in _EN_CONJUNCTIONS.split(_ZH_CONJUNCTIONS.sub("\n", sentence)):
            for clause in piece.split("\n"):
                parts += _split_and(clause)
    kept = list(dict.fromkeys(p.strip(" ,，、") for p in parts
                              if len(p.strip(" ,，、")) >= MIN_PART_CHARS))
    return tuple(kept[:MAX_QUERIES]) if len(kept) > 1 else (query.strip(),)


def _split_and(clause: str) -> list[str]:
    pieces = _EN_AND.split(clause)
    if len(pieces) > 1 and all(len(p.split()) >= 3 for p in pieces):
        return pieces
    return [clause]


class DeterministicQueryTransformer:
    """One strategy, configured once; `transform` is pure."""

    def __init__(self, strategy: str, index: L0Index) -> None:
        if strategy not in ("REWRITE", "EXPAND", "DECOMPOSE", "MULTI_QUERY"):
            raise ValueError(f"unknown query transform strategy {strategy!r}")
        self.strategy = strategy
        self.index = index

    def transform(self, query: str, hints: QueryHints, *,
                  timeout_s: float | None = None) -> TransformedQuery:
        if self.strategy == "REWRITE":
            rewritten = rewrite(query)
            # The trace is audited: the rewrite is worded as the question would be.
            return TransformedQuery((rewritten,), f"rewritten to {audited_text(rewritten)}")
        if self.strategy == "DECOMPOSE":
            parts = decompose(query)
            return TransformedQuery(parts, f"{len(parts)} sub-question(s)")
        terms = expansion_terms(query, hints, self.index)
        expanded = " ".join((query.strip(), *terms))
        if self.strategy == "EXPAND":
            return TransformedQuery((expanded,), f"added {list(terms)}")
        queries = tuple(dict.fromkeys((query.strip(), rewrite(query), expanded)))
        return TransformedQuery(queries[:MAX_QUERIES], f"added {list(terms)}")
