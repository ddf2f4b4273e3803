"""Who may read a document, and for whom a call reads.

A document's `readers` are principals as its source names them, `user:<name>` or
`group:<name>`, compared case aside. A document without readers is readable by every caller of
its dataset. A call reads with an `Access`:
- a person's (the user and groups an agent acts for, `on_behalf_of`, widened by the tenant's
  aliases): documents without readers, and those naming the user or one of the groups;
- `ANONYMOUS` (a key that names no person, or may not): documents without readers only;
- `PLATFORM` (the platform's own reads: evaluation, hit testing, the admin): every document.
A key's calls read with ANONYMOUS unless the key may act for people and the call names one.

Light on purpose (no models): the lookup's types and the audit read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.utils.crypto import salted_hmac

USER, GROUP = "user:", "group:"
MAX_READERS = 100  # principals on one document or source
MAX_GROUPS = 100  # groups one call may name
MAX_PRINCIPAL_CHARS = 200  # a principal, its kind included


def principal(value: str) -> str:
    """`value` as compared: trimmed, case folded, `user:` or `group:` and a name without
    control characters (ValidationError naming what is wrong)."""
    text = value.strip().casefold()
    kind = next((k for k in (USER, GROUP) if text.startswith(k)), None)
    name = text[len(kind):].strip() if kind else ""
    if kind is None or not name:
        raise ValidationError(f"{value[:60]!r} is no principal: write user:<name> or "
                              "group:<name>")
    if len(kind) + len(name) > MAX_PRINCIPAL_CHARS or not name.isprintable():
        raise ValidationError(f"{value[:60]!r}: a principal has at most "
                              f"{MAX_PRINCIPAL_CHARS} printable characters")
    return kind + name


def readers_checked(values: Iterable[str]) -> list[str]:
    """A document's or a source's readers, each checked, sorted, once each."""
    readers = sorted({principal(str(v)) for v in values})
    if len(readers) > MAX_READERS:
        raise ValidationError(f"at most {MAX_READERS} readers, not {len(readers)}")
    return readers


@dataclass(frozen=True)
class Access:
    """The principals a call reads with; None: every document (the platform's own reads)."""

    principals: frozenset[str] | None = frozenset()

    @classmethod
    def person(cls, user: str, groups: Iterable[str] = ()) -> Access:
        """A person's: the user and groups as an agent names them (ValidationError)."""
        names = list(groups)
        if len(names) > MAX_GROUPS:
            raise ValidationError(f"at most {MAX_GROUPS} groups")
        return cls(frozenset([principal(USER + user), *(principal(GROUP + g) for g in names)]))

    def may_read(self, readers: Iterable[str] | None) -> bool:
        """Whether a document with these readers may be read (none: everyone's)."""
        if self.principals is None:
            return True
        named = set(readers or ())
        return not named or not named.isdisjoint(self.principals)

    def widened(self, aliases: Iterable[str]) -> Access:
        """With the names the tenant's sources give the same person or groups."""
        if self.principals is None:
            return self
        return Access(self.principals | {principal(a) for a in aliases})

    def audited(self) -> dict[str, object]:
        """What the audit keeps of it: how many principals and a keyed hash of them, never
        a name (the same person's calls share the hash)."""
        if not self.principals:
            return {"principals": 0}
        joined = "\n".join(sorted(self.principals))
        return {"principals": len(self.principals),
                "hash": salted_hmac("kbplatform.on_behalf_of", joined,
                                    algorithm="sha256").hexdigest()[:16]}


ANONYMOUS = Access()
PLATFORM = Access(None)
