"""People on each platform: their messages and button presses, sent to the Rasa server's webhook as
the platform sends them, signed as the platform signs them, with the test secrets.

Each signature is written here from the platform's documentation, apart from the connectors' code
(so that a connector that signs or checks wrongly does not agree with itself): Slack's ``v0`` HMAC
over the timestamp and body, the Bot Connector's RS256 token, Twilio's HMAC-SHA1 over the webhook URL
and the sorted parameters, Telegram's secret token header, Meta's ``X-Hub-Signature-256``. Every
request a person sends is kept (:class:`Delivery`), so a test can send it again, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tests.live.platforms.standins import (
    BotConnectorAPI,
    Button,
    GraphAPI,
    Sent,
    SlackAPI,
    StandIn,
    TelegramAPI,
    TwilioAPI,
)


@dataclass(frozen=True)
class Delivery:
    """One request as the platform sent it, and the status the Rasa server answered."""

    url: str
    body: bytes
    headers: Mapping[str, str]
    status: int = 0

    def send(self) -> Delivery:
        request = urllib.request.Request(self.url, data=self.body, headers=dict(self.headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return replace(self, status=answer.status)
        except urllib.error.HTTPError as error:
            return replace(self, status=error.code)


@dataclass
class Platform:
    """One platform as the test plays it: the Rasa server's webhook for it, and its API's stand-in."""

    name: str
    webhook: str
    api: StandIn
    secrets: dict[str, str] = field(default_factory=dict)


class Person:
    """Someone on a platform: what they send, and what the assistant sends them."""

    conversation: str  # the Rasa conversation the connector must put their messages in
    address: str  # where the platform's API is told to send their replies

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.mark = platform.api.count()
        self.sent: list[Delivery] = []

    def deliver(self, body: bytes, headers: Mapping[str, str]) -> Delivery:
        self.mark = self.platform.api.count()
        done = Delivery(self.platform.webhook, body, headers).send()
        self.sent.append(done)
        return done

    def expect(self, text: str) -> Sent:
        """The assistant's message to this person, since their latest request, that contains ``text``."""
        return self.platform.api.wait(self.mark, self.address, text)

    def say(self, text: str, **how: Any) -> Delivery:
        raise NotImplementedError

    def press(self, button: Button, **how: Any) -> Delivery:
        raise NotImplementedError


def now_ms() -> int:
    return int(time.time() * 1000)


