"""Questions from an MCP server, protocol side: the elicitation state machine and the calls that wait for
an answer."""
