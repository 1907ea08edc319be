"""Section 8 of `make bench`: the bridge beside the MCP clients a bot owner could pick instead.

Lines: the bridge at every end (tests/bench/worker.py's `peers` section, in each end's worker), and
each peer found (tests/bench/peer_worker.py in the peer's environment): fastmcp's `Client` where
fastmcp is installed (.venv), and Rasa Pro's own MCP runtime where `.venv-pro` exists; a peer that is
not there is skipped with a line that says so. All against the same CRM MCP server, in one run.

Variants, each line's own way of being used: `call`, one find_contact_by_email; `cycle`, a
confirmation cycle (the bridge: the executor asks, "yes", writes; a peer, which has no confirmation:
its two calls, find and add the note); `x8`, eight callers at once (one sample is all eight done).
Every round runs one variant on every line in turn (the order flipping each round), so all lines meet
the same moments of the machine. Each sample is wall time and the CPU time of the process that made
the calls (for the bridge, the action server's side), both measured where the calls run.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.ends import REPO, End, Worker
from tests.bench.stats import Series, ratio

PEER_WORKER = Path(__file__).with_name("peer_worker.py")
VARIANTS = ("call", "cycle", "x8")
PRO_VENV = REPO / ".venv-pro"


@dataclass
class PeerLine:
    """One line of the section: wall and CPU samples per variant."""

    label: str
    wall: dict[str, Series] = field(default_factory=dict)
    cpu: dict[str, Series] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "wall": {name: s.summary(with_samples=False) for name, s in self.wall.items()},
            "cpu": {name: s.summary(with_samples=False) for name, s in self.cpu.items()},
        }


@dataclass
class Peers:
    """The section's lines (the bridge's first, by end key) and the peers that were skipped, and why."""

    lines: dict[str, PeerLine] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"lines": {key: line.summary() for key, line in self.lines.items()}, "skipped": self.skipped}


class PeerWorker(Worker):
    """tests/bench/peer_worker.py PEER in a peer's interpreter (the protocol of tests/bench/worker.py)."""

    def __init__(self, python: str, peer: str, env: dict[str, str]) -> None:
        self.end = End(python, peer, "", {})
        fd, name = tempfile.mkstemp(prefix=f"bench-peer-{peer}-", suffix=".log")
        self.log = Path(name)
        with os.fdopen(fd, "wb") as log:
            self.process = subprocess.Popen(
                [python, str(PEER_WORKER), peer],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )


def _has(python: Path, module: str) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [
            str(python),
            "-c",
            f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)",
        ],
        capture_output=True,
        timeout=60,
    )
    return probe.returncode == 0


def find_peers(first_end: End) -> tuple[dict[str, str], list[str]]:
    """peer -> the interpreter it runs in, and a line for each peer that is not there."""
    found: dict[str, str] = {}
    skipped: list[str] = []
    if _has(Path(first_end.python), "fastmcp"):
        found["fastmcp"] = first_end.python
    else:
        skipped.append(
            f"fastmcp: not installed in {first_end.venv} (the dev extra installs it on Python 3.11+)"
        )
    pro = PRO_VENV / "bin" / "python"
    if _has(pro, "rasa.core.policies.flows.mcp_tool_executor"):
        found["rasa-pro"] = str(pro)
    else:
        why = "has no Rasa Pro (rasa-pro 3.21)" if pro.exists() else "does not exist"
        skipped.append(f"Rasa Pro: skipped, {PRO_VENV.relative_to(REPO)} {why}")
    return found, skipped


def _run(worker: Worker, names: list[str]) -> tuple[list[float], list[float]]:
    answer = worker._ask({"op": "run", "variants": names})
    return [float(s) for s in answer["seconds"]], [float(s) for s in answer["cpu"]]


def measure(
    ours: dict[str, Worker],
    labels: dict[str, str],
    peer_envs: dict[str, str],
    env: dict[str, str],
    args: dict[str, dict[str, Any]],
    n: int,
    warmup: int,
    skipped: list[str],
) -> Peers:
    """`ours`: each end's worker (already running), by end key, with `labels` for their lines;
    `peer_envs`: peer -> interpreter; `args[key]`: what each line's `open` is given (by end key or peer).
    `n` timed samples of each variant per line after `warmup` untimed ones."""
    result = Peers(skipped=list(skipped))
    workers: dict[str, Worker] = dict(ours)
    started: list[Worker] = []
    try:
        for peer, python in peer_envs.items():
            worker = PeerWorker(python, peer, env)
            started.append(worker)
            workers[peer] = worker
        for key, worker in workers.items():
            answer = worker._ask({"op": "open", "section": "peers", "args": args[key]})
            if list(answer["variants"]) != list(VARIANTS):
                raise RuntimeError(f"peers: {key} offers {answer['variants']}, not {list(VARIANTS)}")
            label = labels.get(key) or str(answer.get("peer") or key)
            result.lines[key] = PeerLine(
                label,
                {name: Series(f"{key} {name}") for name in VARIANTS},
                {name: Series(f"{key} {name} cpu") for name in VARIANTS},
            )
        keys = list(workers)
        for key in keys:
            _run(workers[key], [name for name in VARIANTS for _ in range(warmup)])
        for i in range(n):
            for name in VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)]:
                for key in keys if i % 2 == 0 else keys[::-1]:
                    (wall,), (cpu,) = _run(workers[key], [name])
                    result.lines[key].wall[name].samples.append(wall)
                    result.lines[key].cpu[name].samples.append(cpu)
        return result
    finally:
        for key, worker in workers.items():
            if worker.process.poll() is None and key in ours:
                worker.close_section()
        for worker in started:
            worker.close()


def table_lines(peers: Peers, first: str) -> list[str]:
    """The section's rows: per line, each variant's median wall and CPU (ms), and the ratio of each
    figure to the first end's bridge (`first`): above 1, the line costs more than the bridge."""
    out: list[str] = []
    head = "".join(f"{f'{name} wall':>12}{'cpu':>8}{'x br':>7}" for name in VARIANTS)
    out.append(f"  {'line':<46}{'n':>5}{head}")
    base = peers.lines.get(first)
    for line in peers.lines.values():
        cells = ""
        for name in VARIANTS:
            wall, cpu = line.wall[name].median_ms, line.cpu[name].median_ms
            versus = ratio(cpu, base.cpu[name].median_ms) if base is not None else float("nan")
            cells += f"{wall:12.2f}{cpu:8.2f}{_x(versus):>7}"
        n = line.wall[VARIANTS[0]].n
        out.append(f"  {line.label[:46]:<46}{n:>5}{cells}")
    out.append(
        "  wall, cpu: medians in ms per sample (x8: all eight callers); x br: the line's CPU over the first "
        "end's bridge"
    )
    if base is not None:
        for key, line in peers.lines.items():
            if key == first:
                continue
            parts = []
            for name in VARIANTS:
                parts.append(
                    f"{name} wall {_x(ratio(line.wall[name].median_ms, base.wall[name].median_ms))}"
                    f" cpu {_x(ratio(line.cpu[name].median_ms, base.cpu[name].median_ms))}"
                )
            out.append(f"  {line.label} / {base.label}: " + ", ".join(parts))
    out += [f"  {line}" for line in peers.skipped]
    return out


def _x(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"
