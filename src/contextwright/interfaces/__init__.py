"""Interfaces: the ways in from outside, each standing on the service.

`cli` (the command line), `http` (the FastAPI service and its inspector page, extra
``[server]``), `mcp` (the MCP server, extra ``[mcp]``), `eval` (LoCoMo); `_host`
holds the per-tenant operations the two servers share, `_keys` the API keys.
"""
