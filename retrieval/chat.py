"""The chat model behind the LLM stages: any OpenAI-compatible `/v1/chat/completions` endpoint.

One port, `ChatModel.complete`, through the `openai` client. Every failure — a refused key, no
answer in time, an HTTP error, a reply that is not the JSON asked for — raises ChatModelError
with a reason a person can act on (never the key); the stage that called it falls back or
answers UNAVAILABLE, never with a silent empty answer. Each reply carries its token counts for
the audit. The timeout bounds each wait on the server (the client's own): a server that
trickles bytes could hold one call longer. Every request goes through the outbound policy
(kbplatform/outbound.py): an address it refuses, a name that does not resolve, a closed port
and a failed TLS handshake are one and the same "could not be reached", so the message maps
no ports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import httpx2
from django.conf import settings

from kbplatform import outbound

UNREACHABLE = "the chat model could not be reached"  # whatever stopped the connection
# What one reply may hold: a stage asks for a few hundred tokens, never a book.
MAX_REPLY_CHARS = 32_000


class ChatModelError(RuntimeError):
    """The chat model failed; the message names why (never the key)."""


@dataclass(frozen=True)
class ChatReply:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int

    def usage(self) -> dict[str, Any]:
        return {"model": self.model, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


class ChatModel(Protocol):
    name: str
    endpoint: str  # the base URL it calls ("" for none): what tells two models apart

    def complete(self, messages: Sequence[Mapping[str, str]], *, timeout_s: float,
                 json_object: bool = False, max_tokens: int | None = None) -> ChatReply: ...


class OpenAIChatModel:
    def __init__(self, *, base_url: str, api_key: str, model: str, timeout_s: float,
                 max_tokens: int) -> None:
        from openai import OpenAI

        # No retries inside the client: the stage's deadline is the caller's to spend.
        try:
            self._client: OpenAI | None = OpenAI(
                base_url=base_url, api_key=api_key or "unused", timeout=timeout_s,
                max_retries=0, http_client=outbound.client())
        except httpx2.InvalidURL:  # e.g. 0177.0.0.1, which httpx does not read: unreachable
            self._client = None
        self.model = model
        self.name = f"openai/{model}"
        self.endpoint = base_url
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    def complete(self, messages: Sequence[Mapping[str, str]], *, timeout_s: float,
                 json_object: bool = False, max_tokens: int | None = None) -> ChatReply:
        """`max_tokens`: a stage's own bound on the reply, within the model's."""
        import openai

        timeout = max(min(self.timeout_s, timeout_s), 0.001)
        tokens = self.max_tokens if max_tokens is None else max(min(self.max_tokens,
                                                                   max_tokens), 1)
        extra: dict[str, Any] = {"response_format": {"type": "json_object"}} if json_object \
            else {}
        if self._client is None:
            raise ChatModelError(UNREACHABLE)
        try:
            with outbound.deadline(timeout):  # in total: a trickled answer is cut there too
                response = self._client.chat.completions.create(
                    model=self.model, messages=[dict(m) for m in messages],  # type: ignore[misc]
                    max_tokens=tokens, temperature=0, timeout=timeout, **extra)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ChatModelError(f"the chat model refused the API key ({exc.status_code})") \
                from None
        except openai.APITimeoutError:
            raise ChatModelError(f"the chat model did not answer within {timeout:.2f} s") \
                from None
        except openai.APIStatusError as exc:
            raise ChatModelError(f"the chat model answered HTTP {exc.status_code}") from None
        except openai.APIConnectionError:
            raise ChatModelError(UNREACHABLE) from None
        except (openai.OpenAIError, ValueError) as exc:  # a body that is not a completion
            raise ChatModelError(f"the chat model's answer is malformed: "
                                 f"{type(exc).__name__}") from None
        try:
            text = response.choices[0].message.content
            usage = response.usage
            prompt_tokens = int(usage.prompt_tokens) if usage else 0
            completion_tokens = int(usage.completion_tokens) if usage else 0
        except (AttributeError, IndexError, TypeError, ValueError):
            raise ChatModelError("the chat model's answer is not a chat completion") from None
        if not isinstance(text, str):
            raise ChatModelError("the chat model's answer has no message content")
        if len(text) > MAX_REPLY_CHARS:
            raise ChatModelError(f"the chat model's answer is over {MAX_REPLY_CHARS} characters")
        return ChatReply(text=text, model=str(response.model or self.model),
                         prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def json_reply(reply: ChatReply) -> dict[str, Any]:
    """The reply's JSON object; ChatModelError when it is not one."""
    text = reply.text.strip()
    if text.startswith("```"):  # some models fence JSON even when asked for an object
        text = text.strip("`").removeprefix("json").strip()
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: thousands of nested brackets
        raise ChatModelError("the chat model's answer is not JSON") from None
    if not isinstance(payload, dict):
        raise ChatModelError("the chat model's answer is not a JSON object")
    return payload


