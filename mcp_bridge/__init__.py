"""Guarded tool calls for conversational assistants: local Python tools or MCP tools, one executor.

Nothing in this package imports Rasa except :mod:`mcp_bridge.rasa_adapter`.
"""

from mcp_bridge.config import MCPServerConfig, load_mcp_servers
from mcp_bridge.errors import (
    BridgeError,
    ConfigError,
    OutcomeUnknownError,
    ServerUnavailableError,
    ToolArgumentsError,
    ToolCallError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from mcp_bridge.results import ToolResult
from mcp_bridge.runtime import MCPRuntime

__all__ = [
    "BridgeError",
    "ConfigError",
    "MCPRuntime",
    "MCPServerConfig",
    "OutcomeUnknownError",
    "ServerUnavailableError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolNotFoundError",
    "ToolResult",
    "ToolTimeoutError",
    "load_mcp_servers",
]
