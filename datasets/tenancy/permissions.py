"""Who may read a document, and for whom a call reads.

A document's `readers` are principals as its source names them, `user:<name>` or
`group:<name>`, compared case aside. A document without readers is readable by every caller of
its dataset; one whose readers are NOBODY (its source restricts it in a way readers cannot say)
by the platform's own reads only. A source's documents take its readers and, where the source
keeps permissions (Confluence restrictions, a Feishu space's members, a private Yuque book's
team), those too: both apply.
A call reads with an `Access`:
- a person's (the user and groups an agent acts for, `on_behalf_of`, widened by the tenant's
  aliases): documents without readers, and those naming the user or one of the groups;
- `ANONYMOUS` (a key that names no person, or may not): documents without readers only;
- `PLATFORM` (the platform's own reads: evaluation, hit testing, the admin): every document.
A key's calls read with ANONYMOUS unless the key may act for people and the call names one.

Light on purpose (no models): the lookup's types and the audit read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.utils.crypto import salted_hmac

USER, GROUP = "user:", "group:"
MAX_READERS = 100  # principals on one document or source
MAX_GROUPS = 100  # groups one call may name
MAX_PRINCIPAL_CHARS = 200  # a principal, its kind included
# The one reader of a document restricted in a way readers cannot say (levels that name no
# principal in common; more than MAX_READERS): no call names it, so only the platform's own
# reads read the document. No principal() is it.
NOBODY = "none:"


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


def readers_named(names: Iterable[str], *, restricts: bool = False) -> list[str]:
    """The readers a source names (a page's restrictions, a space's members), each as
    principal() writes it: a name that is no principal is left out; when none is left of
    some, more than MAX_READERS are, or one is NOBODY (someone the source names in a way
    readers cannot say), NOBODY (never every caller). `restricts`: the names are the only
    ones who may read (a private space's members), so no name at all is NOBODY too. No name
    is read past the one that decides it: a listing `names` reads lazily asks for no page
    more."""
    given, readers = 0, set()
    for name in names:
        if name == NOBODY:
            return [NOBODY]
        given += 1
        try:
            readers.add(principal(name))
        except ValidationError:
            continue
        if len(readers) > MAX_READERS:
            return [NOBODY]
    if (given or restricts) and not readers:
        return [NOBODY]
    return sorted(readers)


def readers_within(*levels: Sequence[str]) -> list[str]:
    """A document's readers when each level restricts it (its source's readers, a space's
    members, each page above it, its own): an empty level restricts nothing; the principals
    every restricting level names, compared as written (levels that share none: NOBODY)."""
    restricting = [set(level) for level in levels if level]
    if not restricting:
        return []
    common = set.intersection(*restricting)
    return sorted(common) if common else [NOBODY]


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
