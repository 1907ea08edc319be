"""Rasa's REST channel behind a bearer token: for tests, operators and server-to-server callers.

```yaml
# credentials.yml (in place of `rest:`)
mcp_bridge.channels.rest.BearerRestInput:
  token: "${REST_CHANNEL_TOKEN}"
```

The same routes and answers as Rasa's ``rest`` channel (``POST /webhooks/rest/webhook``), and:

* a request without ``Authorization: Bearer <token>`` is answered 401 and reaches nothing; the token
  is compared in constant time and only ever read from the header, never from the URL;
* a body over ``max_body_bytes`` (default 64 KiB) is answered 413, one that is not a JSON object with
  a ``sender`` (1 to 128 printable characters) and a string ``message`` is answered 400;
* every message carries, in its metadata, who sent it: ``rest:<user>`` (``user``, default
  ``operator``), signed with the conversation and the text under ``channel_key``
  (:mod:`mcp_bridge.channels.proof`), which the action server checks before an answer counts.
  The caller still chooses the conversation (``sender``): whoever holds the token can
  speak in any conversation, but the confirmation seal refuses its "yes" to a question that was
  asked of someone else (a person on the chat page, say). Give the token to trusted callers only.

Settings: ``token`` (required, at least 32 characters), ``user``, ``max_body_bytes``, ``channel_key``
(default ``"${MCP_BRIDGE_CHANNEL_KEY}"``, the action servers' value).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rasa.core.channels.channel import InputChannel, UserMessage
from rasa.core.channels.rest import RestInput
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels._settings import Settings, printable_id
from mcp_bridge.channels.proof import ChannelKeys

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024
_KNOWN = {"token", "user", "max_body_bytes", "channel_key"}


class BearerRestInput(RestInput):
    """Rasa's ``rest`` channel, for callers that hold its bearer token."""

    @classmethod
    def name(cls) -> str:
        return "rest"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = Settings(credentials, f"{cls.__module__}.{cls.__qualname__}", _KNOWN)
        return cls(
            settings.secret("token"),
            keys=settings.channel_keys(),
            user=settings.text("user", "operator"),
            max_body_bytes=settings.integer("max_body_bytes", DEFAULT_MAX_BODY_BYTES),
        )

    def __init__(
        self,
        token: str,
        *,
        keys: ChannelKeys,
        user: str = "operator",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._token = token.encode("utf-8")
        self._keys = keys
        self.user = f"{self.name()}:{user}"
        self.max_body_bytes = max_body_bytes

    def _authorized(self, header: str | None) -> bool:
        scheme, _, credentials = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return False
        return hmac.compare_digest(credentials.strip().encode("utf-8"), self._token)

    def _refusal(self, request: Request) -> HTTPResponse | None:
        """The answer to a request that may not go on, or None when it may."""
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return None  # the health route: it says "ok" and nothing else
        if not self._authorized(request.headers.get("authorization")):
            logger.warning("REST channel: a request without a valid bearer token was refused")
            return response.json(
                {"error": "a bearer token is required"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="rasa"'},
            )
        if len(request.body or b"") > self.max_body_bytes:
            return response.json({"error": f"the body is over {self.max_body_bytes} bytes"}, status=413)
        try:
            body = json.loads(request.body or b"")
        except (ValueError, UnicodeDecodeError):
            body = None
        if (
            not isinstance(body, dict)
            or printable_id(body.get("sender")) is None
            or not isinstance(body.get("message"), str)
        ):
            return response.json(
                {"error": 'a JSON object with "sender" (1 to 128 characters) and "message" is required'},
                status=400,
            )
        return None

    def blueprint(self, on_new_message: Callable[[UserMessage], Awaitable[None]]) -> Blueprint:
        routes = super().blueprint(on_new_message)

        # Blueprint middleware runs for this blueprint's routes only, before their handlers.
        @routes.middleware("request")
        async def require_token(request: Request) -> HTTPResponse | None:
            return self._refusal(request)

        return routes

    def _extract_input_channel(self, req: Request) -> str:
        return self.name()  # not the client's say-so

    def get_metadata(self, request: Request) -> dict[str, Any] | None:
        # The body was checked before the handler ran (_refusal): a sender and a string message.
        body = request.json
        return self._keys.vouch(
            body.get("metadata"), conversation=str(body["sender"]), user=self.user, text=body["message"]
        )
