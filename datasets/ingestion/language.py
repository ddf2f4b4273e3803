"""Which of the platform's two languages a text is written in: Chinese or English.

One rule for a document (known at ingestion, so that a lookup knows which languages the
datasets it searches hold) and for a question (which way to translate it). A Chinese writer
keeps product names, commands and error codes in English, so a text is Chinese when it has at
least as many CJK characters as Latin words; code (fenced blocks, inline code) and URLs are
left out, as they are written in neither language.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Language(StrEnum):
    ZH = "zh"
    EN = "en"


UNKNOWN = ""  # no letter of either language: a file not converted yet, digits, punctuation

_FENCES = ("```", "~~~")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_URL = re.compile(r"\bhttps?://\S+")
# The unified ideographs, extension A and the compatibility block: what jieba segments.
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")


def script_counts(text: str) -> tuple[int, int]:
    """(CJK characters, Latin words) of the text's prose: code and URLs left out."""
    prose = _URL.sub(" ", _INLINE_CODE.sub(" ", _unfenced(text)))
    return len(_CJK.findall(prose)), len(_LATIN_WORD.findall(prose))


def _unfenced(text: str) -> str:
    """The text without its fenced code blocks (one left open runs to the end), read line by
    line: linear in the text, whatever it holds (an upload may be 2 MB of backticks)."""
    kept: list[str] = []
    fence = ""
    for line in text.splitlines():
        head = line.lstrip()[:3]
        if head in _FENCES and head == (fence or head):
            fence = "" if fence else head
        elif not fence:
            kept.append(line)
    return "\n".join(kept)


def text_language(text: str) -> str:
    """Language.ZH or Language.EN (their values), or UNKNOWN when the text has no letter of
    either."""
    chinese, english = script_counts(text)
    if not chinese and not english:
        return UNKNOWN
    return Language.ZH.value if chinese >= english else Language.EN.value


def other_language(language: str) -> str:
    """The language a question in `language` is translated into; UNKNOWN for UNKNOWN."""
    if language == Language.ZH:
        return Language.EN.value
    if language == Language.EN:
        return Language.ZH.value
    return UNKNOWN
