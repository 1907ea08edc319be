"""Tools behind one interface: the :class:`~mcp_bridge.tools.sources.Tool` protocol, local tools, argument
checks, results, and the layers every call goes through."""
