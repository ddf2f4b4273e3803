"""The agent channels over the tools: the calls every channel shares (calls.py), their
definitions for agent frameworks (schemas.py) and the MCP server over stdio and streamable
HTTP (mcp_server.py, mcp_http.py). The REST views (retrieval/apis.py) are a channel too."""
