"""What a source may point at, checked when it is saved and again when it syncs: http(s)
URLs through the outbound policy (kbplatform/outbound.py), local paths only under one of
KB_SOURCE_ROOTS."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from django.conf import settings

from datasets.models import Source
from kbplatform.outbound import url_refusal

BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
MAX_GLOBS = 50
# Globs are matched in linear time (datasets/sources/base.py); a bound keeps them readable.
MAX_GLOB_STARS = 8


def local_root(location: str) -> Path | None:
    """`location` resolved (symlinks too), if it lies under one of KB_SOURCE_ROOTS."""
    path = Path(location)
    if not path.is_absolute():
        return None
    resolved = path.resolve()
    for root in settings.KB_SOURCE_ROOTS:
        if resolved.is_relative_to(root.resolve()):
            return resolved
    return None


def is_url(location: str) -> bool:
    return location.lower().startswith(("http://", "https://"))


def location_refusal(*, kind: str, location: str) -> str | None:
    """Why a source of `kind` may not read `location` (without the network), or None."""
    if not location or location != location.strip() or "\x00" in location:
        return "the location is empty or has surrounding spaces"
    if kind == Source.Kind.WEB or (kind == Source.Kind.GIT and is_url(location)):
        refusal = url_refusal(location)
        return f"the URL is refused: {refusal}" if refusal else None
    if "::" in location or "://" in location or location.startswith("-"):
        # git's ext::, fd::, file://, ssh and the like: nothing the server can check.
        return "only http(s) URLs and local paths under KB_SOURCE_ROOTS are read"
    if local_root(location) is None:
        return "a local path must be absolute and under one of KB_SOURCE_ROOTS"
    return None


def source_refusals(source: Source) -> dict[str, str]:
    """Every field of `source` that is not valid, with why."""
    refusals: dict[str, str] = {}
    refusal = location_refusal(kind=source.kind, location=source.location)
    if refusal:
        refusals["location"] = refusal
    if source.kind == Source.Kind.GIT and (not BRANCH.match(source.branch)
                                           or ".." in source.branch):
        refusals["branch"] = "not a branch name git takes"
    sub = PurePosixPath(source.subfolder)
    if source.subfolder and (sub.is_absolute() or ".." in sub.parts):
        refusals["subfolder"] = "a relative path inside the repository, without .."
    include = source.include
    if not isinstance(include, list) or len(include) > MAX_GLOBS or not all(
            isinstance(g, str) and 0 < len(g) <= 200 for g in include):
        refusals["include"] = f"a list of at most {MAX_GLOBS} glob patterns"
    elif any(g.count("*") > MAX_GLOB_STARS for g in include):
        refusals["include"] = f"a glob pattern may hold at most {MAX_GLOB_STARS} `*`"
    return refusals
