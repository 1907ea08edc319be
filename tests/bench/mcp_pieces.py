"""`python -m tests.bench.mcp_pieces` (part of `make profile`): what one MCP call costs the caller's CPU,
by client, and what its pieces cost.

Against a seeded CRM REST API and its MCP server on free local ports, in this process:

1. CPU per find_contact_by_email call (this process's CPU clock, so a busy machine hardly moves it),
   interleaved rounds, for: the local function; the bridge (`MCPRuntime.invoke`); the SDK's `Client`
   as the bridge runs it (2026-07-28, aiohttp under httpx2) without the bridge; the SDK's
   `ClientSession` with the 2025-11-25 handshake, on aiohttp and on httpx2's own transport; fastmcp's
   `Client`; and a hand-written JSON-RPC client on aiohttp (the least any MCP client can do);
2. the pieces of one call, each timed alone (best of 5 repeats): the bridge's own checks, the SDK's
   request building, parsing and validations, httpx2's request building;
3. the SDK patches proposed in docs/reports/mcp-cpu.md, applied in this process only, for the
   measurement (the product never patches the SDK): CPU per call of the SDK's `Client` before and
   after each, interleaved.

Writes var/bench/mcp-pieces.txt. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import pstats
import secrets
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
from crm import tools as crm_tools
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.mcp_client.transport import AiohttpTransport
from mcp_bridge.tools import schema as our_schema
from tests.bench import micro
from tests.bench.__main__ import REPO, _loadavg, _scratch_parent, run_async
from tests.support import procs
from tests.support.mcp_client import auth_headers, mcp_session

DANA = micro.DANA
TOOL = micro.TOOL
Call = Callable[[], Awaitable[Any]]


def _check(data: Any) -> None:
    if not isinstance(data, dict) or data.get("found") is not True:
        raise RuntimeError(f"{TOOL} did not find the seeded contact: {data!r}")


@asynccontextmanager
async def sdk_client(url: str, token: str) -> AsyncIterator[Client]:
    """The SDK's `Client` exactly as the bridge opens it (mcp_bridge/mcp_client/runtime.py), bare."""
    async with (
        httpx2.AsyncClient(
            headers=auth_headers(token),
            timeout=httpx2.Timeout(30.0, read=300.0),
            transport=AiohttpTransport(),
        ) as http,
        Client(streamable_http_client(url, http_client=http), mode="auto", cache=None) as client,
    ):
        await client.session.list_tools()  # the output schemas the SDK validates results against
        yield client


async def hand_written(stack: AsyncExitStack, url: str, token: str) -> Call:
    http = await stack.enter_async_context(aiohttp.ClientSession(headers=auth_headers(token)))
    headers = await micro._hand_written_session(http, url)
    ids = itertools.count(1)

    async def call() -> None:
        params = {"name": TOOL, "arguments": {"email": DANA}}
        body = {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": params}
        async with http.post(url, json=body, headers=headers) as response:
            _check((await response.json()).get("result", {}).get("structuredContent"))

    return call


async def per_call_cpu(variants: dict[str, Call], rounds: int, calls: int) -> dict[str, tuple[float, float]]:
    """name -> (median CPU ms per call, median wall ms per call) over `rounds` interleaved rounds."""
    for call in variants.values():
        for _ in range(10):
            await call()
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            own, start = time.process_time(), time.perf_counter()
            for _ in range(calls):
                await variants[name]()
            cpu[name].append((time.process_time() - own) / calls * 1000)
            wall[name].append((time.perf_counter() - start) / calls * 1000)
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name])) for name in names}


def piece(fn: Callable[[], Any], n: int = 2000) -> float:
    """Microseconds per call, best of 5 repeats."""
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


# The SDK patches proposed in docs/reports/mcp-cpu.md, each as the change upstream would make.


def _patch_validate_only() -> Callable[[], None]:
    """mcp_types.methods.validate_server_result: validate against the revision's model, without the
    dump that serialize_server_result makes and validate_server_result throws away."""
    from mcp_types import methods

    original = methods.validate_server_result

    def validate_server_result(
        method: str, version: str, data: Any, *, surface: Any = methods.SERVER_RESULTS
    ) -> None:
        methods._check_known_version(version)
        methods._adapter(surface[(method, version)]).validate_python(data, by_name=False)

    methods.validate_server_result = validate_server_result  # type: ignore[assignment]

    def undo() -> None:
        methods.validate_server_result = original

    return undo


