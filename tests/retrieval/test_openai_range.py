"""The chat and embedding clients work with every openai release pyproject.toml admits: the
oldest (unpacked by scripts/lower-bounds.sh) and the installed one. Before 3.0 the client took
an httpx client, not the httpx2 one kbplatform/outbound.py hands it, and refused it (issue 36:
`openai>=1.50` admitted those releases)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.retrieval.scripted_server import ScriptedServer, serving

LOWER_BOUNDS = Path(os.environ.get("KB_TEST_LOWER_BOUNDS", ROOT / ".lower-bounds"))

# Both clients, through the outbound policy, as a deployment's settings build them.
CLIENTS = """
import django, json, sys
django.setup()
import openai
from retrieval.chat import OpenAIChatModel
from retrieval.index.embedders import OpenAIEmbedder
url = sys.argv[1]
chat = OpenAIChatModel(base_url=url, api_key="sk-test", model="m", timeout_s=5, max_tokens=50)
reply = chat.complete([{"role": "user", "content": "ping"}], timeout_s=5)
embedder = OpenAIEmbedder(base_url=url, api_key="sk-test", model="e", dimensions=0,
                          batch_size=10, timeout=5)
print(json.dumps({"version": openai.__version__, "reply": reply.text,
                  "vectors": embedder.embed_documents(["a", "b"])}))
"""


class OpenAIServer(ScriptedServer):
    """Chat completions and embeddings, as an OpenAI-compatible endpoint answers them."""

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if "messages" in body:
            answer = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                      "usage": usage, "choices": [{
                          "index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "pong"}}]}
        else:
            answer = {"object": "list", "model": "e", "usage": usage, "data": [
                {"object": "embedding", "index": i, "embedding": [float(i == 0), float(i == 1)]}
                for i in range(len(body["input"]))]}
        return 200, json.dumps(answer).encode()


def _lower_bound() -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"]
    found = next(re.match(r"openai>=([0-9.]+),<", d) for d in dependencies
                 if d.startswith("openai"))
    assert found is not None, "pyproject.toml names no lower and upper bound for openai"
    return found.group(1)


@pytest.mark.parametrize("release", ["oldest", "installed"])
def test_the_chat_and_embedding_clients_work_with_every_admitted_openai(release) -> None:
    path = [str(ROOT)]
    if release == "oldest":
        if not (LOWER_BOUNDS / f"openai-{_lower_bound()}.dist-info").exists():
            pytest.fail(f"openai {_lower_bound()} is not in {LOWER_BOUNDS}: "
                        "bash scripts/lower-bounds.sh")
        path.insert(0, str(LOWER_BOUNDS))
    with serving(OpenAIServer()) as server:
        port = server.server_address[1]
        done = subprocess.run(
            [sys.executable, "-c", CLIENTS, server.url], capture_output=True, text=True,
            timeout=60, check=False, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path),
                 "DJANGO_SETTINGS_MODULE": "kbplatform.settings",
                 "KB_OUTBOUND_ALLOWED_HOSTS": f"127.0.0.1:{port}"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    if release == "oldest":
        assert result["version"] == _lower_bound()
    assert result["reply"] == "pong"
    assert result["vectors"] == [[1.0, 0.0], [0.0, 1.0]]
