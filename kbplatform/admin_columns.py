"""Cells of the admin's lists, made to fit: at 1400 px the list has about 750 px beside the
navigation and the filters, and one long title or path pushed the other columns out of sight.
Long text is cut to a width, the whole of it on hover; two short values share a cell."""

from __future__ import annotations

from datetime import datetime

from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

# One line, cut with an ellipsis: em, not characters, so that Chinese (twice as wide) fits too.
_CUT = ("display: inline-block; max-width: {}em; overflow: hidden; text-overflow: ellipsis; "
        "white-space: nowrap; vertical-align: bottom")
_BELOW = "display: block; color: var(--body-quiet-color); font-size: 0.75rem"


def cut(text: object, em: float) -> SafeString:
    """`text` on one line of at most `em` em; the whole of it in the title (on hover)."""
    value = str(text)
    return format_html('<span class="kb-cut" title="{}" style="{}">{}</span>', value,
                       _CUT.format(em), value)


def stacked(first: object, second: object) -> SafeString:
    """Two values in one cell: `second` below `first`, small and quiet (either may be a cut
    cell or other HTML made safe)."""
    return format_html('{}<span class="kb-below" style="{}">{}</span>', first, _BELOW, second)


def when(moment: datetime) -> str:
    """A time as the admin's own columns show one (DATETIME_FORMAT, local time)."""
    return date_format(localtime(moment), "DATETIME_FORMAT")
