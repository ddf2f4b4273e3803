"""The one chat-model door: which model translates a lookup's question, and a stage's own bound
on the length of a reply."""

from __future__ import annotations

from typing import Any

from retrieval.chat import OpenAIChatModel, translation_model_for
from tests.retrieval.chat_server import chat_server


def test_the_configured_chat_model_translates_else_the_local_model_else_none(
        settings: Any) -> None:
    settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", ""
    assert translation_model_for({}) is None
    settings.KB_LOCAL_MODEL_URL, settings.KB_LOCAL_MODEL_TIMEOUT_SECONDS = \
        "http://127.0.0.1:8091/v1", 7
    local = translation_model_for({})
    assert isinstance(local, OpenAIChatModel)
    assert (local.name, local.endpoint, local.timeout_s) == (
        "openai/local", "http://127.0.0.1:8091/v1", 7.0)
    settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = "https://llm.example.com/v1", "big"
    platform = translation_model_for({})
    assert platform is not None
    assert (platform.name, platform.endpoint) == ("openai/big", "https://llm.example.com/v1")
    own = translation_model_for({"chat_base_url": "https://own.example.com/v1",
                                 "chat_model": "tenant-model"})
    assert own is not None
    assert (own.name, own.endpoint) == ("openai/tenant-model", "https://own.example.com/v1")


def test_a_stage_may_ask_for_a_shorter_reply_never_a_longer_one() -> None:
    with chat_server() as server:
        model = OpenAIChatModel(base_url=server.url, api_key="", model="m", timeout_s=5,
                                max_tokens=100)
        for asked in (None, 30, 500):
            model.complete([{"role": "user", "content": "hi"}], timeout_s=5, max_tokens=asked)
    assert [r["max_tokens"] for r in server.requests] == [100, 30, 100]
