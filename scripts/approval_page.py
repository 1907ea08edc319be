"""Serve the approval page (web/approvals.html) on 127.0.0.1: second approvers log in, see the calls
waiting for their role, approve or refuse them; the requester's conversation is told through Rasa.

    APPROVAL_PAGE_KEY=... APPROVALS_DATABASE=... RASA_AUTH_TOKEN=... \\
        python scripts/approval_page.py --rasa-url http://127.0.0.1:5005 --approvers approvers.yml
        [--host 127.0.0.1] [--port 8081] [--session-seconds 28800] [--sweep-seconds 2]

Who may approve comes from the approvers file (``approvers.yml``: each user's roles and a scrypt
hash of their password, the hash from an environment variable, never in the repository;
``python scripts/approval_page.py hash`` makes one). A login sets an HttpOnly, SameSite=Strict
cookie holding the user and an expiry, signed (HMAC-SHA256) with APPROVAL_PAGE_KEY; every API call
checks it, and every POST must come from this page (Origin / Sec-Fetch-Site). The rules (only the
role decides, never the requester, once, before the expiry) are mcp_bridge.approvals', enforced
there and in the store's SQL, not here; this server only says who is asking.

The page never writes to the system of record. A decision triggers the intent ``approval_decided``
on the requester's conversation through Rasa's HTTP API (``POST /conversations/<id>/trigger_intent``
with the API token), whichever Rasa replica answers (they share the tracker and lock stores); the
plugin's action there runs an approved call once, or says the refusal. A sweep (every
``--sweep-seconds``) refuses requests whose expiry passed undecided and tells every decided request
not yet told (again after 30 s, until the conversation's action has told it).

Routes: `/` (the page), `/approvals.js`, `/approvals.css`, `POST /login`, `POST /logout`,
`/api/me`, `/api/pending`, `POST /api/decide` ({"id": ..., "approve": true|false}), `/health`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from mcp_bridge.approval_store import open_store
from mcp_bridge.approvals import ApprovalRequest, Approvals, Approver
from mcp_bridge.audit import AuditLog
from mcp_bridge.contract import APPROVAL_ENTITY, APPROVAL_INTENT
from mcp_bridge.envsubst import UnsetVariableError, expand
from mcp_bridge.yamlfile import YAMLFileError, load_yaml
from scripts.chat_page import MIN_KEY_CHARS, same_origin

log = logging.getLogger("approval_page")

WEB = Path(__file__).resolve().parents[1] / "examples" / "crm_bot" / "web"
PAGE = WEB / "approvals.html"
FILES = {
    "/approvals.js": (WEB / "approvals.js", "text/javascript"),
    "/approvals.css": (WEB / "approvals.css", "text/css"),
}
COOKIE = "approver_session"
SESSION_SECONDS = 8 * 3600
RETRY_TELL_SECONDS = 30.0
_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_ID = re.compile(r"[0-9a-f]{32}")
# scrypt's cost: n=2**15, r=8, p=1 (about 32 MB and 50 ms a check).
_SCRYPT = {"n": 2**15, "r": 8, "p": 1, "maxmem": 64 * 1024 * 1024}


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``scrypt$<salt>$<hash>`` (base64) of ``password``, as the approvers file keeps it."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, dklen=32, **_SCRYPT)
    return f"scrypt${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, salt, digest = stored.split("$")
        expected = base64.b64decode(digest, validate=True)
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(
            password.encode("utf-8"), salt=base64.b64decode(salt, validate=True), dklen=32, **_SCRYPT
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, expected)


@dataclass(frozen=True)
class Account:
    roles: frozenset[str]
    password_hash: str


def load_approvers(path: Path, env: Mapping[str, str]) -> dict[str, Account]:
    """The approvers file: ``approvers: {user: {roles: [...], password_hash: "${VAR}"}}``; SystemExit
    naming the file, the place and the reason on anything wrong."""

    def fail(where: str, reason: str) -> SystemExit:
        return SystemExit(f"{path}: {where}: {reason}")

    try:
        document = load_yaml(path)
    except YAMLFileError as exc:
        raise SystemExit(f"{path}: cannot read the approvers file: {exc.reason}") from None
    entries = document.get("approvers") if isinstance(document, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise fail("approvers", "a mapping of user names to their roles and password hash")
    accounts: dict[str, Account] = {}
    for user, entry in entries.items():
        where = f"approvers.{user}"
        if not isinstance(user, str) or not _USER.fullmatch(user):
            raise fail(where, "a user name is 1-64 letters, digits and . _ @ -")
        if not isinstance(entry, dict) or set(entry) != {"roles", "password_hash"}:
            raise fail(where, "needs exactly 'roles' and 'password_hash'")
        roles = entry["roles"]
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) and r for r in roles):
            raise fail(f"{where}.roles", "a list of role names")
        try:
            stored = expand(str(entry["password_hash"]), env)
        except UnsetVariableError as exc:
            raise fail(f"{where}.password_hash", f"environment variable {exc.name} is not set") from None
        if not stored.startswith("scrypt$"):
            raise fail(f"{where}.password_hash", "not a scrypt hash (make one with `approval_page.py hash`)")
        accounts[user] = Account(frozenset(roles), stored)
    return accounts


class Sessions:
    """The signed session cookie: ``<user>.<expiry>.<hmac>``."""

    def __init__(self, key: str, seconds: int) -> None:
        self._key = hmac.new(key.encode("utf-8"), b"approval page: sessions", hashlib.sha256).digest()
        self.seconds = seconds

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode("utf-8"), hashlib.sha256).hexdigest()

    def issue(self, user: str, now: float | None = None) -> str:
        body = f"{user}.{int((now or time.time()) + self.seconds)}"
        return f"{body}.{self._mac(body)}"

    def user(self, cookie: str, now: float | None = None) -> str | None:
        parts = cookie.rsplit(".", 2)
        if len(parts) != 3:
            return None
        user, expiry, mac = parts
        if not hmac.compare_digest(mac, self._mac(f"{user}.{expiry}")):
            return None
        if not expiry.isdigit() or int(expiry) < (now or time.time()):
            return None
        return user


class RasaNotifier:
    """Tells a conversation of a decision: ``trigger_intent`` on Rasa's HTTP API."""

    def __init__(self, rasa_url: str, token: str) -> None:
        self.rasa_url = rasa_url.rstrip("/")
        self._token = token

    async def tell(self, session: aiohttp.ClientSession, request: ApprovalRequest) -> bool:
        url = f"{self.rasa_url}/conversations/{quote(request.conversation_id, safe='')}/trigger_intent"
        body = {"name": APPROVAL_INTENT, "entities": {APPROVAL_ENTITY: request.id}}
        params = {"token": self._token, "output_channel": "latest"}
        try:
            async with session.post(
                url, json=body, params=params, timeout=aiohttp.ClientTimeout(30)
            ) as answer:
                if answer.status == 200:
                    return True
                log.warning("approval %s: Rasa answered %s to trigger_intent", request.id, answer.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning(
                "approval %s: Rasa not reached (%s); told again later", request.id, type(exc).__name__
            )
        return False


def security_headers() -> dict[str, str]:
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def _public(request: ApprovalRequest) -> dict[str, Any]:
    """What the page shows of a request: the exact call, who asked, until when."""
    return {
        "id": request.id,
        "tool": request.tool,
        "skill": request.skill,
        "arguments": request.arguments,
        "requester": request.requester,
        "conversation": request.conversation_id,
        "role": request.role,
        "created_at": request.created_at,
        "expires_at": request.expires_at,
    }


def make_app(
    approvals: Approvals,
    accounts: Mapping[str, Account],
    notifier: RasaNotifier,
    key: str,
    *,
    session_seconds: int = SESSION_SECONDS,
    sweep_seconds: float = 2.0,
) -> web.Application:
    if len(key) < MIN_KEY_CHARS:
        raise SystemExit(
            f"approval page: APPROVAL_PAGE_KEY must be at least {MIN_KEY_CHARS} random characters"
        )
    missing = [str(p) for p, _ in [*FILES.values(), (PAGE, "")] if not p.is_file()]
    if missing:
        raise SystemExit(f"approval page: missing {', '.join(missing)}")
    headers = security_headers()
    sessions = Sessions(key, session_seconds)
    sweep_now = asyncio.Event()
    # A password check costs the same for an unknown user, so timing does not tell who exists.
    decoy = hash_password(secrets.token_urlsafe(16))

    def approver(request: web.Request) -> Approver | None:
        user = sessions.user(request.cookies.get(COOKIE, ""))
        account = accounts.get(user) if user else None
        return Approver(user, account.roles) if user and account else None

    def deny(status: int, error: str) -> web.Response:
        return web.json_response({"error": error}, status=status, headers=headers)

    async def body(request: web.Request) -> dict[str, Any] | None:
        try:
            value = await request.json()
        except (ValueError, UnicodeDecodeError):
            return None
        return value if isinstance(value, dict) else None

    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(body=PAGE.read_bytes(), content_type="text/html", headers=headers)

    def static(path: Path, content_type: str) -> Any:
        data = path.read_bytes()

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=data, content_type=content_type, headers=headers)

        return handler

    async def login(request: web.Request) -> web.StreamResponse:
        if not same_origin(request):
            return deny(403, "only the approval page may log in")
        given = await body(request)
        user, password = (given or {}).get("user"), (given or {}).get("password")
        if not isinstance(user, str) or not isinstance(password, str) or len(password) > 1024:
            return deny(400, "user and password, please")
        account = accounts.get(user)
        ok = await asyncio.to_thread(check_password, password, account.password_hash if account else decoy)
        if not ok or account is None:
            log.warning("approval page: a failed login")
            await asyncio.sleep(0.5)
            return deny(401, "wrong user name or password")
        response = web.json_response({"user": user, "roles": sorted(account.roles)}, headers=headers)
        secure = request.secure or request.headers.get("X-Forwarded-Proto") == "https"
        response.set_cookie(
            COOKIE,
            sessions.issue(user),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=secure,
            max_age=session_seconds,
        )
        return response

    async def logout(request: web.Request) -> web.StreamResponse:
        if not same_origin(request):
            return deny(403, "only the approval page may log out")
        response = web.json_response({"ok": True}, headers=headers)
        response.del_cookie(COOKIE, path="/")
        return response

    async def me(request: web.Request) -> web.StreamResponse:
        who = approver(request)
        if who is None:
            return deny(401, "not logged in")
        return web.json_response({"user": who.user, "roles": sorted(who.roles)}, headers=headers)

    async def pending(request: web.Request) -> web.StreamResponse:
        who = approver(request)
        if who is None:
            return deny(401, "not logged in")
        waiting = await approvals.pending(who)
        return web.json_response({"pending": [_public(r) for r in waiting]}, headers=headers)

    async def decide(request: web.Request) -> web.StreamResponse:
        if not same_origin(request):
            return deny(403, "only the approval page may decide")
        who = approver(request)
        if who is None:
            return deny(401, "not logged in")
        given = await body(request) or {}
        request_id, approve = given.get("id"), given.get("approve")
        if not isinstance(request_id, str) or not _ID.fullmatch(request_id) or not isinstance(approve, bool):
            return deny(400, "an id and approve: true or false")
        decided = await approvals.decide(request_id, who, approve)
        if decided.kind in ("approved", "refused"):
            sweep_now.set()  # tell the conversation now
            return web.json_response({"decided": decided.kind}, headers=headers)
        reasons = {
            "own_request": (403, "you asked for this call yourself: another person must approve it"),
            "not_allowed": (403, "this request needs a role you do not have"),
            "already_decided": (409, "this request was already decided, or has expired"),
            "unknown": (404, "no such request"),
        }
        status, reason = reasons[decided.kind]
        return deny(status, reason)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok", headers=headers)

    async def sweep(app: web.Application) -> AsyncIterator[None]:
        async def loop() -> None:
            async with aiohttp.ClientSession() as client:
                while True:
                    try:
                        await approvals.expire_due()
                        for request in await approvals.store.untold(time.time(), RETRY_TELL_SECONDS):
                            await notifier.tell(client, request)
                    except Exception:  # a database hiccup must not end the sweep
                        log.exception("approval page: the sweep failed; trying again")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(sweep_now.wait(), sweep_seconds)
                    sweep_now.clear()

        task = asyncio.create_task(loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await approvals.store.aclose()

    app = web.Application(client_max_size=16 * 1024)
    app.router.add_get("/", page)
    for route, (path, content_type) in FILES.items():
        app.router.add_get(route, static(path, content_type))
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/api/me", me)
    app.router.add_get("/api/pending", pending)
    app.router.add_post("/api/decide", decide)
    app.router.add_get("/health", health)
    app.cleanup_ctx.append(sweep)
    return app


def main() -> int:
    if sys.argv[1:2] == ["hash"]:
        import getpass

        print(hash_password(getpass.getpass("password: ")))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rasa-url", required=True, help="Rasa's HTTP API (started with --enable-api)")
    parser.add_argument("--approvers", type=Path, required=True, help="the approvers file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--session-seconds", type=int, default=SESSION_SECONDS)
    parser.add_argument("--sweep-seconds", type=float, default=2.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    env = os.environ
    token = env.get("RASA_AUTH_TOKEN", "")
    if not token:
        raise SystemExit("approval page: RASA_AUTH_TOKEN (Rasa's --auth-token) is not set")
    accounts = load_approvers(args.approvers, env)
    audit = AuditLog(env.get("AUDIT_LOG", "var/audit.jsonl"))
    approvals = Approvals(open_store(env.get("APPROVALS_DATABASE")), audit)
    app = make_app(
        approvals,
        accounts,
        RasaNotifier(args.rasa_url, token),
        env.get("APPROVAL_PAGE_KEY", ""),
        session_seconds=args.session_seconds,
        sweep_seconds=args.sweep_seconds,
    )
    print(f"approval page on http://{args.host}:{args.port}/ (Rasa at {args.rasa_url})", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
