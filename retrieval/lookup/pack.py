"""Context packing: a bounded set of excerpts, in the post-processor's order."""

from __future__ import annotations

import re
from collections.abc import Sequence

from retrieval.types import ContextPack, PackedEvidence, ScoredChunk

# A tail shorter than this is noise to the agent; the item is dropped instead of cut.
MIN_PARTIAL_CHARS = 200
ELLIPSIS = "…"
# Sentence or line ends: CJK punctuation, a newline, or Latin punctuation followed by
# whitespace (so "3.14" and "e.g.x" are not cut points).
_BOUNDARY = re.compile(r"[。！？；]|\n|[.!?;](?=\s)")


def cut_text(text: str, limit: int) -> tuple[str, bool]:
    """Cut `text` to at most `limit` chars, at a sentence/line end when one is in the second
    half of the window; a cut excerpt ends with an ellipsis (counted in the limit)."""
    if len(text) <= limit:
        return text, False
    window = limit - len(ELLIPSIS)
    ends = [m.end() for m in _BOUNDARY.finditer(text, 0, window)]
    # Cutting at an early boundary would throw away most of the budget.
    cut = ends[-1] if ends and ends[-1] >= window // 2 else window
    return text[:cut].rstrip() + ELLIPSIS, True


class KnowledgeContextPacker:
    """Chunks → ContextPack bounded by `max_excerpt_chars` each and `max_context_chars` total."""

    def __init__(self, max_context_chars: int, max_excerpt_chars: int) -> None:
        if max_context_chars < MIN_PARTIAL_CHARS or max_excerpt_chars < MIN_PARTIAL_CHARS:
            raise ValueError(f"character limits must be at least {MIN_PARTIAL_CHARS}")
        self.max_context_chars = max_context_chars
        self.max_excerpt_chars = max_excerpt_chars

    def pack(self, chunks: Sequence[ScoredChunk]) -> ContextPack:
        items: list[PackedEvidence] = []
        total = 0
        truncated = False
        for chunk in chunks:
            excerpt, cut = cut_text(chunk.content.strip(), self.max_excerpt_chars)
            room = self.max_context_chars - total
            if len(excerpt) > room:
                # Out of budget: the last item is cut if a useful part fits, and nothing
                # after it is added (the order is the relevance order).
                truncated = True
                if room >= MIN_PARTIAL_CHARS:
                    excerpt, _ = cut_text(excerpt, room)
                    items.append(PackedEvidence(chunk=chunk, excerpt=excerpt, truncated=True))
                    total += len(excerpt)
                break
            truncated = truncated or cut
            items.append(PackedEvidence(chunk=chunk, excerpt=excerpt, truncated=cut))
            total += len(excerpt)
        return ContextPack(items=tuple(items), total_chars=total, truncated=truncated)
