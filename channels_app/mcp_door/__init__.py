"""Agents as MCP servers: `/<slug>/mcp` serves one agent (`ask`), `/mcp` every agent the caller may
reach (`list_agents`, `ask(agent, …)`), over the official SDK's streamable HTTP transport.

`routes` is all a web process loads at start; the SDK (`serving`, `tools`) is imported by the first
MCP request.
"""
