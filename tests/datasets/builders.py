"""Small builders for markdown documents, uploads and API calls."""

from __future__ import annotations

import json
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient


def markdown(title: str, sections: dict[str, str], **frontmatter: Any) -> bytes:
    """`# title`, then one `## heading` per section: one chunk per section at the defaults."""
    lines: list[str] = []
    if frontmatter:
        # JSON scalars and lists are valid YAML flow values.
        lines += ["---", *(f"{k}: {json.dumps(v, ensure_ascii=False)}"
                           for k, v in frontmatter.items()), "---", ""]
    lines += [f"# {title}", ""]
    for heading, body in sections.items():
        lines += [f"## {heading}", "", body, ""]
    return "\n".join(lines).encode("utf-8")


def runbook(topic: str, *, sections: int = 2, category: str = "ops") -> bytes:
    """A runbook whose every section names `topic`, so a lookup of `topic` finds it."""
    return markdown(f"{topic} runbook", {
        f"Step {n}": f"For {topic}, step {n}: check the {topic} dashboard and restart {topic}."
        for n in range(1, sections + 1)
    }, category=category, keywords=[topic])


def api_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def md_file(name: str, content: bytes, content_type: str = "text/markdown") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type=content_type)


def upload(client: APIClient, dataset_id: int, name: str, content: bytes) -> Any:
    return client.post(f"/api/datasets/{dataset_id}/documents",
                       {"file": md_file(name, content)}, format="multipart")


def lookup(client: APIClient, query: str, **body: Any) -> dict[str, Any]:
    response = client.post("/api/tools/lookup_knowledge", {"query": query, **body},
                           format="json")
    assert response.status_code == 200, response.content
    result: dict[str, Any] = response.json()
    return result


def found_doc_ids(answer: dict[str, Any]) -> set[str]:
    """The document ids behind an agent-facing answer's evidence."""
    return {item["document_id"].split("#")[0] for item in answer["evidence"]}


def top_doc_id(answer: dict[str, Any]) -> str:
    """The document behind the best evidence of a READY answer."""
    assert answer["evidence_status"] == "READY", answer
    return str(answer["evidence"][0]["document_id"].split("#")[0])


def milvus_rows(store: Any, doc_id: int, *fields: str) -> list[dict[str, Any]]:
    """What the serving collection holds for one document, ordered by chunk id."""
    rows: list[dict[str, Any]] = store.rows(doc_id, *fields)
    return rows
