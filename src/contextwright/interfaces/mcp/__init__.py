"""The MCP server (``contextwright mcp``): contextwright's operations as MCP tools and resources.

`create_server` gives the SDK's `MCPServer` with the tools (``build_context``,
``append_messages``, ``recall``, ``search_memory``, ``add_memory``, ``compact``,
``list_conversations``) and the resources (a conversation's summary and latest
receipt); `serve` runs it over stdio or over streamable HTTP behind API keys;
`http_app` is the HTTP transport's ASGI app. Importing this package does not
import the SDK (extra ``contextwright[mcp]``); using it without the SDK raises
`MissingDependencyError`. See docs/mcp.md.
"""

from ._server import Settings, create_server, http_app, serve

__all__ = ["Settings", "create_server", "http_app", "serve"]
