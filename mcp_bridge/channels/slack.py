"""Slack (the Events API and interactive buttons), signed: in place of Rasa's ``slack`` channel.

```yaml
# credentials.yml (in place of `slack:`)
mcp_bridge.channels.slack.SignedSlackInput:
  slack_token: "${SLACK_BOT_TOKEN}"              # xoxb-...: posts the assistant's replies
  slack_signing_secret: "${SLACK_SIGNING_SECRET}"  # Basic Information > App Credentials
  team_ids: [T0123ABCD]                          # the workspaces this assistant serves
```

Slack posts events (``application/json``) and button presses (``application/x-www-form-urlencoded``,
``payload=<JSON>``) to ``/webhooks/slack/webhook``. Before anything else, as Slack documents
("Verifying requests from Slack"):

* ``X-Slack-Signature`` must be ``v0=`` and the hex HMAC-SHA256, under the signing secret, of
  ``v0:<X-Slack-Request-Timestamp>:<the raw body>`` (compared in constant time), and the timestamp
  within ``max_age_seconds`` (default 300, Slack's five minutes) of this server's clock; else 401.
* The workspace (the event's ``team_id``, the press's ``team.id``) and the person's own workspace
  (``user_team`` or ``team`` of the event, ``user.team_id`` of the press: a Slack Connect channel
  holds people of other workspaces) must be in ``team_ids``; else 403.
* An ``event_id`` (a press's ``trigger_id``) seen before is dropped (Slack retries an event it
  thinks failed, with the same id), answered 200 and logged.

The person is ``slack:<their workspace>/<user id>``; the conversation
``slack_<workspace>_<channel>_<user id>`` (``conversation_granularity: thread``:
``slack_<workspace>_<channel>_<thread ts>_<user id>``), so in a shared channel each person has a
conversation of their own, and the assistant replies where they wrote. The assistant hears direct
messages and mentions (``app_mention``); a message's text is what Rasa reads with the bot's own
mention taken out and Slack's link markup (``<mailto:a@b.c|a@b.c>``) as its text.

A question's buttons are Block Kit buttons whose ``value`` is the payload tagged with the
conversation (:meth:`mcp_bridge.channels.platform.Vouching.button`): a press is handed to Rasa as
its payload, signed like a typed answer; a press whose tag is not the pressing person's conversation
is refused (403). Typed answers work everywhere.

Slack app settings: Event Subscriptions on, Request URL ``https://<rasa>/webhooks/slack/webhook``,
bot events ``message.im`` and ``app_mention``; Interactivity on, the same Request URL; bot token
scopes ``chat:write``, ``im:history``, ``app_mentions:read``.

Settings: ``slack_token``, ``slack_signing_secret``, ``team_ids`` (required), ``api_url`` (default
``https://slack.com/api/``), ``conversation_granularity`` (``channel`` or ``thread``),
``max_age_seconds``, ``channel_key``, ``max_body_bytes``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels.platform import FOREIGN_PRESS, PlatformInput, Replays, Speaker

logger = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"
# Slack's window: "more than five minutes from local time ... could be a replay attack".
DEFAULT_MAX_AGE_SECONDS = 300
# Slack retries an event up to three times within about an hour; its ids are kept as long.
KEEP_EVENT_IDS_SECONDS = 3600
# Block Kit allows 25 elements in an actions block.
MAX_BUTTONS = 25
GRANULARITIES = ("channel", "thread")
_KNOWN = {
    "slack_token",
    "slack_signing_secret",
    "team_ids",
    "api_url",
    "conversation_granularity",
    "max_age_seconds",
}
# Slack's markup for a link or an address (<mailto:dana@example.com|dana@example.com>, <https://x|x>,
# <mailto:dana@example.com>, <https://x>) and the three characters it escapes. Each part is bounded, so
# a message of many unclosed "<mailto:" is read in time linear in its length.
_LINK = re.compile(r"<(?:mailto:|https?://)[^|>]{0,1000}\|([^>]{0,1000})>")
_BARE_ADDRESS = re.compile(r"<mailto:([^|>]{0,1000})>")
_BARE_URL = re.compile(r"<(https?://[^|>]{0,1000})>")
_ESCAPED = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


class SlackOutput(OutputChannel):
    """Posts to the conversation's channel (and thread) with ``chat.postMessage``; the address is
    read from the conversation id, so Rasa's API can send to a conversation too."""

    @classmethod
    def name(cls) -> str:
        return "slack"

    def __init__(self, channel: SignedSlackInput) -> None:
        super().__init__()
        self.input = channel

    async def _post(self, recipient_id: str, **message: Any) -> None:
        address = self.input.address(recipient_id)
        if address is None:
            logger.error("slack: %r is no conversation of this channel; nothing sent", recipient_id)
            return
        slack_channel, thread = address
        body = {"channel": slack_channel, **message}
        if thread:
            body["thread_ts"] = thread
        answer = await self.input.api.call(
            "chat.postMessage",
            "POST",
            f"{self.input.api_url}chat.postMessage",
            json_body=body,
            headers={"Authorization": f"Bearer {self.input.token}"},
        )
        if isinstance(answer, dict) and not answer.get("ok"):
            logger.error("slack: chat.postMessage was refused (%s)", answer.get("error"))

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        for part in text.strip().split("\n\n"):
            await self._post(recipient_id, text=part)

    async def send_text_with_buttons(
        self, recipient_id: str, text: str, buttons: list[dict[str, Any]], **kwargs: Any
    ) -> None:
        usable = [b for b in buttons if isinstance(b.get("payload"), str)][:MAX_BUTTONS]
        elements = [
            {
                "type": "button",
                "action_id": f"mcp_bridge_{number}",
                "text": {"type": "plain_text", "text": str(button.get("title") or button["payload"])[:75]},
                "value": self.input.vouching.button(recipient_id, button["payload"]),
            }
            for number, button in enumerate(usable)
        ]
        blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "plain_text", "text": text}}]
        if elements:
            blocks.append({"type": "actions", "elements": elements})
        await self._post(recipient_id, text=text, blocks=blocks)


