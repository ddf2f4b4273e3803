"""The markdown a document keeps for re-indexing: its body redacted exactly as its chunks are.

Secrets never reach the database through the stored source either, so the admin and the
rebuild only ever see the redacted text. The frontmatter stays as uploaded: it is parsed again
at every re-index, and a redaction marker could change what its YAML means.
"""

from __future__ import annotations

from frontmatter.default_handlers import YAMLHandler

from datasets.ingestion.transformers import SecretRedactor


def stored_source(text: str, *, redact: bool) -> str:
    if not redact:
        return text
    redactor = SecretRedactor()
    handler = YAMLHandler()
    if handler.detect(text):
        try:
            _, body = handler.split(text)
        except ValueError:  # an unclosed frontmatter; the parser rejects it before this
            return redactor.redact(text)
        if text.endswith(body):
            return text[:len(text) - len(body)] + redactor.redact(body)
    return redactor.redact(text)
