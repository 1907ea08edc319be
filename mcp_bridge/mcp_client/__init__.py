"""The MCP client: long-lived sessions, each server's tool catalogue, the HTTP transport. Nothing of skills
or conversations."""
