"""`python tests/bench/peer_worker.py PEER`: another MCP client a bot owner could pick, timed in its own
environment, for `make bench`'s peers section (tests/bench/peers.py).

PEER is `fastmcp` (fastmcp's `Client`, in .venv) or `rasa-pro` (Rasa Pro's own MCP runtime for a
flow's `call` step, in .venv-pro). This file imports nothing of this repository, so it runs in an
environment without the plugin. It speaks tests/bench/worker.py's protocol, one JSON object a line:

    {"op": "open", "section": "peers", "args": {"mcp_url": ..., "token": ...}}
        -> {"variants": ["call", "cycle", "x8"], "peer": "fastmcp 4.2.3 (mcp 2.3.0)"}
    {"op": "run", "variants": ["call"]}  -> {"seconds": [...], "cpu": [...]}   (wall and CPU, each call)
    {"op": "close"}                      -> {}

Each client is kept as its users keep it: one fastmcp `Client` opened once and shared by every call
(its documented use); Rasa Pro's runtime as Rasa Pro runs it for every `call` step, which opens a
connection to the server, lists the tools, calls one and closes. The variants: `call`, one
find_contact_by_email; `cycle`, the two calls of a confirmation cycle (find the contact, add a note
to it) with no confirmation in between, which neither peer has; `x8`, eight callers at once, each
one call (one sample is the eight).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from importlib import metadata
from pathlib import Path
from typing import Any

# Run as a script, this folder is first on sys.path: its modules (stats, report, router, worker...)
# would shadow any top-level module of the same name that the peer's library imports.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

DANA = "dana@example.com"
CONCURRENT = 8
Variant = Callable[[], Awaitable[None]]


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def _contact_id(data: Any) -> int:
    if (
        not isinstance(data, dict)
        or data.get("found") is not True
        or not isinstance(data.get("contact_id"), int)
    ):
        raise RuntimeError(f"find_contact_by_email({DANA!r}) did not find the seeded contact: {data!r}")
    return int(data["contact_id"])


def _note_saved(data: Any) -> None:
    if not isinstance(data, dict) or data.get("ok") is not True:
        raise RuntimeError(f"add_timeline_note did not write: {data!r}")


async def fastmcp_variants(stack: AsyncExitStack, mcp_url: str, token: str) -> tuple[str, dict[str, Variant]]:
    from fastmcp import Client

    client = await stack.enter_async_context(Client(mcp_url, auth=token))

    async def find() -> int:
        return _contact_id(
            (await client.call_tool("find_contact_by_email", {"email": DANA})).structured_content
        )

    async def call() -> None:
        await find()

    async def cycle() -> None:
        contact = await find()
        text = f"bench peer fastmcp {uuid.uuid4().hex}"
        result = await client.call_tool("add_timeline_note", {"contact_id": contact, "text": text})
        _note_saved(result.structured_content)

    async def x8() -> None:
        await asyncio.gather(*(find() for _ in range(CONCURRENT)))

    return f"fastmcp {_version('fastmcp')} Client (mcp {_version('mcp')})", {
        "call": call,
        "cycle": cycle,
        "x8": x8,
    }


async def rasa_pro_variants(
    stack: AsyncExitStack, mcp_url: str, token: str
) -> tuple[str, dict[str, Variant]]:
    """Rasa Pro's `call_mcp_tool` (rasa.core.policies.flows.mcp_tool_executor), as a flow's `call`
    step runs it: the server from endpoints.yml, arguments from slots, the result into slots."""
    from rasa.core.config.configuration import Configuration
    from rasa.core.policies.flows.flow_step_result import ContinueFlowWithNextStep
    from rasa.core.policies.flows.mcp_tool_executor import call_mcp_tool
    from rasa.dialogue_understanding.stack.dialogue_stack import DialogueStack
    from rasa.shared.core.events import SlotSet
    from rasa.shared.core.flows.steps import CallFlowStep
    from rasa.shared.core.slots import AnySlot
    from rasa.shared.core.trackers import DialogueStateTracker
    from rasa.utils.log_utils import configure_structlog

    configure_structlog(logging.INFO)  # Rasa's default level (LOG_LEVEL); debug lines cost CPU per call
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-rasa-pro-")))
    endpoints = folder / "endpoints.yml"
    # Rasa Pro takes a server's credentials as keys beside its url, secrets from the environment only.
    os.environ["BENCH_CRM_MCP_TOKEN"] = token
    endpoints.write_text(
        "mcp_servers:\n"
        f"  - name: crm\n    url: {json.dumps(mcp_url)}\n    type: http\n"
        '    token: "${BENCH_CRM_MCP_TOKEN}"\n'
    )
    Configuration.initialise_endpoints(endpoints_path=endpoints, project_root=folder)

    def step(tool: str, inputs: dict[str, str], outputs: dict[str, str]) -> CallFlowStep:
        return CallFlowStep.from_json(
            "bench_flow",
            {
                "id": f"call_{tool}",
                "call": tool,
                "mcp_server": "crm",
                "mapping": {
                    "input": [{"param": param, "slot": slot} for param, slot in inputs.items()],
                    "output": [{"slot": slot, "value": value} for slot, value in outputs.items()],
                },
            },
        )

    find_step = step(
        "find_contact_by_email",
        {"email": "contact_email"},
        {"contact_id": "result.structuredContent.contact_id", "found": "result.structuredContent.found"},
    )
    note_step = step(
        "add_timeline_note",
        {"contact_id": "contact_id", "text": "note_text"},
        {"saved": "result.structuredContent.ok"},
    )
    slots = [
        AnySlot(name, mappings=[]) for name in ("contact_email", "contact_id", "found", "note_text", "saved")
    ]

    async def run(flow_step: CallFlowStep, tracker: DialogueStateTracker) -> dict[str, Any]:
        result = await call_mcp_tool([], DialogueStack.empty(), flow_step, tracker)
        if not isinstance(result, ContinueFlowWithNextStep):
            raise RuntimeError(f"Rasa Pro's call step did not continue: {result!r}")
        return {event.key: event.value for event in result.events if isinstance(event, SlotSet)}

    def tracker(**values: Any) -> DialogueStateTracker:
        chat = DialogueStateTracker.from_events(f"bench-{uuid.uuid4().hex}", [], slots=slots)
        for name, value in values.items():
            chat.update(SlotSet(name, value))
        return chat

    async def find() -> int:
        found = await run(find_step, tracker(contact_email=DANA))
        return _contact_id({"found": found.get("found"), "contact_id": found.get("contact_id")})

    async def call() -> None:
        await find()

    async def cycle() -> None:
        contact = await find()
        note = tracker(contact_id=contact, note_text=f"bench peer rasa-pro {uuid.uuid4().hex}")
        _note_saved({"ok": (await run(note_step, note)).get("saved")})

    async def x8() -> None:
        await asyncio.gather(*(find() for _ in range(CONCURRENT)))

    label = f"Rasa Pro {_version('rasa-pro')} call step (mcp {_version('mcp')})"
    return label, {"call": call, "cycle": cycle, "x8": x8}


PEERS = {"fastmcp": fastmcp_variants, "rasa-pro": rasa_pro_variants}


async def serve(peer: str, answer: Callable[[dict[str, Any]], None]) -> None:
    stack = AsyncExitStack()
    variants: dict[str, Variant] = {}
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                op = request["op"]
                if op == "open":
                    await stack.aclose()
                    stack = AsyncExitStack()
                    args = request.get("args", {})
                    label, variants = await PEERS[peer](stack, args["mcp_url"], args["token"])
                    answer({"variants": list(variants), "peer": label})
                elif op == "run":
                    seconds, cpu = [], []
                    for name in request["variants"]:
                        own, start = time.process_time(), time.perf_counter()
                        await variants[name]()
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


def main() -> int:
    peer = sys.argv[1] if len(sys.argv) > 1 else ""
    if peer not in PEERS:
        print(f"usage: peer_worker.py {{{','.join(PEERS)}}}", file=sys.stderr)
        return 2
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a stray print (Rasa's start-up lines) goes to standard error, not into the answers
    sys.stdout = sys.stderr

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")

    try:  # the event loop the action servers run on (Sanic's), when the environment has it
        import uvloop
    except ImportError:
        asyncio.run(serve(peer, answer))
    else:
        uvloop.run(serve(peer, answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
