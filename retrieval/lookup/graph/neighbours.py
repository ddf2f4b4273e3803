"""Neighbour expansion (RagConfig.neighbour_expansion): the text around each hit.

ADJACENT adds the chunks `window` places before and after a hit in its document; SECTION adds
the rest of the hit's section (the chunks of the same document with its breadcrumb, next to
it). Neighbours come from the serving collection within the lookup's own filters (tenant,
datasets, activation, metadata filters), so a neighbour is evidence like its hit and the
guard confirms it the same way. They are added only while the context budget has room after
the hits themselves: a neighbour never pushes a hit out of the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from datasets.documents.evidence import EvidenceKey
from datasets.documents.links import stored_lines
from datasets.ingestion.locations import Location
from retrieval.lookup.post_process import evidence_key_of
from retrieval.types import KnowledgeSearchPort, ScoredChunk, SearchFilters, SearchHit

MAX_SECTION_CHUNKS = 20  # per hit: a section longer than this is read from its hit onwards
MAX_DOCUMENT_CHUNKS = 2000  # the splitter's limit: what one document's listing may return


class NeighbourExpander:
    def __init__(self, mode: str, window: int, *, port: KnowledgeSearchPort) -> None:
        if mode not in ("ADJACENT", "SECTION"):
            raise ValueError(f"unknown neighbour expansion {mode!r}")
        self.mode = mode
        self.window = window
        self.port = port

    def expand(self, chunks: Sequence[ScoredChunk], filters: SearchFilters, *,
               budget: int, excerpt_chars: int) -> tuple[ScoredChunk, ...]:
        """New chunks, each marked `neighbour_of:<hit>`, in the hits' order, within `budget`
        characters (counted as the pack counts an excerpt)."""
        within = replace(filters, category=None)  # the hit's own document: no hint needed
        # By place in the document, as the store keys its rows.
        have = {str(EvidenceKey(c.doc_id, c.chunk_index)) for c in chunks
                if c.chunk_index is not None}
        wanted: list[tuple[ScoredChunk, str]] = []
        for chunk in chunks:
            if chunk.chunk_index is None or not chunk.doc_id.isdigit():
                continue
            for key in self._keys(chunk, within):
                if key not in have:
                    have.add(key)
                    wanted.append((chunk, key))
        if not wanted:
            return ()
        found = {hit.chunk_id: hit for hit in self.port.fetch(
            within, ids=[key for _, key in wanted], limit=len(wanted))}
        out: list[ScoredChunk] = []
        served = {c.evidence_key for c in chunks}  # as served: never one id twice
        for parent, key in wanted:
            hit = found.get(key)
            served_as = evidence_key_of(hit) if hit is not None else ""
            if hit is None or served_as in served:
                continue
            served.add(served_as)
            size = min(len(hit.content.strip()), excerpt_chars)
            if size > budget:
                break
            budget -= size
            out.append(_neighbour(parent, hit))
        return tuple(out)

    def _keys(self, chunk: ScoredChunk, filters: SearchFilters) -> list[str]:
        index = chunk.chunk_index
        assert index is not None
        if self.mode == "ADJACENT":
            return [str(EvidenceKey(chunk.doc_id, i))
                    for i in (*range(index - self.window, index),
                              *range(index + 1, index + self.window + 1)) if i >= 0]
        listing = self.port.fetch(filters, doc_id=int(chunk.doc_id), content=False,
                                  limit=MAX_DOCUMENT_CHUNKS)
        section = {int(h.metadata.get("chunkIndex", -1)) for h in listing
                   if str(h.metadata.get("breadcrumb", "")) == chunk.breadcrumb}
        before = [i for i in range(index - 1, index - MAX_SECTION_CHUNKS - 1, -1)
                  if i in section]
        after = [i for i in range(index + 1, index + MAX_SECTION_CHUNKS + 1) if i in section]
        # Contiguous runs only: a later section with the same heading is another section.
        return [str(EvidenceKey(chunk.doc_id, i))
                for i in (*reversed(_run(before, index, -1)), *_run(after, index, 1))]


def _run(indexes: Sequence[int], start: int, step: int) -> list[int]:
    run = []
    for expected, index in enumerate(indexes, 1):
        if index != start + step * expected:
            break
        run.append(index)
    return run


def _neighbour(parent: ScoredChunk, hit: SearchHit) -> ScoredChunk:
    meta = hit.metadata
    index = meta.get("chunkIndex")
    return replace(parent, evidence_key=evidence_key_of(hit), content=hit.content,
                   chunk_index=index if isinstance(index, int) else None,
                   breadcrumb=str(meta.get("breadcrumb", "")), raw_score=0.0,
                   location=Location.stored(meta.get("location")),
                   lines=stored_lines(meta.get("lines")), also_in=(),
                   hit_reasons=(f"neighbour_of:{parent.evidence_key}",))
