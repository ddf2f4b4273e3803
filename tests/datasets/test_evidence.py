"""The evidence key `{docId}#chunk-{n}`: built and read back by one type."""

from __future__ import annotations

import pytest

from datasets.evidence import EvidenceKey


def test_a_key_reads_back_as_the_key_it_was_built_from() -> None:
    key = EvidenceKey("3101", 2)
    assert str(key) == "3101#chunk-2"
    assert EvidenceKey.parse(str(key)) == key
    assert EvidenceKey.require("3101#chunk-2") == key


@pytest.mark.parametrize("text", [
    "", "3101", "3101#chunk-", "#chunk-2", "3101#chunk-x", "3101#chunk-2 ", "3101#chunk--1",
    "3101#chunk-٢", "a#b#chunk-1", "vector:abc", "rank:3", "[3101#chunk-2]"])
def test_anything_else_is_not_a_key(text: str) -> None:
    assert EvidenceKey.parse(text) is None
    with pytest.raises(ValueError, match="not an evidence key"):
        EvidenceKey.require(text)
