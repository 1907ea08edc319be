"""OAuth for MCP servers: client credentials, acting as the person, and where people's tokens are kept."""
