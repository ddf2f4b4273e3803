"""Panels an upper app adds to a document's admin page. The datasets app sits below them and
may not import them, so they register here when their app is ready (audit/apps.py registers
the document's cited rates)."""

from __future__ import annotations

from collections.abc import Callable

from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from datasets.models import Document

DocumentPanel = Callable[[Document], SafeString]
_PANELS: list[DocumentPanel] = []


def document_panel_register(panel: DocumentPanel) -> None:
    """Add `panel` to every document's page (once, however often an app is made ready)."""
    if panel not in _PANELS:
        _PANELS.append(panel)


def document_panels(document: Document) -> SafeString:
    """The registered panels of `document`, in the order they registered."""
    return format_html_join("", "{}", ((panel(document),) for panel in _PANELS))
