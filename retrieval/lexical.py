"""What the query's own words find in a chunk's text: its identifiers and its terms.

The relevance gate reads a dense distance, and a dense distance is a weak witness twice:
an embedding knows little of an identifier (`0x5d09`, `ERROR 1040`, `MALLOC_ARENA_MAX`,
`pt-query-digest`, `v2.3`, `BurstBalance`, `C++`: terms whose meaning is their spelling), and
an off-topic question still has a nearest chunk. The chunk's text settles both: a chunk that
contains every identifier of the query is relevant whatever its distance, and a chunk that
shares none of the query's words needs a closer distance to count. Everything here is read
from the query and the chunk alone, never from index statistics (Milvus Lite's BM25 scores
are per segment), so one query is judged the same way on every collection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import jieba

from retrieval.analysis import bm25_text, contains_term, normalize_text

# A run of Latin letters, digits and the joiners identifiers use; CJK and spaces end it.
_RUN = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.+#:/\\-]*")
_EDGE = ".,:;/\\-"  # a sentence's trailing punctuation, not the term's ("v2.3." → "v2.3")
_JOINED = re.compile(r"[0-9A-Za-z][_.+#:/\\-]+[0-9A-Za-z+#]|\+\+$|#$")
_WORD = re.compile(r"[0-9a-z]+")
_CJK_RUN = re.compile(r"[\u3400-\u9fff]+")
_QUERY_WORD = re.compile(r"[0-9A-Za-z]+|[\u3400-\u9fff]")
MIN_IDENTIFIER_CHARS = 3
MIN_WORD_CHARS = 3
MIN_CJK_WORD_CHARS = 2  # one character ("库", "的") names no topic
# Question words and fillers: they say nothing about which runbook is meant.
_STOP_WORDS = frozenset(bm25_text(" ".join("""
    about after all also and any are because been before being both but can cannot could did
    does doing done during each every few for from get gets getting got had has have having
    her here his how into its just like make many more most much must not now off once only
    other our out over own same should some such than that the their them then there these
    they this those through too under until use used using very was way were what when where
    which while who whom why will with would you your yours
    """.split())).split())


def _is_identifier(term: str) -> bool:
    if len(term) < MIN_IDENTIFIER_CHARS:
        return False
    letters = sum(c.isalpha() for c in term)
    digits = sum(c.isdigit() for c in term)
    upper = sum(c.isupper() for c in term)
    return bool(
        (letters and digits)  # 0x5d09, v2, ext4, x86_64
        or (digits and not letters)  # 1040, 137, 3.12
        or _JOINED.search(term)  # MALLOC_ARENA_MAX, pt-query-digest, a.b.C, C++
        or 2 <= upper < letters  # BurstBalance, OOMKilled, MySQL
        or upper == letters  # SLOWLOG, PLEG
        or (term[0].islower() and upper))  # useEffect, iPhone


@lru_cache(maxsize=100_000)
def _stem(word: str) -> str:
    """One run of letters and digits as BM25 sees it (`bm25_text` of the run alone)."""
    return bm25_text(word)


def _stems(normalized: str) -> list[str]:
    """The text's Latin words stemmed as BM25 stems them, each once, first seen first."""
    return [_stem(w) for w in dict.fromkeys(_WORD.findall(normalized))]


def text_terms(normalized: str) -> frozenset[str]:
    """What `coverage` looks a query's terms up in: the text's Latin words as BM25 stems them,
    and every pair of adjacent CJK characters (a pair occurs in the text exactly when it is
    one of these)."""
    pairs = {run[i:i + 2] for run in _CJK_RUN.findall(normalized) for i in range(len(run) - 1)}
    return frozenset(_stems(normalized)) | pairs


def _terms(normalized: str) -> list[str]:
    """Latin words (stemmed, stop words out) and CJK character bigrams."""
    terms = [w for w in _stems(normalized) if len(w) >= MIN_WORD_CHARS and w not in _STOP_WORDS]
    for run in _CJK_RUN.findall(normalized):
        terms += [run[i:i + 2] for i in range(len(run) - 1)] or [run]
    return list(dict.fromkeys(terms))


