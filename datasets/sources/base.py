"""What every kind of source hands the sync: the files it holds now, each with its version."""

from __future__ import annotations

import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from django.conf import settings

from datasets.models import Document, Source

TITLE_CHARS = 120  # of each title in a path of titles (a wiki page's, a book's document)
MAX_CONFIRMED = 50  # documents missing from a listing by offset asked for before any is deleted


@dataclass(frozen=True)
class Item:
    """One file of the source: `raw` None means unchanged since `version` was stored, a
    `failure` is why it could not be read (its document, if any, stays)."""

    path: str  # in the source, posix; the document's path is <source name>/<path>
    version: str  # what the source says of it: a blob id, mtime and size, an ETag
    raw: bytes | None = None
    failure: str = ""
    url: str = ""  # where a person reads it (Document.url): a web page, a git file's page
    # Who the source lets read it (readers_named, readers_within): a Confluence page's
    # restrictions, a Feishu space's members, a private Yuque book's team; empty: the source
    # keeps none.
    readers: tuple[str, ...] = ()


def file_item(path: str, version: str, size: int, *, known: Mapping[str, str], max_bytes: int,
              read: Callable[[], bytes]) -> Item:
    """A listed file as the sync takes it: unchanged when its document came from this
    version, refused when over `max_bytes`, otherwise read (only then)."""
    if known.get(path) == version:
        return Item(path, version)
    if size > max_bytes:
        return Item(path, version, failure=_over(size, max_bytes))
    return Item(path, version, raw=read())


class ItemFailed(Exception):
    """One file (object, page) could not be read: its line of the sync's log says why, and
    its document, if any, stays."""


def bounded(raw: bytes, max_bytes: int) -> bytes:
    """A file as a source wrote it out (a page's HTML, a document's markdown), or ItemFailed
    when it is over `max_bytes` (KB_MAX_UPLOAD_BYTES)."""
    if len(raw) > max_bytes:
        raise ItemFailed(_over(len(raw), max_bytes))
    return raw


def _over(size: int, max_bytes: int) -> str:
    return f"{size} bytes, over KB_MAX_UPLOAD_BYTES ({max_bytes})"


def max_path(source: Source) -> int:
    """The longest path in `source` a document may hold (its path is <source name>/<path>)."""
    return (Document._meta.get_field("source_path").max_length or 0) - len(source.name) - 1


def listed_item(path: str, version: str, size: int, *, known: Mapping[str, str],
                longest: int, max_bytes: int, read: Callable[[], bytes], url: str,
                readers: Sequence[str] = ()) -> Item:
    """`file_item` for a file a listing named, linking to `url`, read by `readers` at the
    source: a path longer than `longest` (max_path) and a read that fails (ItemFailed) are its
    failed line."""
    if len(path) > longest:
        return Item(path, version, failure=f"a path longer than the {longest} characters a "
                                           "document's path may hold", url=url)
    try:
        item = file_item(path, version, size, known=known, max_bytes=max_bytes, read=read)
    except ItemFailed as exc:
        item = Item(path, version, failure=str(exc))
    return replace(item, url=url, readers=tuple(readers))


