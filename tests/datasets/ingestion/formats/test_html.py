"""HTML as markdown that is text and safe links only: a link keeps an http(s), mailto or
relative target (however its scheme is spelt, encoded or padded) and loses any other, its text
kept; what a browser never shows (scripts, styles, templates, frames) is dropped, and what it
shows as text, `<script>` spelt with entities included, stays text: no markup of the page's
reaches the markdown agents read as excerpts. A web source's page is converted by the same
converter (datasets/sources/web.py stores it as an .html document)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datasets.ingestion.formats import ConversionFailed, Format, convert
from datasets.ingestion.formats.html import convert_html
from datasets.ingestion.formats.kinds import Limits
from datasets.ingestion.splitter import MarkdownSplitter
from tests.datasets.ingestion.formats.markup import assert_text_and_safe_links, markup

LIMITS = Limits(max_pages=10, max_cells=10_000, ocr=False, max_ocr_pages=0)


def page(body: str) -> bytes:
    return f"<html><head><title>Runbook</title></head><body><main>{body}</main></body></html>" \
        .encode()


HOSTILE_TARGETS = [
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "java&#x09;script:alert(1)",
    "java&#10;script:alert(1)",
    "jav&#x0D;ascript:alert(1)",
    " &#x01;&#x20;javascript:alert(1)",
    "&#106;&#97;&#118;&#97;script:alert(1)",
    "javascript&colon;alert(1)",
    "&amp;#106;avascript:alert(1)",  # decoded by the HTML parser, then by a markdown renderer
    "java&amp;Tab;script:alert(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "DATA:image/svg+xml,&lt;svg onload=alert(1)&gt;",
    "vbscript:msgbox(1)",
    "file:///etc/passwd",
    "javascript:alert(1)//https://example.com/",
]


@pytest.mark.parametrize("target", HOSTILE_TARGETS)
def test_a_link_with_any_other_scheme_keeps_its_text_and_loses_its_target(target) -> None:
    markdown = convert_html(page(f'<p>See <a href="{target}">the dashboard</a>.</p>'),
                            LIMITS).markdown

    assert "See the dashboard." in markdown
    assert markup(markdown) == ([], [])
    for word in ("javascript", "script:", "data:", "vbscript", "file:", "alert"):
        assert word not in markdown.lower()


@pytest.mark.parametrize(("href", "kept"), [
    ("https://status.example.com/gw?x=1&amp;y=2", "https://status.example.com/gw?x=1&y=2"),
    ("HTTP://example.com/a b", "HTTP://example.com/a%20b"),
    ("/runbooks/gateway", "/runbooks/gateway"),
    ("../gateway.html#restart", "../gateway.html#restart"),
    ("?page=2", "?page=2"),
    ("mailto:oncall@example.com", "mailto:oncall@example.com"),
    ('https://example.com/")<script>x', "https://example.com/%22%29%3Cscript%3Ex"),
])
def test_web_mail_and_relative_targets_are_kept(href, kept) -> None:
    markdown = convert_html(page(f"<p><a href='{href}'>the link</a></p>"), LIMITS).markdown

    assert markup(markdown) == ([], [kept])


def test_images_and_media_leave_nothing_but_text() -> None:
    markdown = convert_html(page(
        '<p>Before <img src="javascript:alert(1)" alt="x"><img src="data:image/png;base64,AA">'
        '<img src="https://example.com/a.png"> after.</p>'
        '<video src="javascript:alert(1)" poster="javascript:alert(2)">old browser</video>'
        '<audio src="data:audio/wav;base64,AA">no audio</audio>'), LIMITS).markdown

    assert " ".join(markdown.split()) == "# Runbook Before after."


@pytest.mark.parametrize("body", [
    "<script>alert(1)</script>",
    "<SCRIPT type='text/template'><p>alert(1)</p></SCRIPT>",
    "<ScRiPt>alert(1)",
    "<style>p { background: url(javascript:alert(1)) }</style>",
    "<noscript><p>alert(1)</p></noscript>",
    "<template><p>alert(1)</p></template>",
    "<iframe srcdoc='&lt;script&gt;alert(1)&lt;/script&gt;'><p>alert(1)</p></iframe>",
    "<noembed><script>alert(1)</script></noembed>",
    "<noframes><script>alert(1)</script></noframes>",
    "<object data='javascript:alert(1)'><p>alert(1)</p></object>",
    "<svg><script>alert(1)</script></svg>",
    "<form action='javascript:alert(1)'><button>alert(1)</button></form>",
])
def test_what_a_browser_never_shows_as_text_is_dropped(body) -> None:
    markdown = convert_html(page(f"<p>Restart the gateway.</p>{body}"), LIMITS).markdown

    assert "alert" not in markdown
    assert "script" not in markdown.lower()
    assert_text_and_safe_links(markdown)


@pytest.mark.parametrize("body", [
    "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>",
    "<p>&#60;script&#62;alert(1)&#60;/script&#62;</p>",
    "<p>&lt;<span>script</span>&gt;alert(1)&lt;/script&gt;</p>",
    "<p>&lt;img src=x onerror=alert(1)&gt; and &lt;!-- a comment --&gt;</p>",
    "<p>&lt;javascript:alert(1)&gt;</p>",
    "<xmp><script>alert(1)</script></xmp>",
    "<plaintext><script>alert(1)</script>",
    "<h2>&lt;iframe src=x&gt;</h2><ul><li>&lt;style&gt;</li></ul>",
    "<table><tr><th>a</th></tr><tr><td>&lt;script&gt;alert(1)&lt;/script&gt;</td></tr></table>",
    "<p>[click](javascript:alert(1)) and [ref]</p><p>[ref]: javascript:alert(1)</p>",
    "<p>[click]<b>(javascript:alert(1))</b> \\[x]\\<span>(javascript:alert(1))</span></p>",
    "<p><a href='https://example.com/'>x](javascript:alert(1)</a></p>",
    "<p>![x](javascript:alert(1)) &amp;lt;script&amp;gt;</p>",
    "<pre>```\n<script>alert(1)</script>\n```</pre><p>after</p>",
    "<pre><code class='language-x`&lt;'>&lt;script&gt;alert(1)&lt;/script&gt;</code></pre>",
    "<p><code>`</code>&lt;script&gt;<code>`</code></p>",
    "<math><mi xlink:href='javascript:alert(1)'>x</mi></math>",
])
def test_text_that_spells_markup_stays_text(body) -> None:
    """What a browser shows as text stays in the markdown, but never as markup (the page's
    `&lt;script&gt;` is the text "<script>", not a script)."""
    markdown = convert_html(page(body), LIMITS).markdown

    assert_text_and_safe_links(markdown)


def test_the_title_is_text_too() -> None:
    markdown = convert_html(
        b"<html><head><title>&lt;script&gt;alert(1)&lt;/script&gt; [x](javascript:y)"
        b"</title></head><body><p>Body</p></body></html>", LIMITS).markdown

    assert markdown.startswith("# ")
    assert_text_and_safe_links(markdown)


def test_a_page_with_only_a_script_has_no_text() -> None:
    with pytest.raises(ConversionFailed, match="has no text"):
        convert(Format.HTML, b"<html><body><script>alert(1)</script></body></html>")


FRAGMENTS = st.sampled_from([
    "&lt;script&gt;", "&lt;/script&gt;", "alert(1)", "[", "]", "(", ")", "\\", "`", "```",
    "javascript:", "java&#x09;script:", "&amp;", "&lt;", "!", ":", "<b>", "</b>", "<span>",
    "</span>", "<code>", "</code>", "<p>", "<pre>", "</pre>", "<li>", "<td>", "<h1>",
    "<a href='javascript:alert(1)'>", "<a href='https://example.com/'>", "</a>",
    "<img src='javascript:alert(1)'>", "\n", " ", "x", "<!--", "-->", "|", "<table><tr>",
    "</td>", "</tr></table>", "<blockquote>", "<h2>", "</h2>", "<ol>", "- ", "# ", "&gt;",
    "<!-- kb:page 9 -->", "Restart it. ", "a b c d e f g h i j k l m n o p q r s t u v w x y z ",
])


SPLITTER = MarkdownSplitter(chunk_size=100, chunk_overlap=20)


@settings(max_examples=200, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAGMENTS, min_size=1, max_size=60))
def test_no_arrangement_of_hostile_fragments_makes_markup_or_an_unsafe_link(fragments) -> None:
    """Neither in the page's markdown nor in any chunk of it, which is what an agent reads
    (chunks cut small: a cut may fall anywhere, inside inline code too)."""
    try:
        markdown = convert_html(page("".join(fragments)), LIMITS).markdown
    except ConversionFailed:
        return  # a page without text
    assert_text_and_safe_links(markdown)
    for segment in SPLITTER.split(markdown):
        assert_text_and_safe_links(segment.content)


def test_a_chunk_cut_inside_inline_code_leaves_no_markup() -> None:
    sentence = "The gateway restarts when its error rate stays above five percent. "
    markdown = convert_html(page(
        f"<p>{sentence * 3}Never paste <code>&lt;script src=x&gt;. alert(1) "
        f"[x](javascript:alert(2))&lt;/script&gt;</code> into the page. {sentence * 3}</p>"),
        LIMITS).markdown

    segments = SPLITTER.split(markdown)
    assert len(segments) > 3
    for segment in segments:
        assert_text_and_safe_links(segment.content)
