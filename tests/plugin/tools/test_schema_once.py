"""A tool's schema is walked for its patterns once per schema object, and its verdict kept.

The walk (every ``pattern`` and ``patternProperties`` key, each compiled in RE2) ran on every call,
for the input schema twice per confirmed write and for the output schema once per MCP call: most of
the bridge's own CPU per MCP call (docs/reports/mcp-cpu.md). A schema object lives as long as its
catalogue entry, so its verdict is kept by object; a refusal is kept as a refusal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mcp_bridge.errors import ToolArgumentsError
from mcp_bridge.tools import schema


def _walks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The schemas `_patterns` is asked to walk from the top (depth 0), in order."""
    walked: list[Any] = []
    real = schema._patterns

    def counting(node: Any, depth: int) -> Iterator[str]:
        if depth == 0:
            walked.append(node)
        return real(node, depth)

    monkeypatch.setattr(schema, "_patterns", counting)
    return walked


def _schema(pattern: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": pattern}},
        "required": ["code"],
    }


def test_a_schema_is_walked_once_however_often_its_tool_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    walked = _walks(monkeypatch)
    tool_schema = _schema(r"^[A-Z]{3}-\d+$")
    for _ in range(5):
        schema.check_schema_patterns("lookup", tool_schema)
        schema.validate_against_schema("lookup", tool_schema, {"code": "ABC-1"})
    assert walked == [tool_schema]


def test_a_new_schema_object_is_walked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalogue read afresh brings new objects: their patterns are checked anew, even when equal."""
    walked = _walks(monkeypatch)
    first, second = _schema("^a+$"), _schema("^a+$")
    schema.check_schema_patterns("lookup", first)
    schema.check_schema_patterns("lookup", second)
    assert len(walked) == 2 and walked[0] is first and walked[1] is second


def test_a_refused_pattern_is_refused_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    walked = _walks(monkeypatch)
    refused = _schema(r"^(a)\1$")  # a backreference: RE2 cannot run it
    for _ in range(3):
        with pytest.raises(schema.PatternRefusedError, match="the schema of tool 'lookup' cannot be checked"):
            schema.check_schema_patterns("lookup", refused)
        with pytest.raises(ToolArgumentsError, match="cannot be checked"):
            schema.validate_against_schema("lookup", refused, {"code": "aa"})
    assert walked == [refused]


def test_the_verdict_names_the_tool_that_asked() -> None:
    """One schema object shared by two tools: each refusal names the tool it was checked for."""
    shared = _schema("(?=lookahead)")
    for tool in ("first_tool", "second_tool"):
        with pytest.raises(schema.PatternRefusedError, match=f"tool '{tool}'"):
            schema.check_schema_patterns(tool, shared)
