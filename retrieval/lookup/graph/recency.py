"""The recency prior (RagConfig.recency_half_life_days): a document's candidates count less
the older it is, never below half, so that of two runbooks that answer alike the one changed
or reviewed lately comes first. The relevance gate orders its candidates by it
(post_process.py); what they are, their qualities and the answer's relevance level stay as
they were."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from datasets.documents.selectors import db_id
from datasets.documents.validity import Validity

FLOOR = 0.5  # what the oldest document still counts


@dataclass(frozen=True)
class RecencyPrior:
    half_life_days: int
    validity: Mapping[int, Validity]  # of the documents the lookup may serve
    today: dt.date

    def weight(self, doc_id: str) -> float:
        """1 for a document changed or reviewed today (or unknown), 0.75 one half-life ago,
        tending to FLOOR."""
        document = db_id(doc_id)
        known = self.validity.get(document) if document is not None else None
        if known is None:
            return 1.0
        age = (self.today - known.freshest(self.today)).days
        return FLOOR + (1 - FLOOR) * float(0.5 ** (max(age, 0) / self.half_life_days))
