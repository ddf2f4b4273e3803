"""What the checks know — each document's owner and the intervals in which it was switched
off — and the checks of every answer against it."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

FOREVER = float("inf")


@dataclass(frozen=True)
class Owner:
    tenant: int
    dataset: int


@dataclass(frozen=True)
class ToolKey:
    label: str
    secret: str
    tenant: int
    datasets: tuple[int, ...]  # what it may read


class Ledger:
    """Each document's owner and marker words, and the intervals in which it was switched
    off: from the moment the answer to the deactivation or deletion arrived to the moment
    the reactivation was sent (or forever)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owners: dict[str, Owner] = {}
        self.markers: dict[str, tuple[str, ...]] = {}
        self.off: dict[str, list[list[float]]] = {}
        self.deleted: dict[str, float] = {}  # when the deletion's answer arrived

    def add(self, doc_id: str, owner: Owner, markers: tuple[str, ...]) -> None:
        with self._lock:
            self.owners[doc_id] = owner
            self.markers[doc_id] = markers

    def switched_off(self, doc_id: str, *, at: float, deleted: bool) -> None:
        with self._lock:
            intervals = self.off.setdefault(doc_id, [])
            if deleted:
                self.deleted[doc_id] = at
            if not intervals or intervals[-1][1] != FOREVER:
                intervals.append([at, FOREVER])

    def switched_on(self, doc_id: str, *, at: float) -> None:
        with self._lock:
            intervals = self.off.get(doc_id)
            if intervals and intervals[-1][1] == FOREVER:
                intervals[-1][1] = at

    def served_while_off(self, doc_id: str, sent: float, received: float) -> str:
        """"deleted" or "deactivated" when the document was off from before `sent` to after
        `received`; "" otherwise (a switch during the request may go either way)."""
        for start, end in self.off.get(doc_id, ()):
            if start <= sent and received <= end:
                return "deleted" if self.deleted.get(doc_id, FOREVER) <= sent else "deactivated"
        return ""

    def states(self) -> tuple[list[str], list[str]]:
        """(on, off): live documents that are activated, and deactivated ones."""
        with self._lock:
            live = [d for d in self.owners if d not in self.deleted]
            off = {d for d in live if self.off.get(d) and self.off[d][-1][1] == FOREVER}
            return [d for d in live if d not in off], sorted(off)

    def pick(self, rng: random.Random, count: int) -> list[tuple[str, str]]:
        """(document, one of its marker words): half served documents, half deactivated or
        deleted ones — the queries ask for exactly what must not be served."""
        with self._lock:
            off = [d for d in self.off if self.off[d][-1][1] == FOREVER]
            on = list(self.markers.keys() - set(off))
            picked = [rng.choice(off if off and (not on or rng.random() < 0.5) else on)
                      for _ in range(count)]
            return [(d, rng.choice(self.markers[d])) for d in picked]


@dataclass(frozen=True)
class Observation:
    key: ToolKey
    requested: tuple[int, ...]
    probe: bool  # asked for a dataset outside the key's scope: must be refused (400)
    status: int
    evidence_status: str
    doc_ids: tuple[str, ...]  # the evidence served, or the ids a guard call confirmed
    sent: float
    received: float
    asked: tuple[str, ...] = ()  # the documents whose marker words the query carried
    tool: str = "lookup_knowledge"
    phase: int = 0  # which of the run's agent counts it was made under


@dataclass
class Findings:
    out_of_scope: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Lookups whose query named a document that was off for the whole request: the chances
    # a leak had to show.
    asked_for_off: int = 0


def check(observations: list[Observation], ledger: Ledger) -> Findings:
    """Every answer against what the key may read and what was off during the request."""
    found = Findings()
    for seen in observations:
        if seen.probe:
            if seen.status == 200:
                found.out_of_scope.append(f"{seen.key.label} was answered for datasets "
                                          f"{list(seen.requested)} outside its scope")
            continue
        allowed = set(seen.requested or seen.key.datasets) & set(seen.key.datasets)
        if seen.status and any(ledger.served_while_off(d, seen.sent, seen.received)
                               for d in seen.asked):
            found.asked_for_off += 1
        for doc in seen.doc_ids:
            owner = ledger.owners.get(doc)
            if owner is None or owner.tenant != seen.key.tenant or owner.dataset not in allowed:
                where = f"tenant {owner.tenant} dataset {owner.dataset}" if owner else "unknown"
                found.out_of_scope.append(f"{seen.key.label} (datasets {sorted(allowed)}) got "
                                          f"document {doc} of {where}")
                continue
            state = ledger.served_while_off(doc, seen.sent, seen.received)
            if state:
                getattr(found, state).append(f"{seen.key.label} got {state} document {doc}")
    return found
