"""Fixtures for the dataset tests: a tenant with admin and tool clients, and direct ingestion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.datasets.builders import api_client


@dataclass
class Kb:
    tenant: Any
    dataset: Any
    admin: APIClient  # admin key of the tenant
    tool: APIClient  # tool key of the tenant (lookups)


@pytest.fixture
def kb(make_key: Callable[..., tuple[Any, str]]) -> Kb:
    from datasets.services import dataset_create

    admin_key, admin_secret = make_key(role="admin")
    _, tool_secret = make_key(role="tool")
    dataset = dataset_create(tenant=admin_key.tenant, name="ops")
    return Kb(tenant=admin_key.tenant, dataset=dataset, admin=api_client(admin_secret),
              tool=api_client(tool_secret))


@pytest.fixture
def ingest(store: Any) -> Callable[..., Any]:
    """Store and index a document in this process, the way the importer does."""
    from datasets.services import document_index, document_store

    def run(dataset: Any, name: str, raw: bytes) -> Any:
        outcome = document_store(dataset=dataset, file_name=name.rsplit("/", 1)[-1], raw=raw,
                                 max_bytes=settings.KB_MAX_UPLOAD_BYTES, source_path=name,
                                 replace=True)
        document_index(document=outcome.document)
        outcome.document.refresh_from_db()
        return outcome.document

    return run
