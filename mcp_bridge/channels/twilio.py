"""SMS and WhatsApp through Twilio, signed: in place of Rasa's ``twilio`` channel.

```yaml
# credentials.yml (in place of `twilio:`)
mcp_bridge.channels.twilio.SignedTwilioInput:
  account_sid: "${TWILIO_ACCOUNT_SID}"
  auth_token: "${TWILIO_AUTH_TOKEN}"
  twilio_number: ["+15550001111", "whatsapp:+15550001111"]   # the numbers it answers on
  webhook_url: https://rasa.example.com/webhooks/twilio/webhook  # exactly as set at Twilio
```

Twilio posts each incoming message (``application/x-www-form-urlencoded``) to
``/webhooks/twilio/webhook``. Before anything else, as Twilio documents ("Webhooks security"):

* ``X-Twilio-Signature`` must be the base64 HMAC-SHA1, under the auth token, of ``webhook_url``
  followed by every POST parameter, sorted by name, as name and value with nothing between
  (compared in constant time; the URL is tried with and without its default port, as Twilio's own
  validator does); else 401. Behind a proxy the URL the Rasa server sees is not the one Twilio
  signed: ``webhook_url`` is the one configured at Twilio, query string included.
* The ``AccountSid`` must be ``account_sid`` and ``To`` one of ``twilio_number``; else 403.
* A ``MessageSid`` seen before (kept for a day) is dropped, answered 200 and logged. Twilio signs
  no time, so the message id is the replay check.

The person is ``twilio:<From>`` (``+15551234567``, or ``whatsapp:+15551234567``: the number Twilio
received the message from); the conversation ``twilio_sms_<From's digits>_<To's digits>``
(``twilio_whatsapp_...`` on WhatsApp). Messages from other addresses (a short code's, Messenger's
through Twilio) are ignored. On SMS, a question's buttons
are written out as the answers to type; on WhatsApp they are reply buttons (at most three, Twilio's
limit for a message in a session): the connector creates one quick-reply content template per
number of buttons through Twilio's Content API (``content_api_url``) and sends it with the question
and the buttons, each button's id the payload tagged with the conversation. A press comes back with
``ButtonPayload`` and is handed to Rasa as its payload, signed like a typed answer; a press whose tag
is not this conversation's is refused (403). Typed answers work everywhere.

Twilio settings: the number's (or Messaging Service's) "A message comes in" webhook,
``HTTP POST`` to ``webhook_url``.

Settings: ``account_sid``, ``auth_token``, ``twilio_number``, ``webhook_url`` (required),
``api_url`` (default ``https://api.twilio.com``), ``content_api_url`` (default
``https://content.twilio.com``), ``whatsapp_buttons`` (default true), ``channel_key``,
``max_body_bytes``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels.platform import (
    FOREIGN_PRESS,
    PlatformInput,
    Replays,
    Speaker,
    shortened,
    typed_choices,
)

logger = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.twilio.com"
DEFAULT_CONTENT_API_URL = "https://content.twilio.com"
KEEP_MESSAGE_IDS_SECONDS = 24 * 3600
WHATSAPP = "whatsapp:"
# The addresses this channel serves: an SMS number (E.164) or a WhatsApp one.
_ADDRESS = re.compile(r"(whatsapp:)?\+(\d{4,15})")
# WhatsApp's reply buttons in a session: at most three, titles of at most 20 characters.
MAX_WHATSAPP_BUTTONS = 3
MAX_TITLE_CHARS = 20
_KNOWN = {
    "account_sid",
    "auth_token",
    "twilio_number",
    "webhook_url",
    "api_url",
    "content_api_url",
    "whatsapp_buttons",
}


def twilio_signature(auth_token: bytes, url: str, params: Sequence[tuple[str, str]]) -> str:
    """Twilio's signature of a request to ``url`` with these POST parameters."""
    signed = url
    names = sorted({name for name, _ in params})
    for name in names:
        for value in sorted({value for key, value in params if key == name}):
            signed += name + value
    return base64.b64encode(hmac.new(auth_token, signed.encode("utf-8"), hashlib.sha1).digest()).decode(
        "ascii"
    )


