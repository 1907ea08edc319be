"""Reading the plugin's configuration: YAML files, ``${VAR}`` substitution, endpoints.yml's MCP servers."""
