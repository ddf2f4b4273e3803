"""verify_answer: which sentences of an agent's answer the evidence served to its call (or
session) supports, read from the words they share.

A sentence is supported by a served chunk that holds at least SUPPORT of its content terms
(Latin words as BM25 stems them, Chinese character pairs) and every identifier it names
(`0x5d09`, `ERROR 1040`): a number or a name the evidence does not hold is not supported,
however many other words match. A sentence with too few content terms to judge (a heading,
"Sources:") is not checked. Only evidence this key may read, of documents that may still be
served, supports anything: another tenant's call supports nothing, as one never made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from audit.canonical import served_ready
from datasets.evidence import EvidenceKey
from datasets.selectors import chunk_contents, db_id, live_doc_ids
from retrieval.analysis import normalize_text
from retrieval.lexical import QueryTerms, query_terms, text_stems

SUPPORT = 0.6  # the share of a sentence's content terms one chunk must hold
MIN_TERMS = 2  # a sentence with fewer content terms (and no identifier) is not checked
MAX_SENTENCES = 100  # checked per answer; the rest are not
MAX_EVIDENCE = 200  # served chunks read per check (a session's first served first)
SHOWN = 3  # supporting chunks named per sentence, best first
_CITATION = re.compile(rf"\[({EvidenceKey.IN_TEXT})\]")
# After a sentence's end (CJK punctuation, or Latin punctuation before a space) or a line.
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+|\n+")
_SPACE_BEFORE_END = re.compile(r"\s+([.,;:!?。，；：！？])")  # where a marker was taken out


@dataclass(frozen=True)
class CheckedSentence:
    text: str
    supported: bool
    support: float  # the best chunk's share of the sentence's content terms (0: none held)
    evidence: tuple[str, ...]  # served chunks that support it, best first
    cited: tuple[str, ...]  # the ids it cites (`[docId#chunk-n]`)


@dataclass(frozen=True)
class Verification:
    sentences: tuple[CheckedSentence, ...]  # the checked ones, in the answer's order
    evidence: int  # served chunks the sentences were checked against
    skipped: int  # sentences too short to judge, or past MAX_SENTENCES

    @property
    def unsupported(self) -> tuple[str, ...]:
        return tuple(s.text for s in self.sentences if not s.supported)


def served_texts(*, tenant_id: int, readable: list[int], tool_call_id: str = "",
                 session_id: str = "") -> dict[str, str]:
    """The text of each chunk served as READY to the call (or session) that this key may
    still read: key → text, first served first."""
    ready = [item for item in served_ready(tenant_id=tenant_id, tool_call_id=tool_call_id,
                                           session_id=session_id)
             if item.dataset_id in readable][:MAX_EVIDENCE]
    keys = [(key, db_id(key.doc_id)) for key in
            (EvidenceKey.parse(item.document_id) for item in ready) if key]
    live = live_doc_ids(tenant_id=tenant_id, dataset_ids=readable,
                        doc_ids={doc for _, doc in keys if doc is not None})
    pairs = [(doc, key.chunk_index) for key, doc in keys if doc in live]
    texts = chunk_contents(doc_chunks=pairs)
    return {str(EvidenceKey(str(doc), index)): texts[doc, index]
            for doc, index in pairs if (doc, index) in texts}


def verify(answer: str, served: dict[str, str]) -> Verification:
    """Each sentence of `answer` against the served chunks' texts."""
    chunks = [(key, normalized, text_stems(normalized))
              for key, normalized in ((k, normalize_text(t)) for k, t in served.items())]
    checked: list[CheckedSentence] = []
    skipped = 0
    for sentence in (s.strip() for s in _SENTENCE_END.split(answer)):
        if not sentence:
            continue
        cited = tuple(dict.fromkeys(_CITATION.findall(sentence)))
        plain = _CITATION.sub(" ", sentence)
        terms = query_terms(plain)
        if len(checked) == MAX_SENTENCES or (len(terms.terms) < MIN_TERMS
                                             and not terms.identifiers):
            skipped += 1
            continue
        scores = sorted(((_support(terms, normalized, stems), key)
                         for key, normalized, stems in chunks), reverse=True)
        best = scores[0][0] if scores else 0.0
        checked.append(CheckedSentence(
            text=_SPACE_BEFORE_END.sub(r"\1", " ".join(plain.split())),
            supported=best >= SUPPORT, support=round(best, 3),
            evidence=tuple(key for score, key in scores[:SHOWN] if score >= SUPPORT),
            cited=cited))
    return Verification(tuple(checked), len(chunks), skipped)


def _support(terms: QueryTerms, normalized: str, stems: frozenset[str]) -> float:
    """How well one chunk supports a sentence: the share of its content terms the chunk holds
    (1 for a sentence of identifiers only), 0 when it lacks one of its identifiers."""
    if len(terms.identifiers_in(normalized)) < len(terms.identifiers):
        return 0.0
    return terms.coverage(normalized, stems) if terms.terms else 1.0