def url_forms(url: str) -> list[str]:
    """``url`` as given, without its port and with the scheme's default port (Twilio signs either)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    default = 443 if parts.scheme == "https" else 80
    bare = parts._replace(netloc=host).geturl()
    with_port = parts._replace(netloc=f"{host}:{parts.port or default}").geturl()
    return list(dict.fromkeys([url, bare, with_port]))


class TwilioOutput(OutputChannel):
    """Sends with Twilio's Messages API from the number the person wrote to."""

    @classmethod
    def name(cls) -> str:
        return "twilio"

    def __init__(self, channel: SignedTwilioInput) -> None:
        super().__init__()
        self.input = channel

    async def _send(self, recipient_id: str, **fields: str) -> None:
        address = self.input.address(recipient_id)
        if address is None:
            logger.error("twilio: %r is no conversation of this channel; nothing sent", recipient_id)
            return
        person, number = address
        await self.input.api.call(
            "the message create",
            "POST",
            f"{self.input.api_url}/2010-04-01/Accounts/{self.input.account_sid}/Messages.json",
            form={"To": person, "From": number, **fields},
            auth=(self.input.account_sid, self.input.auth_token),
        )

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        for part in text.strip().split("\n\n"):
            await self._send(recipient_id, Body=part)

    async def send_text_with_buttons(
        self, recipient_id: str, text: str, buttons: list[dict[str, Any]], **kwargs: Any
    ) -> None:
        usable = [b for b in buttons if isinstance(b.get("payload"), str)]
        whatsapp = (self.input.vouching.where(recipient_id) or [""])[0] == "whatsapp"
        if not (whatsapp and self.input.whatsapp_buttons and 0 < len(usable) <= MAX_WHATSAPP_BUTTONS):
            await self._send(recipient_id, Body=typed_choices(text, buttons))
            return
        content_sid = await self.input.quick_reply_template(len(usable))
        if content_sid is None:
            await self._send(recipient_id, Body=typed_choices(text, buttons))
            return
        variables = {"1": text}
        for number, button in enumerate(usable):
            variables[str(2 + 2 * number)] = shortened(
                str(button.get("title") or button["payload"]), MAX_TITLE_CHARS
            )
            variables[str(3 + 2 * number)] = self.input.vouching.button(recipient_id, button["payload"])
        await self._send(recipient_id, ContentSid=content_sid, ContentVariables=json.dumps(variables))


