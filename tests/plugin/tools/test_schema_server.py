"""A hostile server's schemas, through the runtime (tests/fixtures/schema_server.py, a real MCP server).

Issue 37's 16-level schema as a write's input schema or a read's output schema: the call is refused
before it is sent, saying why, and nothing is written. A result whose schema is within the limits but
costly to check is checked off the event loop: another conversation's calls to the same server are
answered while it runs (counted, never timed; the latencies are printed with ``-s``, and ``make
bench`` reports them: tests/bench/schema_line.py).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.errors import ToolArgumentsError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from tests.support import procs

SCHEMA_SERVER = procs.REPO_ROOT / "tests" / "fixtures" / "schema_server.py"


@pytest.fixture(scope="module")
def server() -> Iterator[procs.ServiceProcess]:
    port = procs.free_port()
    base = f"http://{procs.HOST}:{port}"
    process = procs.ServiceProcess(
        "schema-mcp",
        [procs.mcp_server_python(), str(SCHEMA_SERVER), "--host", procs.HOST, "--port", str(port)],
        env=procs.child_env(),
        ready_url=f"{base}/writes",
        url=f"{base}/mcp",
    )
    with process:
        yield process


@pytest.fixture
async def runtime(server: procs.ServiceProcess) -> AsyncIterator[MCPRuntime]:
    made = MCPRuntime({"schemas": MCPServerConfig(name="schemas", url=server.url)}, connect_timeout=5.0)
    try:
        yield made
    finally:
        await made.aclose()


def writes(server: procs.ServiceProcess) -> list[str]:
    texts: list[str] = httpx2.get(procs.base_url(server.url) + "/writes", timeout=5.0).json()["texts"]
    return texts


def calls_sent(server: procs.ServiceProcess) -> int:
    methods: list[str] = httpx2.get(procs.base_url(server.url) + "/methods", timeout=5.0).json()
    return methods.count("tools/call")


async def test_the_issues_schema_refuses_the_call_unsent_saying_why(
    server: procs.ServiceProcess, runtime: MCPRuntime
) -> None:
    await runtime.invoke("schemas", "echo", {"text": "warm"})
    before, sent = list(writes(server)), calls_sent(server)
    for tool in ("deep_note", "deep_echo"):
        for _ in range(2):
            with pytest.raises(ToolArgumentsError) as refused:
                await runtime.invoke("schemas", tool, {"text": "a refund for Dana"})
            assert f"the schema of tool {tool!r} is not used" in str(refused.value)
            assert "fan-out" in str(refused.value) and "Dana" not in str(refused.value)
    assert writes(server) == before and calls_sent(server) == sent


async def test_another_conversation_is_answered_while_a_costly_result_is_checked(runtime: MCPRuntime) -> None:
    async def timed(tool: str, text: str) -> float:
        started = time.perf_counter()
        await runtime.invoke("schemas", tool, {"text": text})
        return time.perf_counter() - started

    await timed("echo", "warm")
    heavy_alone = await timed("heavy_echo", "warm")  # the catalogue read, the schema compiled
    alone = statistics.median([await timed("echo", "alone") for _ in range(5)])
    hostile = [asyncio.create_task(timed("heavy_echo", f"hostile {i}")) for i in range(4)]
    beside: list[float] = []
    while not all(task.done() for task in hostile):
        latency = await timed("echo", "another conversation")
        if not all(task.done() for task in hostile):
            beside.append(latency)
    heavy = await asyncio.gather(*hostile)
    print(
        f"\nanother conversation's call: {alone * 1000:.1f} ms alone, "
        f"{statistics.median(beside) * 1000 if beside else float('nan'):.1f} ms (median of {len(beside)}) "
        f"while 4 costly results were checked ({statistics.median(heavy) * 1000:.0f} ms each; "
        f"first {heavy_alone * 1000:.0f} ms)"
    )
    assert len(beside) >= 3  # answered, repeatedly, while the costly checks ran
