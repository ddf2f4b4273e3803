"""The tools agents call: declared once in registry.py, from which the REST views and URLs, the
MCP server (stdio and streamable HTTP) and the tool schemas derive; one audit row per call."""
