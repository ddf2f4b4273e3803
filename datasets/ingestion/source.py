"""The markdown a document keeps for re-indexing: redacted exactly as its chunks are.

Secrets never reach the database through the stored source, so the admin and the rebuild
only ever see the redacted text. In the frontmatter a value that is only the marker is written
as a quoted YAML string: `key: [REDACTED]` would be a YAML list, and re-indexing would read
another type than the one uploaded.
"""

from __future__ import annotations

import logging
import re

import yaml
from frontmatter.default_handlers import YAMLHandler

from datasets.ingestion.transformers import REDACTED, SecretRedactor

logger = logging.getLogger(__name__)

_BARE_MARKER = re.compile(r"^(?P<head>[^\n#]*?(?::|^\s*-)[ \t]*)" + re.escape(REDACTED)
                          + r"(?P<tail>[ \t]*)$", re.MULTILINE)


def stored_source(text: str, *, redact: bool) -> str:
    if not redact:
        return text
    redactor = SecretRedactor()
    handler = YAMLHandler()
    if handler.detect(text):
        try:
            fm_text, body = handler.split(text)
        except ValueError:  # an unclosed frontmatter; the parser rejects it before this
            return redactor.redact(text)
        if text.endswith(body):
            head = text[:len(text) - len(body)]
            return _frontmatter(head, fm_text, redactor) + redactor.redact(body)
    return redactor.redact(text)


def _frontmatter(head: str, fm_text: str, redactor: SecretRedactor) -> str:
    redacted = _BARE_MARKER.sub(lambda m: f'{m["head"]}"{REDACTED}"{m["tail"]}',
                                redactor.redact(fm_text))
    if redacted == fm_text:
        return head
    try:
        loaded = yaml.safe_load(redacted)
    except yaml.YAMLError:
        loaded = None
    if not isinstance(loaded, dict):
        # Never store what the next re-index could not read back.
        logger.warning("the redacted frontmatter does not parse; it is kept as uploaded")
        return head
    return head.replace(fm_text, redacted, 1)
