"""HTML: the page's main content as markdown, headings and tables kept; scripts, styles and
the site's navigation dropped."""

from __future__ import annotations

from bs4 import BeautifulSoup, Comment, Tag
from markdownify import MarkdownConverter

from datasets.ingestion.formats.kinds import ConversionFailed, Converted, Limits
from datasets.ingestion.formats.markdown import defuse_markers, join_blocks

_NEVER_CONTENT = ("script", "style", "noscript", "template", "iframe", "object", "embed", "svg",
                  "canvas", "form", "button", "select", "input", "textarea", "link", "meta")
# Around the main content, not part of it; dropped when no <main> or <article> says where the
# content is.
_CHROME = ("nav", "header", "footer", "aside")


def convert_html(raw: bytes, limits: Limits) -> Converted:
    soup = BeautifulSoup(raw, "lxml")
    for element in soup.find_all(_NEVER_CONTENT):
        element.decompose()
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    root = _main_content(soup)
    if root is None:
        raise ConversionFailed("the HTML page has no body")
    markdown = MarkdownConverter(
        heading_style="ATX",
        bullets="-",
        strip=["img"],
        # The text as written: an escaped order\_svc or a\*b no longer matches what an agent
        # searches for (BM25 reads the chunk's text).
        escape_underscores=False,
        escape_asterisks=False,
        escape_misc=False,
        code_language_callback=_code_language,
    ).convert_soup(root)
    if not markdown.strip():
        raise ConversionFailed("the HTML page has no text")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    if title and not markdown.lstrip().startswith("# "):
        markdown = f"# {' '.join(title.split())}\n\n{markdown}"
    # A page's own text never passes for a location marker.
    return Converted(join_blocks([defuse_markers(markdown.strip())]))


def _code_language(pre: Tag) -> str:
    """The language of a <pre><code class="language-sql">, for the fence's info string."""
    code = pre.find("code")
    for name in (code.get("class") or []) if isinstance(code, Tag) else []:
        if isinstance(name, str) and name.startswith("language-"):
            return name.removeprefix("language-")
    return ""


def _main_content(soup: BeautifulSoup) -> Tag | None:
    for selector in ("main", "[role=main]", "article"):
        candidates = soup.select(selector)
        if candidates:
            return max(candidates, key=lambda tag: len(tag.get_text()))
    body = soup.body or soup
    for element in body.find_all(_CHROME):
        element.decompose()
    return body
