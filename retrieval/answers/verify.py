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
from dataclasses import dataclass, replace

from audit.canonical import served_ready
from datasets.evidence import EvidenceKey
from datasets.selectors import chunk_contents, db_id, live_doc_ids
from retrieval.analysis import normalize_text
from retrieval.answers.answer import CITED, CITED_ID, MAX_SENTENCE_CHARS, SENTENCE_END
from retrieval.lexical import QueryTerms, query_terms, text_terms

SUPPORT = 0.6  # the share of a sentence's content terms one chunk must hold
MIN_TERMS = 2  # a sentence with fewer content terms (and no identifier) is not checked
MAX_SENTENCES = 100  # checked per answer; the rest are not
MAX_EVIDENCE = 200  # served chunks read per check: the latest served
SHOWN = 3  # supporting chunks named per sentence, best first
_SPACE_BEFORE_END = re.compile(r"\s+([.,;:!?。，；：！？])")  # where a marker was taken out
_NUMBER = re.compile(r"(?<![0-9a-z_.])[0-9]+(?:[.,:][0-9]+)*")  # a number of any length
_ABBREVIATION = re.compile(r"[a-z](?:\.[a-z])+\.?")  # e.g., i.e.: no identifier


@dataclass(frozen=True)
class CheckedSentence:
    text: str
    supported: bool
    support: float  # the best chunk's share of the sentence's content terms (0: none held)
    evidence: tuple[str, ...]  # served chunks that support it, best first
    cited: tuple[str, ...]  # the evidence ids it cites (`[docId#…]`)


@dataclass(frozen=True)
class Verification:
    sentences: tuple[CheckedSentence, ...]  # the checked ones, in the answer's order
    evidence: int  # served chunks the sentences were checked against
    skipped: int  # sentences too short or too long to judge, or past MAX_SENTENCES

    @property
    def unsupported(self) -> tuple[str, ...]:
        return tuple(s.text for s in self.sentences if not s.supported)


def served_texts(*, tenant_id: int, readable: list[int], tool_call_id: str = "",
                 session_id: str = "") -> dict[str, str]:
    """The text of each chunk served as READY to the call (or session) that this key may
    still read, the latest MAX_EVIDENCE: key → text."""
    ready = [item for item in served_ready(tenant_id=tenant_id, tool_call_id=tool_call_id,
                                           session_id=session_id)
             if item.dataset_id in readable]
    keys = [(key, db_id(key.doc_id)) for key in
            (EvidenceKey.parse(item.document_id) for item in ready) if key]
    live = live_doc_ids(tenant_id=tenant_id, dataset_ids=readable,
                        doc_ids={doc for _, doc in keys if doc is not None})
    texts = chunk_contents(keys=[(doc, key) for key, doc in keys
                                 if doc is not None and doc in live][-MAX_EVIDENCE:])
    return {str(key): text for key, text in texts.items()}


def verify(answer: str, served: dict[str, str]) -> Verification:
    """Each sentence of `answer` against the served chunks' texts."""
    chunks = [(key, normalized, text_terms(normalized))
              for key, normalized in ((k, normalize_text(t)) for k, t in served.items())]
    checked: list[CheckedSentence] = []
    skipped = 0
    for sentence in (s.strip() for s in SENTENCE_END.split(answer)):
        cited = tuple(dict.fromkeys(i for m in CITED.finditer(sentence)
                                    for i in CITED_ID.findall(m[0])))
        plain = " ".join(CITED.sub(" ", sentence).split())
        if not plain.strip(".,;:!?。，；：！？ "):
            if cited and checked:  # a marker after its sentence's end cites that sentence
                checked[-1] = _citing(checked[-1], cited)
            continue
        terms = query_terms(plain)
        if (len(checked) == MAX_SENTENCES or len(plain) > MAX_SENTENCE_CHARS
                or (len(terms.terms) < MIN_TERMS and not terms.identifiers)):
            skipped += 1
            continue
        needed = _needed(terms, normalize_text(plain))
        scores = sorted(((_support(terms, needed, normalized, known), key)
                         for key, normalized, known in chunks), reverse=True)
        best = scores[0][0] if scores else 0.0
        checked.append(CheckedSentence(
            text=_SPACE_BEFORE_END.sub(r"\1", plain), supported=best >= SUPPORT,
            support=round(best, 3),
            evidence=tuple(key for score, key in scores[:SHOWN] if score >= SUPPORT),
            cited=cited))
    return Verification(tuple(checked), len(chunks), skipped)


def _citing(sentence: CheckedSentence, cited: tuple[str, ...]) -> CheckedSentence:
    return replace(sentence, cited=tuple(dict.fromkeys((*sentence.cited, *cited))))


def _needed(terms: QueryTerms, normalized: str) -> tuple[re.Pattern[str], ...]:
    """What a supporting chunk must hold word for word: the sentence's identifiers
    (abbreviations such as `e.g.` aside) and every number in it, however short."""
    identifiers = [f for f in terms.folded if not _ABBREVIATION.fullmatch(f)]
    words = dict.fromkeys([*identifiers, *_NUMBER.findall(normalized)])
    return tuple(re.compile(rf"(?<![0-9a-z_.]){re.escape(w)}(?![0-9a-z_]|\.[0-9])")
                 for w in words)


def _support(terms: QueryTerms, needed: tuple[re.Pattern[str], ...], normalized: str,
             known: frozenset[str]) -> float:
    """How well one chunk supports a sentence: the share of its content terms the chunk holds
    (1 for a sentence of identifiers only), 0 when it lacks one of its identifiers or
    numbers."""
    if not all(word.search(normalized) for word in needed):
        return 0.0
    return terms.coverage(normalized, known) if terms.terms else 1.0
