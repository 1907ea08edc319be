"""What a connector for a messaging platform does to take part in the confirmation.

The connectors for Slack, Microsoft Teams (Bot Framework), Twilio (SMS and WhatsApp), Telegram and
Facebook Messenger (one module each, configured in credentials.yml in place of Rasa's own) are built
on this module, and a connector of your own can be too (docs/channels/index.md shows one). Between
the platform's request and Rasa, a connector

1. **checks the platform's own proof of the request first**, as the platform documents it (a
   signature over the body, a signed token, a secret header), and refuses a request whose proof is
   missing or does not hold with 401, or 403 when the proof holds but the sender is not one this bot
   serves (another workspace, tenant, page or number): nothing reaches a conversation, and the log
   says why, never what the body held (:meth:`PlatformInput.refuse`);
2. **refuses a replay**: a request outside the platform's time window where the platform signs a
   time, and an event the platform already delivered (:class:`Replays`, answered 200 so that the
   platform stops retrying, and logged);
3. **names the conversation and the person from what the platform authenticated** (a workspace and
   user id, a tenant and an account, a phone number, a page-scoped id), never from text in the
   message (:class:`Speaker`, :meth:`Vouching.speaker`);
4. **signs each message** (:meth:`Vouching.message`): one proof per genuine platform message, of the
   exact text Rasa reads (a button's payload, for a press) and the time it arrived, under
   ``MCP_BRIDGE_CHANNEL_KEY`` (:mod:`mcp_bridge.channels.proof`);
5. **binds each button to its conversation** (:meth:`Vouching.button` when it sends one,
   :meth:`Vouching.pressed` when a press comes back): a press counts as its payload typed, and a
   press of it anywhere else (another person's question in a group chat, a copied payload) is
   refused with 403 (dropped and logged, the request answered 200, where the platform sends several
   events in one request, as Messenger does).

The action server checks each proof, uses each one once, and takes a yes only for the open question
of the person the proof names, asked before the yes arrived.

A request larger than ``max_body_bytes`` (:data:`DEFAULT_MAX_BODY_BYTES`) is refused unread (413).
What a connector sends to the platform goes through :class:`PlatformAPI`, which logs a failed call
by its name and status, never the text or a token.

This module imports the standard library, Rasa, Sanic and aiohttp (which Rasa 3.6 and Rasa Pro 3.21
both bring), and :mod:`mcp_bridge.channels.proof`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels._settings import Settings
from mcp_bridge.channels.proof import TAG_CHARS, ChannelKeys

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "FOREIGN_PRESS",
    "PlatformAPI",
    "PlatformInput",
    "Replays",
    "Speaker",
    "Vouching",
    "typed_choices",
]

logger = logging.getLogger(__name__)

# A platform's webhook request (a message, a button press) is a few KiB.
DEFAULT_MAX_BODY_BYTES = 64 * 1024
# The settings every connector here takes, besides its platform's own.
COMMON_SETTINGS = {"channel_key", "max_body_bytes"}
# Why a press is refused when its button's tag is not the conversation of the person who pressed it.
FOREIGN_PRESS = "a button press of a button not sent to the conversation of the person who pressed it"
# A conversation id is the channel's name and the platform's ids, joined by this character.
CONVERSATION_SEPARATOR = "_"
_URL_SAFE = re.compile(r"[A-Za-z0-9.~-]{1,64}")
# What a button's value holds: the tag, this character, the payload.
_BUTTON_SEPARATOR = ":"
_BUTTON_TAG = "button"
# A reply to the platform's API that takes longer than this is given up (and logged).
API_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Speaker:
    """Who a platform message is from, as the platform authenticated it: the Rasa conversation
    (the tracker's sender id) and the person (``<channel>:<who>``, what the proof names)."""

    conversation: str
    person: str


class Replays:
    """The platform event ids a connector received in the last ``keep_seconds`` (at most ``limit``,
    the oldest forgotten first): the second delivery of one is a replay, or the platform's retry of a
    request it thinks failed, and is handed to Rasa never again.

    The memory is this process's: a Rasa server run as several replicas behind one address has each
    remember what it received, so route a platform's retries to the replica of the first delivery
    (sticky by the platform's source address), or run one replica per platform.
    """

    def __init__(self, keep_seconds: float, limit: int = 100_000) -> None:
        self.keep_seconds = keep_seconds
        self.limit = limit
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first(self, event_id: str) -> bool:
        """True the first time ``event_id`` is seen (and it is remembered), False after."""
        now = time.monotonic()
        while self._seen and (
            len(self._seen) >= self.limit or next(iter(self._seen.values())) < now - self.keep_seconds
        ):
            self._seen.popitem(last=False)
        if event_id in self._seen:
            return False
        self._seen[event_id] = now
        return True


class Vouching:
    """A connector's signature on what it hands Rasa, and on the buttons it sends.

    ``channel`` is the connector's name (its Rasa input channel name, e.g. ``slack``): the prefix of
    every conversation and person it names."""

    def __init__(self, keys: ChannelKeys, channel: str) -> None:
        self.keys = keys
        self.channel = channel

    def speaker(self, where: Sequence[str], who: str) -> Speaker:
        """The speaker in the conversation at ``where`` (the platform's authenticated ids that address
        it: a workspace, a channel, the person) and ``who`` (the person's authenticated id).

        The conversation is ``<channel>_<id>_<id>...``: ids Rasa's HTTP API can name in a URL as they
        are (letters, digits, ``.``, ``-``, ``~``; any other id becomes a digest of it), so that the
        approval page and the sign-in callback reach the conversation. The person is
        ``<channel>:<who>``."""
        parts = [part if _URL_SAFE.fullmatch(part) else short_id(part, 0) for part in where]
        return Speaker(CONVERSATION_SEPARATOR.join([self.channel, *parts]), f"{self.channel}:{who}")

    def where(self, conversation: str) -> list[str] | None:
        """The ids of one of this channel's conversations (those :meth:`speaker` joined), or None."""
        parts = conversation.split(CONVERSATION_SEPARATOR)
        return parts[1:] if parts[0] == self.channel and len(parts) > 1 else None

    def message(
        self,
        text: str,
        output: OutputChannel,
        speaker: Speaker,
        metadata: Mapping[str, Any] | None = None,
    ) -> UserMessage:
        """The message Rasa gets: ``text`` in the speaker's conversation, signed for the speaker."""
        signed = self.keys.vouch(metadata, conversation=speaker.conversation, user=speaker.person, text=text)
        return UserMessage(text, output, speaker.conversation, input_channel=self.channel, metadata=signed)

    def button(self, conversation: str, payload: str) -> str:
        """The value a native button sent to ``conversation`` carries for ``payload``."""
        return f"{self.keys.tag(_BUTTON_TAG, conversation, payload)}{_BUTTON_SEPARATOR}{payload}"

    def pressed(self, conversation: str, value: Any) -> str | None:
        """The payload of a press of a button this channel sent to ``conversation``; None when the
        value is no such button's (sent to another conversation, altered, or not this channel's)."""
        if not isinstance(value, str) or len(value) <= TAG_CHARS or value[TAG_CHARS] != _BUTTON_SEPARATOR:
            return None
        tag, payload = value[:TAG_CHARS], value[TAG_CHARS + 1 :]
        return payload if self.keys.tag_holds(tag, _BUTTON_TAG, conversation, payload) else None


def typed_choices(text: str, buttons: Sequence[Mapping[str, Any]]) -> str:
    """A question with buttons, for a platform that cannot show them: the answers to type, in words,
    as ``rasa shell`` is asked (a button that sends an intent, ``/affirm``, is typed as its title,
    any other as what it sends)."""
    words = [
        str(button.get("title") or "").lower()
        if str(button.get("payload", "")).startswith("/")
        else str(button.get("payload") or "")
        for button in buttons
    ]
    quoted = [f'"{word}"' for word in words if word]
    if not quoted:
        return text
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" or {quoted[-1]}"
    return f"{text}\nReply {listed}."


def shortened(title: str, limit: int) -> str:
    """A button's title cut to a platform's limit (an ellipsis at the end when cut)."""
    return title if len(title) <= limit else title[: limit - 1] + "…"


def short_id(value: str, limit: int = 40) -> str:
    """``value`` if it is at most ``limit`` characters, else a digest of it (32 hex characters): for a
    platform id too long, or not fit, to keep as it is in a conversation id."""
    return value if len(value) <= limit else hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]


