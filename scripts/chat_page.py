"""Serve the chat page (web/) on 127.0.0.1, and the token that lets the page's browser talk to Rasa.

    CHAT_JWT_KEY=... python scripts/chat_page.py --rasa-url http://127.0.0.1:5005
        [--host 127.0.0.1] [--port 8080] [--no-answer-seconds 20] [--token-seconds 120]

Who may talk in a conversation is decided here, not by the browser. The page (`/`) comes with an
HttpOnly session cookie this server issued: 32 random bytes, the time it was issued, and an HMAC of
both under a key derived from CHAT_JWT_KEY. A cookie value it did not issue (unsigned, signed with
another key, altered, or issued more than SESSION_SECONDS ago) is no session: the page replaces it
with a new one it issues, and `/token` refuses it, so a value planted in a browser beforehand (a
cookie set by a sibling site, say) never becomes a conversation. `/token` answers that browser
session (and only a same-origin request from it) with a short-lived JWT signed with CHAT_JWT_KEY,
the key of the Rasa server's socket.io channel (mcp_bridge.channels.socketio): `sub` is the
conversation id, an HMAC of the cookie, so the same browser session always gets the same
conversation (a reload carries on with it) and knowing a conversation id (from a log, say) gives no
way in. The page connects with that token; it never names a conversation itself.

A deployment with its own login replaces the default, anonymous `identify` (see `Identity`,
`make_app(..., identify=...)`): return the conversation of the logged-in person and their user id,
which then rides in every message and binds the confirmations they are asked for.

The page talks to Rasa over a WebSocket only (no HTTP long-polling), so the browser never makes a
cross-origin HTTP request to Rasa and Rasa needs no `--cors` opening: its HTTP API stays closed to
other web pages. Every file goes out with a Content-Security-Policy that allows scripts from this
server only and connections to this Rasa only, so even if a bot message were ever rendered as HTML,
a `<script>` in a note could not run.

Routes: `/` (the page), `/chat.js`, `/chat.css`, `/vendor/socket.io.min.js` (socket.io-client from
web/node_modules, installed by `make setup`), `/config.json` (where the socket is, where the token
is, after how many seconds without an answer the page says so), `/token`, `/health`.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import jwt
from aiohttp import web

from mcp_bridge.approvals.page import MIN_KEY_CHARS, same_origin

WEB = Path(__file__).resolve().parents[1] / "examples" / "crm_bot" / "web"
SOCKET_IO_CLIENT = WEB / "node_modules" / "socket.io-client" / "dist" / "socket.io.min.js"
SOCKET_PATH = "/socket.io/"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The browser session's cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's
# request carries it), no expiry (it ends with the browser session).
COOKIE = "chat_session"
# secrets.token_urlsafe(32), the Unix time it was issued, and the HMAC-SHA256 of both (hex).
_COOKIE_VALUE = re.compile(r"([A-Za-z0-9_-]{43})\.([0-9]{1,12})\.([0-9a-f]{64})")
# A session cookie older than this is no longer taken (the page then issues a new one).
SESSION_SECONDS = 24 * 3600
TOKEN_SECONDS = 120

FILES = {
    "/chat.js": (WEB / "chat.js", "text/javascript"),
    "/chat.css": (WEB / "chat.css", "text/css"),
    "/vendor/socket.io.min.js": (SOCKET_IO_CLIENT, "text/javascript"),
}
PAGE = WEB / "index.html"


@dataclass(frozen=True)
class Identity:
    """Who the browser is: the conversation it may use, and (with a login) the user behind it.

    `conversation_id` becomes the token's `sub`, `user` its `user` claim; the socket.io channel puts
    `socketio:<user>` (without a user: `socketio:<conversation_id>`) into every message's metadata,
    and a confirmation asked of that name can only be answered by it.
    """

    conversation_id: str
    user: str | None = None


Identify = Callable[[web.Request], Awaitable[Identity | None]]


class BrowserSessions:
    """The default identity: no login; each browser session (its cookie) is one conversation."""

    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        # Keys of their own for conversation ids and for signing the cookies, derived from the page's.
        self._key = hmac.new(key, b"chat page: conversation ids", hashlib.sha256).digest()
        self._cookie_key = hmac.new(key, b"chat page: session cookies", hashlib.sha256).digest()
        self._clock = clock

    def _mac(self, nonce: str, issued: str) -> str:
        return hmac.new(self._cookie_key, f"{nonce}.{issued}".encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A new session cookie's value, signed by this server."""
        nonce, issued = secrets.token_urlsafe(32), str(int(self._clock()))
        return f"{nonce}.{issued}.{self._mac(nonce, issued)}"

    def issued(self, value: str) -> bool:
        """``value`` is a session cookie this server issued, and not too old."""
        match = _COOKIE_VALUE.fullmatch(value) if len(value) <= 200 else None
        if match is None:
            return False
        nonce, issued, mac = match.groups()
        if not hmac.compare_digest(mac, self._mac(nonce, issued)):
            return False
        return 0 <= self._clock() - int(issued) <= SESSION_SECONDS

    def start(self, request: web.Request, response: web.StreamResponse) -> None:
        """Give a browser without a session cookie this server issued a new one, with the page."""
        if self.issued(request.cookies.get(COOKIE, "")):
            return
        secure = request.secure or request.headers.get("X-Forwarded-Proto") == "https"
        response.set_cookie(COOKIE, self.issue(), path="/", httponly=True, samesite="Strict", secure=secure)

    async def identify(self, request: web.Request) -> Identity | None:
        cookie = request.cookies.get(COOKIE, "")
        if not self.issued(cookie):
            return None
        return Identity(hmac.new(self._key, cookie.encode("ascii"), hashlib.sha256).hexdigest()[:32])


