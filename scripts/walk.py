"""Follow one confirmed "yes" through the plugin and count how it moves between modules.

Runs a two-step skill (a lookup, then a write that needs a yes) to its question, then traces
``Executor.answer`` for the "yes" with :mod:`sys.monitoring`: every start and every return of a
function written in an ``mcp_bridge`` module's source, on the logical call chain under that one
``answer`` call (the MCP session's own background tasks are not part of the walk; code generated at
import, such as a dataclass's ``__init__``, is not a move into the module that declared it). Twice:
with local tools, and with an MCP tool of tests/fixtures/reminder_server.py (on a free loopback port).

The walk is the sequence of modules the chain is in, consecutive repeats collapsed; a call and a
return both move it. It prints:

* modules entered: the distinct modules of the walk, and the floor, modules entered minus one (the
  fewest moves back a walk through them can make: each module it calls returns once);
* calls that re-enter: calls into a module the walk had been in and returned from, when that module
  leads on (it calls into another module of the plugin somewhere in this walk): following the yes
  goes back into a room it already left, which says a responsibility is split in the wrong place;
* calls into a leaf again: calls into a module already left that calls no other module in this walk
  (a seal opened, a span noted, a row fetched, a slot's variables filled): a library used twice, which
  sends the walk nowhere new;
* moves back, the total: every move into a module already left, returns included (at least the floor);
* upward moves: moves from a lower module to a higher one, where A is above B when A imports B
  (directly or transitively, read from the source with :mod:`ast`). ``calls up`` counts only the calls
  among them (a lower module calling into a higher one).

Exits 1 when a call goes up (a lower module calling into a higher one), or when more than
:data:`MAX_REENTERING` calls re-enter, over MCP or local. ``make walk`` runs it, in ``make test``. Run
from the repository root: ``.venv/bin/python scripts/walk.py [--show]``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcp_bridge.config.servers import MCPServerConfig  # noqa: E402
from mcp_bridge.confirmation.decisions import Decision, Turn  # noqa: E402
from mcp_bridge.confirmation.executor import Executor  # noqa: E402
from mcp_bridge.contract import PENDING_SLOT  # noqa: E402
from mcp_bridge.observability.audit import AuditLog  # noqa: E402
from mcp_bridge.sealing import Seal  # noqa: E402
from mcp_bridge.skills.files import load_skills  # noqa: E402

PACKAGE = "mcp_bridge"
# At most this many calls of one yes may go back into a module that leads on (see the docstring).
MAX_REENTERING = 4

SKILL = """\
skill: walk_{source_id}
tools:
  find_contact: local
  {write}: {source}
tool_constraints:
  - {write}:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm
        utter_on_user_denial: utter_cancelled
steps:
  - execute_tool: find_contact
    arguments: {{email: {{slot: email}}}}
    fills: {{contact_id: contact_id}}
  - execute_tool: {write}
    arguments: {{text: {{slot: text}}}}
    on_success: utter_saved
