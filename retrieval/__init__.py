"""Retrieval: one app, packages by concept, each importing only from those below it.

The base here (types, analysis, lexical, fusion, chat, untrusted) → ragconfig → index → lookup
→ answers, admin → tools. docs/architecture.md draws the floors."""
