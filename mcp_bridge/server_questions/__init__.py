"""A server's questions (MCP elicitation), protocol side: what an MCP server asks the person in the middle
of a call, read as a form or a URL's consent (its state machine), and the 2025-11-25 calls kept open while
the person answers (waiting calls). Asking them in the conversation is the confirmation layer's
(:mod:`mcp_bridge.confirmation.server_asking`). They are never the plugin's own questions
(:mod:`mcp_bridge.question`)."""
