"""The approval page (web/approvals.html), served on 127.0.0.1: second approvers log in, see the calls
waiting for their role, approve or refuse them; the requester's conversation is told through the
action server.

    MCP_BRIDGE_DATABASE=... APPROVAL_TELL_TOKEN=... \\
        mcp-bridge approval-page --actions-url http://127.0.0.1:5055 --approvers approvers.yml
        [--host 127.0.0.1] [--port 8081] [--public-url https://approvals.example.com] [--behind-proxy]
        [--session-seconds 28800] [--sweep-seconds 2] [--retry-seconds 30]

Approvers log in one of two ways. With ``--oidc-issuer``, at the deployment's OpenID provider
(authorization code with PKCE; this page is a confidential client, OIDC_CLIENT_ID/OIDC_CLIENT_SECRET,
its redirect URI ``<--public-url>/callback``, the login in progress in a cookie signed with
APPROVAL_PAGE_KEY): the ID token is verified (signature from the provider's JWKS, issuer, audience,
expiry, nonce) and its ``roles`` claim gives the roles; the example's provider is oidc-provider
(examples/crm_bot/auth/server.mjs); it needs PyJWT (``pip install rasa-mcp-bridge[approval-page]``).
Without it, who may approve comes from the approvers file (``approvers.yml``: each user's roles and a
scrypt hash of their password, the hash from an environment variable, never in the repository;
``mcp-bridge approval-page hash`` makes one), read again when it changes, so a role taken away counts
at the next request. Password checks are rate-limited (:mod:`mcp_bridge.approvals.login_limit`).

A login starts a session kept on the server (:mod:`mcp_bridge.approvals.sessions`: Redis with
APPROVAL_PAGE_SESSIONS, else the approval store's database): the browser holds a random value in a
``__Host-approver_session-<port>`` cookie (HttpOnly, Secure, SameSite=Strict, Path=/), every API call
reads its session from the store, and logging out removes it. Every POST must carry this page's
``Origin`` (:mod:`mcp_bridge.auth.browser`: ``--public-url``'s, or the loopback names on the port; a
request with none is refused). ``--behind-proxy`` says a proxy in front appends the client's address
to ``X-Forwarded-For`` (read for the login limit only then). The rules (only the role decides, never
the requester, once, before the expiry) are mcp_bridge.approvals.second_approver's, enforced there and
in the store's SQL, not here; this server only says who is asking.

The page never writes to the system of record, and holds nothing that could write to a conversation:
no Rasa API token, no channel key, no action server token (it refuses to start with one of those in its
environment: :data:`CONVERSATION_SECRETS`). A decision is told to the requester's conversation by the
action server: the page asks it, ``POST <--actions-url>/mcp-bridge/approvals/tell`` with the request's
id and APPROVAL_TELL_TOKEN, which lets it ask exactly that; the action server reads the request from
the shared store, and, if it is decided and its sealed question holds for its conversation, triggers
the intent ``approval_decided`` in that conversation through Rasa's HTTP API
(:mod:`mcp_bridge.action_server.approval_tell`); the plugin's action
there runs an approved call once, or says the refusal. A sweep (every ``--sweep-seconds``) refuses
requests whose expiry passed undecided and tells every decided request not yet told (again after
``--retry-seconds``, 30, until the conversation's action has told it), and every approved call whose
run was lost (running past its lease: its action server died) once more.

Routes: `/` (the page), `/approvals.js`, `/approvals.css`, `POST /login`, `POST /logout`,
`/api/me`, `/api/pending`, `POST /api/decide` ({"id": ..., "approve": true|false}; answers
{"decided": "approved"|"refused"}, or an error with its ``reason``: own_request, not_allowed,
unknown_person, already_decided, unknown), `/health`.

Who is who: the approvers file's ``people:`` (required, in both login modes) maps each person to
their chat identities, as the channels name them, and their logins here (password logins or OpenID
subjects); the rules compare the requester and the approver as persons through it, and refuse an
approver or a requester it does not name (``unknown_person``; mcp_bridge.approvals.second_approver's
``never_the_requester``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from mcp_bridge.approvals.login_limit import LoginLimit, TooMany
from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals, Approver, People
from mcp_bridge.approvals.sessions import Session, Sessions, open_sessions
from mcp_bridge.approvals.store import open_store
from mcp_bridge.auth.browser import PageOrigin
from mcp_bridge.config.envsubst import UnsetVariableError, expand
from mcp_bridge.config.settings import Settings
from mcp_bridge.config.yamlfile import YAMLFileError, load_yaml
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability.audit import AuditLog

try:  # only for approvers who log in at an OpenID provider (the `approval-page` extra)
    import jwt
except ImportError:  # pragma: no cover - checked at start when --oidc-issuer is given
    jwt = None  # type: ignore[assignment]
# What a token that does not verify raises (nothing, without PyJWT: no OpenID login then).
_JWT_ERRORS: tuple[type[Exception], ...] = (jwt.PyJWTError,) if jwt is not None else ()

log = logging.getLogger("approval_page")

# A page key (APPROVAL_PAGE_KEY) shorter than this is refused.
MIN_KEY_CHARS = 32
# Secrets that let their holder write to a conversation (Rasa's API, the channels, the action server):
# the page needs none of them and refuses to start with one in its environment.
CONVERSATION_SECRETS = (
    "RASA_AUTH_TOKEN",
    "REST_CHANNEL_TOKEN",
    "CHAT_JWT_KEY",
    "MCP_BRIDGE_CHANNEL_KEY",
    "ACTION_SERVER_TOKEN",
    "CONFIRMATION_SECRET",
)
# Where the action server takes the page's "tell this conversation" (mcp_bridge.action_server.approval_tell).
TELL_PATH = "/mcp-bridge/approvals/tell"
WEB = Path(__file__).resolve().parent / "web"
PAGE = WEB / "approvals.html"
FILES = {
    "/approvals.js": (WEB / "approvals.js", "text/javascript"),
    "/approvals.css": (WEB / "approvals.css", "text/css"),
}
# The session cookie's base name: ``__Host-approver_session-<port>`` (PageOrigin.cookie_name).
COOKIE = "approver_session"
LOGIN_COOKIE = "approver_login"
SESSION_SECONDS = 8 * 3600
RETRY_TELL_SECONDS = 30.0
# The approvers file is looked at for changes no more often than this.
RELOAD_SECONDS = 2.0
# Conversations told at the same time (each a request to the action server, which asks Rasa: it lasts
# as long as the conversation's turn).
TELLING = 16
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


def _approvers_section(path: Path, name: str) -> Any:
    """The ``name`` section of the approvers file (None when the file is not a mapping or lacks it);
    SystemExit naming the file when it cannot be read."""
    try:
        document = load_yaml(path)
    except YAMLFileError as exc:
        raise SystemExit(f"{path}: cannot read the approvers file: {exc.reason}") from None
    return document.get(name) if isinstance(document, dict) else None


def load_approvers(path: Path, env: Mapping[str, str]) -> dict[str, Account]:
    """The approvers file: ``approvers: {user: {roles: [...], password_hash: "${VAR}"}}``; SystemExit
    naming the file, the place and the reason on anything wrong."""

    def fail(where: str, reason: str) -> SystemExit:
        return SystemExit(f"{path}: {where}: {reason}")

    entries = _approvers_section(path, "approvers")
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
            raise fail(
                f"{where}.password_hash", "not a scrypt hash (make one with `mcp-bridge approval-page hash`)"
            )
        accounts[user] = Account(frozenset(roles), stored)
    return accounts


MAX_IDENTITIES = 100


def load_people(path: Path, logins: Collection[str] = ()) -> People:
    """The approvers file's identity mapping, ``people: {person: {chat: [...], approval_page: [...]}}``:
    each person's identities as the channels name them (``socketio:dana``, ``rest:operator``) and
    their approval-page logins (password logins, or OpenID subjects). Every password login in
    ``logins`` must be someone's; an identity may be one person's only. SystemExit naming the file,
    the place and the reason on anything wrong."""

    def fail(where: str, reason: str) -> SystemExit:
        return SystemExit(f"{path}: {where}: {reason}")

    entries = _approvers_section(path, "people")
    if not isinstance(entries, dict) or not entries:
        raise fail(
            "people",
            "a mapping of each person to their chat identities and approval-page logins "
            "({chat: [socketio:<user>, ...], approval_page: [<login>, ...]}); without it nobody "
            "could tell a requester from their approver",
        )
    chat: dict[str, str] = {}
    page: dict[str, str] = {}
    for name, entry in entries.items():
        where = f"people.{name}"
        if not isinstance(name, str) or not _USER.fullmatch(name):
            raise fail(where, "a person's name is 1-64 letters, digits and . _ @ -")
        if not isinstance(entry, dict) or not entry or not set(entry) <= {"chat", "approval_page"}:
            raise fail(where, "needs 'chat' (channel identities) and/or 'approval_page' (logins)")
        for key, into in (("chat", chat), ("approval_page", page)):
            identities = entry.get(key, [])
            if (
                not isinstance(identities, list)
                or len(identities) > MAX_IDENTITIES
                or not all(isinstance(i, str) and 0 < len(i) <= 200 for i in identities)
            ):
                raise fail(f"{where}.{key}", f"a list of at most {MAX_IDENTITIES} names")
            for identity in identities:
                if identity in into and into[identity] != name:
                    raise fail(f"{where}.{key}", f"{identity!r} is already {into[identity]}'s")
                into[identity] = name
    unmapped = sorted(set(logins) - set(page))
    if unmapped:
        raise fail("people", f"the approvers {', '.join(unmapped)} are no person's approval_page login")
    return People(chat, page)


class SignedValues:
    """Signed, expiring values in cookies: ``<base64url JSON>.<hmac>``, keyed per ``purpose`` (an OpenID
    login in progress)."""

    def __init__(self, key: str, seconds: int, purpose: bytes = b"sessions") -> None:
        self._key = hmac.new(key.encode("utf-8"), b"approval page: " + purpose, hashlib.sha256).digest()
        self.seconds = seconds

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self, value: Mapping[str, Any], now: float | None = None) -> str:
        payload = {"v": dict(value), "e": int((now or time.time()) + self.seconds)}
        body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")
        return f"{body}.{self._mac(body)}"

    def read(self, cookie: str, now: float | None = None) -> dict[str, Any] | None:
        body, _, mac = cookie.partition(".")
        if not body or len(cookie) > 4096 or not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body.encode("ascii")))
        except ValueError:
            return None
        if (
            not isinstance(payload, dict)
            or not isinstance(payload.get("e"), int)
            or payload["e"] < (now or time.time())
        ):
            return None
        value = payload.get("v")
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class OIDCLogin:
    """Approvers log in at an OpenID provider (authorization code + PKCE); roles from the ID token's
    ``roles`` claim. ``redirect_uri`` is this page's ``/callback`` as the provider knows it."""

    issuer: str
    client_id: str
    client_secret: str
    redirect_uri: str

    async def metadata(self, client: aiohttp.ClientSession) -> dict[str, Any]:
        url = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
        async with client.get(url, timeout=aiohttp.ClientTimeout(10)) as answer:
            answer.raise_for_status()
            found: dict[str, Any] = await answer.json()
        if found.get("issuer") != self.issuer.rstrip("/") and found.get("issuer") != self.issuer:
            raise ValueError("the provider names another issuer")
        return found

    async def start(self, client: aiohttp.ClientSession) -> tuple[str, dict[str, str]]:
        """Where to send the browser, and what the callback must find again (state, nonce, verifier)."""
        found = await self.metadata(client)
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        pending = {
            "state": secrets.token_urlsafe(24),
            "nonce": secrets.token_urlsafe(24),
            "verifier": verifier,
        }
        query = {
            "client_id": self.client_id,
            "response_type": "code",
            "scope": "openid roles",
            "redirect_uri": self.redirect_uri,
            "state": pending["state"],
            "nonce": pending["nonce"],
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        return f"{found['authorization_endpoint']}?{urlencode(query)}", pending

    async def finish(self, client: aiohttp.ClientSession, code: str, pending: Mapping[str, str]) -> Approver:
        """The code exchanged for tokens, the ID token verified (signature, issuer, audience, expiry,
        nonce): who logged in, and their roles."""
        found = await self.metadata(client)
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": pending["verifier"],
        }
        auth = aiohttp.BasicAuth(self.client_id, self.client_secret)
        async with client.post(
            found["token_endpoint"], data=form, auth=auth, timeout=aiohttp.ClientTimeout(10)
        ) as answer:
            tokens = await answer.json()
            if answer.status != 200 or not isinstance(tokens.get("id_token"), str):
                raise ValueError(f"the provider refused the code: {tokens.get('error')}")
        keys = jwt.PyJWKClient(found["jwks_uri"])
        key = await asyncio.to_thread(keys.get_signing_key_from_jwt, tokens["id_token"])
        claims = jwt.decode(
            tokens["id_token"],
            key.key,
            algorithms=["RS256", "ES256", "PS256"],
            audience=self.client_id,
            issuer=found["issuer"],
            options={"require": ["exp", "iat", "sub", "aud", "iss"]},
        )
        if not hmac.compare_digest(str(claims.get("nonce", "")), pending["nonce"]):
            raise ValueError("the ID token is not for this login (nonce)")
        roles = claims.get("roles") or []
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise ValueError("the ID token's roles are not a list of names")
        user = str(claims["sub"])
        if not _USER.fullmatch(user):
            raise ValueError("the ID token names a user this page does not accept")
        return Approver(user, frozenset(roles))