def listing_moved(known: Mapping[str, str], listed: Iterable[tuple[str, str]],
                  current: Callable[[str], bool], noun: str,
                  asked: Callable[[str], bool] = bool) -> str:
    """Why a listing by offset may not delete ("": it may). `known`: the source's documents
    (path → version, "<id>:…"); `listed`: the listing's (path, id); `current(id)`: whether the
    source still holds one gone from the listing (not listed under another path either, and
    one `asked` of), then the listing moved under a change and skipped it. Of more than
    MAX_CONFIRMED gone, that many spread over them are asked, and when none is current the
    rest are taken as gone (one the listing skipped all the same is added again by the next
    sync)."""
    listed = list(listed)
    paths, ids = {path for path, _ in listed}, {key for _, key in listed}
    missing = [key for path, version in known.items() if path not in paths and ":" in version
               for key in [version.partition(":")[0]] if key not in ids and asked(key)]
    count = min(len(missing), MAX_CONFIRMED)
    for key in (missing[i * len(missing) // count] for i in range(count)):
        if current(key):
            return f"{noun} {key} is current but was not listed: the listing moved under a change"
    return ""


def path_name(title: str) -> str:
    """A title as one name of a path: no "/", no control or format characters, no leading
    "." (a hidden name), bounded."""
    name = "".join(c for c in title if unicodedata.category(c) not in ("Cc", "Cf", "Cs"))
    name = re.sub(r"\s+", " ", name.replace("/", "-").replace("\\", "-"))
    name = re.sub(r"^[\s.]+", "", name)[:TITLE_CHARS].strip()
    return name or "untitled"


def same_path(path: str) -> str:
    """What a database collation compares of a path: case and accents aside."""
    return "".join(c for c in unicodedata.normalize("NFKD", path.casefold())
                   if not unicodedata.combining(c))


def distinct_paths(paths: Mapping[str, str]) -> dict[str, str]:
    """Each id's path (of titles), the id added to a path another id's shares as a database
    collation compares them: `Runbooks/Restart (123)`."""
    count = Counter(same_path(path) for path in paths.values())
    return {key: f"{path} ({key})" if count[same_path(path)] > 1 else path
            for key, path in paths.items()}


def hidden(path: str) -> bool:
    """A name no source takes: one of its parts starts with "." (`.git/`, `.draft.md`)."""
    return any(part.startswith(".") for part in path.split("/"))


class SyncFailed(Exception):
    """The source as a whole could not be read (unreachable, refused, too big, too slow): the
    sync fails with this reason, which its owner may read, and deletes nothing."""


class Reader(Protocol):
    commit: str  # git: the commit read; "" for the other kinds
    # Why the source was read in part ("": every file was listed, the others may be deleted).
    partial: str
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

    def allows(self, seconds: float) -> bool:
        """Whether waiting `seconds` from now still ends before the deadline."""
        return time.monotonic() + seconds < self.at


# The tokens of a glob: a literal character, `?`, `*` (within one name), `**` (anything) and
# `**/` (no folder, or any folders).
ONE, NAME, ANY, FOLDERS = "?", "*", "**", "**/"


def glob_tokens(pattern: str) -> tuple[str, ...]:
    """`pattern` as tokens: ONE, NAME, ANY, FOLDERS or one literal character each."""
    tokens: list[str] = []
    i = 0
    while i < len(pattern):
        for token in (FOLDERS, ANY, NAME, ONE):
            if pattern.startswith(token, i):
                break
        else:
            token = f"={pattern[i]}"  # a literal character, "=" before it: "=*" is a "*"
        tokens.append(token)
        i += len(token) if token[0] != "=" else 1
    return tuple(tokens)


class Glob:
    """A glob over posix paths, matched as an automaton over the set of the tokens it may be
    at (never by backtracking): time O(pattern x path) whatever the pattern. `**/` is any
    folders (none too), `*` and `?` stay within one name."""

    def __init__(self, pattern: str) -> None:
        self.tokens = glob_tokens(pattern)

    def __call__(self, path: str) -> bool:
        # A state is (token index, inside): inside a FOLDERS token that has read characters
        # and still owes the "/" that ends it.
        states = self._closure({(0, False)})
        for char in path:
            if not states:
                return False
            after: set[tuple[int, bool]] = set()
            for index, _ in states:
                if index == len(self.tokens):
                    continue
                token = self.tokens[index]
                if token == FOLDERS:
                    after.add((index, True))
                    if char == "/":
                        after.add((index + 1, False))
                elif token == ANY:
                    after.add((index, False))
                elif token == NAME:
                    if char != "/":
                        after.add((index, False))
                elif token == ONE:
                    if char != "/":
                        after.add((index + 1, False))
                elif token[1] == char:
                    after.add((index + 1, False))
            states = self._closure(after)
        return (len(self.tokens), False) in states

    def _closure(self, states: set[tuple[int, bool]]) -> set[tuple[int, bool]]:
        """`states` and those reached without reading: past a NAME, ANY or FOLDERS that
        reads nothing (more)."""
        todo, seen = list(states), set(states)
        while todo:
            index, inside = todo.pop()
            if index < len(self.tokens) and not inside and self.tokens[index] in (
                    NAME, ANY, FOLDERS):
                following = (index + 1, False)
                if following not in seen:
                    seen.add(following)
                    todo.append(following)
        return seen


class Globs:
    """The include globs of a source; none: every file."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.globs = [Glob(p) for p in patterns]

    def __call__(self, path: str) -> bool:
        return not self.globs or any(glob(path) for glob in self.globs)


def too_many() -> SyncFailed:
    return SyncFailed(f"the source has more than {settings.KB_SOURCE_MAX_FILES} files "
                      "(KB_SOURCE_MAX_FILES): narrow its globs or sub-folder")
