"""Serve the chat page (web/) on 127.0.0.1, and the token that lets the page's browser talk to Rasa.

    CHAT_JWT_KEY=... python devstack/chat_page.py --rasa-url http://127.0.0.1:5005
        [--host 127.0.0.1] [--port 8080] [--public-url https://chat.example.com]
        [--no-answer-seconds 20] [--token-seconds 120] [--token-audience mcp_bridge.channels.socketio]

Who may talk in a conversation is decided here, not by the browser. A browser session is issued by
this server only, to the page's own script (`POST /session`, with the page's Origin, as every POST
here needs: mcp_bridge.auth.browser's `origin_required`): a `__Host-chat_session-<port>` cookie
(HttpOnly, Secure, SameSite=Strict, Path=/; its value 32 random bytes, the time it was issued and an
HMAC of both and the cookie's name under a key derived from CHAT_JWT_KEY) and, in the answer's body,
the session's *proof* (an HMAC of the cookie's value), which the script keeps in the page origin's
localStorage. `POST /token` answers only a request with both: a session cookie this server issued,
not older than SESSION_SECONDS, and its proof. So a cookie planted in the browser beforehand (by a
page on another port of the host, whose cookies the browser shares, or an attacker who had one issued
for themselves: session fixation) never becomes the person's conversation: the page's script has no
proof for it, asks for a session of its own, and the planted cookie is replaced.

The token is a short-lived JWT signed with CHAT_JWT_KEY, the key of the Rasa server's socket.io
channel (mcp_bridge.channels.socketio): `sub` is the conversation id, an HMAC of the cookie, so the
same browser session always gets the same conversation (a reload carries on with it) and knowing a
conversation id (from a log, say) gives no way in; `iss` is the page's origin the request came from,
`aud` the channel (`--token-audience`). The page connects with it, renews it on the open socket before
it expires (the channel closes a socket whose token has expired), and never names a conversation.

A deployment with its own login replaces the default, anonymous `identify` (see `Identity`,
`make_app(..., identify=...)`): return the conversation of the logged-in person and their user id,
which then rides in every message and binds the confirmations they are asked for.

The page talks to Rasa over a WebSocket only (no HTTP long-polling), so the browser never makes a
cross-origin HTTP request to Rasa and Rasa needs no `--cors` opening: its HTTP API stays closed to
other web pages. Every file goes out with a Content-Security-Policy that allows scripts from this
server only and connections to this Rasa only, so even if a bot message were ever rendered as HTML,
a `<script>` in a note could not run.

Routes: `/` (the page), `/chat.js`, `/chat.css`, `/vendor/socket.io.min.js` (socket.io-client from
web/node_modules, installed by `make setup`), `/config.json` (where the socket is, where the session
and the token are, after how many seconds without an answer the page says so), `POST /session`,
`POST /token`, `/health`.
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

from mcp_bridge.approvals.page import MIN_KEY_CHARS
from mcp_bridge.auth.browser import PageOrigin

WEB = Path(__file__).resolve().parents[1] / "examples" / "crm_bot" / "web"
SOCKET_IO_CLIENT = WEB / "node_modules" / "socket.io-client" / "dist" / "socket.io.min.js"
SOCKET_PATH = "/socket.io/"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The browser session's cookie, `__Host-chat_session-<port>` (PageOrigin.cookie_name): no expiry, it
# ends with the browser session.
COOKIE = "chat_session"
# secrets.token_urlsafe(32), the Unix time it was issued, and the HMAC-SHA256 of both (hex).
_COOKIE_VALUE = re.compile(r"([A-Za-z0-9_-]{43})\.([0-9]{1,12})\.([0-9a-f]{64})")
_PROOF = re.compile(r"[0-9a-f]{64}")
# A session cookie older than this is no longer taken (the page then asks for a new one).
SESSION_SECONDS = 24 * 3600
TOKEN_SECONDS = 120
# The token's `aud`: the socket.io channel's `jwt_audience` (mcp_bridge.channels.socketio's default).
TOKEN_AUDIENCE = "mcp_bridge.channels.socketio"

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
    """The default identity: no login; each browser session (its cookie and proof) is one conversation."""

    def __init__(self, key: bytes, cookie: str, clock: Callable[[], float] = time.time) -> None:
        # Keys of their own for conversation ids, the cookies and their proofs, derived from the page's.
        self._key = hmac.new(key, b"chat page: conversation ids", hashlib.sha256).digest()
        self._cookie_key = hmac.new(key, b"chat page: session cookies", hashlib.sha256).digest()
        self._proof_key = hmac.new(key, b"chat page: session proofs", hashlib.sha256).digest()
        self.cookie = cookie
        self._clock = clock

    def _mac(self, nonce: str, issued: str) -> str:
        signed = f"{self.cookie}\0{nonce}.{issued}".encode("ascii")
        return hmac.new(self._cookie_key, signed, hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A new session cookie's value, signed by this server for this cookie name."""
        nonce, issued = secrets.token_urlsafe(32), str(int(self._clock()))
        return f"{nonce}.{issued}.{self._mac(nonce, issued)}"

    def proof(self, value: str) -> str:
        """What the page's script shows for the session ``value`` (it cannot read the cookie)."""
        return hmac.new(self._proof_key, value.encode("ascii"), hashlib.sha256).hexdigest()

    def issued(self, value: str) -> bool:
        """``value`` is a session cookie this server issued under this name, and not too old."""
        match = _COOKIE_VALUE.fullmatch(value) if len(value) <= 200 else None
        if match is None:
            return False
        nonce, issued, mac = match.groups()
        if not hmac.compare_digest(mac, self._mac(nonce, issued)):
            return False
        return 0 <= self._clock() - int(issued) <= SESSION_SECONDS

    def proven(self, value: str, proof: object) -> bool:
        """``value`` is a session this server issued and ``proof`` the one it gave the page with it."""
        if not isinstance(proof, str) or not _PROOF.fullmatch(proof) or not self.issued(value):
            return False
        return hmac.compare_digest(proof, self.proof(value))

    def conversation(self, value: str) -> str:
        return hmac.new(self._key, value.encode("ascii"), hashlib.sha256).hexdigest()[:32]


