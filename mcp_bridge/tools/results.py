"""One result shape for every tool, wherever it ran."""

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolResult:
    """What a tool answered. Steps and responses branch on ``ok`` and ``error``, so both always exist."""

    tool: str
    data: dict[str, Any] = field(default_factory=dict)
    # False when the result was rebuilt from text blocks because the tool publishes no output schema.
    structured: bool = True
    source: str = "local"
    # Read from ``data`` once, when the result is made.
    ok: bool = field(init=False, compare=False)
    error: str | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        error = self.data.get("error")
        object.__setattr__(self, "ok", self.data.get("ok") is True)
        object.__setattr__(self, "error", None if error is None else str(error))


def from_local(tool: str, value: Any) -> ToolResult:
    """Normalise what a local tool function returned (a pydantic model or a mapping)."""
    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json")
    elif isinstance(value, dict):
        data = dict(value)
    else:
        raise TypeError(f"local tool {tool!r} returned {type(value).__name__}; return a pydantic model")
    return ToolResult(tool=tool, data=_with_ok(data), structured=True, source="local")


def from_mcp(tool: str, server: str, result: CallToolResult) -> ToolResult:
    source = f"mcp:{server}"
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    if result.is_error:
        return ToolResult(
            tool=tool, data={"ok": False, "error": text or "the tool reported an error"}, source=source
        )
    if result.structured_content is not None:
        return ToolResult(tool=tool, data=_with_ok(dict(result.structured_content)), source=source)
    log.warning(
        "MCP tool %r on server %r published no output schema, so its result arrived as text blocks "
        "and the keys 'ok' and 'error' were recovered from text. Fix the server: annotate the tool's "
        "return type with a pydantic model (or TypedDict) instead of dict, so it publishes outputSchema "
        "and returns structuredContent.",
        tool,
        server,
    )
    return ToolResult(tool=tool, data=_with_ok(_parse_text(text)), structured=False, source=source)


def _parse_text(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"text": text}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _with_ok(data: dict[str, Any]) -> dict[str, Any]:
    # A result without 'ok' did not fail: tools that predate the convention must still route.
    data.setdefault("ok", True)
    data.setdefault("error", None)
    return data
