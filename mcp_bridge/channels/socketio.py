"""socket.io for a web page, where a signed token, not the client, names the conversation.

```yaml
# credentials.yml (in place of `socketio:`)
mcp_bridge.channels.socketio.SignedSocketIOInput:
  jwt_key: "${CHAT_JWT_KEY}"          # Rasa's own setting names; HS256 unless jwt_method says otherwise
  jwt_method: HS256
  allowed_origins: "${CHAT_PAGE_ORIGINS}"   # or a list: [https://chat.example.com]
  # jwt_audience: mcp_bridge.channels.socketio   # the default
  # jwt_issuers: [https://chat.example.com]      # default: allowed_origins
```

What Rasa's ``socketio`` channel (Rasa 3.6) leaves open, and what this one does instead:

* **The conversation is the token's.** A connection must present ``auth: {token: <JWT>}``, signed
  with ``jwt_key`` (``jwt_method``: HS256 by default; RS256 or ES256 with a public key), with
  ``sub`` (the conversation id), ``exp`` (10 s of clock skew allowed), ``aud`` naming this channel
  (``jwt_audience``) and ``iss`` naming the page that asked for it (one of ``jwt_issuers``, by
  default the ``allowed_origins``; and, from a browser, the connection's own ``Origin``): a token
  signed with the same key for anything else is no way in. Anything else is refused before the
  connection opens.
* **Not beyond its token.** The socket is closed when its token expires (``exp``, plus the skew),
  unless the page has given it a newer one for the same conversation and user on the open socket
  (the event ``renew_token``, ``{token}``, acknowledged ``true`` or ``false``): a token, once
  issued, lets nobody keep a conversation open for longer than it says.
  The socket joins the room of ``sub`` and every message it sends goes to that conversation. The
  ``session_id`` a client sends is never used: ``session_request`` is answered with ``sub``, and a
  message naming another conversation is dropped. Rasa's own channel checks the token at connect
  and then lets the client name any conversation.
* **Who sent it.** Each message's metadata says ``socketio:<user>``: the token's ``user`` claim
  (a deployment's login) or, without one, its ``sub``, signed with the conversation and the text
  under ``channel_key`` (:mod:`mcp_bridge.channels.proof`); the action server checks the signature
  before an answer counts, and the confirmation seal binds a question to the person.
* **Only the page's origin.** A browser connection whose ``Origin`` is not in ``allowed_origins`` is
  refused (Rasa's own channel turns python-socketio's origin check off), so another web page the
  person visits cannot talk to the assistant in their name. WebSocket transport only: no
  long-polling, so no cross-origin HTTP requests either.
* **Bounded input.** A socket.io packet over ``max_message_bytes`` (default 64 KiB) closes the
  connection; a token over 4 KiB is refused unread.
* ``enter_room`` is awaited: python-socketio 5.10 made it a coroutine, which Rasa's channel calls
  without ``await`` (its sessions then never receive a reply; RasaHQ/rasa#13027).

Settings: ``jwt_key`` (required), ``jwt_method``, ``allowed_origins`` (required), ``jwt_audience``,
``jwt_issuers``, ``channel_key``
(default ``"${MCP_BRIDGE_CHANNEL_KEY}"``, the action servers' value),
``max_message_bytes``, and Rasa's ``user_message_evt``, ``bot_message_evt``, ``namespace``,
``socketio_path``, ``metadata_key``; ``session_persistence`` is accepted and has no effect (a
conversation always outlives its connections: it is the token's).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jwt
from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from rasa.core.channels.socketio import SocketBlueprint, SocketIOOutput
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse
from socketio import AsyncServer
from socketio.exceptions import ConnectionRefusedError as Refused

from mcp_bridge.channels._settings import ChannelConfigError, Settings, printable_id
from mcp_bridge.channels.proof import ChannelKeys

logger = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024
MAX_TOKEN_CHARS = 4096
# The token's issuer (the page's server) and Rasa may disagree on the time by this much.
CLOCK_SKEW_SECONDS = 10
# The ``aud`` a token must name unless ``jwt_audience`` says otherwise (the example's chat page's).
DEFAULT_AUDIENCE = "mcp_bridge.channels.socketio"
# The event a page renews its token with on an open socket.
RENEW_EVENT = "renew_token"
# PyJWT's names; never "none".
ALGORITHMS = {
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
    "ES256", "ES384", "ES512", "EdDSA",
}  # fmt: skip
_KNOWN = {
    "jwt_key",
    "jwt_method",
    "jwt_audience",
    "jwt_issuers",
    "allowed_origins",
    "max_message_bytes",
    "user_message_evt",
    "bot_message_evt",
    "namespace",
    "socketio_path",
    "metadata_key",
    "session_persistence",
    "channel_key",
}


@dataclass(frozen=True)
class Person:
    """Who a verified token speaks for: the conversation it may use, the user behind it, until when
    (the token's ``exp`` plus the clock skew, a Unix time), and the Origin of the connection."""

    conversation: str
    user: str
    until: float
    origin: str | None = None


class SignedSocketIOInput(InputChannel):
    """socket.io where the conversation is the signed token's subject (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "socketio"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = Settings(credentials, f"{cls.__module__}.{cls.__qualname__}", _KNOWN)
        method = settings.text("jwt_method", "HS256")
        if method not in ALGORITHMS:
            raise settings.error("jwt_method", f"{method!r} is not one of {', '.join(sorted(ALGORITHMS))}")
        origins = settings.text_list("allowed_origins")
        if "*" in origins:
            raise settings.error("allowed_origins", "'*' would let every web page in: name the page's origin")
        issuers = settings.text_list("jwt_issuers") if "jwt_issuers" in settings.values else origins
        return cls(
            keys=settings.channel_keys(),
            jwt_key=settings.secret("jwt_key"),
            jwt_method=method,
            jwt_audience=settings.text("jwt_audience", DEFAULT_AUDIENCE),
            jwt_issuers=issuers,
            allowed_origins=origins,
            max_message_bytes=settings.integer("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES),
            user_message_evt=settings.text("user_message_evt", "user_uttered"),
            bot_message_evt=settings.text("bot_message_evt", "bot_uttered"),
            namespace=settings.optional_text("namespace"),
            socketio_path=settings.text("socketio_path", "/socket.io"),
            metadata_key=settings.text("metadata_key", "metadata"),
        )

    def __init__(
        self,
        *,
        keys: ChannelKeys,
        jwt_key: str,
        allowed_origins: tuple[str, ...],
        jwt_method: str = "HS256",
        jwt_audience: str = DEFAULT_AUDIENCE,
        jwt_issuers: tuple[str, ...] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        user_message_evt: str = "user_uttered",
        bot_message_evt: str = "bot_uttered",
        namespace: str | None = None,
        socketio_path: str = "/socket.io",
        metadata_key: str = "metadata",
    ) -> None:
        if not jwt_key or not allowed_origins:
            raise ChannelConfigError("SignedSocketIOInput needs a jwt_key and allowed_origins")
        self.keys = keys
        self.jwt_key = jwt_key
        self.jwt_method = jwt_method
        self.jwt_audience = jwt_audience
        self.allowed_origins = tuple(allowed_origins)
        self.jwt_issuers = tuple(jwt_issuers) if jwt_issuers is not None else self.allowed_origins
        self.max_message_bytes = max_message_bytes
        self.user_message_evt = user_message_evt
        self.bot_message_evt = bot_message_evt
        self.namespace = namespace
        self.socketio_path = socketio_path
        self.metadata_key = metadata_key
        self.sio: AsyncServer | None = None
        # The task that closes each open socket when its token expires, by socket id.
        self._closing: dict[str, asyncio.Task[None]] = {}

    def get_output_channel(self) -> OutputChannel | None:
        return None if self.sio is None else SocketIOOutput(self.sio, self.bot_message_evt)

    # -- who is asking -----------------------------------------------------------------------

    def origin_allowed(self, environ: dict[str, Any]) -> bool:
        """A browser always sends Origin with a WebSocket; a client without one is no web page."""
        origin = environ.get("HTTP_ORIGIN")
        return origin is None or origin in self.allowed_origins

    def person(self, auth: Any, origin: str | None = None) -> Person | None:
        """Who the connection's token speaks for, or None when it carries no valid token (``origin``:
        the connection's Origin header, which the token's issuer must then be)."""
        token = auth.get("token") if isinstance(auth, dict) else None
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            return None
        if token[:7].lower() == "bearer ":
            token = token[7:]
        try:
            claims = jwt.decode(
                token,
                self.jwt_key,
                algorithms=[self.jwt_method],
                audience=self.jwt_audience,
                issuer=self.jwt_issuers,
                options={"require": ["sub", "exp", "aud", "iss"]},
                leeway=CLOCK_SKEW_SECONDS,
            )
        except jwt.PyJWTError as exc:
            logger.info("socket.io: token refused (%s)", type(exc).__name__)
            return None
        if origin is not None and claims["iss"] != origin:
            logger.info("socket.io: token refused (issued for another page than the connection's)")
            return None
        conversation = printable_id(claims.get("sub"))
        user = claims.get("user")
        if conversation is None or (user is not None and printable_id(user) is None):
            logger.info("socket.io: token refused (its sub or user is not a usable id)")
            return None
        until = float(claims["exp"]) + CLOCK_SKEW_SECONDS
        return Person(conversation, f"{self.name()}:{user or conversation}", until, origin)

    def _metadata(self, data: dict[str, Any]) -> Any:
        metadata = data.get(self.metadata_key)
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except ValueError:
                metadata = None
        return metadata

    # -- the socket ------------------------------------------------------------------------------

    def blueprint(self, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> Blueprint:
        sio = AsyncServer(
            async_mode="sanic",
            # python-socketio refuses a connection whose Origin is not listed (checked again below).
            cors_allowed_origins=list(self.allowed_origins),
            transports=["websocket"],
            max_http_buffer_size=self.max_message_bytes,
        )
        self.sio = sio
        namespace = self.namespace
        routes = SocketBlueprint(sio, self.socketio_path, "mcp_bridge_socketio_webhook", __name__)

        @routes.route("/", methods=["GET"])
        async def health(_: Request) -> HTTPResponse:
            return response.json({"status": "ok"})

        async def close_when_expired(sid: str) -> None:
            """Closes the socket once its token (the latest it was given) has expired."""
            while True:
                try:
                    person: Person = await sio.get_session(sid, namespace=namespace)
                except KeyError:
                    return  # gone already
                left = person.until - time.time()
                if left <= 0:
                    break
                await asyncio.sleep(left)
            logger.info("socket.io: a socket whose token expired was closed")
            await sio.disconnect(sid, namespace=namespace)

        @sio.on("connect", namespace=namespace)
        async def connect(sid: str, environ: dict[str, Any], auth: Any = None) -> None:
            if not self.origin_allowed(environ):
                logger.warning("socket.io: a connection from an origin not allowed was refused")
                raise Refused("origin not allowed")
            person = self.person(auth, environ.get("HTTP_ORIGIN"))
            if person is None:
                raise Refused("a valid token is required")
            await sio.save_session(sid, person, namespace=namespace)
            joined = sio.enter_room(sid, person.conversation, namespace=namespace)
            if inspect.isawaitable(joined):  # a coroutine from python-socketio 5.10 on
                await joined
            self._closing[sid] = asyncio.create_task(close_when_expired(sid))

        @sio.on("disconnect", namespace=namespace)
        async def disconnect(sid: str, *reason: Any) -> None:
            closing = self._closing.pop(sid, None)
            if closing is not None and closing is not asyncio.current_task():
                closing.cancel()
            logger.debug("socket.io: %s disconnected", sid)

        @sio.on(RENEW_EVENT, namespace=namespace)
        async def renew_token(sid: str, data: Any = None) -> bool:
            """A newer token for the open socket: the same conversation and user, a later expiry."""
            person: Person = await sio.get_session(sid, namespace=namespace)
            renewed = self.person(data, person.origin)
            if renewed is None or (renewed.conversation, renewed.user) != (person.conversation, person.user):
                logger.info("socket.io: a token renewal was refused")
                return False
            if renewed.until > person.until:
                await sio.save_session(sid, renewed, namespace=namespace)
            return True

        @sio.on("session_request", namespace=namespace)
        async def session_request(sid: str, data: Any = None) -> None:
            person: Person = await sio.get_session(sid, namespace=namespace)
            # Whatever session_id the client asked for, its conversation is the token's.
            await sio.emit("session_confirm", person.conversation, room=sid, namespace=namespace)

        @sio.on(self.user_message_evt, namespace=namespace)
        async def handle_message(sid: str, data: Any = None) -> None:
            person: Person = await sio.get_session(sid, namespace=namespace)
            if person.until <= time.time():  # before close_when_expired has run, on a busy loop
                logger.info("socket.io: a message on a socket whose token expired was dropped")
                await sio.disconnect(sid, namespace=namespace)
                return
            if not isinstance(data, dict) or not isinstance(data.get("message"), str):
                logger.warning("socket.io: a message without text was dropped")
                return
            claimed = data.get("session_id")
            if claimed not in (None, "", person.conversation):
                logger.warning("socket.io: a message naming another conversation than its token was dropped")
                return
            await on_new_message(
                UserMessage(
                    data["message"],
                    SocketIOOutput(sio, self.bot_message_evt),
                    person.conversation,
                    input_channel=self.name(),
                    metadata=self.keys.vouch(
                        self._metadata(data),
                        conversation=person.conversation,
                        user=person.user,
                        text=data["message"],
                    ),
                )
            )

        return routes
