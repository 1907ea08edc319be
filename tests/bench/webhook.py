"""Action-server requests shaped like the ones Rasa 3.6 sends to `/webhook`, and the load test."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from devstack.services import descendants
from tests.bench.stats import Series
from tests.support.rasa_calls import FakeTracker, said

DANA = "dana@example.com"
JSON_HEADERS = {"Content-Type": "application/json"}
TICKS = os.sysconf("SC_CLK_TCK")
_T = TypeVar("_T")


def response_names(answer: Any) -> list[str]:
    return said(answer) if isinstance(answer, dict) else []


async def pending_conversation(http: aiohttp.ClientSession, url: str, note: str) -> FakeTracker:
    """A conversation in which action_log_interaction has just asked its question (a real pending value)."""
    chat = FakeTracker(f"bench-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
    chat.user(f"log a call with {DANA}: {note}", "log_interaction")
    async with http.post(url, json=chat.payload("action_log_interaction")) as response:
        answer = await response.json(content_type=None)
        if response.status != 200 or response_names(answer) != ["utter_confirm_note"]:
            raise RuntimeError(f"action_log_interaction did not ask (HTTP {response.status}): {answer!r}")
    chat.apply("action_log_interaction", answer)
    if not isinstance(chat.slots.get("pending_confirmation"), dict):
        raise RuntimeError(f"action_log_interaction set no pending confirmation: {answer!r}")
    chat.user("yes", "affirm")
    return chat


@dataclass
class LoadResult:
    clients: int
    latency: Series
    wall_s: float
    # CPU per request (ms) of each process named in load()'s `pids`, and of this one ("client").
    cpu_ms: dict[str, float] = field(default_factory=dict)
    # Requests per second of each round, when this is several rounds merged (see merge_rounds).
    round_rps: list[float] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.latency.n / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "requests": self.latency.n,
            "errors": self.latency.errors,
            "wall_s": round(self.wall_s, 3),
            "throughput_rps": round(self.throughput, 2),
            "cpu_ms_per_request": {name: round(ms, 3) for name, ms in self.cpu_ms.items()},
            "round_rps": [round(rps, 2) for rps in self.round_rps],
            **self.latency.summary(with_samples=False),
        }


async def _gather_limited(count: int, limit: int, make: Callable[[int], Awaitable[_T]]) -> list[_T]:
    semaphore = asyncio.Semaphore(limit)

    async def one(i: int) -> _T:
        async with semaphore:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def load(
    url: str, label: str, requests: int, clients: int, pids: Mapping[str, Sequence[int]] | None = None
) -> LoadResult:
    """POST `requests` confirming calls (`action_confirm_tool`), each a conversation of its own, from
    `clients` concurrent clients. An error is a non-200 answer or any answer but "saved".

    `pids`: name -> the processes (a server and its workers) whose CPU time per request is recorded
    under that name (the action server, the MCP server...).
    """
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
        tag = uuid.uuid4().hex[:8]
        chats = await _gather_limited(
            requests,
            8,
            lambda i: pending_conversation(http, url, f"bench load {label} c{clients} #{i} {tag}"),
        )
        # Encoded before the clock starts: the figures are the action server's, not the client's JSON.
        bodies = [json.dumps(chat.payload("action_confirm_tool")).encode() for chat in chats]
        series = Series(f"{label} x{clients}")
        queue = iter(bodies)

        async def client() -> None:
            for body in queue:
                start = time.perf_counter()
                try:
                    async with http.post(url, data=body, headers=JSON_HEADERS) as response:
                        answer = await response.json(content_type=None)
                        ok = response.status == 200 and response_names(answer) == ["utter_note_saved"]
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                    ok = False
                series.samples.append(time.perf_counter() - start)
                if not ok:
                    series.errors += 1

        pids = dict(pids or {})
        cpu_before = {name: cpu_seconds(*group) for name, group in pids.items()}
        own_before = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - started
        cpu = {name: cpu_seconds(*group) - cpu_before[name] for name, group in pids.items()}
        cpu["client"] = time.process_time() - own_before
        per_request = {name: seconds / max(1, requests) * 1000 for name, seconds in cpu.items()}
        return LoadResult(clients, series, wall, per_request)


def merge_rounds(rounds: list[LoadResult]) -> LoadResult:
    """One line from several rounds at one concurrency level: all samples, the summed wall time (so
    `throughput` is requests over time under load), CPU per request weighted by requests."""
    first = rounds[0]
    merged = LoadResult(first.clients, Series(first.latency.name), 0.0)
    for one in rounds:
        merged.latency.samples.extend(one.latency.samples)
        merged.latency.errors += one.latency.errors
        merged.wall_s += one.wall_s
        merged.round_rps.append(one.throughput)
    total = max(1, merged.latency.n)
    for name in first.cpu_ms:
        merged.cpu_ms[name] = sum(one.cpu_ms.get(name, 0.0) * one.latency.n for one in rounds) / total
    return merged


def cpu_seconds(*pids: int) -> float:
    """User + system CPU of the processes so far, from /proc/<pid>/stat (in clock ticks, 10 ms
    here); a process that has ended counts 0."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def tree(pid: int) -> list[int]:
    """`pid` and every process below it: rasa-sdk 3.21 (Sanic 25) serves from a worker process,
    with a multiprocessing manager and resource tracker beside it; rasa-sdk 3.6 is one process."""
    return [pid, *(child for child, _ in descendants(pid))]


def rss_kib(*pids: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of the processes, summed, in KiB, from
    /proc/<pid>/status; `processes`: how many there were."""
    values: dict[str, int] = {"VmRSS": 0, "VmHWM": 0, "processes": 0}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            continue
        values["processes"] += 1
        for line in status.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] += int(rest.split()[0])
    return values
