"""Bounds on every text derived from one uploaded document.

Each derived text (title, breadcrumb, chunk, search text) is copied once per chunk and
embedded, so an unbounded one multiplies the memory of ingesting a file: a 1.5 MB heading,
repeated into the search text of every chunk below it, once took a web process to 23 GB.
With these bounds a chunk's search text is at most MAX_SEARCH_TEXT_CHARS whatever the input.
"""

from __future__ import annotations

import re

# A title is read in result lists and repeated into every chunk's search text; 200
# characters is a long sentence, and a derived title (H1 or file name) longer than that is
# a paragraph written as a heading.
MAX_TITLE_CHARS = 200
# A title set on purpose in the frontmatter may be longer: Document.title holds 500.
MAX_FRONTMATTER_TITLE_CHARS = 500
# Per heading, in breadcrumbs and in the heading line that opens a chunk: a heading is
# repeated into every chunk below it, so it must cost far less than a chunk (800 by default).
MAX_HEADING_CHARS = 200
# The whole path "A > B > C": Chunk.breadcrumb holds 1000; six levels of 200 would be 1,215.
MAX_BREADCRUMB_CHARS = 500
# A code block or table is kept whole up to this many times chunk_size (3,200 characters at
# the default 800, about 60 lines of code), then cut at line boundaries: an agent needs to
# see a whole block, but a 1 MB fence as one chunk would be one 1 MB embedding input.
MAX_ATOMIC_FACTOR = 4
# The BM25 and embedding input of one chunk (Title + Path + Content). At the default chunk
# size it never cuts: 500 (title) + 500 (path) + 3,200 (largest chunk) + 2 newlines = 4,202.
# It bounds larger KB_CHUNK_SIZE settings, and the USE embedder, which does not truncate,
# needs about 17 KB per token (one token per CJK character): 4,500 characters ≈ 80 MB.
MAX_SEARCH_TEXT_CHARS = 4_500
# Chunks of one document, each embedded and stored as one Milvus row. At the default chunk
# size 2,000 chunks are about 1.4 MB of prose, far beyond a runbook, and embedding them
# takes ~30 s on the offline models; 10,000 one-line sections are a generated file.
MAX_CHUNKS_PER_DOCUMENT = 2_000

# markdown-it costs memory per line and per token, not per byte: 2 MB of "x" lines or of
# "#" lines took 0.3-1.8 GB and up to 100 s of CPU before these two bounds, which keep one
# parse near 60 MB. Lines: markdown-it keeps five integers per line (~200 bytes); 100,000
# lines of 2 MB average 21 bytes, shorter than any prose or code.
MAX_LINES = 100_000
# Tokens (3 per paragraph or heading, 5 per list item, 3 per table cell), ~600 bytes each
# with their share of the splitter's tree. 100,000 is a 20,000-item list or 33,000
# paragraphs; a 2 MB runbook of prose has ~20,000.
MAX_MARKDOWN_TOKENS = 100_000
# PyYAML needs ~110 bytes per byte of a flow list; real frontmatter is a few hundred bytes.
MAX_FRONTMATTER_CHARS = 32_768

# Frontmatter fields are rejected, not cut, above these: they are identifiers and filters
# the author chose, and a silently cut one would not match what the author filters on.
MAX_DOMAIN_CHARS = 100  # Document.domain
MAX_BUSINESS_KEY_CHARS = 200  # Document.business_key
MAX_OWNER_CHARS = 200  # Document.owner
# Milvus VARCHAR(100) counts UTF-8 bytes, not characters: 33 Chinese characters at most.
MAX_CATEGORY_BYTES = 100
MAX_KEYWORDS = 50
MAX_KEYWORD_CHARS = 100
# Other frontmatter fields (`team: sre`, `service: [billing, orders]`) are kept for the filters
# a tenant declares: named by a lower-case identifier, with a few short values. A field past
# these bounds is left out, not refused: nobody filters on it, and no upload fails for it.
MAX_FIELDS = 20
MAX_FIELD_VALUES = 20
MAX_FIELD_VALUE_CHARS = 200
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")

ELLIPSIS = "…"


def shorten(text: str, limit: int, *, cut: bool = False) -> str:
    """`text` if it fits in `limit` characters, else its start ending in "…".

    `cut` says the text was already cut before (e.g. only a prefix was parsed), so it gets
    the "…" even when it fits.
    """
    if len(text) <= limit and not cut:
        return text
    return text[: limit - 1].rstrip() + ELLIPSIS
