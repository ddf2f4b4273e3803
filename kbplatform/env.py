"""Small strict parsers for settings read from the environment."""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# A tenant's slug (datasets.models.SLUG validates it with this pattern).
SLUG_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """Read NAME, or the file named by NAME_FILE (for secrets mounted as files)."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false or 1/0)")


def env_int(name: str, default: int, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} must be at most {maximum}")
    return value


def env_path(name: str, default: Path) -> Path:
    """An absolute path (empty: the default): a relative one would follow each process's
    working directory."""
    raw = env_str(name)
    path = Path(raw) if raw else default
    if not path.is_absolute():
        raise ImproperlyConfigured(f"{name}={raw!r} must be an absolute path")
    return path


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


@dataclass(frozen=True)
class SourceRoot:
    """One entry of KB_SOURCE_ROOTS: `path` is tenant `tenant`'s alone, or, without a tenant,
    a parent whose sub-folder named after a tenant's slug is that tenant's."""

    path: Path
    tenant: str = ""

    def folder_of(self, slug: str) -> Path | None:
        """The folder this entry gives the tenant `slug`, if any (not resolved)."""
        if not self.tenant:
            return self.path / slug
        return self.path if self.tenant == slug else None


def env_source_roots(name: str, default: str, *, apart_from: Path) -> tuple[SourceRoot, ...]:
    """NAME as comma-separated `SLUG=/path` (that tenant's folder) or `/path` (a parent of one
    folder per tenant, `/path/<slug>/`). Entries may not lie inside one another (a tenant would
    read another's folder), nor overlap `apart_from` (the folder the demo imports: a source
    reading it would index its files a second time)."""
    raw = os.environ.get(name)
    roots = []
    for entry in (default if raw is None else raw).split(","):
        entry = entry.strip()
        if not entry:
            continue
        slug, _, path = ("", "", entry) if entry.startswith("/") else entry.partition("=")
        if not Path(path).is_absolute() or (not entry.startswith("/")
                                            and not re.match(SLUG_PATTERN, slug)):
            raise ImproperlyConfigured(f"{name}: {entry!r} is neither SLUG=/absolute/path nor "
                                       "/absolute/path")
        roots.append(SourceRoot(Path(path), slug))
    for first, second in combinations(roots, 2):
        if _nested(first.path, second.path):
            raise ImproperlyConfigured(f"{name}: {first.path} and {second.path} lie inside "
                                       "one another: a tenant would read another's folder")
    for root in roots:
        if _nested(root.path, apart_from):
            raise ImproperlyConfigured(
                f"{name}: {root.path} and KB_KNOWLEDGE_DIR ({apart_from}) lie inside one "
                "another: the demo imports that folder, and a source reading it would index "
                "its files a second time")
    return tuple(roots)


def _nested(first: Path, second: Path) -> bool:
    first, second = first.resolve(), second.resolve()
    return first.is_relative_to(second) or second.is_relative_to(first)


def env_json_object(name: str, default: dict[str, object]) -> dict[str, object]:
    """A JSON object from NAME (or NAME_FILE: it may hold credentials)."""
    raw = env_str(name)
    if not raw.strip():
        return default
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object")
    return value


def generated_secret(path: Path) -> str:
    """The secret kept in `path`, created (owner-only) on first use and shared by every
    process that reads the same file. It is published with one atomic link, so two processes
    starting together agree on one secret and none ever reads a half-written file."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another process published first: use theirs
        finally:
            draft.unlink()
    return path.read_text(encoding="utf-8").strip()