def _transports(client: Client) -> list[Any]:
    """The StreamableHTTPTransport under `client` (found once: the SDK does not expose it)."""
    found = [value for value in _walk(client) if type(value).__name__ == "StreamableHTTPTransport"]
    if not found:
        raise RuntimeError("the SDK client's StreamableHTTPTransport was not found")
    return found


def _patch_parsed_url(transports: list[Any]) -> Callable[[], None]:
    """StreamableHTTPTransport: the endpoint URL parsed once (httpx2.URL), not on every POST."""
    saved = [(transport, transport.url) for transport in transports]
    for transport, url in saved:
        transport.url = httpx2.URL(url)

    def undo() -> None:
        for transport, url in saved:
            transport.url = url

    return undo


def _walk(root: Any, depth: int = 0, seen: set[int] | None = None) -> list[Any]:
    """Objects reachable from `root` through attributes and closures, a few levels deep."""
    seen = seen if seen is not None else set()
    if depth > 6 or id(root) in seen:
        return []
    seen.add(id(root))
    found = [root]
    children: list[Any] = []
    if hasattr(root, "__dict__"):
        children += list(vars(root).values())
    for name in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(root, name, None)
        if frame is not None:
            children += list(frame.f_locals.values())
    if callable(root) and getattr(root, "__closure__", None):
        children += [cell.cell_contents for cell in root.__closure__ if cell.cell_contents is not None]
    if isinstance(root, (list, tuple, set)):
        children += list(root)
    if isinstance(root, dict):
        children += list(root.values())
    for child in children:
        if isinstance(child, (str, bytes, int, float, bool, type(None))):
            continue
        found += _walk(child, depth + 1, seen)
    return found


