"""Telegram, signed: in place of Rasa's ``telegram`` channel.

```yaml
# credentials.yml (in place of `telegram:`)
mcp_bridge.channels.telegram.SignedTelegramInput:
  access_token: "${TELEGRAM_BOT_TOKEN}"      # from @BotFather
  secret_token: "${TELEGRAM_SECRET_TOKEN}"   # the secret_token given to setWebhook
```

Telegram posts each update to ``/webhooks/telegram/webhook``. Before anything else, as Telegram
documents (``setWebhook``'s ``secret_token``): the header ``X-Telegram-Bot-Api-Secret-Token`` must
be ``secret_token`` (compared in constant time; 32 to 256 characters of ``A-Z a-z 0-9 _ -``); else 401.
Telegram signs nothing else, so:

* an ``update_id`` seen before (kept for a day) is dropped, answered 200 and logged;
* a message older than ``max_age_seconds`` (its ``date``, default 300) is dropped and logged
  (Telegram delivers what waited while the webhook was unreachable, and a "yes" typed long before
  is not an answer to what is asked now); a button press carries no time of its own: its
  ``update_id`` is the check;
* edited messages, bots' messages and anything but text and button presses are ignored.

The person is ``telegram:<from.id>``; the conversation ``telegram_<chat.id>_<from.id>``, so in a
group each person has a conversation of their own. A question's buttons are an inline keyboard whose
``callback_data`` is the payload tagged with the conversation (64 bytes at most: a longer payload's
answers are written out instead); a press comes back as a ``callback_query``, is answered
(``answerCallbackQuery``), and is handed to Rasa as its payload, signed like a typed answer; a press
by anyone the button was not sent to (another member of the group, another chat) is refused (403).
Typed answers work everywhere.

Telegram settings, once (the token and the secret from your secret store):

```
curl -X POST "https://api.telegram.org/bot$TELEGRAM_BOT_TOKEN/setWebhook" \\
  -d url=https://rasa.example.com/webhooks/telegram/webhook -d secret_token="$TELEGRAM_SECRET_TOKEN" \\
  -d 'allowed_updates=["message","callback_query"]'
```

Settings: ``access_token``, ``secret_token`` (required), ``api_url`` (default
``https://api.telegram.org``), ``max_age_seconds``, ``channel_key``, ``max_body_bytes``.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels.platform import FOREIGN_PRESS, PlatformInput, Replays, Speaker, typed_choices

logger = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.telegram.org"
DEFAULT_MAX_AGE_SECONDS = 300
KEEP_UPDATE_IDS_SECONDS = 24 * 3600
# Telegram's limit on what a button carries back.
MAX_CALLBACK_DATA_BYTES = 64
# setWebhook's secret_token: "1-256 characters. Only characters A-Z, a-z, 0-9, _ and - are allowed."
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,256}")
_KNOWN = {"access_token", "secret_token", "api_url", "max_age_seconds"}


class TelegramOutput(OutputChannel):
    """Sends with the Bot API's ``sendMessage`` to the conversation's chat."""

    @classmethod
    def name(cls) -> str:
        return "telegram"

    def __init__(self, channel: SignedTelegramInput) -> None:
        super().__init__()
        self.input = channel

    async def _send(self, recipient_id: str, **fields: Any) -> None:
        chat = self.input.chat(recipient_id)
        if chat is None:
            logger.error("telegram: %r is no conversation of this channel; nothing sent", recipient_id)
            return
        await self.input.bot_api("sendMessage", {"chat_id": chat, **fields})

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        for part in text.strip().split("\n\n"):
            await self._send(recipient_id, text=part)

    async def send_text_with_buttons(
        self, recipient_id: str, text: str, buttons: list[dict[str, Any]], **kwargs: Any
    ) -> None:
        keyboard = [
            {
                "text": str(b.get("title") or b["payload"]),
                "callback_data": self.input.vouching.button(recipient_id, b["payload"]),
            }
            for b in buttons
            if isinstance(b.get("payload"), str)
        ]
        if not keyboard or any(
            len(k["callback_data"].encode("utf-8")) > MAX_CALLBACK_DATA_BYTES for k in keyboard
        ):
            await self._send(recipient_id, text=typed_choices(text, buttons))
            return
        await self._send(recipient_id, text=text, reply_markup={"inline_keyboard": [keyboard]})


class SignedTelegramInput(PlatformInput):
    """Telegram's updates, each checked against the webhook's secret token."""

    @classmethod
    def name(cls) -> str:
        return "telegram"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = cls.settings(credentials, _KNOWN)
        secret_token = settings.secret("secret_token")
        if not _SECRET_TOKEN.fullmatch(secret_token):
            raise settings.error(
                "secret_token", "Telegram allows only A-Z, a-z, 0-9, _ and -, at most 256 of them"
            )
        return cls(
            access_token=settings.secret("access_token"),
            secret_token=secret_token,
            api_url=settings.text("api_url", DEFAULT_API_URL),
            max_age_seconds=settings.integer("max_age_seconds", DEFAULT_MAX_AGE_SECONDS),
            **cls.common(settings),
        )

    def __init__(
        self,
        *,
        access_token: str,
        secret_token: str,
        api_url: str = DEFAULT_API_URL,
        max_age_seconds: int = DEFAULT_MAX_AGE_SECONDS,
        **common: Any,
    ) -> None:
        super().__init__(replays=Replays(KEEP_UPDATE_IDS_SECONDS), **common)
        self._access_token = access_token
        self._secret_token = secret_token.encode("utf-8")
        self.api_url = api_url.rstrip("/")
        self.max_age_seconds = max_age_seconds

    def get_output_channel(self) -> OutputChannel:
        return TelegramOutput(self)

    async def bot_api(self, method: str, fields: dict[str, Any]) -> Any:
        return await self.api.call(
            method, "POST", f"{self.api_url}/bot{self._access_token}/{method}", json_body=fields
        )

    # -- Telegram's proof ----------------------------------------------------------------------------

    def unsigned(self, header: str | None) -> str | None:
        if not header:
            return "no X-Telegram-Bot-Api-Secret-Token"
        if not hmac.compare_digest(header.encode("utf-8", "replace"), self._secret_token):
            return "an X-Telegram-Bot-Api-Secret-Token that is not the webhook's secret_token"
        return None

    # -- who speaks ------------------------------------------------------------------------------

    def speaker(self, chat: Any, person: Any) -> Speaker:
        return self.vouching.speaker([str(int(chat)), str(int(person))], str(int(person)))

    def chat(self, conversation: str) -> int | None:
        where = self.vouching.where(conversation)
        try:
            return int(where[0]) if where is not None and len(where) == 2 else None
        except ValueError:
            return None

    # -- the route ---------------------------------------------------------------------------------

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        @routes.route("/webhook", methods=["POST"])
        async def webhook(request: Request) -> HTTPResponse:
            refusal = self.oversized(request)
            if refusal is not None:
                return refusal
            reason = self.unsigned(request.headers.get("x-telegram-bot-api-secret-token"))
            if reason is not None:
                return self.refuse(401, reason)
            try:
                update = json.loads(request.body or b"")
                return await self._update(update, on_new_message)
            except (ValueError, KeyError, TypeError, AttributeError):
                return self.refuse(400, "a body that is not an update Telegram sends")

    async def _update(
        self, update: dict[str, Any], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        update_id = int(update["update_id"])
        query = update.get("callback_query")
        if isinstance(query, dict) and isinstance(query.get("message"), dict):
            return await self._press(update_id, query, on_new_message)
        message = update.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("text"), str):
            return self.ignored("an update that is no text message or button press")
        sender = message.get("from")
        if not isinstance(sender, dict) or sender.get("is_bot"):
            return self.ignored("a message of no person (a channel's post, a bot's message)")
        if not self.replays.first(f"update {update_id}"):
            return self.repeated(f"update {update_id}")
        age = time.time() - int(message["date"])
        if age > self.max_age_seconds:
            self.drop(
                f"update {update_id}",
                f"its message is {int(age)} s old, outside the {self.max_age_seconds} s window",
            )
            return response.json({"status": "too old"})
        speaker = self.speaker(message["chat"]["id"], sender["id"])
        await on_new_message(self.vouching.message(message["text"], TelegramOutput(self), speaker))
        return response.json({"status": "received"})

    async def _press(
        self, update_id: int, query: dict[str, Any], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        if not self.replays.first(f"update {update_id}"):
            return self.repeated(f"update {update_id}")
        await self.bot_api("answerCallbackQuery", {"callback_query_id": str(query["id"])})
        speaker = self.speaker(query["message"]["chat"]["id"], query["from"]["id"])
        pressed = self.vouching.pressed(speaker.conversation, query.get("data"))
        if pressed is None:
            return self.refuse(403, FOREIGN_PRESS)
        await on_new_message(self.vouching.message(pressed, TelegramOutput(self), speaker))
        return response.json({"status": "received"})
