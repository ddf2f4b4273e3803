"""Where a person reads a piece of evidence: the link evidence carries (`url`).

The original's own address when it has one (a web page; a git file's page at the commit its
text came from, at the chunk's lines), a PDF's page in the platform's copy of it, else the
document's page in the admin. Admin links are absolute when KB_PUBLIC_URL names the
platform's address, else paths on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings
from django.urls import reverse

from datasets.ingestion.formats import Format
from datasets.ingestion.locations import Location


def stored_lines(value: Any) -> tuple[int, int] | None:
    """A chunk's [first, last] lines as its metadata stores them; None for anything else (a
    chunk of a converted file, or one indexed before lines were kept)."""
    if (isinstance(value, list) and len(value) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in value)):
        return value[0], value[1]
    return None


def lines_json(lines: tuple[int, int] | None) -> dict[str, int] | None:
    """A chunk's lines as evidence carries them: {"start", "end"} (null: none known)."""
    return {"start": lines[0], "end": lines[1]} if lines else None


def git_file_url(location: str, commit: str, path: str) -> str:
    """A repository file's page at `commit` on its host, for a repository reached over
    http(s) ("" for a local one): GitLab's `/-/blob/`, Gitea's and Forgejo's `/src/commit/`,
    else GitHub's `/blob/` (hosts by name). Never the location's user or token."""
    parts = urlsplit(location)
    if parts.scheme not in ("http", "https") or not parts.hostname or not commit:
        return ""
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    repository = parts.path.rstrip("/").removesuffix(".git")
    name = parts.hostname.lower()
    kind = ("-/blob" if "gitlab" in name else
            "src/commit" if any(n in name for n in ("gitea", "forgejo", "codeberg")) else "blob")
    return urlunsplit((parts.scheme, host, f"{repository}/{kind}/{commit}/{quote(path)}", "", ""))


@dataclass(frozen=True)
class DocumentLink:
    """What a document's evidence links are made of."""

    pk: int
    format: str
    url: str  # Document.url: the original's address, "" when it has none

    def evidence_url(self, *, location: Location | None, lines: tuple[int, int] | None) -> str:
        """The link of evidence that begins at `location` and spans `lines` of the file."""
        if self.url:
            return self.url + (_line_anchor(self.url, lines) if lines else "")
        if self.format == Format.PDF and location is not None and location.kind == "page":
            return _absolute(reverse("admin:datasets_document_original", args=[self.pk])) \
                + f"#page={location.value}"
        return _absolute(reverse("admin:datasets_document_change", args=[self.pk]))


def _line_anchor(url: str, lines: tuple[int, int]) -> str:
    first, last = lines
    if "/-/blob/" in url:  # GitLab: #L3-9
        return f"#L{first}-{last}"
    if "/blob/" in url or "/src/commit/" in url:  # GitHub, Gitea: #L3-L9
        return f"#L{first}-L{last}"
    return ""  # a web page has no line anchors


def _absolute(path: str) -> str:
    return settings.KB_PUBLIC_URL.rstrip("/") + path
