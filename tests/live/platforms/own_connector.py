"""A connector of your own on the plugin's helper (docs/channels/index.md shows this file).

"Acme Chat" is made up for the example: it posts each message to the webhook as JSON
(``{"id", "workspace", "user", "text"}``, or ``"button"`` instead of ``"text"`` for a press), signs
it with ``X-Acme-Signature: hex(HMAC-SHA256(secret, X-Acme-Timestamp + "." + body))``, and shows the
person what the webhook answers. The Rasa server of tests/live/platforms/test_platforms.py serves it
beside the plugin's own connectors.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rasa.core.channels.channel import CollectingOutputChannel, InputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels.platform import FOREIGN_PRESS, PlatformInput, Replays, Vouching


class AcmeOutput(CollectingOutputChannel):
    """What the assistant says, answered to the webhook's request; each button tagged."""

    def __init__(self, vouching: Vouching) -> None:
        super().__init__()
        self.vouching = vouching

    async def send_text_with_buttons(
        self, recipient_id: str, text: str, buttons: list[dict[str, Any]], **kwargs: Any
    ) -> None:
        tagged = [
            {"title": b["title"], "value": self.vouching.button(recipient_id, b["payload"])} for b in buttons
        ]
        await self._persist_message({"recipient_id": recipient_id, "text": text, "buttons": tagged})


class AcmeInput(PlatformInput):
    @classmethod
    def name(cls) -> str:
        return "acme"  # its webhook: /webhooks/acme/webhook

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = cls.settings(credentials, {"signing_secret"})  # + channel_key, max_body_bytes
        return cls(signing_secret=settings.secret("signing_secret"), **cls.common(settings))

    def __init__(self, *, signing_secret: str, **common: Any) -> None:
        super().__init__(replays=Replays(keep_seconds=3600), **common)
        self.secret = signing_secret.encode()

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        @routes.route("/webhook", methods=["POST"])
        async def webhook(request: Request) -> HTTPResponse:
            # 1. The platform's proof, before anything else; a refusal is logged without the body.
            refusal = self.oversized(request)
            if refusal is not None:
                return refusal
            stamp = request.headers.get("x-acme-timestamp", "")
            signed = stamp.encode() + b"." + (request.body or b"")
            expected = hmac.new(self.secret, signed, hashlib.sha256).hexdigest().encode()
            if not hmac.compare_digest(expected, request.headers.get("x-acme-signature", "").encode()):
                return self.refuse(401, "an X-Acme-Signature that does not verify")
            if not stamp.isdigit() or abs(time.time() - int(stamp)) > 300:
                return self.refuse(401, "an X-Acme-Timestamp outside the 300 s window")
            event = json.loads(request.body)
            # 2. An event already received is never handed to Rasa again.
            if not self.replays.first(str(event["id"])):
                return self.repeated(f"event {event['id']}")
            # 3. The conversation and the person, from what the platform signed.
            workspace, user = str(event["workspace"]), str(event["user"])
            speaker = self.vouching.speaker([workspace, user], f"{workspace}/{user}")
            # 4. A press counts as its payload, in the conversation its button was sent to only.
            text = event.get("text")
            if "button" in event:
                text = self.vouching.pressed(speaker.conversation, event["button"])
                if text is None:
                    return self.refuse(403, FOREIGN_PRESS)
            # 5. Signed once, and handed to Rasa.
            output = AcmeOutput(self.vouching)
            await on_new_message(self.vouching.message(str(text), output, speaker))
            return response.json(output.messages)