class SignedSlackInput(PlatformInput):
    """Slack's Events API and interactive buttons, each request checked as Slack signs it."""

    @classmethod
    def name(cls) -> str:
        return "slack"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = cls.settings(credentials, _KNOWN)
        granularity = settings.text("conversation_granularity", "channel")
        if granularity not in GRANULARITIES:
            raise settings.error("conversation_granularity", f"{granularity!r} is not one of {GRANULARITIES}")
        return cls(
            token=settings.secret("slack_token"),
            signing_secret=settings.secret("slack_signing_secret"),
            team_ids=settings.text_list("team_ids"),
            api_url=settings.text("api_url", DEFAULT_API_URL),
            granularity=granularity,
            max_age_seconds=settings.integer("max_age_seconds", DEFAULT_MAX_AGE_SECONDS),
            **cls.common(settings),
        )

    def __init__(
        self,
        *,
        token: str,
        signing_secret: str,
        team_ids: Sequence[str],
        api_url: str = DEFAULT_API_URL,
        granularity: str = "channel",
        max_age_seconds: int = DEFAULT_MAX_AGE_SECONDS,
        **common: Any,
    ) -> None:
        super().__init__(replays=Replays(KEEP_EVENT_IDS_SECONDS), **common)
        self.token = token
        self._signing_secret = signing_secret.encode("utf-8")
        self.team_ids = frozenset(team_ids)
        self.api_url = api_url if api_url.endswith("/") else f"{api_url}/"
        self.granularity = granularity
        self.max_age_seconds = max_age_seconds
        self._tasks: set[asyncio.Task[Any]] = set()

    def get_output_channel(self) -> OutputChannel:
        return SlackOutput(self)

    # -- Slack's proof -------------------------------------------------------------------------------

    def unsigned(self, headers: Mapping[str, str], body: bytes, now: float) -> str | None:
        """Why the request is not Slack's, or None when its signature holds and is recent."""
        stamp = headers.get("x-slack-request-timestamp")
        signature = headers.get("x-slack-signature")
        if not stamp or not signature:
            return "no X-Slack-Signature or X-Slack-Request-Timestamp"
        try:
            sent = int(stamp)
        except ValueError:
            return "an X-Slack-Request-Timestamp that is no number"
        if abs(now - sent) > self.max_age_seconds:
            return (
                f"an X-Slack-Request-Timestamp {int(now - sent)} s from now, outside the "
                f"{self.max_age_seconds} s window (a replay?)"
            )
        base = b"v0:" + stamp.encode("ascii") + b":" + body
        expected = "v0=" + hmac.new(self._signing_secret, base, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8", "replace")):
            return "an X-Slack-Signature that does not verify"
        return None

    def _foreign(self, workspace: Any, own: Any) -> str | None:
        """Why a request of ``workspace`` from a person of ``own`` is not served, or None."""
        if workspace not in self.team_ids:
            return f"a request of workspace {str(workspace)[:32]!r}, which is not in team_ids"
        if own not in self.team_ids:
            return f"a person of workspace {str(own)[:32]!r}, which is not in team_ids"
        return None

    # -- who speaks, and where ---------------------------------------------------------------------

    def speaker(self, workspace: str, own: str, user: str, slack_channel: str, thread: str | None) -> Speaker:
        where = [workspace, slack_channel] + ([thread] if self.granularity == "thread" and thread else [])
        return self.vouching.speaker([*where, user], f"{own}/{user}")

    def address(self, conversation: str) -> tuple[str, str | None] | None:
        """The Slack channel (and thread) of one of this channel's conversations."""
        where = self.vouching.where(conversation)
        if where is not None and len(where) == 3:
            return where[1], None
        if where is not None and len(where) == 4:
            return where[1], where[2]
        return None

    @staticmethod
    def plain_text(text: str, bot_users: Sequence[str]) -> str:
        """The text of a Slack message as the person wrote it: the bot's mention out, links as text."""
        for bot in bot_users:
            text = text.replace(f"<@{bot}>", " ")
        text = _BARE_URL.sub(r"\1", _BARE_ADDRESS.sub(r"\1", _LINK.sub(r"\1", text)))
        for escaped, character in _ESCAPED:
            text = text.replace(escaped, character)
        return text.strip()

    # -- the routes ------------------------------------------------------------------------------

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        @routes.route("/webhook", methods=["POST"])
        async def webhook(request: Request) -> HTTPResponse:
            refusal = self.oversized(request)
            if refusal is not None:
                return refusal
            body = request.body or b""
            reason = self.unsigned(request.headers, body, time.time())
            if reason is not None:
                return self.refuse(401, reason)
            content_type = (request.headers.get("content-type") or "").split(";")[0].strip()
            try:
                if content_type == "application/json":
                    return self._event(json.loads(body), on_new_message)
                if content_type == "application/x-www-form-urlencoded":
                    form = urllib.parse.parse_qs(body.decode("utf-8"))
                    return self._press(json.loads(form["payload"][0]), on_new_message)
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                return self.refuse(400, "a signed body that is not an event or a button press Slack sends")
            return self.refuse(400, f"a signed body of type {content_type!r}")

    def _hand_over(
        self, text: str, speaker: Speaker, on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        message = self.vouching.message(text, SlackOutput(self), speaker)

        async def turn() -> None:
            await on_new_message(message)

        # Slack wants its answer within 3 s: the turn runs after it (Rasa's Slack channel does the same).
        task = asyncio.create_task(turn())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return response.json({"status": "received"})

    def _event(
        self, envelope: dict[str, Any], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        if envelope.get("type") == "url_verification":
            return response.json({"challenge": str(envelope["challenge"])})
        if envelope.get("type") != "event_callback":
            return self.ignored(f"a request of type {str(envelope.get('type'))[:40]!r}")
        event = envelope["event"]
        workspace = envelope.get("team_id")
        own = event.get("user_team") or event.get("team") or workspace
        foreign = self._foreign(workspace, own)
        if foreign is not None:
            return self.refuse(403, foreign)
        heard = event.get("type") == "app_mention" or (
            event.get("type") == "message" and event.get("channel_type") == "im"
        )
        if not heard or event.get("subtype") or event.get("bot_id") or not isinstance(event.get("text"), str):
            return self.ignored("an event that is no person's message to the assistant")
        if not self.replays.first(f"event {envelope['event_id']}"):
            return self.repeated(f"event {str(envelope['event_id'])[:40]}")
        bots = [str(a.get("user_id")) for a in envelope.get("authorizations") or [] if a.get("user_id")]
        thread = event.get("thread_ts") or event.get("ts")
        speaker = self.speaker(str(workspace), str(own), str(event["user"]), str(event["channel"]), thread)
        return self._hand_over(self.plain_text(event["text"], bots), speaker, on_new_message)

    def _press(
        self, payload: dict[str, Any], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        if payload.get("type") != "block_actions":
            return self.ignored(f"an interaction of type {str(payload.get('type'))[:40]!r}")
        workspace = payload["team"]["id"]
        user = payload["user"]
        own = user.get("team_id") or workspace
        foreign = self._foreign(workspace, own)
        if foreign is not None:
            return self.refuse(403, foreign)
        action = payload["actions"][0]
        if action.get("type") != "button":
            return self.ignored(f"an interaction with a {str(action.get('type'))[:40]!r}")
        if not self.replays.first(f"press {payload.get('trigger_id') or action['action_ts']}"):
            return self.repeated(f"button press {str(payload.get('trigger_id') or action['action_ts'])[:40]}")
        message = payload.get("message") or {}
        slack_channel = (payload.get("channel") or {}).get("id") or payload["container"]["channel_id"]
        thread = message.get("thread_ts") or message.get("ts")
        speaker = self.speaker(workspace, own, str(user["id"]), str(slack_channel), thread)
        pressed = self.vouching.pressed(speaker.conversation, action.get("value"))
        if pressed is None:
            return self.refuse(403, FOREIGN_PRESS)
        return self._hand_over(pressed, speaker, on_new_message)
