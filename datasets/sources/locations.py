"""What a source may point at, checked when it is saved and again when it syncs: http(s)
URLs through the outbound policy (kbplatform/outbound.py), local paths only inside the folders
KB_SOURCE_ROOTS gives the source's tenant (a refusal reads the same whether the path exists or
not: "not yours" looks like "does not exist")."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from datasets.models import Source
from datasets.sources.confluence import space_refusal
from datasets.sources.feishu import place_refusal
from datasets.sources.s3 import bucket_refusal
from datasets.sources.secrets import secret_refusal
from datasets.sources.yuque import book_refusal
from kbplatform.outbound import host_refusal, url_allowed, url_refusal

BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
# A host name as curl looks it up and a signature names it (lower case: urlsplit's hostname),
# or an address.
ASCII_HOST = re.compile(r"^(?:[a-z0-9_-]+(?:\.[a-z0-9_-]+)*|[0-9a-f:.]+)$")
MAX_GLOBS = 50
# The kinds besides git over http(s) that read with a credential.
CREDENTIALED = (Source.Kind.S3, Source.Kind.CONFLUENCE, Source.Kind.YUQUE,
                Source.Kind.FEISHU)
# The kinds that read a whole wiki space or book, selected by title path.
WIKIS = (Source.Kind.CONFLUENCE, Source.Kind.YUQUE, Source.Kind.FEISHU)
# Globs are matched in linear time (datasets/sources/base.py); a bound keeps them readable.
MAX_GLOB_STARS = 8
ALLOWED_HOSTS_HINT = (" (a host on this machine or the private network is allowed by naming "
                      "it in KB_OUTBOUND_ALLOWED_HOSTS)")


class Refused(ValueError):
    """A local location the source may not read; the text is for the source's owner."""


def tenant_folders(slug: str) -> list[tuple[Path, Path]]:
    """The folders KB_SOURCE_ROOTS gives the tenant `slug`: (as configured, resolved). A
    parent's sub-folder that is a symbolic link is none: it could lead into another's."""
    folders = []
    for root in settings.KB_SOURCE_ROOTS:
        folder = root.folder_of(slug)
        if folder is None:
            continue
        if not root.tenant:
            folder = root.path.resolve() / slug
            if folder.is_symlink():
                continue
        folders.append((root.folder_of(slug) or folder, folder.resolve()))
    return folders


def outside_folders(slug: str) -> str:
    """The one refusal of a local path that is not in the tenant's folders."""
    shown = ", ".join(str(configured) for configured, _ in tenant_folders(slug))
    if not shown:
        return "this tenant has no source folder on the server (KB_SOURCE_ROOTS names none)"
    return f"a local path must be absolute and inside this tenant's source folders: {shown}"


def folders_named_by(slug: str) -> list[Path]:
    """The folders KB_SOURCE_ROOTS binds to `slug`: each `slug=` entry's, and each parent's
    `<slug>/` that exists (or is a link)."""
    return [folder for root in settings.KB_SOURCE_ROOTS
            if (folder := root.folder_of(slug)) is not None
            and (root.tenant or os.path.lexists(folder))]


def rename_refusals(*, old: str, new: str) -> list[str]:
    """Why renaming a tenant from `old` to `new` would hand source folders over: the new
    slug's folders are someone's (or were), the old slug's would wait for the next tenant of
    that name."""
    refusals = []
    theirs, ours = folders_named_by(new), folders_named_by(old)
    if theirs:
        refusals.append(f"KB_SOURCE_ROOTS gives {new} the source folders "
                        f"{', '.join(map(str, theirs))}: a tenant renamed to {new} would read "
                        "them. Move them away first (and back after the rename if they are "
                        "meant for this tenant).")
    if ours:
        refusals.append(f"KB_SOURCE_ROOTS gives {old} the source folders "
                        f"{', '.join(map(str, ours))}: they would stay {old}'s, for whichever "
                        f"tenant is named {old} next. Move them away first (and under {new} "
                        "after the rename), with the locations of the sources that read them.")
    return refusals


def local_path(location: str, *, tenant: str) -> Path:
    """`location` resolved (symbolic links too) when it lies in one of the tenant's folders;
    Refused otherwise, with the same text whether the path exists or not."""
    path = Path(location)
    if path.is_absolute():
        resolved = path.resolve()
        if any(resolved.is_relative_to(folder) for _, folder in tenant_folders(tenant)):
            return resolved
    raise Refused(outside_folders(tenant))


def local_repository(location: str, *, tenant: str) -> Path:
    """The git folder of the repository at `location` (`<location>/.git` or a bare
    repository), when it lies in the tenant's folders and git would read nothing outside
    them: no `.git` file, no alternates, no commondir (each names another repository)."""
    path = local_path(location, tenant=tenant)
    work_tree_git = path / ".git"
    git_dir = work_tree_git if work_tree_git.is_dir() and not work_tree_git.is_symlink() \
        else path
    if os.path.lexists(work_tree_git) and git_dir == path:
        raise Refused("its .git is a file or a link to another folder: give the repository's "
                      "own folder")
    if not (git_dir / "HEAD").is_file() or not (git_dir / "objects").is_dir():
        raise Refused("not a git repository (neither a bare one nor one with a .git folder)")
    for name in ("objects/info/alternates", "commondir", ".git"):
        if os.path.lexists(git_dir / name):
            raise Refused(f"its git folder has {name}, which makes git read another "
                          "repository: give that repository's own folder")
    return git_dir


