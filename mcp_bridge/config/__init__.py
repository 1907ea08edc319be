"""Reading the plugin's configuration: YAML files, ``${VAR}`` substitution, endpoints.yml's MCP servers,
and the settings (:mod:`mcp_bridge.config.settings`: every environment variable the plugin reads, read
once)."""
