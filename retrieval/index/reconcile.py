"""Reconciliation: find (and repair) drift between the database and a Milvus collection.

The database is the truth. For each document the collection should hold exactly the chunks its
stored source splits into (with the version's splitter settings), carrying its content hash and
activation, and nothing of a deleted document. Kinds of drift:

- `orphan`: rows of a document that is deleted or unknown;
- `missing`: a live document with chunks absent (or none at all);
- `stale`: rows of an older content, or chunks the document no longer has;
- `chunk_rows`: the database's Chunk rows differ from what the source splits into.

Activation is not compared: lookups filter on the rows' activation, Milvus holds none. Repair
deletes orphans and re-indexes missing and stale documents (the embedding cache makes that
cheap), under the writer lock with the rows re-read first.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from datasets.documents.evidence import EvidenceKey
from datasets.ingestion.compose import document_drafts
from datasets.models import Chunk, Document
from retrieval.index import milvus
from retrieval.index.embedders import embedder_named
from retrieval.index.milvus.writer import StoredChunk
from retrieval.index.models import IndexVersion
from retrieval.index.sync import document_batches, prepare, write_prepared
from retrieval.index.writer_lock import milvus_writer

logger = logging.getLogger(__name__)

KINDS = ("orphan", "missing", "stale", "chunk_rows")
EXAMPLES = 10  # ids kept per kind for the report


@dataclass
class ReconcileReport:
    collection: str
    documents: int = 0
    rows: int = 0
    drift: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    repaired: bool = False
    # pk → as it holds: revision, content hash, readers
    revisions: dict[int, tuple[int, str, list[str]]] = field(default_factory=dict)

    def add(self, kind: str, what: str) -> None:
        self.drift[kind] += 1
        if len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append(what)

    @property
    def clean(self) -> bool:
        return not any(self.drift.values())

    def line(self) -> str:
        """One line for a job's log."""
        drift = ", ".join(f"{kind} {n}" for kind, n in self.drift.items() if n) or "none"
        return (f"{self.collection}: {self.documents} documents, {self.rows} rows; "
                f"drift: {drift}")

    def summary(self) -> dict[str, object]:
        return {"collection": self.collection, "documents": self.documents, "rows": self.rows,
                "drift": dict(self.drift), "examples": dict(self.examples),
                "repaired": self.repaired}


def reconcile(*, version: IndexVersion, repair: bool = False) -> ReconcileReport:
    """Compare `version`'s collection with the database; with `repair`, make them agree.

    Milvus's side is read as ids only; documents are read a batch at a time (their stored
    sources are split again), so memory follows the number of chunks, not the corpus.
    """
    report = ReconcileReport(collection=version.collection_name)
    stored: dict[int, list[StoredChunk]] = defaultdict(list)
    for chunk in milvus.writer().stored_chunks(version.collection_name):
        stored[chunk.doc_id].append(chunk)
        report.rows += 1
    live = dict(Document.objects.filter(deleted=False, dataset__evaluation=False)
                .values_list("doc_id", "pk"))
    report.documents = len(live)
    orphans = [c.id for doc_id in stored if doc_id not in live for c in stored[doc_id]]
    for chunk_id in orphans:
        report.add("orphan", chunk_id)
    reindex: list[int] = []
    for documents in document_batches(list(live.values())):
        chunk_ids: dict[int, set[str]] = defaultdict(set)
        for doc_id, index in Chunk.objects.filter(document__in=documents).values_list(
                "document__doc_id", "chunk_index"):
            chunk_ids[doc_id].add(str(EvidenceKey(str(doc_id), index)))
        for document in documents:
            if _drift(report, version, document, stored.get(document.doc_id, []),
                      chunk_ids[document.doc_id]):
                reindex.append(document.pk)
            report.revisions[document.pk] = (document.revision, document.content_hash,
                                             list(document.readers))
    if repair:
        _repair(version, orphans, reindex)
        report.repaired = True
    logger.info("reconcile %s: %s", version.collection_name, report.summary())
    return report


def _drift(report: ReconcileReport, version: IndexVersion, document: Document,
           rows: list[StoredChunk], chunk_ids: set[str]) -> bool:
    """Record the document's drift; whether it must be indexed again."""
    doc_id = document.doc_id
    drafts = document_drafts(document=document, chunking=version.chunking)
    expected = {str(EvidenceKey(str(doc_id), d.index)) for d in drafts}
    have = {c.id for c in rows}
    if chunk_ids != expected:
        report.add("chunk_rows", str(doc_id))
    if expected - have:
        report.add("missing", str(doc_id))
        return True
    if have - expected or any(c.content_hash != document.content_hash
                              or c.dataset_id != document.dataset_id
                              or c.readers not in (None, tuple(document.readers))
                              for c in rows):
        report.add("stale", str(doc_id))
        return True
    return chunk_ids != expected  # Milvus is right, the Chunk rows are not


def _repair(version: IndexVersion, orphans: list[str], reindex: list[int]) -> None:
    writer = milvus.writer()
    with milvus_writer():  # and every row re-read under it: the comparison ran without it
        live = set(Document.objects.filter(deleted=False).values_list("doc_id", flat=True))
        orphans = [c for c in orphans if int(EvidenceKey.require(c).doc_id) not in live]
        for start in range(0, len(orphans), 1000):
            writer.delete_ids(orphans[start:start + 1000], collection=version.collection_name)
        embedder = embedder_named(version.embedder)
        for documents in document_batches(reindex):
            write_prepared(prepare(documents, chunking=version.chunking, embedder=embedder),
                           collection=version.collection_name)
