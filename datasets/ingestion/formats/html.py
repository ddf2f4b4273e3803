"""HTML: the page's main content as markdown, headings and tables kept; scripts, styles and
the site's navigation dropped. The markdown holds no markup of the page's: its text stays text
(`&lt;script&gt;` is the text "<script>", never a tag), images are dropped, and a link keeps
its target only when it is an http(s), mailto or relative one."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import quote

from bs4 import BeautifulSoup, Comment, Tag
from markdown_it import MarkdownIt
from markdownify import MarkdownConverter

from datasets.ingestion.formats.kinds import ConversionFailed, Converted, Limits
from datasets.ingestion.formats.markdown import (
    defuse_markers,
    heading,
    join_blocks,
    literal,
    plain_text,
)

# What a browser never shows as the page's text: its content is dropped with the element.
_NEVER_CONTENT = ("script", "style", "noscript", "template", "iframe", "frame", "frameset",
                  "noembed", "noframes", "object", "embed", "applet", "svg", "canvas", "video",
                  "audio", "form", "button", "select", "input", "textarea", "link", "meta")
# Around the main content, not part of it; dropped when no <main> or <article> says where the
# content is.
_CHROME = ("nav", "header", "footer", "aside")

# A link's target is kept with these schemes, or none (a relative one); any other
# (javascript:, data:, vbscript:, file:...) runs or reads something: the link is dropped as
# a script is, its text kept. mailto: is kept: an address to write to (the on-call's) is
# content, and opening a mail client runs nothing.
_SCHEMES = frozenset({"http", "https", "mailto"})
# A scheme as a URL parser reads one (WHATWG URL: a letter, then letters, digits, + - .).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
# What a URL parser strips from a URL's ends (C0 controls and space) and removes anywhere
# (tab, line feed, carriage return): `\x01 java\tscript:` is javascript:.
_URL_ENDS = "".join(map(chr, range(0x21)))
_URL_IGNORED = re.compile(r"[\t\n\r]")
# Left as they are in a kept target; anything else is percent-encoded, so that no target
# ends the markdown link early, holds a space, a bracket or a quote, or reads as an entity
# other than the ones checked.
_URL_SAFE = "!#$%&'*+,/:;=?@~"
# Where markdownify writes a converted element inside a line of markup of its own: a heading
# or table cell (`_inline`), a link, emphasis, a quote.
_INLINE_PARENTS = frozenset({"_inline", "a", "b", "strong", "em", "i", "del", "s", "strike",
                             "sub", "sup", "q"})
_LINE_BREAKS = re.compile(r"[ \t]*\n\s*")
_SPAN_UNSAFE = re.compile(r"[<\[\]]")
# Links made whatever their target (markdown-it's own check would hide one from _renders_as_text).
_RENDERER = MarkdownIt("commonmark").enable("table")
_RENDERER.validateLink = lambda url: True  # type: ignore[method-assign]
# A code block's language, from its class: letters, digits and a few marks, nothing that
# could end the fence's line.
_LANGUAGE = re.compile(r"[\w+#.\-]{1,40}")


def convert_html(raw: bytes, limits: Limits) -> Converted:
    soup = BeautifulSoup(raw, "lxml")
    for element in soup.find_all(_NEVER_CONTENT):
        element.decompose()
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    root = _main_content(soup)
    if root is None:
        raise ConversionFailed("the HTML page has no body")
    markdown = _Markdown(
        heading_style="ATX",
        bullets="-",
        strip=["img"],
        # The text as written: an escaped order\_svc or a\*b no longer matches what an agent
        # searches for (BM25 reads the chunk's text).
        escape_underscores=False,
        escape_asterisks=False,
        escape_misc=False,
    ).convert_soup(root)
    if not markdown.strip():
        raise ConversionFailed("the HTML page has no text")
    notes: tuple[str, ...] = ()
    if not _renders_as_text(markdown):
        # Structure markdownify wrote around the page's text (code spans side by side, a
        # code block where only a line fits) made some of it markup: the page's text, as text.
        markdown = plain_text(root.get_text("\n"))
        notes = ("the page's layout could not be kept safely: converted as plain text",)
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    if title and not markdown.lstrip().startswith("# "):
        markdown = f"{heading(1, title)}\n\n{markdown.lstrip()}"
    # A page's own text never passes for a location marker.
    return Converted(join_blocks([defuse_markers(markdown.strip())]), notes)


def _renders_as_text(markdown: str) -> bool:
    """Whether a CommonMark renderer (with tables, as the splitter reads the markdown) finds
    no raw HTML in it and only links and images whose targets a link may keep."""
    for token in _RENDERER.parse(markdown):
        if token.type == "html_block":
            return False
        for child in token.children or ():
            target = child.attrs.get("href") or child.attrs.get("src")
            if child.type == "html_inline" or (target is not None and not all(
                    _allowed(url) for url in (str(target), html.unescape(str(target))))):
                return False
    return True


def link_target(href: str) -> str | None:
    """The target a link keeps, or None: also checked as a markdown renderer reads it (with
    its entities decoded: `&#106;avascript:` left by the HTML parser is javascript: there)."""
    cleaned = _URL_IGNORED.sub("", href.strip(_URL_ENDS))
    if not cleaned or not all(_allowed(url) for url in (cleaned, html.unescape(cleaned))):
        return None
    return quote(cleaned, safe=_URL_SAFE)


def _allowed(url: str) -> bool:
    scheme = _SCHEME.match(_URL_IGNORED.sub("", url.strip(_URL_ENDS)))
    return scheme is None or scheme.group(1).lower() in _SCHEMES


class _Markdown(MarkdownConverter):
    """markdownify with the page's text kept as text, links' targets checked and code fences
    that no code ends. (markdownify's stub declares none of the methods overridden here.)"""

    def escape(self, text: str, parent_tags: Any) -> str:
        # Called for text outside code only: code is shown as written by any renderer.
        return literal(super().escape(text, parent_tags))  # type: ignore[misc]

    def convert_a(self, el: Tag, text: str, parent_tags: Any) -> str:
        target = link_target(str(el.get("href") or ""))
        el.attrs = {"href": target} if target else {}  # a title is not content
        return str(super().convert_a(el, text, parent_tags))  # type: ignore[misc]

    def convert_code(self, el: Tag, text: str, parent_tags: Any) -> str:
        if "_noformat" in parent_tags:  # a code block's text
            return text
        # A blank line would end the span's paragraph, and a chunk may be cut inside a span
        # (the splitter cuts long paragraphs at sentences): its text would be left raw. Code
        # that holds what would then be markup is written as text instead.
        text = _LINE_BREAKS.sub(" ", text)
        if _SPAN_UNSAFE.search(text):
            return literal(text)
        return str(super().convert_code(el, text, parent_tags))  # type: ignore[misc]

    def convert_pre(self, el: Tag, text: str, parent_tags: Any) -> str:
        if not text:
            return ""
        if parent_tags & _INLINE_PARENTS:
            # A fence must start its line: inside bold text, a link or a table cell its
            # first line would be text, and the code raw HTML.
            return str(self.convert_code(el, " ".join(text.split()), parent_tags))
        longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"\n\n{fence}{_code_language(el)}\n{text.strip(chr(10))}\n{fence}\n\n"


def _code_language(pre: Tag) -> str:
    """The language of a <pre><code class="language-sql">, for the fence's info string."""
    code = pre.find("code")
    for name in (code.get("class") or []) if isinstance(code, Tag) else []:
        if isinstance(name, str) and name.startswith("language-"):
            language = name.removeprefix("language-")
            return language if _LANGUAGE.fullmatch(language) else ""
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