def issue_token(
    identity: Identity,
    key: str,
    seconds: int,
    *,
    issuer: str,
    audience: str = TOKEN_AUDIENCE,
    now: float | None = None,
) -> str:
    """The socket.io channel's token for `identity`: `sub`, `iss` (the page's origin), `aud` (the
    channel), `exp` (all four required by the channel), `iat`, and `user` when there is one."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {
        "sub": identity.conversation_id,
        "iss": issuer,
        "aud": audience,
        "iat": issued,
        "exp": issued + seconds,
    }
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
    origin: PageOrigin,
    *,
    no_answer_seconds: float = 20.0,
    token_seconds: int = TOKEN_SECONDS,
    token_audience: str = TOKEN_AUDIENCE,
    identify: Identify | None = None,
) -> web.Application:
    """The page's server, reached at `origin`. `key` signs the tokens (the Rasa channel's `jwt_key`);
    `identify` says who a request comes from, None for "nobody yet" (default: one conversation per
    browser session, :class:`BrowserSessions`)."""
    if len(key) < MIN_KEY_CHARS:
        raise SystemExit(f"chat page: CHAT_JWT_KEY must be at least {MIN_KEY_CHARS} random characters")
    missing = [str(path) for path, _ in [*FILES.values(), (PAGE, "")] if not path.is_file()]
    if missing:
        raise SystemExit(f"chat page: missing {', '.join(missing)} (run `make setup`)")
    headers = security_headers(rasa_url)
    cookie = origin.cookie_name(COOKIE)
    sessions = BrowserSessions(key.encode("utf-8"), cookie) if identify is None else None
    config = json.dumps(
        {
            "socketUrl": rasa_url.rstrip("/"),
            "socketPath": SOCKET_PATH,
            "sessionPath": "session",
            "tokenPath": "token",
            "noAnswerSeconds": no_answer_seconds,
        }
    )

    def refuse(status: int, error: str) -> web.Response:
        return web.json_response({"error": error}, status=status, headers=headers)

    def from_the_page(request: web.Request) -> bool:
        return origin.allows(request.headers.get("Origin"), request.headers.get("Sec-Fetch-Site"))

    async def given(request: web.Request) -> dict[str, object]:
        try:
            value = await request.json() if request.can_read_body else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    async def who(request: web.Request) -> Identity | None:
        if identify is not None:
            return await identify(request)
        assert sessions is not None
        value = request.cookies.get(cookie, "")
        if not sessions.proven(value, (await given(request)).get("proof")):
            return None
        return Identity(sessions.conversation(value))

    def static(path: Path, content_type: str) -> Handler:
        body = path.read_bytes()  # a few small files, read once: restart the server after editing them

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, content_type=content_type, headers=headers)

        return handler

    page_body = PAGE.read_bytes()

    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(body=page_body, content_type="text/html", headers=headers)

    async def session(request: web.Request) -> web.StreamResponse:
        if not from_the_page(request):
            return refuse(403, "only the chat page may start a session")
        if sessions is None:
            return web.json_response({"proof": None}, headers=headers)  # the deployment's login decides
        value = sessions.issue()
        response = web.json_response({"proof": sessions.proof(value)}, headers=headers)
        response.headers["Set-Cookie"] = origin.session_cookie(COOKIE, value)
        return response

    async def token(request: web.Request) -> web.StreamResponse:
        sent_from = request.headers.get("Origin")
        if not from_the_page(request) or sent_from is None:
            return refuse(403, "only the chat page may ask")
        identity = await who(request)
        if identity is None:
            return refuse(401, "no session: reload the page")
        issued = issue_token(identity, key, token_seconds, issuer=sent_from.lower(), audience=token_audience)
        return web.json_response({"token": issued, "expiresIn": token_seconds}, headers=headers)

    async def config_json(request: web.Request) -> web.StreamResponse:
        return web.Response(text=config, content_type="application/json", headers=headers)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok", headers=headers)

    async def favicon(request: web.Request) -> web.StreamResponse:
        return web.Response(status=204, headers=headers)

    app = web.Application(client_max_size=4096)  # the only bodies are a proof
    app.router.add_get("/", page)
    for route, (path, content_type) in FILES.items():
        app.router.add_get(route, static(path, content_type))
    app.router.add_get("/config.json", config_json)
    app.router.add_post("/session", session)
    app.router.add_post("/token", token)
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
        "--public-url",
        help="this page's URL as browsers reach it (default: http://127.0.0.1:PORT and its loopback "
        "names; required when not listening on loopback, and then https)",
    )
    parser.add_argument(
        "--no-answer-seconds", type=float, default=20.0, help="say so when the assistant is silent this long"
    )
    parser.add_argument(
        "--token-seconds", type=int, default=TOKEN_SECONDS, help="how long a token lets the page connect"
    )
    parser.add_argument(
        "--token-audience",
        default=TOKEN_AUDIENCE,
        help="the tokens' `aud`: the socket.io channel's jwt_audience",
    )
    args = parser.parse_args()
    key = os.environ.get("CHAT_JWT_KEY", "")
    try:
        origin = PageOrigin.for_page(args.public_url, args.host, args.port)
    except ValueError as exc:
        raise SystemExit(f"chat page: {exc}") from None
    app = make_app(
        args.rasa_url,
        key,
        origin,
        no_answer_seconds=args.no_answer_seconds,
        token_seconds=args.token_seconds,
        token_audience=args.token_audience,
    )
    print(f"chat page on http://{args.host}:{args.port}/ (Rasa at {args.rasa_url})", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
