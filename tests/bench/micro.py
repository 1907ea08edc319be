"""In-process benchmarks: one tool call (local, bare SDK, bridge), session reuse, the executor cycle."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from crm import tools as crm_tools
from mcp_types import LATEST_PROTOCOL_VERSION

from mcp_bridge.config.servers import MCPServerConfig, load_mcp_servers
from mcp_bridge.confirmation.decisions import Turn
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.mcp_client.transport import AiohttpTransport
from mcp_bridge.skills.files import domain_responses, load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.bench import floor_server
from tests.bench.stats import Series, Variant, round_robin
from tests.support.conversation import skills_with_source
from tests.support.mcp_client import mcp_session

BOT = Path(__file__).resolve().parents[2] / "examples" / "crm_bot"
DANA = "dana@example.com"
TOOL = "find_contact_by_email"


def _check_contact(data: Any) -> None:
    if not isinstance(data, dict) or data.get("ok") is not True or data.get("found") is not True:
        raise RuntimeError(f"{TOOL}({DANA!r}) did not find the seeded contact: {data!r}")


def _check_noop(data: Any) -> None:
    if not isinstance(data, dict) or data.get("ok") is not True or data.get("echo") != DANA:
        raise RuntimeError(f"the floor server's noop({DANA!r}) did not answer as it should: {data!r}")


def mcp_servers(mcp_url: str, token: str) -> dict[str, MCPServerConfig]:
    """The MCP servers of the repo's endpoints.yml (flags such as `trusted` included), at this run's URL."""
    return load_mcp_servers(BOT / "endpoints.yml", env={"CRM_MCP_URL": mcp_url, "CRM_MCP_TOKEN": token})


@asynccontextmanager
async def bridge_runtime(mcp_url: str, token: str) -> AsyncIterator[MCPRuntime]:
    runtime = MCPRuntime(mcp_servers(mcp_url, token))
    try:
        yield runtime
    finally:
        await runtime.aclose()


@asynccontextmanager
async def tool_call_variants(mcp_url: str, token: str, floor_url: str) -> AsyncIterator[dict[str, Variant]]:
    """Section 1: the same call through the bridge, a bare SDK session kept open, and locally; and
    the floor: a tool that does nothing, over plain HTTP and over the bare SDK (tests/bench/floor_server.py).
    """
    async with AsyncExitStack() as stack:
        session = await stack.enter_async_context(mcp_session(mcp_url, token))
        runtime = await stack.enter_async_context(bridge_runtime(mcp_url, token))
        # The floor's SDK client runs as the bridge runs it (aiohttp under httpx2): the lowest it gets.
        floor = await stack.enter_async_context(
            mcp_session(floor_url + floor_server.MCP_PATH, transport=AiohttpTransport())
        )
        http = await stack.enter_async_context(aiohttp.ClientSession())
        raw_url = floor_url + floor_server.MCP_PATH
        raw_headers = await _hand_written_session(http, raw_url)
        raw_ids = itertools.count(1)

        async def local() -> None:
            _check_contact((await crm_tools.find_contact_by_email(DANA)).model_dump())

        async def sdk() -> None:
            result = await session.call_tool(TOOL, {"email": DANA})
            _check_contact(result.structured_content)

        async def bridge() -> None:
            _check_contact((await runtime.invoke("crm", TOOL, {"email": DANA})).data)

        async def noop_plain() -> None:
            async with http.post(floor_url + floor_server.PLAIN_PATH, json={"email": DANA}) as response:
                _check_noop(await response.json())

        async def noop_sdk() -> None:
            _check_noop((await floor.call_tool("noop", {"email": DANA})).structured_content)

        async def noop_jsonrpc() -> None:
            call = {"name": "noop", "arguments": {"email": DANA}}
            body = {"jsonrpc": "2.0", "id": next(raw_ids), "method": "tools/call", "params": call}
            async with http.post(raw_url, json=body, headers=raw_headers) as response:
                _check_noop((await response.json()).get("result", {}).get("structuredContent"))

        yield {
            "local": local,
            "sdk": sdk,
            "bridge": bridge,
            "noop_plain": noop_plain,
            "noop_jsonrpc": noop_jsonrpc,
            "noop_sdk": noop_sdk,
        }


async def tool_call(mcp_url: str, token: str, n: int, floor_url: str) -> dict[str, Series]:
    """Section 1 in this process (`tool_call_variants`, interleaved)."""
    async with tool_call_variants(mcp_url, token, floor_url) as variants:
        return await round_robin(variants, dict.fromkeys(variants, n))


async def _hand_written_session(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    """Open an MCP session with two plain POSTs (initialize, initialized); return the headers a
    request in it carries. For the floor only: the least a client can do, with no SDK client."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    client = {"name": "bench", "version": "0"}
    hello = {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": client}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
    async with http.post(url, json=body, headers=headers) as response:
        answer = await response.json()
        session_id = response.headers.get("mcp-session-id")
    version = answer.get("result", {}).get("protocolVersion")
    if not session_id or not version:
        raise RuntimeError(f"the floor server did not open a session: {answer!r}")
    headers |= {"mcp-session-id": session_id, "mcp-protocol-version": version}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers=headers) as response:
        if response.status >= 300:
            raise RuntimeError(f"the floor server refused notifications/initialized: HTTP {response.status}")
    return headers


