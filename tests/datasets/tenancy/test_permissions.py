"""Readers as the sources give them: each level a document's readers must be within, names
that are no principal never widening a document, NOBODY read by no call but the platform's."""

from __future__ import annotations

from collections.abc import Iterator

from datasets.tenancy.permissions import (
    ANONYMOUS,
    MAX_READERS,
    NOBODY,
    PLATFORM,
    Access,
    readers_named,
    readers_within,
)


def test_a_sources_names_are_readers_and_a_bad_one_never_widens_a_document() -> None:
    assert readers_named([]) == []  # the source restricts nothing
    assert readers_named(["user:Alice@Example.org", "group:sre", "group:SRE"]) == [
        "group:sre", "user:alice@example.org"]
    # A name that is no principal is left out; when none is left, nobody (never everyone).
    assert readers_named(["group:sre", "user:\x00", "robot:x"]) == ["group:sre"]
    assert readers_named(["user:", "user:\x07bell"]) == [NOBODY]
    assert readers_named(f"user:u{n}" for n in range(MAX_READERS + 1)) == [NOBODY]


def test_readers_are_within_every_level_that_restricts() -> None:
    assert readers_within([], []) == []
    assert readers_within(["group:sre"], []) == ["group:sre"]
    assert readers_within(["group:sre", "user:bob"], ["user:bob", "user:carol"]) == ["user:bob"]
    assert readers_within(["group:sre"], ["group:dba"]) == [NOBODY]
    assert readers_within([NOBODY], []) == [NOBODY]


def test_nobody_is_read_by_no_call_but_the_platforms() -> None:
    everyone = Access.person("alice", ["sre", "none"])
    for access in (everyone, ANONYMOUS, everyone.widened(["group:x"])):
        assert not access.may_read([NOBODY])
    assert PLATFORM.may_read([NOBODY])


def test_names_are_read_no_further_than_the_one_that_decides() -> None:
    read: list[int] = []

    def names() -> Iterator[str]:  # a listing read lazily: each name a page may cost
        for n in range(500):
            read.append(n)
            yield f"user:u{n}"

    assert readers_named(names()) == [NOBODY] and len(read) == MAX_READERS + 1
    assert readers_named(iter(["user:a", NOBODY, "user:b"])) == [NOBODY]
