"""Facebook Messenger, signed: in place of Rasa's ``facebook`` channel.

```yaml
# credentials.yml (in place of `facebook:`)
mcp_bridge.channels.facebook.SignedMessengerInput:
  verify: "${FACEBOOK_VERIFY_TOKEN}"               # the Verify Token of the webhook's settings
  secret: "${FACEBOOK_APP_SECRET}"                 # App settings > Basic > App Secret
  page-access-token: "${FACEBOOK_PAGE_ACCESS_TOKEN}"
  page_id: "123456789012345"                       # the Page this assistant speaks for
```

Meta sends the webhook's verification (``GET``, answered with ``hub.challenge`` only when
``hub.verify_token`` is ``verify``) and every event (``POST``) to ``/webhooks/facebook/webhook``.
Before anything else, as Meta documents ("Validating payloads"): ``X-Hub-Signature-256`` must be
``sha256=`` and the hex HMAC-SHA256, under the App Secret, of the raw body (compared in constant
time); else 401. Then:

* every entry must be of ``page_id`` (another Page's event, even signed by the same app, is refused:
  403);
* a message id (``mid``) seen before (kept for a day) is dropped and logged; an event older than
  ``max_age_seconds`` (its ``timestamp``, default 300) is dropped and logged (Meta redelivers what
  failed, for hours; a "yes" typed long before is not an answer to what is asked now); both answered
  200, as Meta expects;
* echoes of the Page's own messages, and anything but text, quick replies and postbacks, are ignored.

The person is ``facebook:<page>/<page-scoped id>``, the conversation
``facebook_<page>_<page-scoped id>``. A question's buttons are quick replies (titles cut to Meta's
20 characters) whose payload is the button's payload tagged with the conversation; a press comes
back as a message with ``quick_reply.payload`` (or a ``postback``) and is handed to Rasa as its
payload, signed like a typed answer; a payload whose tag is not this conversation's is dropped
(the request is answered 200, as Meta expects) and logged. Typed answers work everywhere. Each call
to the Send API carries ``appsecret_proof``.

Meta app settings: Webhooks, the Page subscription, Callback URL
``https://<rasa>/webhooks/facebook/webhook``, Verify Token ``verify``, fields ``messages`` and
``messaging_postbacks``.

Settings: ``verify``, ``secret``, ``page-access-token``, ``page_id`` (required), ``graph_url``
(default ``https://graph.facebook.com/v19.0``), ``max_age_seconds``, ``channel_key``,
``max_body_bytes``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels.platform import FOREIGN_PRESS, PlatformInput, Replays, shortened, typed_choices

DEFAULT_GRAPH_URL = "https://graph.facebook.com/v19.0"
DEFAULT_MAX_AGE_SECONDS = 300
KEEP_MESSAGE_IDS_SECONDS = 24 * 3600
# Messenger's quick replies: at most 13, titles of at most 20 characters, payloads of 1000.
MAX_QUICK_REPLIES = 13
MAX_TITLE_CHARS = 20
MAX_PAYLOAD_CHARS = 1000
logger = logging.getLogger(__name__)

_KNOWN = {"verify", "secret", "page-access-token", "page_id", "graph_url", "max_age_seconds"}


class MessengerOutput(OutputChannel):
    """Sends with the Send API (``/me/messages``) to the person's page-scoped id."""

    @classmethod
    def name(cls) -> str:
        return "facebook"

    def __init__(self, channel: SignedMessengerInput) -> None:
        super().__init__()
        self.input = channel

    async def _send(self, recipient_id: str, message: dict[str, Any]) -> None:
        person = self.input.person(recipient_id)
        if person is None:
            logger.error("facebook: %r is no conversation of this channel; nothing sent", recipient_id)
            return
        await self.input.api.call(
            "the Send API call",
            "POST",
            f"{self.input.graph_url}/me/messages",
            json_body={"recipient": {"id": person}, "messaging_type": "RESPONSE", "message": message},
            params={"access_token": self.input.page_token, "appsecret_proof": self.input.appsecret_proof},
        )

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        for part in text.strip().split("\n\n"):
            await self._send(recipient_id, {"text": part})

    async def send_text_with_buttons(
        self, recipient_id: str, text: str, buttons: list[dict[str, Any]], **kwargs: Any
    ) -> None:
        replies = [
            {
                "content_type": "text",
                "title": shortened(str(button.get("title") or button["payload"]), MAX_TITLE_CHARS),
                "payload": self.input.vouching.button(recipient_id, button["payload"]),
            }
            for button in buttons[:MAX_QUICK_REPLIES]
            if isinstance(button.get("payload"), str)
        ]
        if not replies or any(len(reply["payload"]) > MAX_PAYLOAD_CHARS for reply in replies):
            await self._send(recipient_id, {"text": typed_choices(text, buttons)})
            return
        await self._send(recipient_id, {"text": text, "quick_replies": replies})


