"""How current a document's evidence is: what evidence says of it (`updated_at`,
`reviewed_at`, `valid_until`, `owner`, `stale`) and what the console lists as stale."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Validity:
    updated_at: dt.datetime  # when its content last changed
    reviewed_at: dt.date | None = None  # frontmatter: when it was last reviewed
    valid_until: dt.date | None = None  # frontmatter: until when it holds
    owner: str = ""  # frontmatter: who answers for it

    def freshest(self, today: dt.date) -> dt.date:
        """The last day someone changed or vouched for it: its content's change, or its
        review if later (a review dated after `today` vouches for nothing yet)."""
        changed = self.updated_at.date()
        reviewed = self.reviewed_at if self.reviewed_at and self.reviewed_at <= today else None
        return max(changed, reviewed) if reviewed else changed

    def stale(self, today: dt.date) -> bool:
        """Past the day it holds until."""
        return self.valid_until is not None and self.valid_until < today

    def as_dict(self, today: dt.date) -> dict[str, Any]:
        """As evidence carries it (JSON), judged on `today`."""
        return {"updated_at": self.updated_at.isoformat(),
                "reviewed_at": self.reviewed_at.isoformat() if self.reviewed_at else None,
                "valid_until": self.valid_until.isoformat() if self.valid_until else None,
                "owner": self.owner, "stale": self.stale(today)}
