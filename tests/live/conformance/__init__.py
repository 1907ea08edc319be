"""The MCP project's conformance suite (@modelcontextprotocol/conformance) against the plugin's MCP client
(``client.py``, the command the suite runs) and the example CRM's MCP server (test_conformance.py)."""