def configured_chat_model() -> ChatModel | None:
    """The model of KB_CHAT_BASE_URL, or None: the stages then use their offline fallbacks."""
    return chat_model_for({})


def chat_model_for(config: Mapping[str, Any]) -> ChatModel | None:
    """The chat model of a lookup's config (RagConfig's chat_* values, "" or 0 taking the
    KB_CHAT_* settings), or None when neither names an endpoint.

    A tenant's own endpoint is sent only the key its chat_api_key_env names, never the
    platform's KB_CHAT_API_KEY. A named variable that is not set is a model that fails each
    call with that reason: the stage falls back or answers UNAVAILABLE, as for a refused key.
    One client (and connection pool) per process and configuration.
    """
    own_url = config.get("chat_base_url") or ""
    base_url = own_url or settings.KB_CHAT_BASE_URL
    if not base_url:
        return None
    key_env = config.get("chat_api_key_env") or ""
    if key_env and key_env not in os.environ:
        return _Misconfigured(f"the chat model's key variable {key_env} is not set")
    api_key = os.environ[key_env] if key_env else "" if own_url else settings.KB_CHAT_API_KEY
    return _chat_model(base_url, api_key, config.get("chat_model") or settings.KB_CHAT_MODEL,
                       float(config.get("chat_timeout_seconds") or
                             settings.KB_CHAT_TIMEOUT_SECONDS),
                       int(config.get("chat_max_tokens") or settings.KB_CHAT_MAX_TOKENS))


# The local model answers translations only (a question's length, not an answer's).
LOCAL_MODEL_MAX_TOKENS = 256


def translation_model_for(config: Mapping[str, Any]) -> ChatModel | None:
    """The model that translates a lookup's question (docs/retrieval-graph.md, "The other
    language"): the config's or the deployment's chat model when one is configured, else the
    local model the deployment runs (KB_LOCAL_MODEL_URL), else None."""
    configured = chat_model_for(config)
    if configured is not None:
        return configured
    if not settings.KB_LOCAL_MODEL_URL:
        return None
    return _chat_model(settings.KB_LOCAL_MODEL_URL, "", "local",
                       float(settings.KB_LOCAL_MODEL_TIMEOUT_SECONDS), LOCAL_MODEL_MAX_TOKENS)


class _Misconfigured:
    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.name = "misconfigured"
        self.endpoint = ""

    def complete(self, messages: Sequence[Mapping[str, str]], *, timeout_s: float,
                 json_object: bool = False, max_tokens: int | None = None) -> ChatReply:
        raise ChatModelError(self.reason)


@lru_cache(maxsize=16)
def _chat_model(base_url: str, api_key: str, model: str, timeout_s: float,
                max_tokens: int) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=base_url, api_key=api_key, model=model,
                           timeout_s=timeout_s, max_tokens=max_tokens)
