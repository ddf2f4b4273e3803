"""Original files of uploaded documents, kept through Django's storage API (STORAGES["default"]:
a folder under KB_VAR_DIR, or S3 and the like): a conversion reads them in the worker, a
rebuild converts them again when the converters changed, the admin offers them for download.

A name holds the document's doc_id and the content hash: a re-upload of other bytes is a new
file (the old one goes when its change commits), the same bytes are the same file.
"""

from __future__ import annotations

import logging

from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage
from django.db import transaction

logger = logging.getLogger(__name__)


def original_name(*, tenant_id: int, doc_id: int, digest: str, suffix: str) -> str:
    return f"originals/{tenant_id}/{doc_id}/{digest}.{suffix}"


def original_save(name: str, raw: bytes) -> bool:
    """Store `raw` under `name` unless it is there already (it holds the same bytes); whether
    this call stored it."""
    if default_storage.exists(name):
        return False
    saved = default_storage.save(name, ContentFile(raw))
    if saved != name:  # another upload of the same bytes stored it meanwhile
        default_storage.delete(saved)
        return False
    return True


def original_open(name: str) -> File[bytes]:
    """The stored file, open for reading (FileNotFoundError when it is not there)."""
    return default_storage.open(name, "rb")


def original_read(name: str) -> bytes:
    with original_open(name) as handle:
        data: bytes = handle.read()
    return data


def original_delete_on_commit(name: str) -> None:
    """Remove the file once the change that drops it commits (a rollback keeps it)."""
    if name:
        transaction.on_commit(lambda: original_discard(name))


def original_discard(name: str) -> None:
    """Remove the file now (a row that was to name it was not written)."""
    try:
        default_storage.delete(name)
    except OSError:  # the row no longer names it; an operator may clean it up
        logger.exception("could not delete the original file %s", name)
