"""What a CommonMark renderer makes of converted markdown: raw HTML it passes through, and the
targets of links and images (for the tests that no document's text becomes markup)."""

from __future__ import annotations

from urllib.parse import urlsplit

from markdown_it import MarkdownIt

SAFE_SCHEMES = {"", "http", "https", "mailto"}


def renderer() -> MarkdownIt:
    """A CommonMark renderer with GFM tables that turns every link into one, whatever its
    target (markdown-it's own check would hide an unsafe one from the test)."""
    md = MarkdownIt("commonmark").enable("table")
    md.validateLink = lambda url: True
    return md


RENDERER = renderer()


def markup(markdown: str) -> tuple[list[str], list[str]]:
    """The raw HTML a renderer passes through, and every link's and image's target."""
    html, targets = [], []
    for token in RENDERER.parse(markdown):
        if token.type == "html_block":
            html.append(token.content)
        for child in token.children or ():
            if child.type == "html_inline":
                html.append(child.content)
            elif child.type in ("link_open", "image"):
                targets.append(str(child.attrs.get("href") or child.attrs.get("src") or ""))
    return html, targets


def scheme(target: str) -> str:
    """The scheme a browser would see: control characters and spaces anywhere ignored."""
    return urlsplit("".join(c for c in target if c > " ")).scheme.lower()


def assert_text_and_safe_links(markdown: str) -> None:
    html, targets = markup(markdown)
    assert html == [], markdown
    assert {scheme(target) for target in targets} <= SAFE_SCHEMES, (targets, markdown)