async def measure(mcp_url: str, token: str, rounds: int, calls: int) -> list[str]:
    out: list[str] = []
    async with AsyncExitStack() as stack:
        runtime = MCPRuntime(micro.mcp_servers(mcp_url, token))
        stack.push_async_callback(runtime.aclose)
        bare = await stack.enter_async_context(sdk_client(mcp_url, token))
        legacy_aio = await stack.enter_async_context(
            mcp_session(mcp_url, token, transport=AiohttpTransport())
        )
        legacy_httpx = await stack.enter_async_context(mcp_session(mcp_url, token))
        from fastmcp import Client as FastMCPClient

        fast = await stack.enter_async_context(FastMCPClient(mcp_url, auth=token))
        raw = await hand_written(stack, mcp_url, token)
        args = {"email": DANA}

        async def local() -> None:
            _check((await crm_tools.find_contact_by_email(DANA)).model_dump())

        async def bridge() -> None:
            _check((await runtime.invoke("crm", TOOL, args)).data)

        from mcp_bridge.tools import results as tool_results

        async def bridge_direct() -> None:
            """The proposal for mcp_client/runtime.py measured: invoke's checks and result as they are,
            the SDK's call awaited in the caller's task (no task and no asyncio.wait per call)."""
            tool = await runtime.get_tool("crm", TOOL)
            our_schema.validate_against_schema(tool.name, tool.input_schema, args)
            our_schema.check_schema_patterns(tool.name, tool.output_schema or {})
            connection = await runtime._connection("crm")
            session = connection._require_session()
            answer = await session.call_tool(TOOL, args, read_timeout_seconds=30.0, allow_input_required=True)
            _check(tool_results.from_mcp(TOOL, "crm", answer).data)  # type: ignore[arg-type]

        async def sdk_modern() -> None:
            _check((await bare.session.call_tool(TOOL, args)).structured_content)

        async def sdk_legacy_aio() -> None:
            _check((await legacy_aio.call_tool(TOOL, args)).structured_content)

        async def sdk_legacy_httpx() -> None:
            _check((await legacy_httpx.call_tool(TOOL, args)).structured_content)

        async def fastmcp_call() -> None:
            _check((await fast.call_tool(TOOL, args)).structured_content)

        variants: dict[str, Call] = {
            "local function": local,
            "bridge: MCPRuntime.invoke (2026-07-28)": bridge,
            "bridge's checks, the SDK call awaited directly (proposal)": bridge_direct,
            "SDK Client as the bridge runs it (2026-07-28, aiohttp)": sdk_modern,
            "SDK ClientSession, 2025-11-25 handshake, aiohttp": sdk_legacy_aio,
            "SDK ClientSession, 2025-11-25, httpx2's own transport": sdk_legacy_httpx,
            "fastmcp Client (2026-07-28, httpx2's own transport)": fastmcp_call,
            "hand-written JSON-RPC on aiohttp (2025-11-25)": raw,
        }
        figures = await per_call_cpu(variants, rounds, calls)
        out.append(f"1. one {TOOL} call: CPU of this process per call (median of {rounds} rounds of {calls})")
        out.append(f"  {'':<58}{'cpu ms':>8}{'wall ms':>9}{'cpu - local':>13}")
        base = figures["local function"][0]
        for name, (cpu, wall) in figures.items():
            out.append(f"  {name:<58}{cpu:8.3f}{wall:9.3f}{cpu - base:+13.3f}")

        tools = await runtime.tools("crm")
        find, add = tools[TOOL], tools["add_timeline_note"]
        note_args = {"contact_id": 1, "text": "x" * 200}
        from jsonschema import exceptions as jsonschema_exceptions
        from mcp import types
        from mcp_types import jsonrpc_message_adapter
        from mcp_types import methods as sdk_methods

        raw_result = (await bare.session.call_tool(TOOL, args)).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": raw_result}).encode()
        version = bare.session.protocol_version or "2026-07-28"
        surface = sdk_methods._adapter(sdk_methods.SERVER_RESULTS[("tools/call", version)])
        validator = bare.session._output_schema_validator(TOOL, find.output_schema or {})
        structured = raw_result["structuredContent"]
        http = httpx2.AsyncClient(headers=auth_headers(token))
        stack.push_async_callback(http.aclose)
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": TOOL, "arguments": args},
        }
        post_headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        parsed_url = httpx2.URL(mcp_url)

        def walk_uncached(schema: Any) -> None:
            for pattern in our_schema._patterns(schema, depth=0):
                our_schema._compiled(pattern)

        pieces = [
            (
                "ours: input schema's patterns walked (before the cut: every call)",
                lambda: walk_uncached(add.input_schema),
            ),
            (
                "ours: output schema's patterns walked (before: every MCP call)",
                lambda: walk_uncached(find.output_schema),
            ),
            (
                "ours: check_schema_patterns, once per schema object (now)",
                lambda: our_schema.check_schema_patterns(TOOL, find.output_schema),
            ),
            (
                "ours: validate_against_schema(add_timeline_note's arguments)",
                lambda: our_schema.validate_against_schema(add.name, add.input_schema, note_args),
            ),
            (
                "sdk: CallToolRequest built and dumped",
                lambda: types.CallToolRequest(
                    params=types.CallToolRequestParams(name=TOOL, arguments=args)
                ).model_dump(by_alias=True, mode="json", exclude_none=True),
            ),
            (
                "httpx2: build_request, the URL a str (the SDK, every POST)",
                lambda: http.build_request("POST", mcp_url, json=message, headers=post_headers),
            ),
            (
                "httpx2: build_request, the URL parsed once (patch B)",
                lambda: http.build_request("POST", parsed_url, json=message, headers=post_headers),
            ),
            (
                "sdk: the response envelope parsed (validate_json)",
                lambda: jsonrpc_message_adapter.validate_json(body, by_name=False),
            ),
            (
                "sdk: validate_server_result: validated and dumped (now)",
                lambda: sdk_methods.validate_server_result("tools/call", version, raw_result),
            ),
            (
                "sdk: the same, validated only (patch A)",
                lambda: surface.validate_python(raw_result, by_name=False),
            ),
            (
                "sdk: the result validated again into CallToolResult",
                lambda: bare.session._call_tool_adapter.validate_python(raw_result, by_name=False),
            ),
            (
                "sdk: structuredContent against the output schema (jsonschema)",
                lambda: jsonschema_exceptions.best_match(validator.iter_errors(structured)),
            ),
        ]
        out += [
            "",
            f"2. the pieces of one call, each alone: microseconds (best of 5; response {len(body)} bytes)",
        ]
        for label, fn in pieces:
            out.append(f"  {label:<70}{piece(fn):9.1f}")

        undo_a = _patch_validate_only
        transports = _transports(bare)
        undo_b = lambda: _patch_parsed_url(transports)  # noqa: E731

        async def with_patch(patch: Callable[[], Callable[[], None]]) -> Call:
            async def call() -> None:
                undo = patch()
                try:
                    await sdk_modern()
                finally:
                    undo()

            return call

        async def none_patched() -> None:
            undo = (lambda: lambda: None)()
            try:
                await sdk_modern()
            finally:
                undo()

        def both() -> Callable[[], None]:
            first, second = undo_a(), undo_b()

            def undo() -> None:
                second()
                first()

            return undo

        patched = await per_call_cpu(
            {
                "SDK Client as the bridge runs it, as released": none_patched,
                "with patch A (validate_server_result validates only)": await with_patch(undo_a),
                "with patch B (the endpoint URL parsed once)": await with_patch(undo_b),
                "with A and B": await with_patch(both),
            },
            rounds,
            calls,
        )
        out += [
            "",
            "3. the proposed SDK patches, applied in this process for the measurement: CPU ms per call",
        ]
        first = next(iter(patched.values()))[0]
        for name, (cpu, _) in patched.items():
            out.append(f"  {name:<58}{cpu:8.3f}{cpu - first:+9.3f}")

        # 5. (printed after 4) This repository's cut, before and after, on the executor's whole
        # confirmation cycle over MCP: the schema walk once per schema object (now), or on every call.
        executor = micro._executor(
            micro.skills_with_source(Path(tempfile.mkdtemp(prefix="pieces-skills-")), "mcp:crm"),
            mcp_url,
            token,
        )
        stack.push_async_callback(executor.aclose)
        cached = our_schema._pattern_refusal

        def uncached(schema: Any) -> str | None:
            our_schema._checked_by_id.clear()
            return cached(schema)

        async def cycle_with(refusal: Callable[[Any], str | None]) -> None:
            our_schema._pattern_refusal = refusal
            try:
                await micro._confirmation_cycle(executor, "pieces")
            finally:
                our_schema._pattern_refusal = cached

        async def before() -> None:
            await cycle_with(uncached)

        async def after() -> None:
            await cycle_with(cached)

        cut = await per_call_cpu(
            {"before: the schemas walked on every call": before, "after: once per schema object": after},
            rounds,
            max(10, calls // 2),
        )
        cut_lines = [
            "",
            "5. the cut in mcp_bridge/tools/schema.py: CPU ms per confirmation cycle over MCP (2 calls)",
        ]
        for name, (cpu, wall) in cut.items():
            cut_lines.append(f"  {name:<58}{cpu:8.3f}{wall:9.3f}")

        # 4. Where the SDK client's CPU goes: its own CPU by package under cProfile, scaled to the
        # CPU per call measured above without the profiler (the profiler's cost inflates deep stacks).
        from tests.bench.cpu_profile import by_package

        for label, call, key in (
            ("the SDK's Client, bare", sdk_modern, "SDK Client as the bridge runs it (2026-07-28, aiohttp)"),
            ("the hand-written JSON-RPC client", raw, "hand-written JSON-RPC on aiohttp (2025-11-25)"),
        ):
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            for _ in range(rounds * calls // 2):
                await call()
            profiler.disable()
            per_call = figures[key][0]
            out += ["", f"4. {label}: own CPU by package (cProfile shares x {per_call:.2f} ms per call)"]
            for package, share in by_package(pstats.Stats(profiler), top=12):
                out.append(f"  {share:6.1%}  {share * per_call:6.3f} ms  {package}")
    return out + cut_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.mcp_pieces", description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=100, help="calls per round and variant")
    parser.add_argument("--out", type=Path, default=REPO / "var" / "bench" / "mcp-pieces.txt")
    args = parser.parse_args(argv)
    head = [
        f"python -m tests.bench.mcp_pieces  {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime())}",
        f"load average at start {_loadavg()}",
        "",
    ]
    services = procs.Services()
    with tempfile.TemporaryDirectory(prefix="pieces-", dir=_scratch_parent()) as tmp:
        try:
            rest = services.start(procs.crm_rest(procs.seed_db(Path(tmp) / "crm.sqlite3")))
            token = secrets.token_urlsafe(16)
            mcp = services.start(procs.crm_mcp(rest.url, token=token))
            os.environ.update(CRM_URL=rest.url, CRM_API_TOKEN=procs.child_env()["CRM_API_TOKEN"])
            body = run_async(measure(mcp.url, token, args.rounds, args.calls))
        finally:
            services.close()
    text = "\n".join([*head, *body, "", f"load average at end {_loadavg()}"]) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
