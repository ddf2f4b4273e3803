"""A real local HTTP server speaking the OpenAI chat-completions protocol, scripted for tests.

`POST /v1/chat/completions {model, messages, ...}` → a `chat.completion` object with usage.
By default it answers like a careful model, as the JSON each stage asks for: a judge with a
good grade, a query transform with the question itself, an answer with the first sentence of
the first source in the prompt, citing that source's id; a translator with the translation
TRANSLATIONS holds for the question (another question comes back as it was asked). `reply`
replaces that script; `behaviour` switches to one of a model endpoint's failure modes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from retrieval.answers.agentic_plan import SYSTEM_PROMPT as PLAN_PROMPT
from retrieval.lookup.graph.model_judge import SYSTEM_PROMPT as JUDGE_PROMPT
from retrieval.lookup.graph.query_transform import decompose
from retrieval.lookup.graph.translate import SYSTEM_PROMPT as TRANSLATE_PROMPT
from tests.retrieval.scripted_server import ScriptedServer, serving

_QUESTION = re.compile(r"<question>\n(.*?)\n</question>", re.DOTALL)
_SOURCE = re.compile(r'<source id="([^"]+)"[^>]*>\n(.*?)\n</source>', re.DOTALL)


# What the scripted translator knows: the tests' questions in the other language, as a person
# would translate them.
TRANSLATIONS = {
    "消费组的积压一直在涨，消息处理不过来":
        "The consumer group's backlog keeps growing and the messages cannot be processed "
        "in time",
    "缓存的内存满了，写入失败怎么办": "The cache's memory is full and writes fail: what to do",
    "redis writes fail with OOM command not allowed":
        "redis 写入失败，提示 OOM command not allowed",
}


def careful_reply(body: dict[str, Any]) -> str:
    """A judge: the evidence answers (0.9). The agentic plan: the question split as the rules
    split it. A query transform: the question as the one query. A translation: TRANSLATIONS'.
    An answer: the first sentence of the first source, citing it; not answerable without
    sources."""
    content = body["messages"][-1]["content"]
    question = _QUESTION.search(content)
    if asks_to_translate(body) and question:
        return TRANSLATIONS.get(question.group(1), question.group(1))
    if asks_to_judge(body):
        return json.dumps({"score": 0.9, "reason": "the evidence answers the question",
                           "better_query": ""})
    if question and body["messages"][0]["content"] == PLAN_PROMPT:  # split as the rules do
        return json.dumps({"queries": list(decompose(question.group(1)))}, ensure_ascii=False)
    if question and "<sources>" not in content:  # a query transform
        return json.dumps({"queries": [question.group(1)]}, ensure_ascii=False)
    found = _SOURCE.findall(content)
    if not found:
        return json.dumps({"answerable": False, "answer": "", "citations": []})
    document_id, text = found[0]
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    sentence = re.split(r"(?<=[.。!?])\s", lines[0] if lines else text)[0]
    return json.dumps({"answerable": True, "answer": f"{sentence} [{document_id}]",
                       "citations": [document_id]}, ensure_ascii=False)


def asks_to_judge(body: dict[str, Any]) -> bool:
    """Whether the request is the quality judge's (by its system message: the answer's prompt
    quotes a question and sources too)."""
    return bool(body["messages"]) and body["messages"][0]["content"] == JUDGE_PROMPT


def asks_to_translate(body: dict[str, Any]) -> bool:
    """Whether the request is the translation stage's (by its system message)."""
    return bool(body["messages"]) and body["messages"][0]["content"] == TRANSLATE_PROMPT


class ChatServer(ScriptedServer):
    def __init__(self) -> None:
        super().__init__()
        # A str is the message's content; a dict the whole message (e.g. with tool_calls).
        self.reply: Callable[[dict[str, Any]], str | dict[str, Any]] = careful_reply
        self.behaviour = "ok"  # ok | slow | 401 | 500 | not_json | html
        self.delay_s = 3.0

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        if self.behaviour == "slow":
            time.sleep(self.delay_s)
        if self.behaviour == "401":
            return 401, b'{"error": {"message": "invalid api key", "type": "auth"}}'
        if self.behaviour == "500":
            return 500, b'{"error": {"message": "boom"}}'
        if self.behaviour == "html":
            return 200, b"<html>gateway</html>"
        reply = "Sure! The answer is 42." if self.behaviour == "not_json" else self.reply(body)
        message = {"role": "assistant", **reply} if isinstance(reply, dict) \
            else {"role": "assistant", "content": reply}
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
        completion_tokens = len(str(message.get("content") or "").split())
        return 200, json.dumps({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
            "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }).encode()


def chat_server(*, allowed: bool = True) -> AbstractContextManager[ChatServer]:
    return serving(ChatServer(), allowed=allowed)
