"""Action-server requests shaped like the ones Rasa 3.6 sends to `/webhook`, and the load test."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from tests.bench.stats import Series
from tests.support.rasa_calls import FakeTracker, said

DANA = "dana@example.com"
JSON_HEADERS = {"Content-Type": "application/json"}
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
            **self.latency.summary(with_samples=False),
        }


async def _gather_limited(count: int, limit: int, make: Callable[[int], Awaitable[_T]]) -> list[_T]:
    semaphore = asyncio.Semaphore(limit)

    async def one(i: int) -> _T:
        async with semaphore:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def load(url: str, label: str, requests: int, clients: int) -> LoadResult:
    """POST `requests` confirming calls (`action_confirm_tool`), each a conversation of its own, from
    `clients` concurrent clients. An error is a non-200 answer or any answer but "saved"."""
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

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return LoadResult(clients, series, time.perf_counter() - started)


def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of `pid`, in KiB, from /proc/<pid>/status."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values
