"""`python -m tests.bench.worker`: the in-process sections (1 to 3) of `make bench` in one end's Python.

The bench runs one worker per end (each action-server venv's own interpreter: rasa-sdk, Python,
mcp, uvloop as that end has them) and interleaves their samples: it asks one worker for one timed
call, then the next, round robin, so both ends meet the same moments of the shared machine. The
worker times each call itself, so the pipe between them is never in a figure.

One JSON object per line on standard input, one answer per line on standard output (anything else
that would be printed there goes to standard error instead):

    {"op": "open", "section": "tool_call", "args": {...}}  -> {"variants": ["local", ...]}
    {"op": "run", "variants": ["local", "sdk"]}            -> {"seconds": [0.00123, 0.0031], "cpu": [...]}
    {"op": "close"}                                        -> {}
    end of input                                           -> the worker closes what is open, exits

Any failure answers {"error": "<traceback>"}. `cpu`: this process's CPU time during each call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from crm import tools as crm_tools

from tests.bench import micro
from tests.bench.stats import Variant

SECTIONS: dict[str, Callable[..., AbstractAsyncContextManager[dict[str, Variant]]]] = {
    "tool_call": micro.tool_call_variants,
    "session": micro.session_variants,
    "executor_cycle": lambda workdir, **kw: micro.executor_variants(Path(workdir), **kw),
    "peers": lambda workdir, **kw: micro.peer_variants(Path(workdir), **kw),
}


async def _lines() -> AsyncIterator[dict[str, Any]]:
    while line := await asyncio.to_thread(sys.stdin.readline):
        if line.strip():
            yield json.loads(line)


async def serve(answer: Callable[[dict[str, Any]], None]) -> None:
    stack = contextlib.AsyncExitStack()
    variants: dict[str, Variant] = {}
    try:
        async for request in _lines():
            try:
                op = request["op"]
                if op == "open":
                    await stack.aclose()
                    stack = contextlib.AsyncExitStack()
                    section = SECTIONS[request["section"]](**request.get("args", {}))
                    variants = await stack.enter_async_context(section)
                    answer({"variants": list(variants)})
                elif op == "run":  # one after the other, each timed on its own
                    calls = [variants[name] for name in request["variants"]]
                    seconds, cpu = [], []
                    for call in calls:
                        own, start = time.process_time(), time.perf_counter()
                        await call()
                        seconds.append(time.perf_counter() - start)
                        cpu.append(time.process_time() - own)
                    answer({"seconds": seconds, "cpu": cpu})
                elif op == "close":
                    await stack.aclose()
                    variants = {}
                    answer({})
                else:
                    raise ValueError(f"unknown op {op!r}")
            except Exception:
                answer({"error": traceback.format_exc()})
    finally:
        await stack.aclose()
        await crm_tools.close_client()


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # from here on, a stray print goes to standard error, not into the answers
    sys.stdout = sys.stderr

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")

    from tests.bench.__main__ import run_async

    run_async(serve(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