class SignedMessengerInput(PlatformInput):
    """Messenger's webhook events, each checked against ``X-Hub-Signature-256``."""

    @classmethod
    def name(cls) -> str:
        return "facebook"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = cls.settings(credentials, _KNOWN)
        return cls(
            verify=settings.secret("verify"),
            app_secret=settings.secret("secret"),
            page_token=settings.secret("page-access-token"),
            page_id=settings.text("page_id"),
            graph_url=settings.text("graph_url", DEFAULT_GRAPH_URL),
            max_age_seconds=settings.integer("max_age_seconds", DEFAULT_MAX_AGE_SECONDS),
            **cls.common(settings),
        )

    def __init__(
        self,
        *,
        verify: str,
        app_secret: str,
        page_token: str,
        page_id: str,
        graph_url: str = DEFAULT_GRAPH_URL,
        max_age_seconds: int = DEFAULT_MAX_AGE_SECONDS,
        **common: Any,
    ) -> None:
        super().__init__(replays=Replays(KEEP_MESSAGE_IDS_SECONDS), **common)
        self._verify = verify.encode("utf-8")
        self._app_secret = app_secret.encode("utf-8")
        self.page_token = page_token
        self.page_id = page_id
        self.graph_url = graph_url.rstrip("/")
        self.max_age_seconds = max_age_seconds
        # Meta's proof that a Graph API call comes from the app: HMAC-SHA256 of the token, hex.
        self.appsecret_proof = hmac.new(
            self._app_secret, page_token.encode("utf-8"), hashlib.sha256
        ).hexdigest()

    def get_output_channel(self) -> OutputChannel:
        return MessengerOutput(self)

    # -- Meta's proof ----------------------------------------------------------------------------

    def unsigned(self, signature: str | None, body: bytes) -> str | None:
        if not signature:
            return "no X-Hub-Signature-256"
        expected = "sha256=" + hmac.new(self._app_secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8", "replace")):
            return "an X-Hub-Signature-256 that does not verify"
        return None

    def person(self, conversation: str) -> str | None:
        """The page-scoped id of the person of one of this channel's conversations."""
        where = self.vouching.where(conversation)
        return where[1] if where is not None and len(where) == 2 and where[0] == self.page_id else None

    # -- the routes --------------------------------------------------------------------------------

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        @routes.route("/webhook", methods=["GET"])
        async def verification(request: Request) -> HTTPResponse:
            token = str(request.args.get("hub.verify_token") or "").encode("utf-8")
            if request.args.get("hub.mode") != "subscribe" or not hmac.compare_digest(token, self._verify):
                return self.refuse(403, "a webhook verification without the Verify Token")
            return response.text(str(request.args.get("hub.challenge") or ""))

        @routes.route("/webhook", methods=["POST"])
        async def webhook(request: Request) -> HTTPResponse:
            refusal = self.oversized(request)
            if refusal is not None:
                return refusal
            body = request.body or b""
            reason = self.unsigned(request.headers.get("x-hub-signature-256"), body)
            if reason is not None:
                return self.refuse(401, reason)
            try:
                update = json.loads(body)
                if update.get("object") != "page":
                    return self.ignored(f"an update of {str(update.get('object'))[:40]!r}")
                entries = list(update["entry"])
                foreign = [
                    str(entry.get("id"))[:40] for entry in entries if str(entry.get("id")) != self.page_id
                ]
                if foreign:
                    return self.refuse(403, f"an event of Page {foreign[0]!r}, not page_id")
                for entry in entries:
                    for event in entry.get("messaging") or []:
                        await self._event(event, on_new_message)
            except (ValueError, KeyError, TypeError, AttributeError):
                return self.refuse(400, "a body that is not an update Messenger sends")
            return response.json({"status": "received"})

    async def _event(
        self, event: dict[str, Any], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> None:
        message = event.get("message") or {}
        postback = event.get("postback") or {}
        if message.get("is_echo") or not (message.get("mid") or postback.get("mid")):
            return  # the Page's own message echoed, a delivery or read receipt
        mid = str(message.get("mid") or postback.get("mid"))
        if str(event["recipient"]["id"]) != self.page_id:
            self.drop(f"message {mid[:60]}", "it is addressed to another Page than page_id")
            return
        if not self.replays.first(f"message {mid}"):
            self.drop(f"message {mid[:60]}", "it was received before (a replay, or Meta's retry)")
            return
        age = time.time() - int(event["timestamp"]) / 1000
        if age > self.max_age_seconds:
            self.drop(
                f"message {mid[:60]}", f"it is {int(age)} s old, outside the {self.max_age_seconds} s window"
            )
            return
        person = str(event["sender"]["id"])
        speaker = self.vouching.speaker([self.page_id, person], f"{self.page_id}/{person}")
        tagged = (message.get("quick_reply") or {}).get("payload") or postback.get("payload")
        if tagged is not None:
            text = self.vouching.pressed(speaker.conversation, tagged)
            if text is None:
                self.drop(
                    f"message {mid[:60]}",
                    FOREIGN_PRESS,
                )
                return
        elif isinstance(message.get("text"), str):
            text = message["text"]
        else:
            return  # an attachment, a sticker: nothing the assistant reads
        await on_new_message(self.vouching.message(text, MessengerOutput(self), speaker))
