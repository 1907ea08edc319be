"""Guarded tool calls for conversational assistants: local Python tools or MCP tools, one executor.

A bot author touches little of it: skill files, ``import mcp_bridge.rasa`` in the actions package,
:func:`local_tool` for the bot's own tools, and the ``mcp-bridge`` command (init, check, tools,
test e2e). The rest is exported for tests and for other front ends than Rasa: nothing in this package
imports rasa_sdk except :mod:`mcp_bridge.rasa`.
"""

from mcp_bridge.audit import AuditLog
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
from mcp_bridge.executor import ConfirmationPolicy, Decision, Executor, Outcome, Responses, Say, Turn
from mcp_bridge.reader import (
    Answer,
    ConfirmationReader,
    Edit,
    NluOpinion,
    No,
    Other,
    Redirect,
    TooLong,
    Unclear,
    Yes,
    load_words,
)
from mcp_bridge.results import ToolResult
from mcp_bridge.runtime import MCPRuntime
from mcp_bridge.sealing import PendingConfirmation, Seal
from mcp_bridge.skills import Skill, load_skills
from mcp_bridge.tools import LocalTool, MCPTool, Tool, ToolBox, local_tool, register_local_tools

__all__ = [
    "Answer",
    "AuditLog",
    "BridgeError",
    "ConfigError",
    "ConfirmationPolicy",
    "ConfirmationReader",
    "Decision",
    "Edit",
    "Executor",
    "LocalTool",
    "MCPRuntime",
    "MCPServerConfig",
    "MCPTool",
    "NluOpinion",
    "No",
    "Other",
    "Outcome",
    "OutcomeUnknownError",
    "PendingConfirmation",
    "Redirect",
    "Responses",
    "Say",
    "Seal",
    "ServerUnavailableError",
    "Skill",
    "Tool",
    "ToolArgumentsError",
    "ToolBox",
    "ToolCallError",
    "ToolNotFoundError",
    "ToolResult",
    "ToolTimeoutError",
    "TooLong",
    "Turn",
    "Unclear",
    "Yes",
    "load_mcp_servers",
    "load_skills",
    "load_words",
    "local_tool",
    "register_local_tools",
]
