"""Duplicate content spends one slot: the same runbook uploaded twice, or in two datasets,
is served once, its other copies named in `also_in` — copies the key may read only."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.documents.services import dataset_create
from tests.conftest import Kb
from tests.retrieval.conftest import NGINX, MakeKey, client_for, lookup, ready

QUESTION = "nginx 502 bad gateway upstream connection refused"


@pytest.mark.django_db
def test_copies_of_a_runbook_take_one_place_and_are_named_by_it(
        kb: Kb, ingest: Any, make_key: MakeKey) -> None:
    edge = dataset_create(tenant=kb.tenant, name="edge")
    first = ingest(kb.dataset, "web/nginx-502.md", NGINX.encode())
    again = ingest(kb.dataset, "imported/nginx-502-copy.md", NGINX.encode())
    other = ingest(edge, "nginx.md", NGINX.encode())
    copies = {d.doc_key: d.source_path for d in (first, again, other)}

    body = ready(lookup(kb.tool, QUESTION))
    served = [item["document_id"].split("#")[0] for item in body["evidence"]]
    # Each chunk's text once: one copy served, the two others named by it, chunk for chunk.
    assert len([d for d in served if d in copies]) == first.chunk_count
    for item in body["evidence"]:
        named = {c["document_id"].split("#")[0]: c["source"] for c in item["also_in"]}
        assert named.keys() | {item["document_id"].split("#")[0]} == copies.keys()
        assert named == {d: copies[d] for d in named}
        chunk = item["document_id"].split("#")[1]
        assert all(c["document_id"].split("#")[1] == chunk for c in item["also_in"])

    # A key of one dataset is told of no copy it may not read.
    _, scoped = make_key("acme", datasets=(edge,))
    only = ready(lookup(client_for(scoped), QUESTION))
    assert {i["document_id"].split("#")[0] for i in only["evidence"]} == {other.doc_key}
    assert all(item["also_in"] == [] for item in only["evidence"])