class PlatformAPI:
    """A connector's HTTP client for its platform's API (aiohttp, made on first use in the server's
    event loop, closed when the server stops)."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_SECONDS))
        return self._session

    async def call(
        self,
        what: str,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """The JSON the platform answered, or None when the call failed (logged by ``what`` and the
        status, never the URL, which may hold a token, nor the body)."""
        try:
            async with self._client().request(
                method,
                url,
                json=json_body,
                data=dict(form) if form is not None else None,
                headers=dict(headers or {}),
                auth=aiohttp.BasicAuth(*auth) if auth else None,
                params=dict(params) if params else None,
            ) as reply:
                body = await reply.read()
                if reply.status >= 300:
                    logger.error("%s: %s was answered %d", self.channel, what, reply.status)
                    return None
                return json.loads(body) if body else {}
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            logger.error("%s: %s failed (%s)", self.channel, what, type(exc).__name__)
            return None

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()


class PlatformInput(InputChannel):
    """The part every connector here shares: its settings, its signature (``vouching``), its
    memory of events (``replays``), its API client (``api``), refusing, and its routes under
    ``/webhooks/<name>/``: ``GET /`` (health) and what :meth:`add_routes` adds."""

    def __init__(
        self, *, keys: ChannelKeys, replays: Replays, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    ) -> None:
        self.vouching = Vouching(keys, self.name())
        self.replays = replays
        self.max_body_bytes = max_body_bytes
        self.api = PlatformAPI(self.name())
        # Refusals are logged under the connector's own module (mcp_bridge.channels.slack, ...).
        self.log = logging.getLogger(type(self).__module__)

    @classmethod
    def settings(cls, credentials: Mapping[str, Any] | None, known: set[str]) -> Settings:
        """This connector's entry in credentials.yml, its unknown keys refused."""
        return Settings(credentials, f"{cls.__module__}.{cls.__qualname__}", known | COMMON_SETTINGS)

    @staticmethod
    def common(settings: Settings) -> dict[str, Any]:
        """The settings every connector takes: the channel key and the body limit."""
        return {
            "keys": settings.channel_keys(),
            "max_body_bytes": settings.integer("max_body_bytes", DEFAULT_MAX_BODY_BYTES),
        }

    # -- refusing ----------------------------------------------------------------------------------

    def refuse(self, status: int, reason: str) -> HTTPResponse:
        """Refuse a request: nothing reaches a conversation; the log says why (never the body)."""
        self.log.warning("%s: a request was refused (%d): %s", self.name(), status, reason)
        return response.json({"error": reason}, status=status)

    def drop(self, event: str, reason: str) -> None:
        """Drop an event of a verified request (too old, or one of several a request carries); the
        request is answered 200, so that the platform does not deliver it again. The event reaches
        no conversation; the log says why."""
        self.log.warning("%s: %s was dropped: %s", self.name(), event, reason)

    def repeated(self, event: str) -> HTTPResponse:
        """Drop an event already received (answered 200: a platform retries anything else)."""
        self.log.warning(
            "%s: %s was received before and is dropped (a replay, or the platform's retry)",
            self.name(),
            event,
        )
        return response.json({"status": "already received"})

    def ignored(self, what: str) -> HTTPResponse:
        """A verified request that carries nothing for the assistant (a bot's own message, a typing
        notice): answered 200 so that the platform does not retry it."""
        self.log.debug("%s: %s ignored", self.name(), what)
        return response.json({"status": "ignored"})

    def oversized(self, request: Request) -> HTTPResponse | None:
        if len(request.body or b"") > self.max_body_bytes:
            return self.refuse(413, f"a body over {self.max_body_bytes} bytes")
        return None

    # -- routes ------------------------------------------------------------------------------------

    def blueprint(self, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> Blueprint:
        routes = Blueprint(f"mcp_bridge_{self.name()}_webhook", __name__)

        @routes.route("/", methods=["GET"])
        async def health(_: Request) -> HTTPResponse:
            return response.json({"status": "ok"})

        @routes.listener("after_server_stop")
        async def close_api(*_: Any) -> None:
            await self.api.close()

        self.add_routes(routes, on_new_message)
        return routes

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        raise NotImplementedError
