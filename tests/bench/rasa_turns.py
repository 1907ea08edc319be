"""Whole turns through Rasa's REST channel: a new conversation asks, and only the "yes" is timed.

One warm Rasa server serves every line: its action endpoint is tests/bench/router.py, which passes
each conversation's action calls on to the action server of its route (an end and a variant).
The conversations go to the routes in turn, turn by turn: whatever else the shared machine does at
a moment falls on every line alike, which sequential phases could not promise.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import aiohttp

from tests.bench.stats import Series

DANA = "dana@example.com"
ASKED = "Save this to"
SAVED = "Saved to"


async def _say(http: aiohttp.ClientSession, rasa_url: str, sender: str, text: str) -> list[dict[str, Any]]:
    async with http.post(f"{rasa_url}/webhooks/rest/webhook", json={"sender": sender, "message": text}) as r:
        body = await r.json(content_type=None)
        if r.status != 200 or not isinstance(body, list):
            raise RuntimeError(f"Rasa answered HTTP {r.status}: {body!r}")
        return body


def _texts(messages: list[dict[str, Any]]) -> str:
    return " | ".join(str(message.get("text")) for message in messages)


async def _conversation(http: aiohttp.ClientSession, rasa_url: str, route: str, i: int) -> tuple[float, bool]:
    """One conversation: the request (asked to confirm, untimed), then the timed "yes"."""
    sender = f"bench-{route}-{uuid.uuid4().hex}"
    note = f"bench rasa turn {route} {i} {uuid.uuid4().hex[:8]}"
    asked = await _say(http, rasa_url, sender, f"log a call with {DANA}: {note}")
    if ASKED not in _texts(asked):
        raise RuntimeError(f"Rasa did not ask to confirm the note ({route}): {_texts(asked)!r}")
    start = time.perf_counter()
    try:
        saved = await _say(http, rasa_url, sender, "yes")
        ok = SAVED in _texts(saved)
    except (aiohttp.ClientError, RuntimeError):
        ok = False
    return time.perf_counter() - start, ok


def rest_headers(rest_token: str) -> dict[str, str]:
    """What the REST channel (mcp_bridge.channels.rest) requires of every request."""
    return {"Authorization": f"Bearer {rest_token}"}


async def interleaved_yes_turns(
    rasa_url: str, routes: list[str], n: int, *, rest_token: str, warmup: int = 3
) -> dict[str, Series]:
    """`n` timed "yes" turns per route, the routes in turn (the first one moving on every time).

    A conversation whose request was not asked about is a setup failure (raised); a "yes" that did
    not end in "Saved to ..." is counted as an error, and its time is kept. The i-th samples of
    all routes were taken next to each other: pairs, for `stats.ratio_spread`.
    """
    series = {route: Series(route) for route in routes}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, headers=rest_headers(rest_token)) as http:
        for i in range(warmup + n):
            shift = i % len(routes)
            for route in routes[shift:] + routes[:shift]:
                elapsed, ok = await _conversation(http, rasa_url, route, i)
                if i >= warmup:
                    series[route].samples.append(elapsed)
                    series[route].errors += 0 if ok else 1
    return series
