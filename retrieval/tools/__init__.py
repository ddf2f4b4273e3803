"""The tools agents call: REST views, their serializers and URLs, the MCP server (stdio and
streamable HTTP) and the tool schemas."""
