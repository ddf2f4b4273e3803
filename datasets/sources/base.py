"""What every kind of source hands the sync: the files it holds now, each with its version."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings


@dataclass(frozen=True)
class Item:
    """One file of the source: `raw` None means unchanged since `version` was stored, a
    `failure` is why it could not be read (its document, if any, stays)."""

    path: str  # in the source, posix; the document's path is <source name>/<path>
    version: str  # what the source says of it: a blob id, mtime and size, an ETag
    raw: bytes | None = None
    failure: str = ""


def file_item(path: str, version: str, size: int, *, known: Mapping[str, str], max_bytes: int,
              read: Callable[[], bytes]) -> Item:
    """A listed file as the sync takes it: unchanged when its document came from this
    version, refused when over `max_bytes`, otherwise read (only then)."""
    if known.get(path) == version:
        return Item(path, version)
    if size > max_bytes:
        return Item(path, version,
                    failure=f"{size} bytes, over KB_MAX_UPLOAD_BYTES ({max_bytes})")
    return Item(path, version, raw=read())


class SyncFailed(Exception):
    """The source as a whole could not be read (unreachable, refused, too big, too slow): the
    sync fails with this reason, which its owner may read, and deletes nothing."""


class Reader(Protocol):
    commit: str  # git: the commit read; "" for the other kinds
    complete: bool  # every file of the source was listed: the others may be deleted
    expected: int  # the files listed so far (the job's total)

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        """The source's files; `known`: path -> version of the documents it made."""
        ...


class Deadline:
    """A sync's time bound (KB_SOURCE_SYNC_TIMEOUT_SECONDS)."""

    def __init__(self) -> None:
        self.seconds = settings.KB_SOURCE_SYNC_TIMEOUT_SECONDS
        self.at = time.monotonic() + self.seconds

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise SyncFailed(f"the sync took longer than {self.seconds} s "
                             "(KB_SOURCE_SYNC_TIMEOUT_SECONDS)")

    def left(self) -> float:
        return max(1.0, self.at - time.monotonic())


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob over posix paths: `**/` any folders (none too), `*` and `?` within one name."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


class Globs:
    """The include globs of a source; none: every file."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.regexes = [glob_regex(p) for p in patterns]

    def __call__(self, path: str) -> bool:
        return not self.regexes or any(r.match(path) for r in self.regexes)


def too_many() -> SyncFailed:
    return SyncFailed(f"the source has more than {settings.KB_SOURCE_MAX_FILES} files "
                      "(KB_SOURCE_MAX_FILES): narrow its globs or sub-folder")
