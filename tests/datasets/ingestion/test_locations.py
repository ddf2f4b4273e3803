"""Page, slide and sheet markers become the chunk's location and leave its text."""

from __future__ import annotations

import pytest

from datasets.ingestion.locations import Location, take_markers
from datasets.ingestion.parse import parse_markdown
from datasets.ingestion.pipeline import ChunkDraft, Chunking, build_chunks


def chunks(markdown: str, size: int = 400) -> list[ChunkDraft]:
    raw = markdown.encode()
    return build_chunks(parse_markdown(raw, file_name="x.md", max_bytes=len(raw) + 1),
                        chunking=Chunking(size=size, overlap=50), redact=False)


PAGES = ("# Report\n\n<!-- kb:page 1 -->\n\nIntro on the first page.\n\n## Disk\n\n"
         + "Disk words fill the page. " * 20 + "\n\n<!-- kb:page 2 -->\n\n"
         + "Second page words. " * 20 + "\n\n<!-- kb:page 3 -->\n\n## Memory\n\nMemory text.\n")


def test_each_chunk_carries_the_page_it_begins_on_and_no_marker() -> None:
    drafts = chunks(PAGES)

    assert [d.location.value if d.location else None for d in drafts][0] == 1
    assert drafts[-1].location == Location("page", 3)
    assert drafts[-1].breadcrumb == "p. 3 > Report > Memory"
    assert all("kb:page" not in d.content and "kb:page" not in d.search_text for d in drafts)
    second = [d for d in drafts if d.content.startswith("Second page")]
    assert second and all(d.location == Location("page", 2) for d in second)


def test_a_chunk_over_two_pages_carries_the_first() -> None:
    markdown = ("## Steps\n\n<!-- kb:page 4 -->\n\nStart of the steps.\n\n<!-- kb:page 5 -->\n\n"
                "End of the steps.\n")

    [draft] = chunks(markdown)

    assert draft.location == Location("page", 4)
    assert draft.content == "## Steps\n\nStart of the steps.\n\nEnd of the steps."


@pytest.mark.parametrize(("marker", "location", "label"), [
    ("<!-- kb:slide 2 -->", {"slide": 2}, "slide 2"),
    ("<!-- kb:sheet Inventory 2026 -->", {"sheet": "Inventory 2026"}, "sheet Inventory 2026"),
])
def test_slides_and_sheets(marker: str, location: dict[str, object], label: str) -> None:
    [draft] = chunks(f"{marker}\n\n## Hosts\n\nThe hosts of the fleet.\n")

    assert draft.location is not None and draft.location.as_dict() == location
    assert draft.breadcrumb == f"{label} > Hosts"


def test_a_document_without_markers_has_no_location() -> None:
    assert all(d.location is None for d in chunks("# Plain\n\nNo pages here.\n"))


def test_only_a_marker_on_a_line_of_its_own_counts() -> None:
    marked = take_markers("See <!-- kb:page 2 --> inline.\n```\n<!-- kb:page x -->\n```\n")

    assert marked.locations == ()


@pytest.mark.parametrize("stored", [None, "p. 3", {"page": "3"}, {"page": True},
                                    {"page": 1, "slide": 2}, {"row": 4}, {"sheet": 5}])
def test_a_stored_location_that_is_not_one_is_none(stored: object) -> None:
    assert Location.stored(stored) is None


def test_a_stored_location_reads_back() -> None:
    for location in (Location("page", 3), Location("slide", 1), Location("sheet", "Q1")):
        assert Location.stored(location.as_dict()) == location
