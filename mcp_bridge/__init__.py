"""Guarded tool calls for conversational assistants: local Python tools or MCP tools, one executor.

A bot author touches little of it: skill files, ``import mcp_bridge.rasa`` in the actions package,
:func:`local_tool` for the bot's own tools, and the ``mcp-bridge`` command (init, check, tools,
test e2e). The rest is exported for tests and for other front ends than Rasa: nothing in this package
imports rasa_sdk except :mod:`mcp_bridge.rasa`.

The names below are imported on first use (PEP 562), not with the package: the Rasa server imports
:mod:`mcp_bridge.channels` from an environment that has none of the plugin's dependencies (mcp,
pydantic 2), and importing a subpackage runs this file first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from mcp_bridge.sources import LocalTool, MCPTool, Tool
    from mcp_bridge.tools import ToolBox, local_tool, register_local_tools

# name -> the module that defines it
_EXPORTS = {
    "AuditLog": "audit",
    "MCPServerConfig": "config",
    "load_mcp_servers": "config",
    "BridgeError": "errors",
    "ConfigError": "errors",
    "OutcomeUnknownError": "errors",
    "ServerUnavailableError": "errors",
    "ToolArgumentsError": "errors",
    "ToolCallError": "errors",
    "ToolNotFoundError": "errors",
    "ToolTimeoutError": "errors",
    "ConfirmationPolicy": "executor",
    "Decision": "executor",
    "Executor": "executor",
    "Outcome": "executor",
    "Responses": "executor",
    "Say": "executor",
    "Turn": "executor",
    "Answer": "reader",
    "ConfirmationReader": "reader",
    "Edit": "reader",
    "NluOpinion": "reader",
    "No": "reader",
    "Other": "reader",
    "Redirect": "reader",
    "TooLong": "reader",
    "Unclear": "reader",
    "Yes": "reader",
    "load_words": "reader",
    "ToolResult": "results",
    "MCPRuntime": "runtime",
    "PendingConfirmation": "sealing",
    "Seal": "sealing",
    "Skill": "skills",
    "load_skills": "skills",
    "LocalTool": "sources",
    "MCPTool": "sources",
    "Tool": "sources",
    "ToolBox": "tools",
    "local_tool": "tools",
    "register_local_tools": "tools",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
