"""A document's other frontmatter fields, kept for the filters its tenant declares (its staff
declare them: tests/datasets/admin/test_scope.py): stored at upload (and for documents stored
before, by the migration), shown on its admin page."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse

from datasets.models import Document
from tests.conftest import Kb
from tests.datasets.admin.test_scope import page

RUNBOOK = (b"---\ntitle: Kafka consumer lag\nteam: [SRE, data]\nservice: orders\n"
           b"tier: 1\n---\n\n# Kafka consumer lag\n\nReset the consumer group's offsets.\n")


@pytest.mark.django_db
def test_an_uploaded_documents_other_fields_are_kept_and_shown(
        kb: Kb, ingest: Any, admin_client: Client) -> None:
    document = ingest(kb.dataset, "kafka/lag.md", RUNBOOK)
    document.refresh_from_db()
    assert document.fields == {"team": ["SRE", "data"], "service": ["orders"], "tier": ["1"]}
    html = page(admin_client, reverse("admin:datasets_document_change", args=[document.pk]))
    assert "orders" in html and "Fields" in html

    # Stored before fields were kept: the migration reads them from its frontmatter.
    Document.objects.filter(pk=document.pk).update(fields={})
    migration = importlib.import_module("datasets.migrations.0021_document_fields")
    migration.fill_fields(apps, None)
    document.refresh_from_db()
    assert document.fields["service"] == ["orders"]
