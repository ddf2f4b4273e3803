"""The text a model reads of a tool's result over MCP (some hosts show it nothing else): the
status and the citations, the answer in its own block, then the evidence as delimited data
(retrieval/untrusted.py), each piece under its document_id; nothing of a document or an
answer can forge a line or a block of it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from retrieval.lookup.project import titled
from retrieval.untrusted import LABEL, answer_block, sources_block


def evidence_text(body: Mapping[str, Any]) -> str:
    """A lookup's or an answer's result."""
    lines = [f"status: {body.get('answer_status') or body.get('evidence_status')}"]
    if body.get("answer"):
        lines += ["citations: " + ", ".join(body.get("citations", [])),
                  answer_block(body["answer"])]
    if body.get("covered_topics") or body.get("searched_datasets"):
        # Names and domains written by people: quoted, each on this one line (JSON escapes
        # a line break), never a line of their own.
        lines.append("searched: " + json.dumps(
            [d["name"] for d in body.get("searched_datasets", [])], ensure_ascii=False))
        lines.append("they cover: " + json.dumps(body.get("covered_topics", []),
                                                 ensure_ascii=False))
    evidence = body.get("evidence") or []
    if evidence:
        lines.append(f"evidence ({LABEL}; cite a source by its id):")
        lines.append(sources_block(
            (item["document_id"], _titled(item), item["excerpt"]) for item in evidence))
    return "\n".join(lines)


def _titled(item: Mapping[str, Any]) -> str:
    """A source's title attribute: title > breadcrumb, and where its text also is."""
    title = titled(item["title"], item["breadcrumb"])
    copies = [copy["source"] or copy["document_id"] for copy in item.get("also_in") or ()]
    return f"{title} (also in: {', '.join(copies)})" if copies else title


def section_text(body: Mapping[str, Any]) -> str:
    """A fetched section: its ids to cite and to read on, then its text as data."""
    lines = [f"status: {body['evidence_status']}"]
    if body.get("document_ids"):
        lines += ["cite: " + ", ".join(body["document_ids"]),
                  f"truncated: {str(body['truncated']).lower()}; previous: "
                  f"{body['previous'] or '-'}; next: {body['next'] or '-'}",
                  f"section ({LABEL}):",
                  sources_block([(body["document_id"], titled(body["title"], body["breadcrumb"]),
                                  body["text"])])]
    return "\n".join(lines)


def node_text(body: Mapping[str, Any]) -> str:
    """The RAG node's `result`: already the text it hands on to the loop."""
    return str(body["result"])


def json_text(body: Mapping[str, Any]) -> str:
    """Ids and names, no retrieved text: the body itself."""
    return json.dumps(body, ensure_ascii=False)