class ActionServerNotifier:
    """Tells a conversation of a decision by asking the action server to (``POST`` :data:`TELL_PATH`
    with the request's id and the tell token): it reads the request and its conversation from the
    store itself, so the page names nothing else, and its token lets it ask nothing else."""

    def __init__(self, actions_url: str, token: str) -> None:
        self.actions_url = actions_url.rstrip("/")
        self._token = token

    async def tell(self, session: aiohttp.ClientSession, request: ApprovalRequest) -> bool:
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with session.post(
                self.actions_url + TELL_PATH,
                json={"id": request.id},
                headers=headers,
                timeout=aiohttp.ClientTimeout(30),
            ) as answer:
                if answer.status == 200:
                    return True
                log.warning(
                    "approval %s: the action server answered %s; told again later", request.id, answer.status
                )
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning(
                "approval %s: the action server not reached (%s); told again later",
                request.id,
                type(exc).__name__,
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


Accounts = Callable[[], Mapping[str, Account]]


class ApproversFile:
    """The approvers file as it is now: read again when it changes (looked at no more often than every
    :data:`RELOAD_SECONDS`), so a role taken away or a person mapped anew counts at the next request.
    A file that no longer loads leaves the last good one in force, and the log says why."""

    def __init__(
        self, path: Path, env: Mapping[str, str], approvals: Approvals, *, passwords: bool = True
    ) -> None:
        self.path = path
        self._env = env
        self._approvals = approvals
        self._passwords = passwords
        self._accounts: Mapping[str, Account] = {}
        self._seen: tuple[int, int] | None = None
        self._looked = 0.0
        self._load()  # SystemExit at start, naming the file, place and reason

    def _stamp(self) -> tuple[int, int] | None:
        try:
            found = self.path.stat()
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size

    def _load(self) -> None:
        stamp = self._stamp()
        accounts = load_approvers(self.path, self._env) if self._passwords else {}
        self._approvals.people = load_people(self.path, accounts)
        self._accounts, self._seen = accounts, stamp

    def __call__(self) -> Mapping[str, Account]:
        now = time.monotonic()
        if now - self._looked >= RELOAD_SECONDS:
            self._looked = now
            if self._stamp() != self._seen:
                try:
                    self._load()
                    log.info("approval page: %s read again", self.path)
                except SystemExit as exc:
                    self._seen = self._stamp()
                    log.error("approval page: %s not read again, the last good one stays: %s", self.path, exc)
        return self._accounts


def make_app(
    approvals: Approvals,
    accounts: Mapping[str, Account] | Accounts,
    notifier: ActionServerNotifier,
    origin: PageOrigin,
    sessions: Sessions,
    *,
    key: str = "",
    oidc: OIDCLogin | None = None,
    limit: LoginLimit | None = None,
    sweep_seconds: float = 2.0,
    retry_seconds: float = RETRY_TELL_SECONDS,
) -> web.Application:
    """The page's server, reached at ``origin``, its sessions in ``sessions``. Approvers log in with a
    password checked against ``accounts`` (their roles read from there at every request; a callable
    gives the accounts as they are now: :class:`ApproversFile`), or, with ``oidc``, at the OpenID
    provider (their roles from its ID token, kept in the session; ``key`` signs the login in
    progress)."""
    if oidc is not None and len(key) < MIN_KEY_CHARS:
        raise SystemExit(
            f"approval page: APPROVAL_PAGE_KEY must be at least {MIN_KEY_CHARS} random characters"
        )
    missing = [str(p) for p, _ in [*FILES.values(), (PAGE, "")] if not p.is_file()]
    if missing:
        raise SystemExit(f"approval page: missing {', '.join(missing)}")
    current: Accounts = accounts if callable(accounts) else (lambda: accounts)
    headers = security_headers()
    cookie = origin.cookie_name(COOKIE)
    # The OpenID login in progress: its path the callback's, so not __Host-; named for the port all
    # the same (browsers send a host's cookies to all its ports); Secure (https, or loopback).
    login_cookie = f"{LOGIN_COOKIE}-{origin.port}"
    logins = SignedValues(key or secrets.token_urlsafe(32), 600, b"logins in progress")
    limit = limit or LoginLimit()
    client_session: list[aiohttp.ClientSession] = []
    sweep_now = asyncio.Event()
    # A password check costs the same for an unknown user, so timing does not tell who exists.
    decoy = hash_password(secrets.token_urlsafe(16))

    async def session_of(request: web.Request) -> Session | None:
        return await sessions.read(request.cookies.get(cookie, ""))

    async def approver(request: web.Request) -> Approver | None:
        session = await session_of(request)
        if session is None:
            return None
        if session.roles is not None:
            return Approver(session.user, session.roles)
        account = current().get(session.user)  # the roles as the approvers file gives them now
        return Approver(session.user, account.roles) if account else None

    async def start_session(response: web.StreamResponse, who: Approver) -> None:
        roles = who.roles if oidc is not None else None
        value = await sessions.start(who.user, roles)
        response.headers["Set-Cookie"] = origin.session_cookie(COOKIE, value, max_age=sessions.seconds)

    def from_the_page(request: web.Request) -> bool:
        return origin.allows(request.headers.get("Origin"), request.headers.get("Sec-Fetch-Site"))

    def deny(status: int, error: str, reason: str | None = None) -> web.Response:
        body = {"error": error} if reason is None else {"error": error, "reason": reason}
        return web.json_response(body, status=status, headers=headers)

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
        if oidc is not None:
            return deny(404, "log in at the identity provider: /login/oidc")
        if not from_the_page(request):
            return deny(403, "only the approval page may log in")
        given = await body(request)
        user, password = (given or {}).get("user"), (given or {}).get("password")
        if not isinstance(user, str) or not isinstance(password, str) or len(password) > 1024:
            return deny(400, "user and password, please")
        account = current().get(user)
        client = origin.client(request.remote, request.headers)
        try:
            limit.admit(client, user[:64])
            async with limit.checking():
                stored = account.password_hash if account else decoy
                ok = await asyncio.to_thread(check_password, password, stored)
        except TooMany as exc:
            log.warning("approval page: a login refused unchecked (too many)")
            answer = deny(429, "too many logins: try again later")
            answer.headers["Retry-After"] = str(int(exc.retry_after + 0.999))
            return answer
        if not ok or account is None:
            log.warning("approval page: a failed login")
            limit.failed(client, user[:64])
            await asyncio.sleep(0.5)
            return deny(401, "wrong user name or password")
        response = web.json_response({"user": user, "roles": sorted(account.roles)}, headers=headers)
        await start_session(response, Approver(user, account.roles))
        return response

    async def oidc_start(request: web.Request) -> web.StreamResponse:
        if oidc is None:
            return deny(404, "this page logs in with a password")
        target, pending = await oidc.start(client_session[0])
        response = web.HTTPFound(target, headers=headers)
        # Lax: the browser comes back from the provider by a top-level navigation.
        response.set_cookie(
            login_cookie, logins.issue(pending), path="/callback", httponly=True, samesite="Lax", secure=True
        )
        return response

    async def oidc_callback(request: web.Request) -> web.StreamResponse:
        if oidc is None:
            return deny(404, "this page logs in with a password")
        pending = logins.read(request.cookies.get(login_cookie, ""))
        code, state = request.query.get("code"), request.query.get("state")
        if pending is None or not code or not isinstance(state, str):
            return deny(400, "no login in progress here: start again at /")
        if not hmac.compare_digest(state, str(pending.get("state"))):
            return deny(400, "this answer is not for the login this browser started")
        try:
            who = await oidc.finish(client_session[0], code, pending)
        except (ValueError, KeyError, aiohttp.ClientError, *_JWT_ERRORS) as exc:  # type: ignore[misc]
            log.warning("approval page: a login at the provider failed: %s", exc)
            return deny(401, "the login could not be verified")
        response = web.HTTPFound("/", headers=headers)
        response.del_cookie(login_cookie, path="/callback", secure=True)
        await start_session(response, who)
        log.info("approval page: %s logged in (roles: %s)", who.user, ", ".join(sorted(who.roles)) or "none")
        return response

    async def logout(request: web.Request) -> web.StreamResponse:
        if not from_the_page(request):
            return deny(403, "only the approval page may log out")
        await sessions.end(request.cookies.get(cookie, ""))  # the cookie, kept elsewhere, opens nothing now
        response = web.json_response({"ok": True}, headers=headers)
        response.headers["Set-Cookie"] = origin.cleared_cookie(COOKIE)
        return response

    async def me(request: web.Request) -> web.StreamResponse:
        who = await approver(request)
        if who is None:
            login = "oidc" if oidc is not None else "password"
            return web.json_response({"error": "not logged in", "login": login}, status=401, headers=headers)
        return web.json_response({"user": who.user, "roles": sorted(who.roles)}, headers=headers)

    async def pending(request: web.Request) -> web.StreamResponse:
        who = await approver(request)
        if who is None:
            return deny(401, "not logged in")
        waiting = await approvals.pending(who)
        return web.json_response({"pending": [_public(r) for r in waiting]}, headers=headers)

    async def decide(request: web.Request) -> web.StreamResponse:
        if not from_the_page(request):
            return deny(403, "only the approval page may decide")
        who = await approver(request)
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
            "unknown_person": (
                403,
                "you or the requester are not in the deployment's list of people: nobody can tell "
                "you apart, so you may not decide it",
            ),
            "not_allowed": (403, "this request needs a role you do not have"),
            "already_decided": (409, "this request was already decided, or has expired"),
            "unknown": (404, "no such request"),
        }
        status, reason = reasons[decided.kind]
        return deny(status, reason, decided.kind)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok", headers=headers)

    async def sweep(app: web.Application) -> AsyncIterator[None]:
        client_session.append(aiohttp.ClientSession())

        # Each conversation is told in a task of its own (at most TELLING at once), so one that Rasa
        # is slow to answer (its action is running a call) holds up no other.
        telling: set[asyncio.Task[bool]] = set()
        gate = asyncio.Semaphore(TELLING)

        async def tell(request: ApprovalRequest) -> bool:
            async with gate:
                return await notifier.tell(client_session[0], request)

        async def loop() -> None:
            while True:
                try:
                    await approvals.expire_due()
                    for request in await approvals.store.untold(time.time(), retry_seconds):
                        task = asyncio.create_task(tell(request))
                        telling.add(task)
                        task.add_done_callback(telling.discard)
                except Exception:  # a database hiccup must not end the sweep
                    log.exception("approval page: the sweep failed; trying again")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sweep_now.wait(), sweep_seconds)
                sweep_now.clear()

        task = asyncio.create_task(loop())
        yield
        for running in [task, *telling]:
            running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(task, *telling, return_exceptions=True)
        await approvals.store.aclose()
        await sessions.store.aclose()
        await client_session[0].close()

    app = web.Application(client_max_size=16 * 1024)
    app.router.add_get("/", page)
    for route, (path, content_type) in FILES.items():
        app.router.add_get(route, static(path, content_type))
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/login/oidc", oidc_start)
    app.router.add_get("/callback", oidc_callback)
    app.router.add_get("/api/me", me)
    app.router.add_get("/api/pending", pending)
    app.router.add_post("/api/decide", decide)
    app.router.add_get("/health", health)
    app.cleanup_ctx.append(sweep)
    return app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The page's options (``mcp-bridge approval-page --help``)."""
    parser.add_argument(
        "--actions-url",
        help="the action server's base URL as this page reaches it: it tells the requester's "
        "conversation of a decision (APPROVAL_TELL_TOKEN; the same value on the action servers)",
    )
    parser.add_argument("--approvers", type=Path, help="the approvers file (password logins)")
    parser.add_argument(
        "--oidc-issuer",
        help="log approvers in at this OpenID provider instead (OIDC_CLIENT_ID, OIDC_CLIENT_SECRET; roles "
        "from the ID token's `roles` claim)",
    )
    parser.add_argument(
        "--public-url",
        help="this page's URL as browsers reach it (default: http://127.0.0.1:PORT and its loopback "
        "names; required when not listening on loopback, and then https)",
    )
    parser.add_argument(
        "--behind-proxy",
        action="store_true",
        help="a proxy in front appends the client's address to X-Forwarded-For (read for the login "
        "limit only with this)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--session-seconds", type=int, default=SESSION_SECONDS)
    parser.add_argument("--sweep-seconds", type=float, default=2.0)
    parser.add_argument(
        "--retry-seconds",
        type=float,
        default=RETRY_TELL_SECONDS,
        help="tell a conversation again after this long when it has not taken up its decision",
    )
    parser.add_argument(
        "what",
        nargs="?",
        choices=["serve", "hash"],
        default="serve",
        help="serve the page (the default), or print a password's hash for the approvers file",
    )