"""


async def find_contact(email: str) -> dict[str, Any]:
    return {"ok": True, "found": True, "contact_id": 7}


async def create_reminder(text: str, idempotency_key: str | None = None) -> dict[str, Any]:
    return {"ok": True, "id": 1}


LOCAL_TOOLS: dict[str, Callable[..., Any]] = {
    "find_contact": find_contact,
    "create_reminder": create_reminder,
}


# -- layering ---------------------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """{module: modules of the package it imports}, read from the source (lazy imports included)."""
    modules: dict[str, Path] = {}
    for path in (REPO / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from mcp_bridge import metrics` imports the module metrics, not the whole package.
                names = {f"{node.module}.{alias.name}" for alias in node.names}
                submodules = names & modules.keys()
                imported |= submodules or {node.module}
        # The package itself (__init__.py) is a lazy facade of names, below nothing and above nothing.
        graph[name] = {module for module in imported if module in modules and module not in (name, PACKAGE)}
    return graph


def above(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """{module: every module it imports, directly or transitively}."""
    closure: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        closure[start] = seen - {start}
    return closure


# -- tracing ----------------------------------------------------------------------------------


SOURCE = str(REPO / PACKAGE)


def written(code: CodeType) -> bool:
    """Whether the code is written in the package's source. Code generated at import (a dataclass's
    ``__init__``, ``__eq__``) runs with its module's globals but holds none of its logic: building a
    record of a type another module defines is not a move into that module."""
    return code.co_filename.startswith(SOURCE)


class Walk:
    """The module walk of the call chain under one root frame."""

    def __init__(self, root: CodeType) -> None:
        self.root = root
        self.root_frame: FrameType | None = None
        self.moves: list[tuple[str, str, str]] = []  # (from, to, "call" | "return")
        self.current: str | None = None

    def _in_walk(self, frame: FrameType) -> bool:
        walker: FrameType | None = frame
        while walker is not None:
            if walker is self.root_frame:
                return True
            walker = walker.f_back
        return False

    @staticmethod
    def _module(frame: FrameType | None) -> str | None:
        """The package module whose source holds the frame's code, or the nearest caller's."""
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and written(frame.f_code):
                return str(name)
            frame = frame.f_back
        return None

    def _move(self, to: str | None, kind: str) -> None:
        if to is not None and to != self.current:
            if self.current is not None:
                self.moves.append((self.current, to, kind))
            self.current = to

    def start(self, code: CodeType, offset: int) -> Any:
        frame = sys._getframe(1)
        if code is self.root and self.root_frame is None:
            self.root_frame = frame
            self.current = self._module(frame)
            return None
        if self.root_frame is None or not written(code) or not self._in_walk(frame):
            return None
        self._move(self._module(frame), "call")
        return None

    def end(self, code: CodeType, offset: int, *rest: Any) -> Any:
        frame = sys._getframe(1)
        if self.root_frame is None or frame is self.root_frame or not self._in_walk(frame):
            return None
        self._move(self._module(frame.f_back), "return")
        return None


def figures(moves: list[tuple[str, str, str]], closure: Mapping[str, set[str]]) -> dict[str, Any]:
    path = [moves[0][0], *(to for _, to, _ in moves)] if moves else []
    callers = {source for source, _, kind in moves if kind == "call"}  # the modules that lead on
    entered: set[str] = set()
    returned_from: set[str] = set()
    back = 0
    reentering: list[tuple[str, str]] = []
    leaf_again: list[tuple[str, str]] = []
    for source, to, kind in moves:
        entered.add(source)
        back += to in entered
        if kind == "return":
            returned_from.add(source)
        elif to in returned_from:
            (reentering if to in callers else leaf_again).append((source, to))
    upward = [(a, b, kind) for a, b, kind in moves if a in closure.get(b, set())]
    modules = sorted(set(path))
    return {
        "path": path,
        "modules": modules,
        "floor": max(len(modules) - 1, 0),
        "reentering": reentering,
        "leaf_again": leaf_again,
        "back": back,
        "upward": len(upward),
        "calls_up": sum(1 for *_, kind in upward if kind == "call"),
        "moves": len(moves),
    }


async def traced_yes(executor: Executor, skill_id: str, slots: dict[str, Any]) -> tuple[Walk, Decision]:
    asked = await executor.start(skill_id, Turn("walk", dict(slots), 1))
    assert asked.outcome == "pending", asked
    slots = {**slots, **asked.slots}
    yes = Turn("walk", slots, 2, "affirm", 0.99, {"affirm": 0.99}, text="yes", loop_active=True)
    walk = Walk(Executor.answer.__code__)
    monitoring: Any = getattr(sys, "monitoring")  # noqa: B009 (3.12+; mypy checks for 3.10)
    tool_id = monitoring.PROFILER_ID
    monitoring.use_tool_id(tool_id, "walk")
    events = monitoring.events
    monitoring.register_callback(tool_id, events.PY_START, walk.start)
    monitoring.register_callback(tool_id, events.PY_RETURN, walk.end)
    monitoring.register_callback(tool_id, events.PY_UNWIND, walk.end)
    monitoring.set_events(tool_id, events.PY_START | events.PY_RETURN | events.PY_UNWIND)
    try:
        decision = await executor.answer(yes)
    finally:
        monitoring.set_events(tool_id, 0)
        monitoring.free_tool_id(tool_id)
    assert decision.outcome == "done", decision
    assert decision.slots.get(PENDING_SLOT, "unset") is None
    return walk, decision


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"the fixture MCP server did not listen on port {port}")


def build(skills_dir: Path, servers: Mapping[str, MCPServerConfig]) -> Executor:
    """The executor as the action server builds it (mcp_bridge.action_server.build): audited calls."""
    from mcp_bridge.mcp_client.runtime import MCPRuntime
    from mcp_bridge.skills.toolbox import ToolBox

    skills = load_skills(skills_dir, local_tools=LOCAL_TOOLS, mcp_servers=servers, responses=None)
    audit = AuditLog(None)
    tools = ToolBox(LOCAL_TOOLS, MCPRuntime(servers), audit=audit)
    return Executor(skills, tools, audit=audit, seal=Seal(secrets.token_bytes(32)))


async def walk_both(port: int, show: bool) -> tuple[int, int]:
    """Prints both walks; returns how many calls went up in them, and the most calls that re-enter."""
    closure = above(import_graph())
    servers = {"notes": MCPServerConfig(name="notes", url=f"http://127.0.0.1:{port}/mcp", trusted=True)}
    with tempfile.TemporaryDirectory() as directory:
        skills_dir = Path(directory)
        for source_id, source in (("local", "local"), ("mcp", "mcp:notes")):
            text = SKILL.format(source_id=source_id, source=source, write="create_reminder")
            (skills_dir / f"{source_id}.yml").write_text(text)
        executor = build(skills_dir, servers)
        calls_up = reentering = 0
        try:
            for source_id in ("local", "mcp"):
                slots = {"email": "dana@example.com", "text": "walked"}
                walk, _ = await traced_yes(executor, f"walk_{source_id}", slots)
                found = figures(walk.moves, closure)
                calls_up += found["calls_up"]
                reentering = max(reentering, len(found["reentering"]))
                print(
                    f"{source_id:5}: modules entered {len(found['modules'])} (floor {found['floor']}), "
                    f"calls that re-enter {len(found['reentering'])} (at most {MAX_REENTERING}), "
                    f"calls into a leaf again {len(found['leaf_again'])}, "
                    f"moves back {found['back']} (total, returns included), "
                    f"upward moves {found['upward']} (calls up {found['calls_up']}), moves {found['moves']}"
                )
                for label, calls in (("re-enter", found["reentering"]), ("leaf again", found["leaf_again"])):
                    if show or label == "re-enter":
                        for source, to in calls:
                            print(f"       {label}: {_short(source)} -> {_short(to)}")
                if show:
                    print("       walk: " + " > ".join(_short(m) for m in found["path"]))
        finally:
            await executor.aclose()
    return calls_up, reentering


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def main(show: bool) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "fixtures" / "reminder_server.py"), "--port", str(port)],
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(port)
        calls_up, reentering = asyncio.run(walk_both(port, show))
    finally:
        server.terminate()
        server.wait(timeout=10)
    if calls_up:
        raise SystemExit(f"{calls_up} call(s) went up: a lower module called into a higher one")
    if reentering > MAX_REENTERING:
        raise SystemExit(
            f"{reentering} calls of one yes re-enter a module already left (at most {MAX_REENTERING}): "
            "a responsibility is split in the wrong place"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--show", action="store_true", help="print the walk itself")
    main(parser.parse_args().show)