@asynccontextmanager
async def session_variants(mcp_url: str, token: str) -> AsyncIterator[dict[str, Variant]]:
    """Section 2: a session kept open and reused against a new session (connect, initialize) per call."""
    async with mcp_session(mcp_url, token) as session:

        async def reused() -> None:
            _check_contact((await session.call_tool(TOOL, {"email": DANA})).structured_content)

        async def per_call() -> None:
            async with mcp_session(mcp_url, token) as fresh:
                _check_contact((await fresh.call_tool(TOOL, {"email": DANA})).structured_content)

        yield {"reused": reused, "per_call": per_call}


SESSION_WARMUP = 3  # a session per call is slow: fewer untimed calls first


async def session_reuse(mcp_url: str, token: str, n: int) -> dict[str, Series]:
    """Section 2 in this process (`session_variants`, interleaved)."""
    async with session_variants(mcp_url, token) as variants:
        return await round_robin(variants, dict.fromkeys(variants, n), warmup=SESSION_WARMUP)


def _executor(skills_dir: Path, mcp_url: str, token: str) -> Executor:
    servers = mcp_servers(mcp_url, token)
    skills = load_skills(
        skills_dir,
        local_tools=crm_tools.TOOLS,
        mcp_servers=servers,
        responses=domain_responses(BOT / "domain.yml"),
    )
    return Executor(skills, ToolBox(crm_tools.TOOLS, MCPRuntime(servers)))


async def _confirmation_cycle(executor: Executor, label: str) -> None:
    """log_interaction → pending question → "yes" → the note is written."""
    note = f"bench executor {label} {uuid.uuid4().hex}"
    conversation = f"bench-{uuid.uuid4().hex}"
    slots: dict[str, Any] = {"contact_email": DANA, "note_text": note}
    asked = await executor.start(
        "log_interaction",
        Turn(conversation, dict(slots), 1, "log_interaction", 1.0, {"log_interaction": 1.0}),
    )
    if asked.outcome != "pending" or [say.response for say in asked.say] != ["utter_confirm_note"]:
        raise RuntimeError(f"executor ({label}) did not ask before writing: {asked}")
    slots.update(asked.slots)
    done = await executor.answer(
        Turn(
            conversation,
            dict(slots),
            2,
            intent="affirm",
            intent_confidence=1.0,
            intent_ranking={"affirm": 1.0},
            text="yes",
            loop_active=True,
        )
    )
    if done.outcome != "done" or [say.response for say in done.say] != ["utter_note_saved"]:
        raise RuntimeError(f"executor ({label}) did not write the confirmed note: {done}")
    if done.slots.get(PENDING_SLOT) is not None:
        raise RuntimeError(f"executor ({label}) left a confirmation pending: {done}")


@asynccontextmanager
async def executor_variants(workdir: Path, mcp_url: str, token: str) -> AsyncIterator[dict[str, Variant]]:
    """Section 3: start → pending, confirm → write, with the tools local and over MCP."""
    executors = {
        source.replace(":crm", ""): _executor(
            skills_with_source(workdir / f"skills-{i}", source), mcp_url, token
        )
        for i, source in enumerate(("local", "mcp:crm"))
    }
    try:

        def cycle(label: str, executor: Executor) -> Variant:
            return lambda: _confirmation_cycle(executor, label)

        yield {label: cycle(label, executor) for label, executor in executors.items()}
    finally:
        for executor in executors.values():
            await executor.aclose()


async def executor_cycle(workdir: Path, mcp_url: str, token: str, n: int) -> dict[str, Series]:
    """Section 3 in this process (`executor_variants`, interleaved)."""
    async with executor_variants(workdir, mcp_url, token) as variants:
        return await round_robin(variants, dict.fromkeys(variants, n))


PEER_CONCURRENT = 8  # section 8's x8: callers at once


@asynccontextmanager
async def peer_variants(workdir: Path, mcp_url: str, token: str) -> AsyncIterator[dict[str, Variant]]:
    """Section 8, the bridge's line (tests/bench/peers.py): one call through the runtime, the
    executor's confirmation cycle over MCP, and eight callers at once on the one runtime."""
    executor = _executor(skills_with_source(workdir / "skills-peers", "mcp:crm"), mcp_url, token)
    runtime = MCPRuntime(mcp_servers(mcp_url, token))
    try:

        async def find() -> None:
            _check_contact((await runtime.invoke("crm", TOOL, {"email": DANA})).data)

        async def cycle() -> None:
            await _confirmation_cycle(executor, "peers")

        async def x8() -> None:
            await asyncio.gather(*(find() for _ in range(PEER_CONCURRENT)))

        yield {"call": find, "cycle": cycle, "x8": x8}
    finally:
        await runtime.aclose()
        await executor.aclose()