def issue_token(identity: Identity, key: str, seconds: int, now: float | None = None) -> str:
    """The socket.io channel's token for `identity`: `sub`, `exp` (required by the channel), `iat`,
    and `user` when there is one."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {"sub": identity.conversation_id, "iat": issued, "exp": issued + seconds}
    if identity.user:
        claims["user"] = identity.user
    return jwt.encode(claims, key, algorithm="HS256")


def security_headers(rasa_url: str) -> dict[str, str]:
    parts = urlsplit(rasa_url)
    socket_origin = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}"
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src 'self' {socket_origin}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def make_app(
    rasa_url: str,
    key: str,
    *,
    no_answer_seconds: float = 20.0,
    token_seconds: int = TOKEN_SECONDS,
    identify: Identify | None = None,
) -> web.Application:
    """The page's server. `key` signs the tokens (the Rasa channel's `jwt_key`); `identify` says who
    a request comes from, None for "nobody yet" (default: one conversation per browser session)."""
    if len(key) < MIN_KEY_CHARS:
        raise SystemExit(f"chat page: CHAT_JWT_KEY must be at least {MIN_KEY_CHARS} random characters")
    missing = [str(path) for path, _ in [*FILES.values(), (PAGE, "")] if not path.is_file()]
    if missing:
        raise SystemExit(f"chat page: missing {', '.join(missing)} (run `make setup`)")
    headers = security_headers(rasa_url)
    sessions = BrowserSessions(key.encode("utf-8")) if identify is None else None
    who = identify or (sessions.identify if sessions else None)
    assert who is not None
    config = json.dumps(
        {
            "socketUrl": rasa_url.rstrip("/"),
            "socketPath": SOCKET_PATH,
            "tokenPath": "token",
            "noAnswerSeconds": no_answer_seconds,
        }
    )

    def static(path: Path, content_type: str) -> Handler:
        body = path.read_bytes()  # a few small files, read once: restart the server after editing them

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, content_type=content_type, headers=headers)

        return handler

    page_body = PAGE.read_bytes()

    async def page(request: web.Request) -> web.StreamResponse:
        response = web.Response(body=page_body, content_type="text/html", headers=headers)
        if sessions is not None:
            sessions.start(request, response)
        return response

    async def token(request: web.Request) -> web.StreamResponse:
        if not same_origin(request):
            return web.json_response({"error": "only the chat page may ask"}, status=403, headers=headers)
        identity = await who(request)
        if identity is None:
            return web.json_response({"error": "no session: reload the page"}, status=401, headers=headers)
        body = {"token": issue_token(identity, key, token_seconds), "expiresIn": token_seconds}
        return web.json_response(body, headers=headers)

    async def config_json(request: web.Request) -> web.StreamResponse:
        return web.Response(text=config, content_type="application/json", headers=headers)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok", headers=headers)

    async def favicon(request: web.Request) -> web.StreamResponse:
        return web.Response(status=204, headers=headers)

    app = web.Application(client_max_size=4096)  # no route takes a body
    app.router.add_get("/", page)
    for route, (path, content_type) in FILES.items():
        app.router.add_get(route, static(path, content_type))
    app.router.add_get("/config.json", config_json)
    app.router.add_get("/token", token)
    app.router.add_get("/health", health)
    app.router.add_get("/favicon.ico", favicon)
    return app


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rasa-url", required=True, help="Rasa's base URL as the browser reaches it")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--no-answer-seconds", type=float, default=20.0, help="say so when the assistant is silent this long"
    )
    parser.add_argument(
        "--token-seconds", type=int, default=TOKEN_SECONDS, help="how long a token lets the page connect"
    )
    args = parser.parse_args()
    key = os.environ.get("CHAT_JWT_KEY", "")
    app = make_app(
        args.rasa_url, key, no_answer_seconds=args.no_answer_seconds, token_seconds=args.token_seconds
    )
    print(f"chat page on http://{args.host}:{args.port}/ (Rasa at {args.rasa_url})", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
