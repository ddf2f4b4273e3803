"""A server folder as a source (the import_knowledge folder, made incremental): a file is read
again only when its mtime or size moved, and stored again only when its content did."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
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
        for path, (version, size) in files.items():
            try:
                item = file_item(path, version, size, known=known, max_bytes=self.max_bytes,
                                 read=(root / path).read_bytes)
            except OSError as exc:
                item = Item(path, version, failure=f"could not be read ({exc.strerror})")
            yield item

    def _files(self, root: Path) -> dict[str, tuple[str, int]]:
        """path -> ("mtime_ns:size", size) of the regular files the globs take; symlinks and
        hidden names are skipped (a link could lead out of the root)."""
        files: dict[str, tuple[str, int]] = {}
        for folder, names, file_names in os.walk(root, onerror=_unreadable, followlinks=False):
            names[:] = sorted(n for n in names if not n.startswith("."))
            self.deadline.check()
            for name in sorted(file_names):
                full = Path(folder) / name
                if name.startswith(".") or full.is_symlink() or not full.is_file():
                    continue
                relative = full.relative_to(root).as_posix()
                if not self.globs(relative):
                    continue
                stat = full.stat()
                files[relative] = (f"{stat.st_mtime_ns}:{stat.st_size}", stat.st_size)
                if len(files) > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
        return files


def _unreadable(exc: OSError) -> None:
    # A folder that cannot be listed would look empty: its files' documents would be deleted.
    raise SyncFailed(f"a folder of the source could not be listed ({exc.strerror})")
