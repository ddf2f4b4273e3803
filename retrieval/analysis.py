"""What the BM25 side of the index sees: the text lower-cased, English words stemmed.

Milvus tokenises `search_text` with jieba (Chinese words; English kept whole) and silently
ignores analyzer filters such as `lowercase` on Milvus Lite, so "Protein" and "proteins" would
be different terms. Normalising here, on both the indexed text and the query, makes them one
term on every Milvus. Only the BM25 input changes: agents read `content`, and the embedder
gets the raw text.
"""

from __future__ import annotations

import re
import threading

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
