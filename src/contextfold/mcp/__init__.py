"""`contextfold mcp`: the recall and pin tools of a conversation, for any MCP client.

An agent behind `contextfold proxy` never sees what was folded; this server gives it the
runtime's own recall tools (SPEC L2) and pins (N1-N2) over the store, for the client's own
conversation and nothing else (L4): `which.py` finds that conversation, `tools.py` runs the
tools with the library's functions, `server.py` serves them over stdio or streamable HTTP
with the official `mcp` SDK (the `mcp` extra). docs/mcp.md has the whole story.
"""
