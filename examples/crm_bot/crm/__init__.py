"""The reference CRM: a SQLite system of record, its REST API, and the CRM tools served locally
or over MCP. Run it with `python -m crm seed | rest | mcp`."""
