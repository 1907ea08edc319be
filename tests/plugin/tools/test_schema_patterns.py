"""Patterns a server publishes cost the action server next to nothing, whatever they are.

Against a real MCP server (tests/fixtures/pattern_server.py) whose schemas carry ``^(a+)+$``, a
pattern Python's ``re`` takes exponential time on for "aaa…!" (2^27 steps for the 28 characters
here: seconds, during which the event loop, and so every other conversation, would stand still):
the input schema of a write, the output schema of a read and, through the elicitation state
machine, a question's field. Each such call is timed against a call of the same shape without a
pattern and must cost under 50 ms more; calls of other conversations running at the same time
keep their latency. Patterns RE2 cannot run (a backreference, a lookahead) are refused before the
call is sent. The figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.errors import ToolArgumentsError, ToolResultInvalidError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.server_questions.elicitation import Replied, begin, reply
from mcp_bridge.tools import schema
from tests.support import procs

PATTERN_SERVER = procs.REPO_ROOT / "tests" / "fixtures" / "pattern_server.py"
HOSTILE = "a" * 27 + "!"  # fails ^(a+)+$ only after 2^27 backtracking steps in Python's re
MATCHING = "a" * 28
BUDGET_SECONDS = 0.05


@pytest.fixture(scope="module")
def server() -> Iterator[procs.ServiceProcess]:
    port = procs.free_port()
    base = f"http://{procs.HOST}:{port}"
    process = procs.ServiceProcess(
        "pattern-mcp",
        [procs.mcp_server_python(), str(PATTERN_SERVER), "--host", procs.HOST, "--port", str(port)],
        env=procs.child_env(),
        ready_url=f"{base}/writes",
        url=f"{base}/mcp",
    )
    with process:
        yield process


@pytest.fixture
async def runtime(server: procs.ServiceProcess) -> AsyncIterator[MCPRuntime]:
    made = MCPRuntime({"patterns": MCPServerConfig(name="patterns", url=server.url)}, connect_timeout=5.0)
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


async def timed(runtime: MCPRuntime, tool: str, text: str) -> tuple[float, Any]:
    """Wall time of one call and its outcome (the result, or the exception it raised)."""
    started = time.perf_counter()
    try:
        outcome: Any = await runtime.invoke("patterns", tool, {"text": text})
    except Exception as exc:  # the outcome under test
        outcome = exc
    return time.perf_counter() - started, outcome


async def median_of(runtime: MCPRuntime, tool: str, text: str, times: int = 7) -> float:
    return statistics.median([(await timed(runtime, tool, text))[0] for _ in range(times)])


async def test_a_catastrophic_input_pattern_refuses_at_once_and_writes_nothing(
    server: procs.ServiceProcess, runtime: MCPRuntime
) -> None:
    before = list(writes(server))
    await timed(runtime, "plain_note", "warm")  # connect and list once
    normal = await median_of(runtime, "echo", MATCHING)  # a round trip to the server
    elapsed, outcome = await timed(runtime, "save_note", HOSTILE)
    hostile = statistics.median(
        [elapsed] + [(await timed(runtime, "save_note", HOSTILE))[0] for _ in range(4)]
    )
    print(f"\ninput pattern: refused in {hostile * 1000:.2f} ms; a normal call {normal * 1000:.2f} ms")
    assert isinstance(outcome, ToolArgumentsError), outcome
    assert "fails pattern" in str(outcome) and HOSTILE not in str(outcome)  # the rule, never the value
    assert hostile < BUDGET_SECONDS
    assert writes(server) == before + ["warm"]  # nothing of the refused calls was written
    await runtime.invoke("patterns", "save_note", {"text": MATCHING})  # a matching one is sent
    assert writes(server)[-1] == MATCHING


async def test_a_catastrophic_output_pattern_costs_no_more_than_a_normal_call(runtime: MCPRuntime) -> None:
    normal = await median_of(runtime, "echo", MATCHING)
    elapsed, outcome = await timed(runtime, "echo", HOSTILE)
    hostile = statistics.median([elapsed] + [(await timed(runtime, "echo", HOSTILE))[0] for _ in range(6)])
    print(f"\noutput pattern: {hostile * 1000:.2f} ms a call; the same call matching {normal * 1000:.2f} ms")
    assert isinstance(outcome, ToolResultInvalidError), outcome
    assert hostile - normal < BUDGET_SECONDS


async def test_other_conversations_keep_their_latency_while_hostile_calls_run(runtime: MCPRuntime) -> None:
    await timed(runtime, "echo", MATCHING)
    alone = await median_of(runtime, "echo", MATCHING)

    async def others() -> list[float]:
        return [(await timed(runtime, "echo", MATCHING))[0] for _ in range(10)]

    async def hostile() -> None:
        for _ in range(10):
            await asyncio.gather(timed(runtime, "echo", HOSTILE), timed(runtime, "save_note", HOSTILE))

    latencies, _ = await asyncio.gather(others(), hostile())
    during = statistics.median(latencies)
    print(
        f"\nanother conversation's call: {alone * 1000:.2f} ms alone, "
        f"{during * 1000:.2f} ms (median; worst {max(latencies) * 1000:.2f} ms) beside hostile calls"
    )
    assert during - alone < BUDGET_SECONDS
    assert max(latencies) < alone + 4 * BUDGET_SECONDS


def test_a_catastrophic_pattern_in_a_servers_question_is_checked_at_once() -> None:
    request = {
        "message": "Which code?",
        "requestedSchema": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^(a+)+$", "maxLength": 100}},
            "required": ["code"],
        },
    }
    step = begin("patterns", request)
    assert not isinstance(step, Replied)
    started = time.perf_counter()
    again = reply(step.pending, HOSTILE)
    elapsed = time.perf_counter() - started
    print(f"\nquestion pattern: a reply checked in {elapsed * 1000:.2f} ms")
    assert elapsed < BUDGET_SECONDS
    assert not isinstance(again, Replied)  # the reply does not fit: the field is asked again
    answered = reply(again.pending, MATCHING)
    assert isinstance(answered, Replied) and answered.content == {"code": MATCHING}


async def test_patterns_re2_cannot_run_refuse_the_call_before_it_is_sent(
    server: procs.ServiceProcess, runtime: MCPRuntime
) -> None:
    before, sent = list(writes(server)), calls_sent(server)
    for tool in ("backref_note", "lookahead_echo"):
        with pytest.raises(ToolArgumentsError, match="cannot be run in linear time"):
            await runtime.invoke("patterns", tool, {"text": "aa"})
    assert writes(server) == before and calls_sent(server) == sent


def test_a_question_with_a_pattern_re2_cannot_run_is_declined_unasked() -> None:
    request = {
        "message": "Which code?",
        "requestedSchema": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "(a)\\1"}},
        },
    }
    assert begin("patterns", request) == Replied("decline")


def test_texts_and_patterns_over_their_limits_are_refused_not_skipped() -> None:
    with pytest.raises(schema.PatternRefusedError, match="characters"):
        schema.validate_against_schema(
            "t",
            {"properties": {"text": {"type": "string", "pattern": "^a*$"}}},
            {"text": "a" * (schema.MAX_PATTERN_INPUT_CHARS + 1)},
        )
    with pytest.raises(schema.PatternRefusedError, match="characters"):
        schema.validate_against_schema(
            "t", {"properties": {"text": {"pattern": "a" * (schema.MAX_PATTERN_CHARS + 1)}}}, {"text": "a"}
        )
    # patternProperties, and the additionalProperties that depends on it, run in RE2 too.
    keys = {"patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}
    started = time.perf_counter()
    with pytest.raises(ToolArgumentsError):
        schema.validate_against_schema("t", keys, {HOSTILE: 1})
    assert time.perf_counter() - started < BUDGET_SECONDS
