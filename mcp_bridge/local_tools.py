"""Input schemas of local tool functions, derived the way the mcp SDK derives an MCP tool's.

So a local tool and the same function served over MCP refuse exactly the same arguments.
"""

import functools
from typing import Any

from mcp.server.mcpserver.utilities.func_metadata import func_metadata

from mcp_bridge.runtime import validate_against_schema
from mcp_bridge.skills import ToolFunction


@functools.cache
def input_schema(function: ToolFunction) -> dict[str, Any]:
    schema: dict[str, Any] = func_metadata(function).arg_model.model_json_schema()
    return schema


def validate_local_arguments(name: str, function: ToolFunction, arguments: dict[str, Any]) -> None:
    validate_against_schema(name, input_schema(function), arguments)