class SignedTwilioInput(PlatformInput):
    """Twilio's incoming SMS and WhatsApp messages, each checked against ``X-Twilio-Signature``."""

    @classmethod
    def name(cls) -> str:
        return "twilio"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = cls.settings(credentials, _KNOWN)
        webhook_url = settings.text("webhook_url")
        if urllib.parse.urlsplit(webhook_url).scheme not in ("http", "https"):
            raise settings.error("webhook_url", "the URL configured at Twilio, http(s)://... is required")
        buttons = settings.values.get("whatsapp_buttons", True)
        if not isinstance(buttons, bool):
            raise settings.error("whatsapp_buttons", "true or false is required")
        return cls(
            account_sid=settings.text("account_sid"),
            auth_token=settings.secret("auth_token"),
            numbers=settings.text_list("twilio_number"),
            webhook_url=webhook_url,
            api_url=settings.text("api_url", DEFAULT_API_URL),
            content_api_url=settings.text("content_api_url", DEFAULT_CONTENT_API_URL),
            whatsapp_buttons=buttons,
            **cls.common(settings),
        )

    def __init__(
        self,
        *,
        account_sid: str,
        auth_token: str,
        numbers: Sequence[str],
        webhook_url: str,
        api_url: str = DEFAULT_API_URL,
        content_api_url: str = DEFAULT_CONTENT_API_URL,
        whatsapp_buttons: bool = True,
        **common: Any,
    ) -> None:
        super().__init__(replays=Replays(KEEP_MESSAGE_IDS_SECONDS), **common)
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.numbers = frozenset(numbers)
        self.webhook_url = webhook_url
        self.api_url = api_url.rstrip("/")
        self.content_api_url = content_api_url.rstrip("/")
        self.whatsapp_buttons = whatsapp_buttons
        self._templates: dict[int, str] = {}

    def get_output_channel(self) -> OutputChannel:
        return TwilioOutput(self)

    # -- Twilio's proof ------------------------------------------------------------------------------

    def unsigned(self, signature: str | None, params: Sequence[tuple[str, str]]) -> str | None:
        """Why the request is not Twilio's, or None when its signature holds."""
        if not signature:
            return "no X-Twilio-Signature"
        token = self.auth_token.encode("utf-8")
        given = signature.encode("utf-8", "replace")
        if not any(
            hmac.compare_digest(twilio_signature(token, url, params).encode("ascii"), given)
            for url in url_forms(self.webhook_url)
        ):
            return "an X-Twilio-Signature that does not verify (is webhook_url the URL configured at Twilio?)"
        return None

    def speaker(self, person: str, number: str) -> Speaker | None:
        """The speaker of a message from ``person`` to ``number`` (both SMS, or both WhatsApp)."""
        theirs, ours = _ADDRESS.fullmatch(person), _ADDRESS.fullmatch(number)
        if theirs is None or ours is None or theirs[1] != ours[1]:
            return None
        kind = "whatsapp" if theirs[1] else "sms"
        return self.vouching.speaker([kind, theirs[2], ours[2]], person)

    def address(self, conversation: str) -> tuple[str, str] | None:
        """The person's address and this bot's number of one of this channel's conversations."""
        where = self.vouching.where(conversation)
        if where is None or len(where) != 3 or where[0] not in ("sms", "whatsapp"):
            return None
        prefix = WHATSAPP if where[0] == "whatsapp" else ""
        person, number = f"{prefix}+{where[1]}", f"{prefix}+{where[2]}"
        return (person, number) if number in self.numbers else None

    async def quick_reply_template(self, buttons: int) -> str | None:
        """The content template of a question with ``buttons`` reply buttons (made once per count)."""
        if buttons in self._templates:
            return self._templates[buttons]
        variables = {"1": "Question"}
        actions = []
        for number in range(buttons):
            variables[str(2 + 2 * number)] = f"Answer {number + 1}"
            variables[str(3 + 2 * number)] = f"answer_{number + 1}"
            actions.append({"title": f"{{{{{2 + 2 * number}}}}}", "id": f"{{{{{3 + 2 * number}}}}}"})
        answer = await self.api.call(
            "the content template create",
            "POST",
            f"{self.content_api_url}/v1/Content",
            json_body={
                "friendly_name": f"mcp_bridge_question_{buttons}_buttons",
                "language": "en",
                "variables": variables,
                "types": {"twilio/quick-reply": {"body": "{{1}}", "actions": actions}},
            },
            auth=(self.account_sid, self.auth_token),
        )
        sid = answer.get("sid") if isinstance(answer, dict) else None
        if not isinstance(sid, str):
            logger.error("twilio: no content template for reply buttons; the answers are written out instead")
            return None
        self._templates[buttons] = sid
        return sid

    # -- the route ---------------------------------------------------------------------------------

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        @routes.route("/webhook", methods=["POST"])
        async def webhook(request: Request) -> HTTPResponse:
            refusal = self.oversized(request)
            if refusal is not None:
                return refusal
            try:
                params = urllib.parse.parse_qsl((request.body or b"").decode("utf-8"), keep_blank_values=True)
            except (UnicodeDecodeError, ValueError):
                params = []
            reason = self.unsigned(request.headers.get("x-twilio-signature"), params)
            if reason is not None:
                return self.refuse(401, reason)
            return await self._message(dict(params), on_new_message)

    async def _message(
        self, form: Mapping[str, str], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        if form.get("AccountSid") != self.account_sid:
            return self.refuse(403, "a message of another Twilio account")
        number, person, message_id = form.get("To"), form.get("From"), form.get("MessageSid")
        if number not in self.numbers:
            return self.refuse(403, f"a message to {str(number)[:40]!r}, which is not a twilio_number")
        if not person or not message_id:
            return self.refuse(400, "a message without From or MessageSid")
        if not self.replays.first(f"message {message_id}"):
            return self.repeated(f"message {message_id[:40]}")
        speaker = self.speaker(person, number)
        if speaker is None:
            return self.ignored("a message from an address that is no phone number (SMS or WhatsApp)")
        if form.get("ButtonPayload"):
            text = self.vouching.pressed(speaker.conversation, form["ButtonPayload"])
            if text is None:
                return self.refuse(
                    403,
                    FOREIGN_PRESS,
                )
        else:
            # Some carriers turn @ into ¡ in an SMS (Rasa's Twilio channel turns it back too).
            text = (form.get("Body") or "").replace("¡", "@")
        if not text.strip():
            return self.ignored("a message without text")
        await on_new_message(self.vouching.message(text, TwilioOutput(self), speaker))
        return response.text("", status=204)
