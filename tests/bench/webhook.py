"""Action-server requests shaped like the ones Rasa 3.6 sends to `/webhook`, and the load test."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml

from tests.bench.stats import Series

REPO = Path(__file__).resolve().parents[2]
DANA = "dana@example.com"
RASA_SDK_VERSION = "3.6.2"
JSON_HEADERS = {"Content-Type": "application/json"}
_T = TypeVar("_T")
INTENTS = ("affirm", "deny", "log_interaction", "provide_email", "out_of_scope")


def load_domain() -> dict[str, Any]:
    """The domain as a dict, as Rasa sends it with every action call."""
    domain = yaml.safe_load((REPO / "domain.yml").read_text())
    return domain if isinstance(domain, dict) else {}


def _parse_data(text: str, intent: str, entities: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ranking = [{"name": intent, "confidence": 1.0}]
    ranking += [{"name": other, "confidence": 0.0} for other in INTENTS if other != intent]
    return {
        "text": text,
        "intent": {"name": intent, "confidence": 1.0},
        "intent_ranking": ranking,
        "entities": entities or [],
        "message_id": uuid.uuid4().hex,
        "metadata": {},
    }


def _user(parse_data: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "event": "user",
        "timestamp": now,
        "text": parse_data["text"],
        "parse_data": parse_data,
        "input_channel": "rest",
        "message_id": parse_data["message_id"],
        "metadata": {},
    }


def _action(name: str, now: float) -> dict[str, Any]:
    return {"event": "action", "timestamp": now, "name": name, "policy": "RulePolicy", "confidence": 1.0}


def _slot(name: str, value: Any, now: float) -> dict[str, Any]:
    return {"event": "slot", "timestamp": now, "name": name, "value": value}


@dataclass
class Conversation:
    """One conversation's tracker, grown the way Rasa grows it between action calls."""

    domain: dict[str, Any]
    sender_id: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex}")
    events: list[dict[str, Any]] = field(default_factory=list)
    slots: dict[str, Any] = field(default_factory=dict)
    latest_message: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.slots = dict.fromkeys(self.domain.get("slots") or {})
        self.slots.update(requested_slot=None, session_started_metadata=None)
        now = time.time()
        self.events = [_action("action_session_start", now), {"event": "session_started", "timestamp": now}]
        self.events.append(_action("action_listen", now))

    def say(self, parse_data: dict[str, Any]) -> None:
        self.latest_message = parse_data
        self.events.append(_user(parse_data, time.time()))

    def set_slot(self, name: str, value: Any) -> None:
        self.slots[name] = value
        self.events.append(_slot(name, value, time.time()))

    def apply(self, action: str, answer: dict[str, Any]) -> None:
        """What Rasa does with an action server answer: log the action, apply its events and replies."""
        now = time.time()
        self.events.append(_action(action, now))
        for event in answer.get("events") or []:
            if event.get("event") == "slot":
                self.slots[event["name"]] = event.get("value")
            self.events.append({**event, "timestamp": now})
        for reply in answer.get("responses") or []:
            self.events.append({"event": "bot", "timestamp": now, "text": reply.get("text"), "data": {}})
        self.events.append(_action("action_listen", now))

    def request(self, action: str) -> dict[str, Any]:
        return {
            "next_action": action,
            "sender_id": self.sender_id,
            "tracker": {
                "sender_id": self.sender_id,
                "slots": dict(self.slots),
                "latest_message": self.latest_message,
                "latest_event_time": time.time(),
                "followup_action": None,
                "paused": False,
                "events": list(self.events),
                "latest_input_channel": "rest",
                "active_loop": {},
                "latest_action": {"action_name": self.events[-1].get("name")},
                "latest_action_name": self.events[-1].get("name"),
            },
            "domain": self.domain,
            "version": RASA_SDK_VERSION,
        }


def response_names(answer: Any) -> list[str]:
    if not isinstance(answer, dict):
        return []
    return [str(reply.get("response")) for reply in answer.get("responses") or [] if isinstance(reply, dict)]


async def pending_conversation(
    http: aiohttp.ClientSession, url: str, domain: dict[str, Any], note: str
) -> Conversation:
    """A conversation in which action_log_interaction has just asked its question (a real pending value)."""
    chat = Conversation(domain)
    chat.say(
        _parse_data(
            f"log a call with {DANA}: {note}",
            "log_interaction",
            [{"entity": "email", "value": DANA, "extractor": "RegexEntityExtractor"}],
        )
    )
    chat.set_slot("contact_email", DANA)
    chat.set_slot("note_text", note)
    async with http.post(url, json=chat.request("action_log_interaction")) as response:
        answer = await response.json(content_type=None)
        if response.status != 200 or response_names(answer) != ["utter_confirm_note"]:
            raise RuntimeError(f"action_log_interaction did not ask (HTTP {response.status}): {answer!r}")
    chat.apply("action_log_interaction", answer)
    if not isinstance(chat.slots.get("pending_confirmation"), dict):
        raise RuntimeError(f"action_log_interaction set no pending confirmation: {answer!r}")
    chat.say(_parse_data("yes", "affirm"))
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
    domain = load_domain()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
        tag = uuid.uuid4().hex[:8]
        chats = await _gather_limited(
            requests,
            8,
            lambda i: pending_conversation(http, url, domain, f"bench load {label} c{clients} #{i} {tag}"),
        )
        # Encoded before the clock starts: the figures are the action server's, not the client's JSON.
        bodies = [json.dumps(chat.request("action_confirm_tool")).encode() for chat in chats]
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