def is_url(location: str) -> bool:
    return location.lower().startswith(("http://", "https://"))


def location_refusal(*, kind: str, location: str, tenant: str) -> str | None:
    """Why a source of `kind` of the tenant `tenant` may not read `location` (without the
    network), or None."""
    if not location or location != location.strip() or "\x00" in location:
        return "the location is empty or has surrounding spaces"
    if kind == Source.Kind.S3:
        refusal = _url_refusal(location) or bucket_refusal(location)
        if refusal is None and not ASCII_HOST.match(urlsplit(location).hostname or ""):
            return ("the bucket's host is written in ASCII (an international name as "
                    "xn--...), without a trailing dot: the signature names it so")
        return refusal
    if kind == Source.Kind.CONFLUENCE:
        return _url_refusal(location) or space_refusal(location)
    if kind == Source.Kind.YUQUE:
        return _url_refusal(location) or book_refusal(location)
    if kind == Source.Kind.FEISHU:
        return _url_refusal(location) or place_refusal(location)
    if kind == Source.Kind.WEB or (kind == Source.Kind.GIT and is_url(location)):
        refusal = _url_refusal(location)
        if refusal is None and kind == Source.Kind.GIT and not ASCII_HOST.match(
                urlsplit(location).hostname or ""):
            return ("a git URL's host is written in ASCII (an international name as xn--...), "
                    "without a trailing dot: git is held to the addresses checked for it")
        return refusal
    if "::" in location or "://" in location or location.startswith("-"):
        # git's ext::, fd::, file://, ssh and the like: nothing the server can check.
        return "only http(s) URLs and local paths in this tenant's source folders are read"
    try:
        if kind == Source.Kind.GIT:
            local_repository(location, tenant=tenant)
        else:
            local_path(location, tenant=tenant)
    except Refused as exc:
        return str(exc)
    return None


def _url_refusal(url: str) -> str | None:
    refusal = url_refusal(url)
    if refusal is None:
        return None
    parts = urlsplit(url)
    try:
        by_address = host_refusal(parts.hostname or "", parts.port) is not None
    except ValueError:
        by_address = False
    return f"the URL is refused: {refusal}{ALLOWED_HOSTS_HINT if by_address else ''}"


def source_refusals(source: Source) -> dict[str, str]:
    """Every field of `source` that is not valid, with why."""
    refusals: dict[str, str] = {}
    refusal = location_refusal(kind=source.kind, location=source.location,
                               tenant=source.dataset.tenant.slug)
    if refusal:
        refusals["location"] = refusal
    if source.kind == Source.Kind.GIT and (not BRANCH.match(source.branch)
                                           or ".." in source.branch):
        refusals["branch"] = "not a branch name git takes"
    # Read as written: a "." that PurePosixPath would drop is sent, and a URL drops it after
    # the request is signed.
    if source.subfolder and (source.subfolder.startswith("/") or any(
            part in (".", "..") for part in source.subfolder.split("/"))):
        refusals["subfolder"] = ("a relative path inside the repository or bucket, without . "
                                 "or ..")
    if source.subfolder and source.kind in WIKIS:
        refusals["subfolder"] = (f"a {source.kind} source takes the whole space or book: its "
                                 "include globs select pages by title path (`Operations/**`)")
    if source.max_page_bytes > settings.KB_MAX_UPLOAD_BYTES:
        refusals["max_page_bytes"] = (f"at most KB_MAX_UPLOAD_BYTES "
                                      f"({settings.KB_MAX_UPLOAD_BYTES}): a larger page could "
                                      "not be stored")
    if source.secret_env:
        refusal = secret_refusal(source.secret_env, slug=source.dataset.tenant.slug)
        if refusal is None and not (source.kind in CREDENTIALED or (
                source.kind == Source.Kind.GIT and is_url(source.location))):
            refusal = ("only a git source over http(s), an s3, confluence, yuque or feishu "
                       "source takes a credential")
        elif refusal is None and source.location.lower().startswith("http://") and not (
                url_allowed(source.location)):
            refusal = ("a credential travels over https only (plain http to a host "
                       "KB_OUTBOUND_ALLOWED_HOSTS names)")
        if refusal:
            refusals["secret_env"] = refusal
    elif source.kind == Source.Kind.FEISHU:
        refusals["secret_env"] = ("a feishu source reads as an app: the variable holding "
                                  "`<app id>:<app secret>`")
    include = source.include
    if not isinstance(include, list) or len(include) > MAX_GLOBS or not all(
            isinstance(g, str) and 0 < len(g) <= 200 for g in include):
        refusals["include"] = f"a list of at most {MAX_GLOBS} glob patterns"
    elif any(g.count("*") > MAX_GLOB_STARS for g in include):
        refusals["include"] = f"a glob pattern may hold at most {MAX_GLOB_STARS} `*`"
    return refusals
