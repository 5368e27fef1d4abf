"""The MCP door: the official SDK's MCPServer with the governed-memory tools (server.py, tools.py), served over
stdio (`manage.py mcp`) and Streamable HTTP at /mcp/ (http.py)."""
