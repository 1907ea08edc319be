"""Whole turns through Rasa's REST channel: a new conversation asks, and only the "yes" is timed.

Each variant has a Rasa server of its own (same model, each calling its own action server), both
warm, and the conversations alternate between them turn by turn: whatever else the shared machine
does at a moment falls on both variants alike, which sequential phases could not promise.
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


async def _conversation(http: aiohttp.ClientSession, rasa_url: str, label: str, i: int) -> tuple[float, bool]:
    """One conversation: the request (asked to confirm, untimed), then the timed "yes"."""
    sender = f"bench-{label}-{uuid.uuid4().hex}"
    note = f"bench rasa turn {label} {i} {uuid.uuid4().hex[:8]}"
    asked = await _say(http, rasa_url, sender, f"log a call with {DANA}: {note}")
    if ASKED not in _texts(asked):
        raise RuntimeError(f"Rasa did not ask to confirm the note ({label}): {_texts(asked)!r}")
    start = time.perf_counter()
    try:
        saved = await _say(http, rasa_url, sender, "yes")
        ok = SAVED in _texts(saved)
    except (aiohttp.ClientError, RuntimeError):
        ok = False
    return time.perf_counter() - start, ok


async def interleaved_yes_turns(rasa_urls: dict[str, str], n: int, *, warmup: int = 3) -> dict[str, Series]:
    """`n` timed "yes" turns per variant, alternating variant by variant (and which goes first).

    A conversation whose request was not asked about is a setup failure (raised); a "yes" that did
    not end in "Saved to ..." is counted as an error, and its time is kept.
    """
    names = list(rasa_urls)
    series = {name: Series(name) for name in names}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        for i in range(warmup + n):
            for name in names if i % 2 == 0 else names[::-1]:
                elapsed, ok = await _conversation(http, rasa_urls[name], name, i)
                if i >= warmup:
                    series[name].samples.append(elapsed)
                    series[name].errors += 0 if ok else 1
    return series