def run(args: argparse.Namespace) -> int:
    """Serve the page (or, ``hash``, print the hash of a password typed at the prompt)."""
    if args.what == "hash":
        import getpass

        print(hash_password(getpass.getpass("password: ")))
        return 0
    if not args.actions_url:
        raise SystemExit(
            "approval page: give --actions-url, the action server's base URL: it tells the requester's "
            "conversation of a decision"
        )
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise SystemExit(f"approval page: {exc}") from None
    env = settings.environ
    held = [name for name in CONVERSATION_SECRETS if env.get(name)]
    if held:
        raise SystemExit(
            f"approval page: not started: {', '.join(held)} is set in its environment. The page needs "
            "none of them (the action server tells conversations), and a process that holds one can "
            "write to any conversation: start it without"
        )
    token = settings.approval_tell_token or ""
    if len(token) < MIN_KEY_CHARS:
        raise SystemExit(
            f"approval page: APPROVAL_TELL_TOKEN must be at least {MIN_KEY_CHARS} random characters (the "
            "same value as the action servers')"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        origin = PageOrigin.for_page(args.public_url, args.host, args.port, trust_proxy=args.behind_proxy)
    except ValueError as exc:
        raise SystemExit(f"approval page: {exc}") from None
    public = (args.public_url or f"http://{args.host}:{args.port}").rstrip("/")
    oidc = None
    if args.oidc_issuer:
        if jwt is None:
            raise SystemExit(
                "approval page: --oidc-issuer needs PyJWT: pip install 'rasa-mcp-bridge[approval-page]'"
            )
        client_id, client_secret = settings.oidc_client_id, settings.oidc_client_secret
        if not client_id or not client_secret:
            raise SystemExit("approval page: --oidc-issuer needs OIDC_CLIENT_ID and OIDC_CLIENT_SECRET")
        oidc = OIDCLogin(args.oidc_issuer, client_id, client_secret, f"{public}/callback")
    if args.approvers is None:
        raise SystemExit(
            "approval page: give --approvers: its people: say who is who (and, without --oidc-issuer, "
            "its approvers: who logs in with a password)"
        )
    audit = AuditLog.from_settings(settings)  # the action server's trail, file and key
    database = settings.database
    approvals = Approvals(open_store(database), audit)
    approvers = ApproversFile(args.approvers, env, approvals, passwords=oidc is None)
    try:
        store = open_sessions(settings.approval_page_sessions, database)
    except ValueError as exc:
        raise SystemExit(f"approval page: {exc}") from None
    app = make_app(
        approvals,
        approvers,
        ActionServerNotifier(args.actions_url, token),
        origin,
        Sessions(store, args.session_seconds),
        key=settings.approval_page_key,
        oidc=oidc,
        sweep_seconds=args.sweep_seconds,
        retry_seconds=args.retry_seconds,
    )
    print(
        f"approval page on http://{args.host}:{args.port}/ (action server at {args.actions_url})", flush=True
    )
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mcp-bridge approval-page",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
