"""The local model's server (kbplatform/processes.py LocalModelServer): it loads only the file
its sha256 names, and, with the real pinned model, answers the chat client of the LLM stages
through the outbound policy."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from kbplatform.local_model import MODEL_ALIAS, configured_file
from kbplatform.processes import LocalModelServer, UnverifiedModel, free_port, port_open


def test_a_model_file_that_is_not_the_pinned_one_is_never_loaded(tmp_path: Path) -> None:
    """The server is not even started: the file is checked against its sha256 first."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    pinned = hashlib.sha256(model.read_bytes()).hexdigest()
    with model.open("r+b") as tampered:  # one byte changed, the size kept
        tampered.seek(100)
        tampered.write(b"\xff")
    port = free_port()
    server = LocalModelServer(model, pinned, port, tmp_path / "server.log", threads=1)

    with pytest.raises(UnverifiedModel, match=f"not the pinned {pinned}: it is not loaded"):
        server.start()

    assert server.process is None and not (tmp_path / "server.log").exists()
    assert not port_open("127.0.0.1", port)
    with pytest.raises(UnverifiedModel, match="does not exist"):
        LocalModelServer(tmp_path / "gone.gguf", pinned, port, tmp_path / "server.log",
                         threads=1).start()


@pytest.mark.integration  # once per run: it loads the real model (0.5 GB, its CPU threads)
@pytest.mark.timeout(300)
def test_the_local_model_server_answers_a_chat_completion_through_the_outbound_policy(
        tmp_path: Path, settings: Any) -> None:
    """The pinned model (scripts/local-model.sh put it in KB_LOCAL_MODEL_DIR), served as the
    demo serves it, translates a question for the chat client of the LLM stages."""
    from retrieval.chat import UNREACHABLE, ChatModelError, OpenAIChatModel

    model, sha256 = configured_file()
    if not model.is_file():
        pytest.fail(f"the local model is not in {model.parent}: bash scripts/local-model.sh "
                    "(and KB_LOCAL_MODEL_DIR as it had)")
    server = LocalModelServer(model, sha256, free_port(), tmp_path / "server.log",
                              threads=settings.KB_LOCAL_MODEL_THREADS)
    began = time.monotonic()
    server.start()
    try:
        loaded = time.monotonic() - began
        client = OpenAIChatModel(base_url=server.url, api_key="", model=MODEL_ALIAS,
                                 timeout_s=60, max_tokens=48)
        question = [{"role": "system", "content": "Translate the user's text into English. "
                                                  "Reply with the translation only."},
                    {"role": "user", "content": "Redis 内存满了怎么办"}]
        settings.KB_OUTBOUND_ALLOWED_HOSTS = []
        with pytest.raises(ChatModelError, match=UNREACHABLE):  # loopback: refused unless named
            client.complete(question, timeout_s=60)
        settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{server.port}"]

        began = time.monotonic()
        reply = client.complete(question, timeout_s=60)
        answered = time.monotonic() - began
    finally:
        server.stop()
    print(f"local model {model.name}: ready in {loaded:.1f} s, answered in {answered:.1f} s: "
          f"{reply.text!r}")
    assert "redis" in reply.text.lower() and "memory" in reply.text.lower()
    assert reply.completion_tokens > 0 and reply.model == MODEL_ALIAS
    assert not port_open("127.0.0.1", server.port)
