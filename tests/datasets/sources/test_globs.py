"""A source's include globs: what they take, in time linear in the path, whatever the
pattern; a pattern with too many `*` is refused when the source is saved."""

from __future__ import annotations

import time

import pytest

from datasets.sources.base import Globs
from datasets.sources.locations import MAX_GLOB_STARS
from datasets.sources.services import InvalidSource
from tests.datasets.sources.builders import make_source


@pytest.mark.parametrize(("pattern", "path", "taken"), [
    ("**/*.md", "a.md", True), ("**/*.md", "docs/deep/a.md", True),
    ("**/*.md", "a.txt", False), ("*.md", "docs/a.md", False), ("*.md", "a.md", True),
    ("docs/**/*.md", "docs/a.md", True), ("docs/**/*.md", "docs/x/y/a.md", True),
    ("docs/**/*.md", "other/a.md", False), ("docs/**", "docs/x/y", True),
    ("**", "any/thing", True), ("a?c.md", "abc.md", True), ("a?c.md", "a/c.md", False),
    ("a.md", "a.md", True), ("a.md", "xa.md", False), ("a.md", "a.mdx", False),
    ("[x].md", "[x].md", True), ("[x].md", "x.md", False), ("a**b", "a/x/b", True),
    ("**/", "a/", True), ("**/b", "b", True), ("**/b", "a/xb", False),
    ("*a*a*b", "aaab", True), ("*a*a*b", "ab", False),
])
def test_what_a_glob_takes(pattern: str, path: str, taken: bool) -> None:
    assert Globs([pattern])(path) is taken


def test_no_globs_take_every_file() -> None:
    assert Globs([])("any/file.bin")


def test_a_glob_made_to_backtrack_is_matched_in_linear_time() -> None:
    # The glob froze the web process for 10-13 s with `re` (each `*a` more: x4).
    globs = Globs(["*a*a*a*a*a*a*a*a*a*b", "**/*a*a*a*a*a*a*a*a*a*b"])
    for length in (40, 400, 4000):
        started = time.monotonic()
        assert not globs("a" * length)
        assert not globs("x/" * (length // 2) + "a" * length)
        assert time.monotonic() - started < 2.0, length


@pytest.mark.django_db
def test_a_glob_with_too_many_stars_is_refused_when_saved(kb) -> None:
    with pytest.raises(InvalidSource, match=f"at most {MAX_GLOB_STARS} `\\*`") as refused:
        make_source(kb.dataset, kind="web", location="https://example.org/",
                    include=["*a" * (MAX_GLOB_STARS + 1)])
    assert "include" in refused.value.extra["fields"]
    make_source(kb.dataset, kind="web", location="https://example.org/",
                include=["*a" * MAX_GLOB_STARS])
