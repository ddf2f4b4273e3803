"""The cited rates of one document, as a panel of its admin page (datasets/admin/panels.py)."""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from audit.cited import Cited, document_cited
from datasets.models import Document


def _rate(figures: Cited) -> str:
    return f"{100 * figures.rate:.0f} %" if figures.rate is not None else "–"


def cited_panel(document: Document) -> SafeString:
    """How often the document's evidence was served as READY, cited and rated, in all and by
    rank: one grouped query."""
    total, by_rank = document_cited(document_id=document.doc_id)
    if not total.served:
        return format_html('<p class="cited-panel">{}</p>', "Not served as READY evidence yet "
                           "(or its calls were pruned from the audit).")
    rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", (
        (rank, figures.served, figures.cited, _rate(figures)) for rank, figures in by_rank))
    return format_html(
        '<div class="cited-panel"><p>Served as READY evidence <b class="cited-served">{}</b> '
        'times, cited <b class="cited-cited">{}</b> times (cited rate {}); rated helpful {}, '
        'not helpful {}.</p><table><thead><tr><th>rank</th><th>served</th><th>cited</th>'
        '<th>cited rate</th></tr></thead><tbody>{}</tbody></table></div>',
        total.served, total.cited, _rate(total), total.helpful, total.not_helpful, rows)
