"""A document's way in: its format sniffed and converted to markdown, parsed, transformed
(secrets redacted), located (pages, slides, sheets), split into chunk drafts — composed once
for the indexing (compose.py) — and its language told; a folder's import."""
