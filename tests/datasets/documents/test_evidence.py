"""Evidence ids, `{docId}#{anchor}` and `{docId}#chunk-{n}`: built and read back by one type;
the anchored id of a chunk survives an edit elsewhere in its document."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.documents.evidence import EvidenceKey, chunk_anchor
from datasets.models import Chunk
from retrieval.lookup.post_process import evidence_key_of
from retrieval.types import SearchHit
from tests.conftest import Kb


def test_a_key_reads_back_as_the_key_it_was_built_from() -> None:
    key = EvidenceKey("3101", 2)
    assert str(key) == "3101#chunk-2"
    assert EvidenceKey.parse(str(key)) == key
    assert EvidenceKey.require("3101#chunk-2") == key


@pytest.mark.parametrize("text", [
    "", "3101", "3101#chunk-", "#chunk-2", "3101#chunk-x", "3101#chunk-2 ", "3101#chunk--1",
    "3101#chunk-٢", "a#b#chunk-1", "vector:abc", "rank:3", "[3101#chunk-2]",
    "3101#9899E86D49F2", "3101#9899e86d49f", "3101#9899e86d49f2a", "3101#9899e86d49g2"])
def test_anything_else_is_not_a_key(text: str) -> None:
    assert EvidenceKey.parse(text) is None
    with pytest.raises(ValueError, match="not an evidence key"):
        EvidenceKey.require(text)


def test_an_anchored_key_reads_back_and_names_its_text() -> None:
    anchor = chunk_anchor("Redis > Memory", "Run INFO memory.")
    assert anchor == chunk_anchor("Redis > Memory", "Run INFO memory.") and len(anchor) == 12
    assert anchor != chunk_anchor("Redis > Other", "Run INFO memory.")  # its heading counts
    key = EvidenceKey("3101", anchor=anchor)
    assert str(key) == f"3101#{anchor}" and EvidenceKey.parse(str(key)) == key
    assert EvidenceKey.served("3101", 4, anchor) == key
    assert EvidenceKey.served("3101", 4, "") == EvidenceKey("3101", 4)
    with pytest.raises(ValueError):
        EvidenceKey("3101", 4, anchor)


def test_a_row_indexed_without_an_anchor_is_served_by_its_place() -> None:
    meta: dict[str, Any] = {"docId": "3101", "chunkIndex": 4}
    assert evidence_key_of(SearchHit("3101#chunk-4", "text", meta, 1, 0.5)) == "3101#chunk-4"
    meta["anchor"] = "9899e86d49f2"
    assert evidence_key_of(SearchHit("3101#chunk-4", "text", meta, 1, 0.5)) == "3101#9899e86d49f2"


GUIDE = ("# Kafka guide\n\n## Restart a consumer\n\nStop it, reset the group's offsets, "
         "start it again.\n\n## Check the lag\n\nThe lag graph falls to zero within minutes.\n")


@pytest.mark.django_db
def test_an_id_survives_an_edit_elsewhere_in_its_document(kb: Kb, ingest: Any) -> None:
    document = ingest(kb.dataset, "kafka/guide.md", GUIDE.encode())
    body = kb.tool.post("/api/tools/lookup_knowledge", {"query": "kafka lag graph falls"},
                        format="json").json()
    cited = next(e for e in body["evidence"] if "lag graph" in e["excerpt"])
    assert EvidenceKey.require(cited["document_id"]).anchor  # served by its anchor
    place = Chunk.objects.get(document=document, content__contains="lag graph").chunk_index

    # A section inserted above it: the chunk moves down a place, its id stays its own.
    ingest(kb.dataset, "kafka/guide.md", GUIDE.replace(
        "## Restart", "## Before you start\n\nTell the on-call channel.\n\n## Restart").encode())
    moved = Chunk.objects.get(document=document, content__contains="lag graph")
    assert moved.evidence_key == cited["document_id"]
    fetched = kb.tool.post("/api/tools/fetch_evidence", {"document_id": cited["document_id"]},
                           format="json").json()
    assert fetched["document_ids"][0] == cited["document_id"]
    assert "lag graph falls to zero" in fetched["text"]
    again = kb.tool.post("/api/tools/lookup_knowledge", {"query": "kafka lag graph falls"},
                         format="json").json()
    assert cited["document_id"] in [e["document_id"] for e in again["evidence"]]
    # Its old place names another chunk now: only the anchored id kept its meaning.
    assert moved.chunk_index == place + 1
    assert "lag graph" not in Chunk.objects.get(document=document, chunk_index=place).content


@pytest.mark.django_db
def test_a_repeated_chunk_is_served_by_its_place_and_paging_reads_each_once(
        kb: Kb, ingest: Any) -> None:
    """Two chunks with the same heading and text: the first has the anchor, the repeat its
    place, so every served id names one chunk and reading on by `next` ends."""
    same = "The same log line, again and again, as a log repeats itself."
    document = ingest(kb.dataset, "logs/repeat.md",
                      ("# Log\n\n## Lines\n\n" + "\n\n".join([same] * 60) + "\n").encode())
    ids = [c.evidence_key for c in Chunk.objects.filter(document=document)]
    assert len(ids) == len(set(ids)) > 3
    assert sum(1 for i in ids if EvidenceKey.require(i).anchor) < len(ids)
    read, asked = [], ids[0]
    while asked:
        body = kb.tool.post("/api/tools/fetch_evidence",
                            {"document_id": asked, "max_chars": 500}, format="json").json()
        read += body["document_ids"]
        asked = body["next"]
        assert len(read) <= len(ids)
    assert read == ids
