"""``gputriage mcp``: the read-only answers an assistant can call over the Model Context
Protocol (tools.py: the tools as plain functions; bounded.py: each call in its own
process under a time bound; server.py: the SDK's stdio server around them)."""
