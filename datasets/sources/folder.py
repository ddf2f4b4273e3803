"""A server folder as a source (the import_knowledge folder, made incremental): a file is read
again only when its mtime or size moved, and stored again only when its content did."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

from django.conf import settings

from datasets.models import Source
from datasets.sources.base import Deadline, Globs, Item, SyncFailed, file_item, too_many
from datasets.sources.locations import Refused, local_path


class FolderReader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.commit = ""
        self.partial = ""
        self.expected = 0
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        try:  # the tenant's folders now: the settings or a link may have moved
            root = local_path(self.source.location, tenant=self.source.dataset.tenant.slug)
        except Refused as exc:
            raise SyncFailed(str(exc)) from None
        if not root.is_dir():
            raise SyncFailed("the folder does not exist or is not a folder")
        files = self._files(root)
        self.expected = len(files)
        for path, (version, size, identity) in files.items():
            try:
                item = file_item(path, version, size, known=known, max_bytes=self.max_bytes,
                                 read=partial(self._read, root / path, identity))
            except OSError as exc:
                item = Item(path, version, failure=f"could not be read ({exc.strerror})")
            except NotAsListed as exc:
                item = Item(path, version, failure=str(exc))
            yield item

    def _files(self, root: Path) -> dict[str, tuple[str, int, tuple[int, int]]]:
        """path -> ("mtime_ns:size", size, (device, inode)) of the regular files the globs
        take; symlinks and hidden names are skipped (a link could lead out of the root). The
        walk holds each folder open and enters no folder that was swapped for a link while it
        looked (os.fwalk)."""
        files: dict[str, tuple[str, int, tuple[int, int]]] = {}
        for folder, names, file_names, folder_fd in os.fwalk(
                root, onerror=_unreadable, follow_symlinks=False):
            names[:] = sorted(n for n in names if not n.startswith("."))
            self.deadline.check()
            for name in sorted(file_names):
                if name.startswith("."):
                    continue
                try:
                    found = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since it was listed
                relative = (Path(folder) / name).relative_to(root).as_posix()
                if not stat.S_ISREG(found.st_mode) or not self.globs(relative):
                    continue
                files[relative] = (f"{found.st_mtime_ns}:{found.st_size}", found.st_size,
                                   (found.st_dev, found.st_ino))
                if len(files) > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
        return files

    def _read(self, path: Path, identity: tuple[int, int]) -> bytes:
        """The file the walk listed, and only it: opened without following a link, the same
        device and inode (a name or folder swapped for a link since leads elsewhere), no more
        than KB_MAX_UPLOAD_BYTES (it may have grown since)."""
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
            opened = os.fstat(handle.fileno())
            if (opened.st_dev, opened.st_ino) != identity:
                raise NotAsListed("changed while the sync read it: read again at the next sync")
            raw = handle.read(self.max_bytes + 1)
        if len(raw) > self.max_bytes:
            raise NotAsListed(f"over KB_MAX_UPLOAD_BYTES ({self.max_bytes}) when read")
        return raw


class NotAsListed(Exception):
    """The file is not what the walk listed any more (another file, or grown past the bound)."""


def _unreadable(exc: OSError) -> None:
    # A folder that cannot be listed would look empty: its files' documents would be deleted.
    raise SyncFailed(f"a folder of the source could not be listed ({exc.strerror})")
