"""Loopback stand-ins for the platforms' APIs, which receive the assistant's replies.

Each speaks the documented protocol of its platform's API, as far as the connectors use it, and
checks the credential the platform would (Slack's bot token, the Bot Connector's token from its token
endpoint, Twilio's basic auth, the Telegram bot token in the path, Messenger's page token and
``appsecret_proof``): a call without it is refused as the platform refuses it, and not recorded.
Each records what it was sent (:class:`Sent`), in order, for the tests to read. The Bot Connector's
stand-in also serves the OpenID metadata and keys the connector checks tokens against, and signs
tokens as the Bot Connector does (:meth:`BotConnectorAPI.token`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support import procs

REPLY_SECONDS = 30.0
BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"


@dataclass(frozen=True)
class Button:
    title: str
    value: str  # what the platform sends back when it is pressed


@dataclass(frozen=True)
class Sent:
    """One message the assistant sent: to whom (the platform's address), its text, its buttons."""

    to: str
    text: str
    buttons: tuple[Button, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


class StandIn:
    """One platform API on a free port of 127.0.0.1; subclasses answer in :meth:`answer`."""

    name = "platform"

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.refused: list[str] = []
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                answer = stand_in.answer(self.command, parts.path, query, dict(self.headers.items()), body)
                data = json.dumps(answer.body).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((procs.HOST, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name=self.name, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{procs.HOST}:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Answer:
        raise NotImplementedError

    def record(self, sent: Sent) -> None:
        with self._lock:
            self.sent.append(sent)

    def refuse(self, why: str, status: int, body: Any) -> Answer:
        with self._lock:
            self.refused.append(why)
        return Answer(status, body)

    def count(self) -> int:
        with self._lock:
            return len(self.sent)

    def since(self, mark: int, to: str) -> list[Sent]:
        with self._lock:
            return [sent for sent in self.sent[mark:] if sent.to == to]

    def wait(self, mark: int, to: str, text: str, seconds: float = REPLY_SECONDS) -> Sent:
        """The first message to ``to`` after ``mark`` whose text contains ``text`` (waits for it)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for sent in self.since(mark, to):
                if text in sent.text:
                    return sent
            time.sleep(0.05)
        seen = [sent.text for sent in self.since(mark, to)]
        raise AssertionError(
            f"{self.name}: {to} never got {text!r}; got {seen}; refused calls: {self.refused}"
        )


def _bearer(headers: dict[str, str]) -> str:
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    return token if scheme == "Bearer" else ""


class SlackAPI(StandIn):
    """Slack's Web API: ``chat.postMessage`` with the bot token (``invalid_auth`` otherwise)."""

    name = "slack-api"

    def __init__(self, bot_token: str) -> None:
        self.bot_token = bot_token
        super().__init__()

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Answer:
        if path != "/api/chat.postMessage" or method != "POST":
            return self.refuse(f"{method} {path}", 404, {"ok": False, "error": "unknown_method"})
        if not hmac.compare_digest(_bearer(headers), self.bot_token):
            return self.refuse("a bad bot token", 200, {"ok": False, "error": "invalid_auth"})
        message = json.loads(body)
        buttons = tuple(
            Button(element["text"]["text"], element["value"])
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for element in block["elements"]
        )
        self.record(Sent(message["channel"], message["text"], buttons, message))
        return Answer(200, {"ok": True, "channel": message["channel"], "ts": f"{time.time():.6f}"})


class BotConnectorAPI(StandIn):
    """The Bot Connector service: its OpenID metadata and keys (``/openid``, ``/keys``), the token
    endpoint (client credentials), and ``/v3/conversations/<id>/activities`` with the token it issued."""

    name = "bot-connector"
    button_key = "mcp_bridge_button"

    def __init__(self, app_id: str, app_password: str, endorsements: tuple[str, ...] = ("msteams",)) -> None:
        self.app_id = app_id
        self.app_password = app_password
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # listed nowhere
        self.key_id = secrets.token_hex(8)
        self.endorsements = list(endorsements)
        self.issued: set[str] = set()
        super().__init__()

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.key_id, "use": "sig", "endorsements": self.endorsements}]}

    def token(self, service_url: str, *, key: Any = None, **claims: Any) -> str:
        """A token as the Bot Connector signs one for an activity to the bot (or other ``claims``)."""
        now = int(time.time())
        body = {
            "iss": BOT_FRAMEWORK_ISSUER,
            "aud": self.app_id,
            "serviceurl": service_url,
            "nbf": now - 5,
            "exp": now + 3600,
            **claims,
        }
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": self.key_id})

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Answer:
        if method == "GET" and path == "/openid":
            return Answer(200, {"issuer": BOT_FRAMEWORK_ISSUER, "jwks_uri": f"{self.url}/keys"})
        if method == "GET" and path == "/keys":
            return Answer(200, self.jwks())
        if method == "POST" and path == "/token":
            form = dict(urllib.parse.parse_qsl(body.decode()))
            if (
                form.get("grant_type") != "client_credentials"
                or form.get("client_id") != self.app_id
                or form.get("client_secret") != self.app_password
                or form.get("scope") != "https://api.botframework.com/.default"
            ):
                return self.refuse("a bad token request", 401, {"error": "invalid_client"})
            token = secrets.token_urlsafe(24)
            self.issued.add(token)
            return Answer(200, {"token_type": "Bearer", "expires_in": 3599, "access_token": token})
        prefix, suffix = "/v3/conversations/", "/activities"
        if method == "POST" and path.startswith(prefix) and path.endswith(suffix):
            if _bearer(headers) not in self.issued:
                return self.refuse("a token the token endpoint did not issue", 401, {"error": "Unauthorized"})
            activity = json.loads(body)
            conversation = urllib.parse.unquote(path[len(prefix) : -len(suffix)])
            assert activity["conversation"]["id"] == conversation
            text, buttons = activity.get("text") or "", ()
            for attachment in activity.get("attachments") or []:
                card = attachment["content"]
                text = " ".join(block["text"] for block in card["body"] if block.get("type") == "TextBlock")
                buttons = tuple(
                    Button(action["title"], action["data"][self.button_key])
                    for action in card.get("actions") or []
                )
            self.record(Sent(conversation, text, buttons, activity))
            return Answer(200, {"id": secrets.token_hex(6)})
        return self.refuse(f"{method} {path}", 404, {"error": "NotFound"})


class TwilioAPI(StandIn):
    """Twilio's Messages API and Content API, with the account's basic auth."""

    name = "twilio-api"

    def __init__(self, account_sid: str, auth_token: str) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.templates: dict[str, dict[str, Any]] = {}
        super().__init__()

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Answer:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        if headers.get("Authorization") != f"Basic {expected}":
            return self.refuse("bad basic auth", 401, {"code": 20003, "message": "Authenticate"})
        if method == "POST" and path == "/v1/Content":
            template = json.loads(body)
            sid = "HX" + secrets.token_hex(16)
            self.templates[sid] = template
            return Answer(201, {"sid": sid, **template})
        if method == "POST" and path == f"/2010-04-01/Accounts/{self.account_sid}/Messages.json":
            form = dict(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
            if "ContentSid" in form:
                variables = json.loads(form["ContentVariables"])
                kind = self.templates[form["ContentSid"]]["types"]["twilio/quick-reply"]
                text = kind["body"].replace("{{1}}", variables["1"])
                buttons = tuple(
                    Button(
                        variables[action["title"].strip("{}")],
                        variables[action["id"].strip("{}")],
                    )
                    for action in kind["actions"]
                )
                self.record(Sent(form["To"], text, buttons, form))
            else:
                self.record(Sent(form["To"], form["Body"], (), form))
            return Answer(201, {"sid": "SM" + secrets.token_hex(16), "status": "queued"})
        return self.refuse(f"{method} {path}", 404, {"code": 20404})


class TelegramAPI(StandIn):
    """The Bot API: ``sendMessage`` and ``answerCallbackQuery`` under ``/bot<token>/``."""

    name = "telegram-api"

    def __init__(self, bot_token: str) -> None:
        self.bot_token = bot_token
        self.answered: list[str] = []
        super().__init__()

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Answer:
        prefix = f"/bot{self.bot_token}/"
        if not path.startswith(prefix):
            return self.refuse(
                "a bad bot token", 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            )
        call = json.loads(body)
        if path == prefix + "answerCallbackQuery":
            self.answered.append(call["callback_query_id"])
            return Answer(200, {"ok": True, "result": True})
        if path == prefix + "sendMessage":
            keyboard = (call.get("reply_markup") or {}).get("inline_keyboard") or []
            buttons = tuple(Button(key["text"], key["callback_data"]) for row in keyboard for key in row)
            self.record(Sent(str(call["chat_id"]), call["text"], buttons, call))
            message = {
                "message_id": len(self.sent),
                "date": int(time.time()),
                "chat": {"id": call["chat_id"]},
            }
            return Answer(200, {"ok": True, "result": message})
        return self.refuse(path[len(prefix) :], 404, {"ok": False, "error_code": 404})


class GraphAPI(StandIn):
    """Messenger's Send API (``/me/messages``) with the page token and its ``appsecret_proof``."""

    name = "graph-api"

    def __init__(self, page_token: str, app_secret: str) -> None:
        self.page_token = page_token
        self.app_secret = app_secret
        super().__init__()

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Answer:
        proof = hmac.new(self.app_secret.encode(), self.page_token.encode(), hashlib.sha256).hexdigest()
        if query.get("access_token") != self.page_token or query.get("appsecret_proof") != proof:
            return self.refuse("a bad token or appsecret_proof", 400, {"error": {"code": 190}})
        if method != "POST" or path != "/me/messages":
            return self.refuse(f"{method} {path}", 404, {"error": {"code": 100}})
        call = json.loads(body)
        message = call["message"]
        buttons = tuple(
            Button(reply["title"], reply["payload"]) for reply in message.get("quick_replies") or []
        )
        self.record(Sent(call["recipient"]["id"], message["text"], buttons, call))
        return Answer(
            200, {"recipient_id": call["recipient"]["id"], "message_id": "m_" + secrets.token_hex(8)}
        )
