"""Text as the index and the query stages see it: the BM25 input (lower-cased, English words
stemmed), and the normalised form terms are matched in (`normalize_text`, `contains_term`).

Milvus tokenises `search_text` with jieba (Chinese words; English kept whole) and silently
ignores analyzer filters such as `lowercase` on Milvus Lite, so "Protein" and "proteins" would
be different terms. Normalising here, on both the indexed text and the query, makes them one
term on every Milvus. Only the BM25 input changes: agents read `content`, and the embedder
gets the raw text.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

import Stemmer

VERSION = "bm25-lower-snowball-en-v1"
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    # A PyStemmer object is not thread-safe: one per thread.
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def bm25_text(text: str) -> str:
    stem = _stemmer().stemWord
    return _WORD.sub(lambda match: stem(match.group(0).lower()), text)


# A one-character term ("a", "库") would match nearly every query.
MIN_TERM_CHARS = 2


def normalize_text(text: str) -> str:
    # NFKC folds full-width forms (Ｒｅｄｉｓ) that Chinese input methods produce.
    return unicodedata.normalize("NFKC", text).casefold()


@lru_cache(maxsize=4096)
def _term_pattern(term: str) -> re.Pattern[str]:
    # Latin/digit edges need a word boundary so "go" does not match "google" and "java" does
    # not match "javascript"; CJK has no spaces between words, so there a substring is used.
    head = r"(?<![0-9a-z_])" if re.match(r"[0-9a-z_]", term) else ""
    tail = r"(?![0-9a-z_])" if re.search(r"[0-9a-z_]$", term) else ""
    return re.compile(head + re.escape(term) + tail)


def contains_term(text: str, term: str) -> bool:
    """True when the normalized `term` (≥ 2 chars) occurs in the already normalized `text`."""
    return len(term) >= MIN_TERM_CHARS and _term_pattern(term).search(text) is not None
