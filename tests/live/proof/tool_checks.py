"""What the CRM MCP server publishes and returns, seen with the raw mcp SDK client."""

from __future__ import annotations

from typing import Any

import jsonschema
from mcp.types import CallToolResult, Tool

from tests.live.proof.report import CheckResult, failed, passed
from tests.live.proof.store import StoreReader
from tests.support.mcp_client import mcp_session

LOOKUP = "find_contact_by_email"


def _keys(data: dict[str, Any] | None) -> str:
    return ", ".join(data) if data else "none"


def _structured(result: CallToolResult) -> dict[str, Any] | None:
    content = result.structured_content
    return dict(content) if isinstance(content, dict) else None


def check_output_schemas(tools: list[Tool]) -> CheckResult:
    name = "every CRM tool publishes an output schema"
    without = [tool.name for tool in tools if not tool.output_schema]
    if not tools:
        return failed(name, "the server lists no tools")
    if without:
        return failed(name, f"no outputSchema: {', '.join(without)}")
    return passed(name, ", ".join(sorted(tool.name for tool in tools)))


def check_lookup(result: CallToolResult, store: StoreReader, email: str) -> CheckResult:
    name = f"{LOOKUP} over MCP"
    data = _structured(result) or {}
    contact = store.contact(email)
    if contact is None:
        return failed(name, f"{email} is not in the seeded store")
    saw = f"{data.get('name')} <{data.get('email')}>"
    expected = {"ok": True, "found": True, "contact_id": contact.contact_id, "name": contact.name}
    if result.is_error or any(data.get(key) != value for key, value in expected.items()):
        return failed(name, f"isError={result.is_error} {data or result.content}; the store has {contact}")
    return passed(name, saw)


def check_absent(result: CallToolResult, store: StoreReader, email: str) -> CheckResult:
    name = "absent contact is not an error"
    data = _structured(result) or {}
    if store.contact(email) is not None:
        return failed(name, f"{email} is in the store, so it is not absent")
    saw = f"ok={str(data.get('ok')).lower()} found={str(data.get('found')).lower()}"
    if result.is_error or data.get("ok") is not True or data.get("found") is not False or data.get("error"):
        return failed(name, f"isError={result.is_error} {saw} error={data.get('error')!r}")
    return passed(name, saw)


def check_structured(tool: Tool | None, results: list[CallToolResult]) -> CheckResult:
    name = "result is structured, not text blocks"
    if tool is None or not tool.output_schema:
        return failed(name, f"{LOOKUP} publishes no outputSchema")
    for result in results:
        data = _structured(result)
        if data is None:
            return failed(name, f"structuredContent missing; content blocks: {result.content}")
        try:
            jsonschema.validate(data, tool.output_schema)
        except jsonschema.ValidationError as exc:
            return failed(name, f"structuredContent does not match outputSchema: {exc.message}")
    keys = _keys(_structured(results[0]))
    return passed(name, f"outputSchema published; structuredContent matches it ({keys})")


async def tool_checks(
    mcp_url: str, token: str, store: StoreReader, present: str, absent: str
) -> list[CheckResult]:
    async with mcp_session(mcp_url, token) as session:
        tools = list((await session.list_tools()).tools)
        found = await session.call_tool(LOOKUP, {"email": present})
        missing = await session.call_tool(LOOKUP, {"email": absent})
    lookup_tool = next((tool for tool in tools if tool.name == LOOKUP), None)
    return [
        check_output_schemas(tools),
        check_lookup(found, store, present),
        check_absent(missing, store, absent),
        check_structured(lookup_tool, [found, missing]),
    ]
