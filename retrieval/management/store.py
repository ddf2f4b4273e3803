"""Commands that reach Milvus: an outage or a refused request is their message, never a
traceback (e.g. a Milvus Lite file held by another process says what to do)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from retrieval.index.milvus.connection import VectorStoreRejected, VectorStoreUnavailable


class StoreCommand(BaseCommand):
    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except (VectorStoreUnavailable, VectorStoreRejected) as exc:
            raise CommandError(str(exc)) from exc
