"""The L0 hints follow documents changed by another process, without restarting this one."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from retrieval.index.milvus import reset_connection
from tests.conftest import ROOT, database_url
from tests.retrieval.conftest import (
    KAFKA,
    NGINX,
    ZEBRA,
    MakeKey,
    client_for,
    evidence_ids,
    import_runbooks,
    last_trace,
    lookup,
    write_runbooks,
)

OKAPI = """---
title: Okapi census
domain: savanna
keywords: [okapi]
category: savanna
---
# Okapi census

## Counting okapis

Okapis are counted from camera traps set along the rivers of the Ituri rain forest.
"""


def manage(*args: str) -> str:
    """Run manage.py in a new process against this test's database and Milvus."""
    url = database_url()
    # A Milvus Lite file serves one process at a time: this one lets go of it (it opens it
    # again at its next call). On a server this only reconnects.
    reset_connection()
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "DATABASE_URL": url,
                               "MILVUS_URI": settings.MILVUS_URI,
                               # indexes in that process: this test runs no worker
                               "CELERY_TASK_ALWAYS_EAGER": "true"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.django_db(transaction=True)
def test_documents_changed_by_another_process_change_the_hints_here(
        store: Any, make_key: MakeKey, tmp_path: Path) -> None:
    folder = tmp_path / "acme-ops"
    acme = import_runbooks(folder, tenant="acme", dataset="ops",
                           files={"zebra.md": ZEBRA, "nginx.md": NGINX})
    _, secret = make_key("acme")
    _, admin_secret = make_key("acme", role="admin")
    tool, admin = client_for(secret), client_for(admin_secret)

    def hints(question: str) -> tuple[list[str], str | None, list[str]]:
        sid = f"s-{uuid.uuid4().hex}"
        response = lookup(tool, question, session_id=sid)
        assert response.status_code == 200, response.content
        trace = last_trace(admin, sid)["hints"]
        return trace["domains"], trace["category_filter"], evidence_ids(response.json())

    # This process builds and caches its L0 index from the two documents.
    assert hints("zebra stripes: why are they black and white")[:2] == (["zoology"], "zoology")
    assert hints("okapi census in the rain forest")[:2] == ([], None)
    assert hints("kafka consumer group lag keeps growing")[:2] == ([], None)

    # Another process re-imports the folder: zebra.md now describes okapis, kafka.md is new.
    write_runbooks(folder, {"zebra.md": OKAPI, "kafka.md": KAFKA})
    output = manage("import_knowledge", str(folder), "--tenant", "acme", "--dataset", "ops")
    assert "2 indexed" in output, output

    domains, category, ids = hints("okapi census in the rain forest")
    assert (domains, category) == (["savanna"], "savanna")
    assert ids and all(e.startswith(f"{acme.documents['zebra'].doc_key}#") for e in ids)
    assert hints("zebra stripes: why are they black and white")[:2] == ([], None)
    assert hints("kafka consumer group lag keeps growing")[:2] == (["messaging"], "messaging")

    # Another process switches the okapi document off: its hint goes too (same document
    # count, only its change time moved).
    doc_id = acme.documents["zebra"].doc_key
    manage("shell", "-c",
           "from datasets.models import Document; from datasets.documents.services import "
           "document_set_activation as off; "
           f"off(document=Document.objects.get(doc_id={doc_id}), activated=False)")
    domains, category, ids = hints("okapi census in the rain forest")
    assert (domains, category) == ([], None)
    assert not any(e.startswith(f"{doc_id}#") for e in ids)
