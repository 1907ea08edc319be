"""Call the action server's /webhook the way Rasa 3.6 does, without a Rasa server.

`FakeTracker` keeps what Rasa's tracker would keep between turns (slots, events, the latest parsed
message) and builds the JSON that Rasa's RemoteAction posts: ``next_action``, ``sender_id``,
``tracker`` (rasa_sdk's ``Tracker.from_dict`` fields), ``domain`` and ``version``. It applies the
events an action answers with, as Rasa would.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from functools import cache
from typing import Any

import yaml

from mcp_bridge.channels.proof import ChannelKeys
from tests.support.procs import EXAMPLE_BOT, TEST_CHANNEL_KEY

RASA_VERSION = "3.6.21"


@cache
def domain() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLE_BOT / "domain.yml").read_text())
    return loaded


def slot_names() -> list[str]:
    return list((domain().get("slots") or {}).keys())


class FakeTracker:
    """``user`` signs each message as the plugin's channels do (:mod:`mcp_bridge.channels.proof`),
    as ``signed_as`` with ``channel_key`` (the tests' key, which every action server a test starts
    checks); ``signed_as=None`` sends it unsigned, as Rasa's own channels would."""

    def __init__(
        self,
        sender_id: str,
        *,
        signed_as: str | None = "rest:operator",
        channel_key: str = TEST_CHANNEL_KEY,
        **slots: Any,
    ) -> None:
        self.sender_id = sender_id
        self.signed_as = signed_as
        self.channel_key = channel_key
        self.slots: dict[str, Any] = {name: None for name in slot_names()}
        self.slots.update(slots)
        self.events: list[dict[str, Any]] = [
            {"event": "action", "name": "action_session_start", "timestamp": time.time()},
            {"event": "session_started", "timestamp": time.time()},
            {"event": "action", "name": "action_listen", "timestamp": time.time()},
        ]
        self.latest_message: dict[str, Any] = {}
        # The active loop, as Rasa keeps it (action_confirm_tool while a question is pending).
        self.active_loop: str | None = None

    def user(self, text: str, intent: str, confidence: float = 1.0, **ranking: float) -> FakeTracker:
        """The person says ``text``; the NLU reads ``intent`` (and ``ranking`` for the others)."""
        intent_ranking = [{"name": intent, "confidence": confidence}]
        intent_ranking += [{"name": name, "confidence": value} for name, value in ranking.items()]
        parse_data: dict[str, Any] = {
            "text": text,
            "intent": {"name": intent, "confidence": confidence},
            "entities": [],
            "intent_ranking": intent_ranking,
        }
        metadata: dict[str, Any] = {}
        if self.signed_as is not None:
            keys = ChannelKeys.parse(self.channel_key)
            metadata = keys.vouch(None, conversation=self.sender_id, user=self.signed_as, text=text)
        self.latest_message = {**parse_data, "metadata": metadata}
        self.events.append(
            {
                "event": "user",
                "timestamp": time.time(),
                "text": text,
                "parse_data": parse_data,
                "input_channel": "rest",
                "metadata": metadata,
            }
        )
        return self

    def payload(self, action: str) -> dict[str, Any]:
        return {
            "next_action": action,
            "sender_id": self.sender_id,
            "tracker": {
                "sender_id": self.sender_id,
                "slots": dict(self.slots),
                "latest_message": self.latest_message,
                "events": list(self.events),
                "paused": False,
                "followup_action": None,
                "active_loop": {"name": self.active_loop} if self.active_loop else {},
                "latest_action_name": "action_listen",
            },
            "domain": domain(),
            "version": RASA_VERSION,
        }

    def apply(self, action: str, answer: dict[str, Any]) -> None:
        """Record the action, its responses and its events, as Rasa does after a remote action."""
        self.events.append({"event": "action", "name": action, "timestamp": time.time()})
        for response in answer.get("responses", []):
            self.events.append({"event": "bot", "text": response.get("response"), "timestamp": time.time()})
        for event in answer.get("events", []):
            self.events.append(event)
            if event.get("event") == "slot":
                self.slots[event["name"]] = event["value"]
            elif event.get("event") == "active_loop":
                self.active_loop = event.get("name")
        self.events.append({"event": "action", "name": "action_listen", "timestamp": time.time()})


def call_action(
    webhook_url: str,
    action: str,
    tracker: FakeTracker,
    *,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, float]:
    """POST one action call (with ``headers``: the action server's token, say): (status, decoded body
    or None, seconds taken). Never raises for 4xx/5xx."""
    data = json.dumps(tracker.payload(action)).encode()
    request = urllib.request.Request(
        webhook_url, data=data, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    elapsed = time.monotonic() - started
    try:
        return status, json.loads(body), elapsed
    except ValueError:
        return status, None, elapsed


def said(answer: dict[str, Any]) -> list[str]:
    return [str(response.get("response")) for response in answer.get("responses", [])]


def slot_events(answer: dict[str, Any]) -> dict[str, Any]:
    return {
        event["name"]: event["value"] for event in answer.get("events", []) if event.get("event") == "slot"
    }