# -- Slack -------------------------------------------------------------------------------------------


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """ "Verifying requests from Slack": v0=hex(HMAC-SHA256(secret, "v0:" + timestamp + ":" + body))."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackPerson(Person):
    BOT_USER = "UBOT0001"

    def __init__(self, platform: Platform, team: str, user: str, channel: str, user_team: str | None = None):
        super().__init__(platform)
        self.team, self.user, self.channel = team, user, channel
        self.user_team = user_team or team
        self.conversation = f"slack_{team}_{channel}_{user}"
        self.address = channel

    def _signed(
        self, body: bytes, content_type: str, *, secret: str | None = None, age: int = 0, signed: bool = True
    ) -> Delivery:
        stamp = str(int(time.time()) - age)
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp}
        if signed:
            headers["X-Slack-Signature"] = slack_signature(
                secret or self.platform.secrets["signing_secret"], stamp, body
            )
        return self.deliver(body, headers)

    def say(self, text: str, **how: Any) -> Delivery:
        stamp = f"{time.time():.6f}"
        envelope = {
            "token": "verification-token-unused",
            "team_id": how.pop("team", self.team),
            "api_app_id": "A0APP0001",
            "type": "event_callback",
            "event_id": how.pop("event_id", "Ev" + secrets.token_hex(5).upper()),
            "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team, "user_id": self.BOT_USER, "is_bot": True}],
            "event": {
                "type": "message",
                "channel_type": "im",
                "user": self.user,
                "team": self.user_team,
                "text": text,
                "ts": stamp,
                "event_ts": stamp,
                "channel": self.channel,
            },
        }
        return self._signed(json.dumps(envelope).encode(), "application/json", **how)

    def press(self, button: Button, **how: Any) -> Delivery:
        stamp = f"{time.time():.6f}"
        payload = {
            "type": "block_actions",
            "team": {"id": self.team, "domain": "example"},
            "user": {"id": self.user, "username": self.user.lower(), "team_id": self.user_team},
            "api_app_id": "A0APP0001",
            "trigger_id": how.pop("trigger_id", f"{int(time.time())}.{secrets.token_hex(6)}"),
            "container": {"type": "message", "message_ts": stamp, "channel_id": self.channel},
            "channel": {"id": self.channel, "name": "directmessage"},
            "message": {"type": "message", "ts": stamp, "text": "the question"},
            "actions": [
                {
                    "type": "button",
                    "action_id": "mcp_bridge_1",
                    "block_id": "b1",
                    "text": {"type": "plain_text", "text": button.title},
                    "value": button.value,
                    "action_ts": stamp,
                }
            ],
        }
        body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        return self._signed(body, "application/x-www-form-urlencoded", **how)


# -- Microsoft Teams (Bot Framework) -----------------------------------------------------------------


class TeamsPerson(Person):
    BOT = {"id": "28:bot-app-id", "name": "CRM assistant"}

    def __init__(self, platform: Platform, tenant: str, aad_object_id: str, conversation_id: str):
        super().__init__(platform)
        self.tenant, self.aad, self.conversation_id = tenant, aad_object_id, conversation_id
        self.connector: BotConnectorAPI = platform.api  # type: ignore[assignment]
        # A Teams conversation id ("a:1...") is no id a URL can hold as it is: a digest of it.
        digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:32]
        self.conversation = f"botframework_{tenant}_{digest}_{aad_object_id}"
        self.address = conversation_id

    def _activity(self, **fields: Any) -> dict[str, Any]:
        return {
            "type": "message",
            "id": fields.pop("id", secrets.token_hex(8)),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "serviceUrl": self.connector.url,
            "channelId": fields.pop("channel_id", "msteams"),
            "from": {"id": f"29:{self.aad}", "name": "Dana", "aadObjectId": self.aad},
            "conversation": {
                "id": self.conversation_id,
                "conversationType": "personal",
                "tenantId": fields.pop("tenant", self.tenant),
            },
            "recipient": self.BOT,
            "channelData": {"tenant": {"id": self.tenant}},
            **fields,
        }

    def _send(self, activity: dict[str, Any], token: str | None = "default", **claims: Any) -> Delivery:
        headers = {"Content-Type": "application/json"}
        if token == "default":
            token = self.connector.token(self.connector.url, **claims)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.deliver(json.dumps(activity).encode(), headers)

    def say(self, text: str, **how: Any) -> Delivery:
        token = how.pop("token", "default")
        claims = how.pop("claims", {})
        return self._send(self._activity(text=text, **how), token, **claims)

    def press(self, button: Button, **how: Any) -> Delivery:
        value = {BotConnectorAPI.button_key: button.value}
        return self._send(self._activity(value=value, **how))


# -- Twilio ------------------------------------------------------------------------------------------


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str]) -> str:
    """ "Webhooks security": base64(HMAC-SHA1(auth token, URL + each parameter, sorted, name + value))."""
    signed = url + "".join(name + params[name] for name in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), signed.encode(), hashlib.sha1).digest()).decode()


class TwilioPerson(Person):
    def __init__(self, platform: Platform, number: str, ours: str):
        super().__init__(platform)
        self.number, self.ours = number, ours
        kind = "whatsapp" if number.startswith("whatsapp:") else "sms"
        self.conversation = f"twilio_{kind}_{number.split('+')[1]}_{ours.split('+')[1]}"
        self.address = number

    def _params(self, **fields: str) -> dict[str, str]:
        params = {
            "MessageSid": "SM" + secrets.token_hex(16),
            "SmsSid": "",
            "AccountSid": self.platform.secrets["account_sid"],
            "MessagingServiceSid": "",
            "From": self.number,
            "To": self.ours,
            "NumMedia": "0",
            "NumSegments": "1",
            "ApiVersion": "2010-04-01",
            **fields,
        }
        params["SmsSid"] = params["MessageSid"]
        if self.number.startswith("whatsapp:"):
            params["WaId"] = self.number.removeprefix("whatsapp:+")
            params["ProfileName"] = "Dana"
        return params

    def _send(
        self, params: dict[str, str], *, token: str | None = None, url: str | None = None, signed: bool = True
    ):
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if signed:
            headers["X-Twilio-Signature"] = twilio_signature(
                token or self.platform.secrets["auth_token"],
                url or self.platform.secrets["webhook_url"],
                params,
            )
        return self.deliver(urllib.parse.urlencode(params).encode(), headers)

    def say(self, text: str, **how: Any) -> Delivery:
        fields = {key: how.pop(key) for key in ("To", "AccountSid", "MessageSid") if key in how}
        return self._send(self._params(Body=text, **fields), **how)

    def press(self, button: Button, **how: Any) -> Delivery:
        return self._send(
            self._params(Body=button.title, ButtonText=button.title, ButtonPayload=button.value), **how
        )


# -- Telegram ----------------------------------------------------------------------------------------


class TelegramPerson(Person):
    _update_ids = iter(range(10_000_000, 11_000_000))

    def __init__(self, platform: Platform, user_id: int, chat_id: int | None = None):
        super().__init__(platform)
        self.user_id = user_id
        self.chat_id = chat_id if chat_id is not None else user_id
        self.conversation = f"telegram_{self.chat_id}_{user_id}"
        self.address = str(self.chat_id)

    def _chat(self) -> dict[str, Any]:
        if self.chat_id == self.user_id:
            return {"id": self.chat_id, "type": "private", "first_name": "Dana"}
        return {"id": self.chat_id, "type": "group", "title": "Sales"}

    def _send(self, update: dict[str, Any], secret: str | None = None, signed: bool = True) -> Delivery:
        headers = {"Content-Type": "application/json"}
        if signed:
            headers["X-Telegram-Bot-Api-Secret-Token"] = secret or self.platform.secrets["secret_token"]
        return self.deliver(json.dumps(update).encode(), headers)

    def say(self, text: str, **how: Any) -> Delivery:
        message = {
            "message_id": secrets.randbelow(10**6),
            "from": {"id": self.user_id, "is_bot": False, "first_name": "Dana"},
            "chat": self._chat(),
            "date": int(time.time()) - how.pop("age", 0),
            "text": text,
        }
        return self._send({"update_id": next(self._update_ids), "message": message}, **how)

    def press(self, button: Button, **how: Any) -> Delivery:
        query = {
            "id": str(secrets.randbits(60)),
            "from": {"id": self.user_id, "is_bot": False, "first_name": "Dana"},
            "message": {
                "message_id": 1,
                "date": int(time.time()),
                "chat": self._chat(),
                "text": "the question",
            },
            "chat_instance": str(secrets.randbits(60)),
            "data": button.value,
        }
        return self._send({"update_id": next(self._update_ids), "callback_query": query}, **how)


# -- Messenger ---------------------------------------------------------------------------------------


def hub_signature(app_secret: str, body: bytes) -> str:
    """ "Validating payloads": sha256=hex(HMAC-SHA256(App Secret, body))."""
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


class MessengerPerson(Person):
    def __init__(self, platform: Platform, page_id: str, psid: str):
        super().__init__(platform)
        self.page_id, self.psid = page_id, psid
        self.conversation = f"facebook_{page_id}_{psid}"
        self.address = psid

    def _send(
        self, message: dict[str, Any], *, page: str | None = None, age: int = 0, **how: Any
    ) -> Delivery:
        page = page or self.page_id
        stamp = now_ms() - age * 1000
        event = {
            "sender": {"id": self.psid},
            "recipient": {"id": page},
            "timestamp": stamp,
            "message": message,
        }
        body = json.dumps(
            {"object": "page", "entry": [{"id": page, "time": stamp, "messaging": [event]}]}
        ).encode()
        headers = {"Content-Type": "application/json"}
        if how.get("signed", True):
            headers["X-Hub-Signature-256"] = hub_signature(
                how.get("secret") or self.platform.secrets["app_secret"], body
            )
        return self.deliver(body, headers)

    def say(self, text: str, **how: Any) -> Delivery:
        return self._send({"mid": how.pop("mid", "m_" + secrets.token_hex(12)), "text": text}, **how)

    def press(self, button: Button, **how: Any) -> Delivery:
        message = {
            "mid": "m_" + secrets.token_hex(12),
            "text": button.title,
            "quick_reply": {"payload": button.value},
        }
        return self._send(message, **how)


__all__ = [
    "Delivery",
    "GraphAPI",
    "MessengerPerson",
    "Person",
    "Platform",
    "SlackAPI",
    "SlackPerson",
    "TeamsPerson",
    "TelegramAPI",
    "TelegramPerson",
    "TwilioAPI",
    "TwilioPerson",
]