@dataclass(frozen=True)
class QueryTerms:
    """A query's identifiers and content terms. The methods take the chunk's text already
    through `normalize_text` (one normalisation serves them all)."""

    identifiers: tuple[str, ...]  # as written, first seen first
    folded: tuple[str, ...]  # the identifiers through normalize_text
    terms: tuple[str, ...]  # normalized content terms, see _terms
    identifiers_only: bool  # every word of the query (Latin runs, CJK characters) is in one

    def identifiers_in(self, normalized: str) -> tuple[str, ...]:
        """The identifiers that occur in the text as whole terms (case folded)."""
        return tuple(t for t, f in zip(self.identifiers, self.folded, strict=True)
                     if contains_term(normalized, f))

    def coverage(self, normalized: str, terms: frozenset[str] | None = None) -> float:
        """The share of the query's content terms that occur in the text (0 when it has none);
        `terms`: the text's text_terms, when one text is read for many queries."""
        if not self.terms:
            return 0.0
        if terms is not None:
            return sum(t in terms for t in self.terms) / len(self.terms)
        stems = set(_stems(normalized))
        found = sum(contains_term(normalized, t) if _CJK_RUN.match(t) else t in stems
                    for t in self.terms)
        return found / len(self.terms)


def query_terms(query: str) -> QueryTerms:
    identifiers: list[str] = []
    for match in _RUN.finditer(query):
        term = match.group(0).rstrip(_EDGE)
        if _is_identifier(term) and term not in identifiers:
            identifiers.append(term)
    words = len(_QUERY_WORD.findall(query))
    in_identifiers = sum(len(_QUERY_WORD.findall(t)) for t in identifiers)
    return QueryTerms(identifiers=tuple(identifiers),
                      folded=tuple(normalize_text(t) for t in identifiers),
                      terms=tuple(_terms(normalize_text(query))),
                      identifiers_only=bool(words) and in_identifiers >= words)


def vocabulary_terms(query: str, texts: Sequence[str], *, limit: int) -> tuple[str, ...]:
    """The query's content words that the texts contain: Latin words compared by their BM25
    stem, Chinese words (jieba's, as BM25 cuts them) as substrings. Each as the query wrote it
    (normalized), first seen first, at most `limit`. A word no text contains is never
    returned: what this gives away of a query is vocabulary the texts already hold."""
    normalized = normalize_text(query)
    words = [(w, _stem(w)) for w in dict.fromkeys(_WORD.findall(normalized))]
    latin = [(w, s) for w, s in words if len(s) >= MIN_WORD_CHARS and s not in _STOP_WORDS]
    runs = _CJK_RUN.findall(normalized)
    if not (latin or runs) or not texts:
        return ()
    # Lower-cased, not NFKC-normalized: NFKC of ten chunks with CJK punctuation costs more than
    # a millisecond, and what it would fold (full-width Latin letters) is rare in documents.
    joined = "\n".join(texts).lower()
    found = [w for w, s in latin if _holds_stem(joined, s)]
    found += dict.fromkeys(w for run in runs for w in _chinese_words(run, joined))
    # Back in the query's order: "redis memory" and "memory redis" keep their first word first.
    order = {term: normalized.find(term) for term in found}
    return tuple(sorted(found, key=order.__getitem__)[:limit])


def _chinese_words(run: str, text: str) -> list[str]:
    """The words of a run of Chinese that `text` holds: jieba's words of the run (a topic
    reads "数据库", never the bigrams "数据, 据库"); a word the text does not hold whole gives
    the longest of its own words that it does, none overlapping ("主从复制" → "主从", "复制")."""
    found = []
    for word in jieba.lcut(run):
        if len(word) < MIN_CJK_WORD_CHARS:
            continue
        if word in text:
            found.append(word)
            continue
        parts = sorted((w for w in dict.fromkeys(jieba.lcut_for_search(word))
                        if MIN_CJK_WORD_CHARS <= len(w) < len(word) and w in text),
                       key=len, reverse=True)
        taken: list[tuple[int, int]] = []
        for part in parts:
            start = word.find(part)
            end = start + len(part)
            if all(end <= a or start >= b for a, b in taken):
                taken.append((start, end))
        found += [word[a:b] for a, b in sorted(taken)]
    return found


def _holds_stem(text: str, stem: str) -> bool:
    """A word of `text` stems to `stem`: str.find for the words that start like it, so no
    other word of the text is stemmed. Such a word starts with the stem, but for the final
    "i" Snowball makes of a "y" (memory → memori)."""
    head = stem[:-1] if stem.endswith("i") else stem
    start = text.find(head)
    while start >= 0:
        if start == 0 or not _WORD.match(text, start - 1):
            word = _WORD.match(text, start)
            if word is not None and _stem(word.group(0)) == stem:
                return True
        start = text.find(head, start + 1)
    return False
