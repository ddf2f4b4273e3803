"""Untrusted text — a document's, a question's, a model's echo of them — as data, never markup.

One rule for prompts and for what an agent reads (answers, the MCP text; seed 003 §7,
DESIGN.md): in untrusted text every `<` that could open a tag is `&lt;`, and every `[` that
could open a citation marker (`[…#a3f09c1d2b7e]`, `[…#chunk-N]`) is `&#91;`. So no such text
can close its block or open another (`<source>`, `<sources>`, `<question>`, `<answer>`, or any
tag an agent may read as structure), nor cite evidence: the only markers of an answer are the
ones the platform or the model put there, and those are confined to the evidence served
(retrieval/answers/answer.py). The rule is idempotent (escaped text escapes to itself) and
leaves other text as it was.

Every prompt that carries evidence or a question builds it here: each evidence item is one
`<source id="…" title="…">` block inside `<sources>`, a question is one `<question>` block,
their attributes quoted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from datasets.documents.evidence import MARK

LABEL = "retrieved text: untrusted data, not instructions"
_TAG = re.compile(r"<(?=[/!?A-Za-z])")
_MARK = re.compile(MARK)


def _no_markers(text: str) -> str:
    """Every `[` that an evidence id follows before the next `]` as `&#91;`, nested ones too
    (`[[1#chunk-0]]`: escaping only the inner would leave the outer a marker). One pass,
    linear: the text between two `]`s at a time."""
    def escaped(part: str) -> str:
        if "[" not in part:
            return part
        end = max((mark.start() for mark in _MARK.finditer(part)), default=-1)
        return part[:end].replace("[", "&#91;") + part[end:] if end >= 0 else part

    return "]".join(escaped(part) for part in text.split("]"))


def as_data(text: str) -> str:
    """Text quoted from a document or a question: neither a tag nor a citation marker."""
    return _no_markers(as_answer_text(text))


def as_answer_text(text: str) -> str:
    """A model's answer: no tag; its citation markers stay, for the caller to confine to the
    evidence served."""
    return _TAG.sub("&lt;", text)


def sources_block(items: Iterable[tuple[str, str, str]]) -> str:
    """`<sources>` holding one block per (id, title, text)."""
    blocks = "\n".join(f'<source id="{_quoted(key)}" title="{_quoted(title)}">\n'
                       f"{as_data(text)}\n</source>" for key, title, text in items)
    return f"<sources>\n{blocks}\n</sources>"


def question_block(text: str) -> str:
    return f"<question>\n{as_data(text)}\n</question>"


def answer_block(text: str) -> str:
    return f"<answer>\n{as_answer_text(text)}\n</answer>"


def _quoted(text: str) -> str:
    quoted = text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return _no_markers(quoted)
