"""Acting as the person: OAuth authorization code with PKCE, across chat turns and replicas.

A server whose ``oauth:`` block says ``grant: authorization_code`` is called with the token of the
person in the conversation (the name the channel authenticated, ``Turn.user``), never with a
shared one. The MCP SDK's :class:`~mcp.client.auth.OAuthClientProvider` does this flow inside one
HTTP request: it sends the person to the authorization page and *awaits* the callback. A chat spans
turns, and the callback may reach another replica, so the bridge uses the SDK's parts and keeps
the flow's state where every replica finds it:

* discovery as the MCP specification describes: the server's 401 challenge and its
  protected-resource metadata (RFC 9728), then the authorization server's metadata (RFC 8414),
  with the SDK's helpers (``mcp.client.auth.utils``); read once per process and server. With
  ``oauth.issuer`` set, the server's metadata must name that authorization server, whose metadata
  is then read at that issuer alone: a server that names another is refused before anything of the
  client's goes anywhere (no link, no code, no secret, no verifier). Metadata for another resource
  than the server's URL is refused the same way (RFC 9728 section 7.3), and without ``oauth.scope``
  the scope asked for is the specification's choice: the 401's ``scope``, else the metadata's
  ``scopes_supported``, else none;
* the sign-in link shown in the chat is the action server's own callback route with a sealed *start
  ticket* (``?start=``; Fernet: encrypted and signed, with its time: it expires) naming the
  conversation, the person, the server, the skill, a nonce and a short *code*, which the chat shows
  beside the link and nowhere else. Opening the link takes nothing (:meth:`PersonOAuth.invitation`:
  a link previewer or a mail scanner that fetches it first owns nothing): the page says whose chat
  the sign-in is for and asks for the code. Sending it is good once (:meth:`PersonOAuth.start`; a
  wrong code :data:`MAX_CODE_TRIES` times spends the link): so someone lured to another's link, who
  has not that chat's code, links nothing. Then the route sets a cookie holding a random browser
  secret, and only then is the authorization URL made, with the SDK's
  :class:`PKCEParameters` (S256), the RFC 8707 ``resource`` the SDK's context computes, and a
  ``state`` sealed like the ticket that also carries the digest of that browser secret. The PKCE
  verifier stays in the token store under the nonce (:mod:`mcp_bridge.auth.token_store`) and is taken
  once, so a state is good for one sign-in only;
* the callback counts only in the browser that opened the link: without the cookie whose digest the
  state carries, it is refused before anything is taken or exchanged (:meth:`PersonOAuth.complete`);
* the tokens are not the person's yet: they wait, encrypted, in the store, and the page shows which
  account signed in (the ID token's or the access token's email, name or subject) with "Use this
  account" and "Not me" (a POST carrying a sealed ticket bound to the same cookie). Only "Use this
  account" stores them for the person (:meth:`PersonOAuth.confirm`); "Not me" drops and revokes them;
* the code exchange, the refresh and the client authentication are the SDK provider's own requests
  (``_exchange_token_authorization_code``, ``_refresh_token``, ``prepare_token_auth``) and its
  response handling; the tokens go to the encrypted store per (person, server);
* a token is refreshed a little before it expires; a refresh that fails removes the token and the
  person is asked to sign in again: a call never goes out under anyone else's identity;
* disconnecting removes the token and revokes it at the authorization server (RFC 7009) when
  it publishes a revocation endpoint.

Nothing here logs a token, a code or a verifier.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlparse

from cryptography.fernet import InvalidToken

from mcp_bridge.auth.token_store import TokenStore
from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.errors import BridgeError, NotAuthorisedError, ServerUnavailableError
from mcp_bridge.mcp_sdk import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthClientProvider,
    OAuthMetadata,
    OAuthToken,
    PKCEParameters,
    ProtectedResourceMetadata,
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    check_resource_allowed,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    http,
    issuers_match,
    resource_url_from_server_url,
    validate_authorization_response_iss,
    validate_metadata_issuer,
)

log = logging.getLogger(__name__)

# How long a sign-in link stays good.
SIGN_IN_SECONDS = 600
# A token counts as expired this long before it is (at most; a tenth of its lifetime when shorter).
REFRESH_BEFORE = 30.0
# How long the "which account" page waits for "Use this account" once the sign-in came back.
CONFIRM_SECONDS = 300
# The code the chat shows beside a sign-in link: this many characters of CODE_ALPHABET (no 0/O, 1/I/L).
CODE_CHARS = 6
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
# A sign-in link is spent after this many wrong codes.
MAX_CODE_TRIES = 5
# One route serves the three steps a browser makes: ``GET ?start=`` (the link shown in the chat),
# ``GET ?state=&code=`` (the authorization server's redirect) and ``POST`` (the person's choice). So
# a proxy that exposes the redirect URI exposes all of it, and the browser cookie's path is that URI.
CALLBACK_PATH = "/mcp-bridge/oauth/callback"
# The longest account name shown on the confirmation page.
MAX_ACCOUNT_CHARS = 120
# Token-response fields longer than this are not read for the account name.
_MAX_JWT_CHARS = 16384


@dataclass(frozen=True)
class Acting:
    """Who the calls made now are for: the conversation, the person the channel named, the skill."""

    conversation: str
    person: str | None
    skill: str | None = None


@dataclass(frozen=True)
class SignInLink:
    url: str
    # Where the person signs in, as they should read it (host and port of the authorization page).
    domain: str
    server: str
    # What the person types on the link's page: shown in the chat beside the link, and nowhere else.
    code: str = ""


@dataclass(frozen=True)
class Invitation:
    """What a sign-in link's page shows before anything is taken: whose chat it serves (the person
    as the channel named them, the skill that asked, when), and where they will sign in."""

    person: str
    server: str
    skill: str | None
    domain: str
    asked_at: float
    # The authorization page's origin (scheme, host and port), where the page's form leads.
    authorization_origin: str = ""


class SignInRequiredError(NotAuthorisedError):
    """The person has no usable token for this server: nothing was sent; they must sign in first.

    ``link`` is None when none can be made (the channel names nobody)."""

    def __init__(self, message: str, server: str, link: SignInLink | None = None, *, again: bool = False):
        super().__init__(message)
        self.server = server
        self.link = link
        # True when a token was there but could not be renewed (the person signs in again).
        self.again = again


class SignInError(BridgeError):
    """A callback that does not complete a sign-in (forged, expired or replayed state; a refused
    code). The message is safe to show: it names no token, code or person."""


@dataclass(frozen=True)
class SignedIn:
    conversation: str
    person: str
    server: str
    skill: str | None


@dataclass(frozen=True)
class Started:
    """A start link opened: where the browser goes next, and the cookie that binds it to this sign-in."""

    url: str
    # The cookie's attributes: ``Secure`` (and the ``__Host-`` name) when the redirect URI is https;
    # its path is the redirect URI's, so it is sent to this route alone.
    secure: bool
    path: str


@dataclass(frozen=True)
class Linked:
    """A sign-in that came back from the authorization server, its tokens kept until the person says
    "Use this account". ``ticket`` goes into the confirmation form; it is sealed and bound to the
    browser's cookie."""

    signed: SignedIn
    account: str | None
    domain: str
    ticket: str


def normal_code(typed: str) -> str:
    """A code as the person may type it (lower case, spaces, a dash) as the chat showed it."""
    return "".join(ch for ch in typed.upper() if ch.isalnum())[: CODE_CHARS * 2]


def shown_code(code: str) -> str:
    """The code as the chat shows it: two groups of three."""
    half = len(code) // 2
    return f"{code[:half]}-{code[half:]}"


def browser_digest(secret: str) -> str:
    """What the state carries of the browser secret (the secret itself stays in the cookie)."""
    return hashlib.sha256(b"mcp-bridge sign-in browser\0" + secret.encode()).hexdigest()


@dataclass
class _Discovered:
    resource: ProtectedResourceMetadata | None
    metadata: OAuthMetadata
    # The scope asked for when oauth.scope is not set: the MCP specification's selection (the 401's
    # scope, else the protected-resource metadata's scopes_supported, else none).
    scope: str | None = None


async def discover(config: MCPServerConfig) -> _Discovered:
    """Where people sign in for the server, as the MCP specification says: its 401's hint, its
    protected-resource metadata (RFC 9728), then the authorization server's metadata (RFC 8414).
    NotAuthorisedError when none is found, or when ``oauth.issuer`` pins another server than the
    one the metadata names."""
    pinned = config.oauth.issuer if config.oauth is not None else None
    async with _http(config) as http:
        challenge = await http.post(
            config.url,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"accept": "application/json, text/event-stream"},
        )
        hint = extract_resource_metadata_from_www_auth(challenge)
        challenged = extract_scope_from_www_auth(challenge)
        resource: ProtectedResourceMetadata | None = None
        for url in build_protected_resource_metadata_discovery_urls(hint, config.url):
            resource = await handle_protected_resource_response(
                await http.send(create_oauth_metadata_request(url))
            )
            if resource is not None:
                break
        served = resource_url_from_server_url(config.url)
        if resource is not None and not check_resource_allowed(served, str(resource.resource)):
            # RFC 9728 section 7.3: metadata for another resource could send people to sign in for it.
            raise NotAuthorisedError(
                f"MCP server {config.name!r} publishes protected-resource metadata for {resource.resource}, "
                f"not for {served}: nobody is sent to sign in, and nothing was sent"
            )
        named = [str(server) for server in resource.authorization_servers or []] if resource else []
        if pinned is not None and named and not any(issuers_match(server, pinned) for server in named):
            raise NotAuthorisedError(
                f"MCP server {config.name!r} names the authorization server {', '.join(named)}, but "
                f"oauth.issuer allows only {pinned}: nobody is sent to sign in there, and nothing was sent"
            )
        issuer = pinned or (named[0] if named else None)
        metadata: OAuthMetadata | None = None
        for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, config.url):
            go_on, metadata = await handle_auth_metadata_response(
                await http.send(create_oauth_metadata_request(url))
            )
            if metadata is not None or not go_on:
                break
    if metadata is None:
        raise NotAuthorisedError(
            f"MCP server {config.name!r}: no authorization server metadata found (protected-resource "
            "metadata, RFC 9728, then RFC 8414); nobody can sign in"
        )
    if pinned is not None and not issuers_match(str(metadata.issuer), pinned):
        raise NotAuthorisedError(
            f"MCP server {config.name!r}: the authorization server at {pinned} calls itself "
            f"{metadata.issuer}, not the oauth.issuer configured; nobody is sent to sign in there"
        )
    if issuer is not None and pinned is None:
        validate_metadata_issuer(metadata, issuer)
    return _Discovered(resource, metadata, get_client_metadata_scopes(challenged, resource, metadata))


async def authorization_server(config: MCPServerConfig) -> str:
    """The issuer of the authorization server where people sign in for ``config``'s server (discovered;
    nothing of anyone's is sent). NotAuthorisedError when none is found, ServerUnavailableError when
    the server cannot be reached."""
    try:
        return str((await discover(config)).metadata.issuer)
    except http.HTTPError as exc:
        raise ServerUnavailableError(
            f"MCP server {config.name!r} at {config.url} could not be reached ({type(exc).__name__})"
        ) from exc


def _http(config: MCPServerConfig) -> http.AsyncClient:
    timeout = config.oauth.timeout if config.oauth is not None else 10.0
    return http.AsyncClient(timeout=timeout, follow_redirects=False)


class _OneShotStorage:
    """The SDK's TokenStorage for one provider object: what its handlers store, kept for the caller."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        return None


class PersonOAuth:
    """Sign-in links, callbacks, the people's tokens (refreshed) and disconnecting, for the servers
    that act as the person."""

    def __init__(
        self,
        servers: Mapping[str, MCPServerConfig],
        store: TokenStore,
        *,
        clock: Any = time.time,
    ) -> None:
        self._servers = {name: config for name, config in servers.items() if config.acts_as_person}
        self._store = store
        self._clock = clock
        self._discovered: dict[str, _Discovered] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def store(self) -> TokenStore:
        return self._store

    def serves(self, server: str) -> bool:
        return server in self._servers

    # -- discovery -----------------------------------------------------------------------------

    async def _discover(self, server: str) -> _Discovered:
        found = self._discovered.get(server)
        if found is None:
            found = self._discovered[server] = await discover(self._servers[server])
        return found

    async def _provider(self, server: str) -> tuple[OAuthClientProvider, _OneShotStorage]:
        """The SDK's provider for ``server``, its context filled with what discovery found."""
        config = self._servers[server]
        oauth = config.oauth
        assert oauth is not None and oauth.redirect_uri is not None
        found = await self._discover(server)
        method = "client_secret_basic" if oauth.client_secret else "none"
        metadata = OAuthClientMetadata(
            redirect_uris=[oauth.redirect_uri],  # type: ignore[list-item]  # pydantic parses the URL
            scope=oauth.scope or found.scope,
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method=method,  # type: ignore[arg-type]
        )
        storage = _OneShotStorage()
        provider = OAuthClientProvider(config.url, metadata, storage)
        context = provider.context
        context.protected_resource_metadata = found.resource
        context.oauth_metadata = found.metadata
        context.auth_server_url = str(found.metadata.issuer)
        context.client_info = OAuthClientInformationFull(
            client_id=oauth.client_id,
            client_secret=oauth.client_secret or None,
            redirect_uris=[oauth.redirect_uri],  # type: ignore[list-item]
            token_endpoint_auth_method=method,
            grant_types=["authorization_code", "refresh_token"],
            scope=oauth.scope or found.scope,
        )
        return provider, storage

    # -- signing in ------------------------------------------------------------------------------

    async def link(self, server: str, conversation: str, person: str, skill: str | None) -> SignInLink:
        """The sign-in link shown to ``person`` in ``conversation``: the callback route with a sealed,
        expiring start ticket, good for one browser (:meth:`start`)."""
        provider, _ = await self._provider(server)
        context = provider.context
        oauth = self._servers[server].oauth
        assert oauth is not None and oauth.redirect_uri is not None and context.oauth_metadata is not None
        pkce = PKCEParameters.generate()
        nonce = secrets.token_urlsafe(24)
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_CHARS))
        expires = self._clock() + SIGN_IN_SECONDS
        await self._store.begin_sign_in(nonce, pkce.code_verifier, expires)
        await self._store.begin_sign_in(_START + nonce, "0", expires)  # the wrong codes sent so far
        ticket = self._seal(
            {
                "t": "start",
                "c": conversation,
                "p": person,
                "s": server,
                "k": skill,
                "n": nonce,
                "x": pkce.code_challenge,
                "d": code,
                "e": expires,
            }
        )
        endpoint = str(context.oauth_metadata.authorization_endpoint)
        separator = "&" if "?" in oauth.redirect_uri else "?"
        url = f"{oauth.redirect_uri}{separator}{urlencode({'start': ticket})}"
        return SignInLink(url, urlparse(endpoint).netloc, server, shown_code(code))

    async def invitation(self, ticket: str) -> Invitation:
        """What a sign-in link's page shows, taking nothing (a link fetched by a previewer stays
        good); SignInError when the ticket is not ours or has expired."""
        opened = self._open(ticket, "start", SIGN_IN_SECONDS)
        server = str(opened["s"])
        if server not in self._servers:
            raise SignInError("this sign-in link is for a server this bot no longer acts on")
        provider, _ = await self._provider(server)
        metadata = provider.context.oauth_metadata
        endpoint = urlparse(str(metadata.authorization_endpoint) if metadata is not None else "")
        asked_at = float(opened.get("e", self._clock())) - SIGN_IN_SECONDS
        origin = f"{endpoint.scheme}://{endpoint.netloc}" if endpoint.netloc else ""
        return Invitation(str(opened["p"]), server, opened.get("k"), endpoint.netloc, asked_at, origin)

    def callback_origins(self) -> frozenset[str]:
        """The origins of the redirect URIs: where the sign-in pages' forms are posted from."""
        found = set()
        for config in self._servers.values():
            if config.oauth is not None and config.oauth.redirect_uri:
                parts = urlparse(config.oauth.redirect_uri)
                found.add(f"{parts.scheme}://{parts.netloc}".lower())
        return frozenset(found)

    async def start(self, ticket: str, browser: str, code: str) -> Started:
        """The code the chat showed, sent from a start link's page by a browser whose cookie will hold
        ``browser``: the authorization URL, its state bound to that secret. Good once: a second
        browser (or a second sending) is refused; a wrong code is refused, and spends the link after
        :data:`MAX_CODE_TRIES` of them."""
        opened = self._open(ticket, "start", SIGN_IN_SECONDS)
        server = str(opened["s"])
        if server not in self._servers:
            raise SignInError("this sign-in link is for a server this bot no longer acts on")
        key = _START + str(opened["n"])
        tries = await self._store.take_sign_in(key)
        if tries is None:
            raise SignInError(
                "this sign-in link was used already (in this or another browser) or has expired; "
                "ask again in the chat for a new one"
            )
        if not hmac.compare_digest(normal_code(code).encode(), str(opened.get("d", "")).encode()):
            wrong = int(tries) + 1 if tries.isdigit() else MAX_CODE_TRIES
            log.warning("sign-in to MCP server %r: a wrong code (%d of %d)", server, wrong, MAX_CODE_TRIES)
            if wrong >= MAX_CODE_TRIES:
                raise SignInError(
                    "too many wrong codes: this sign-in link no longer works; ask again in the chat"
                )
            expires = float(opened.get("e", self._clock() + SIGN_IN_SECONDS))
            await self._store.begin_sign_in(key, str(wrong), expires)
            raise SignInError(
                "that is not the code the chat showed beside this link. Only the chat that asked you to "
                "sign in has it: if it is not your chat, do not sign in here"
            )
        provider, _ = await self._provider(server)
        context = provider.context
        oauth = self._servers[server].oauth
        assert oauth is not None and oauth.redirect_uri is not None
        assert context.oauth_metadata is not None and context.client_info is not None
        state = self._seal(
            {
                "t": "state",
                **{key: opened[key] for key in ("c", "p", "s", "k", "n")},
                "b": browser_digest(browser),
            }
        )
        params = {
            "response_type": "code",
            "client_id": context.client_info.client_id,
            "redirect_uri": str(oauth.redirect_uri),
            "state": state,
            "code_challenge": str(opened["x"]),
            "code_challenge_method": "S256",
            "resource": context.get_resource_url(),  # RFC 8707
        }
        if context.client_metadata.scope:
            params["scope"] = context.client_metadata.scope
        endpoint = str(context.oauth_metadata.authorization_endpoint)
        redirect = urlparse(str(oauth.redirect_uri))
        return Started(f"{endpoint}?{urlencode(params)}", redirect.scheme == "https", redirect.path or "/")

    def _seal(self, value: Mapping[str, Any]) -> str:
        return self._store.keys.states.encrypt_at_time(
            json.dumps(value).encode(), int(self._clock())
        ).decode()

    def _open(self, sealed: str, kind: str, ttl: int) -> dict[str, Any]:
        """A ticket or state we sealed, of this kind, not older than ``ttl``; else SignInError."""
        try:
            opened = json.loads(
                self._store.keys.states.decrypt_at_time(sealed.encode(), ttl, int(self._clock()))
            )
            if not isinstance(opened, dict) or opened.get("t") != kind:
                raise ValueError(kind)
            for key in ("c", "p", "s", "n"):
                if not isinstance(opened.get(key), str):
                    raise ValueError(key)
        except (InvalidToken, ValueError, TypeError):
            raise SignInError(
                "this sign-in link is not valid or has expired; ask again in the chat"
            ) from None
        return opened

    async def complete(
        self, state: str, code: str | None, iss: str | None, error: str | None = None, *, browser: str | None
    ) -> Linked:
        """The callback: check the state (sealed, not expired, not used) and that ``browser`` (the
        cookie) is the secret of the browser that opened the link, exchange the code, and hold the
        tokens until the person confirms the account (:meth:`confirm`). A callback in another
        browser is refused before anything is taken, so the person's own browser can still finish."""
        opened = self._open(state, "state", SIGN_IN_SECONDS)
        signed = SignedIn(opened["c"], opened["p"], opened["s"], opened.get("k"))
        if not browser or not hmac.compare_digest(browser_digest(browser), str(opened.get("b", ""))):
            log.warning(
                "sign-in to MCP server %r refused: completed in a browser that did not open the link "
                "(conversation %s)",
                signed.server,
                signed.conversation,
            )
            raise SignInError(
                "this sign-in was started in another browser, so it cannot be completed here. Open the "
                "link from the chat in the browser you chat in"
            )
        if signed.server not in self._servers:
            raise SignInError("this sign-in link is for a server this bot no longer acts on")
        verifier = await self._store.take_sign_in(opened["n"])
        if verifier is None:
            raise SignInError("this sign-in link was used already or has expired; ask again in the chat")
        if error or not code:
            raise SignInError("the sign-in was not completed at the authorization server")
        provider, storage = await self._provider(signed.server)
        try:
            validate_authorization_response_iss(iss, provider.context.oauth_metadata)  # RFC 9207
        except Exception:
            raise SignInError("the sign-in answer came from another authorization server") from None
        request = await provider._exchange_token_authorization_code(code, verifier)
        async with _http(self._servers[signed.server]) as http:
            response = await http.send(request)
            try:
                await provider._handle_token_response(response)
            except Exception:
                log.warning(
                    "sign-in to MCP server %r: the authorization server refused the code (HTTP %s)",
                    signed.server,
                    response.status_code,
                )
                raise SignInError(
                    "the authorization server refused the sign-in; ask again in the chat"
                ) from None
        assert storage.tokens is not None
        account = _account(response)
        unconfirmed = secrets.token_urlsafe(24)
        record = _record(storage.tokens, self._clock())
        expires_at = self._clock() + CONFIRM_SECONDS
        await self._store.begin_sign_in(_UNCONFIRMED + unconfirmed, json.dumps(record), expires_at)
        ticket = self._seal(
            {
                "t": "confirm",
                "c": signed.conversation,
                "p": signed.person,
                "s": signed.server,
                "k": signed.skill,
                "n": unconfirmed,
                "b": opened["b"],
                "a": account,
            }
        )
        metadata = provider.context.oauth_metadata
        domain = urlparse(str(metadata.authorization_endpoint)).netloc if metadata is not None else ""
        return Linked(signed, account, domain, ticket)

    async def confirm(self, ticket: str, browser: str | None, use: bool) -> SignedIn | None:
        """The person's choice on the confirmation page, in the browser that signed in: "Use this
        account" stores the tokens kept until then for the person the link named (the SignedIn); "Not
        me" drops and revokes them (None). Good once; SignInError when the ticket is not ours, is for another
        browser, has expired or was answered already."""
        opened = self._open(ticket, "confirm", CONFIRM_SECONDS)
        if not browser or not hmac.compare_digest(browser_digest(browser), str(opened.get("b", ""))):
            raise SignInError("this answer comes from another browser than the one that signed in")
        signed = SignedIn(opened["c"], opened["p"], opened["s"], opened.get("k"))
        kept = await self._store.take_sign_in(_UNCONFIRMED + opened["n"])
        if kept is None:
            raise SignInError("this sign-in was answered already or has expired; ask again in the chat")
        record = json.loads(kept)
        if not use:
            log.info("a sign-in to MCP server %r was declined: not the person's account", signed.server)
            if signed.server in self._servers:
                await self._revoke(signed.server, record)
            return None
        if signed.server not in self._servers:
            raise SignInError("this sign-in link is for a server this bot no longer acts on")
        if isinstance(opened.get("a"), str):
            record["account"] = opened["a"]  # what the chat says when asked which account is in use
        await self._store.put(signed.person, signed.server, record)
        log.info("a person signed in to MCP server %r (conversation %s)", signed.server, signed.conversation)
        return signed

    # -- the person's token ----------------------------------------------------------------------

    async def access_token(
        self, server: str, person: str | None, conversation: str, skill: str | None
    ) -> str:
        """The person's valid access token for ``server``, refreshed when about to expire; else
        :class:`SignInRequiredError` with a link (none when the channel names nobody)."""
        if person is None:
            raise SignInRequiredError(
                f"MCP server {server!r} acts as the person in the conversation, and this channel names "
                "nobody: nothing was sent",
                server,
            )
        lock = self._locks.setdefault((server, person), asyncio.Lock())
        async with lock:
            record = await self._store.get(person, server)
            if record is not None and not _expiring(record, self._clock()):
                return str(record["token"]["access_token"])
            again = record is not None
            if record is not None and record["token"].get("refresh_token"):
                refreshed = await self._refresh(server, record)
                if refreshed is not None:
                    if "account" in record:
                        refreshed["account"] = record["account"]
                    await self._store.put(person, server, refreshed)
                    return str(refreshed["token"]["access_token"])
            if record is not None:
                await self._store.delete(person, server)
        link = await self.link(server, conversation, person, skill)
        what = "could not be renewed" if again else "is not there yet"
        raise SignInRequiredError(
            f"the person's sign-in to MCP server {server!r} {what}: nothing was sent",
            server,
            link,
            again=again,
        )

    async def accounts(self, person: str) -> dict[str, str | None]:
        """The servers ``person`` is signed in to through the bridge, each with the account the sign-in
        page showed (None when the authorization server said nothing of it)."""
        found: dict[str, str | None] = {}
        for server in self._servers:
            record = await self._store.get(person, server)
            if record is not None:
                account = record.get("account")
                found[server] = account if isinstance(account, str) else None
        return found

    async def forget(self, server: str, person: str) -> None:
        """The server refused the person's token: drop it, so the next call asks them to sign in."""
        await self._store.delete(person, server)

    async def _refresh(self, server: str, record: Mapping[str, Any]) -> dict[str, Any] | None:
        provider, storage = await self._provider(server)
        provider.context.current_tokens = OAuthToken.model_validate(record["token"])
        request = await provider._refresh_token()
        async with _http(self._servers[server]) as http:
            try:
                response = await http.send(request)
            except http.HTTPError as exc:
                log.warning("refreshing a token for MCP server %r failed: %s", server, type(exc).__name__)
                return None
            if not await provider._handle_refresh_response(response):
                log.info(
                    "MCP server %r: a token could not be refreshed (HTTP %s)", server, response.status_code
                )
                return None
        assert storage.tokens is not None
        return _record(storage.tokens, self._clock())

    async def disconnect(self, person: str) -> list[str]:
        """Remove ``person``'s tokens for every server that acts as the person, revoking them at the
        authorization server when it offers revocation; the servers that had one."""
        removed: list[str] = []
        for server in self._servers:
            record = await self._store.get(person, server)
            if not await self._store.delete(person, server):
                continue
            removed.append(server)
            if record is not None:
                await self._revoke(server, record)
        return removed

    async def _revoke(self, server: str, record: Mapping[str, Any]) -> None:
        try:
            provider, _ = await self._provider(server)
        except Exception as exc:  # revocation is a courtesy: the token is gone from here already
            log.warning("MCP server %r: token not revoked (%s)", server, type(exc).__name__)
            return
        endpoint = (
            provider.context.oauth_metadata.revocation_endpoint if provider.context.oauth_metadata else None
        )
        if endpoint is None:
            return
        token = record["token"]
        async with _http(self._servers[server]) as http:
            for value, hint in (
                (token.get("refresh_token"), "refresh_token"),
                (token.get("access_token"), "access_token"),
            ):
                if not value:
                    continue
                client_id = self._servers[server].oauth.client_id  # type: ignore[union-attr]
                data, headers = provider.context.prepare_token_auth(
                    {"token": value, "token_type_hint": hint, "client_id": client_id},
                    {"Content-Type": "application/x-www-form-urlencoded"},
                )
                try:
                    response = await http.post(str(endpoint), data=data, headers=headers)
                    log.info("MCP server %r: %s revoked (HTTP %s)", server, hint, response.status_code)
                except http.HTTPError as exc:
                    log.warning("MCP server %r: %s not revoked (%s)", server, hint, type(exc).__name__)

    async def aclose(self) -> None:
        await self._store.close()


# Keys of the store's sign-in rows besides the PKCE verifier (under the bare nonce): a link not
# opened yet, and tokens waiting for "Use this account".
_START = "start:"
# The prefix of the tokens kept in the store until the person says the account is theirs.
_UNCONFIRMED = "held:"


def _account(response: http.Response) -> str | None:
    """Which account signed in, as the person should recognise it: the email, name or subject of the
    token response's ID token, else of its access token when that is a JWT. Read for display only
    (the response came straight from the token endpoint); None when the server says nothing of it."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for field in ("id_token", "access_token"):
        claims = _jwt_claims(body.get(field))
        for claim in ("email", "preferred_username", "name", "sub"):
            value = claims.get(claim)
            if isinstance(value, str) and value.strip():
                shown = "".join(ch for ch in value if unicodedata.category(ch)[0] != "C").strip()
                if shown:
                    return shown[:MAX_ACCOUNT_CHARS]
    return None


def _jwt_claims(value: object) -> dict[str, Any]:
    if not isinstance(value, str) or len(value) > _MAX_JWT_CHARS or value.count(".") != 2:
        return {}
    payload = value.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, TypeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _record(tokens: OAuthToken, now: float) -> dict[str, Any]:
    return {"token": tokens.model_dump(mode="json", exclude_none=True), "obtained_at": now}


def _expiring(record: Mapping[str, Any], now: float) -> bool:
    lifetime = record["token"].get("expires_in")
    if not lifetime:
        return False
    margin = min(REFRESH_BEFORE, 0.1 * float(lifetime))
    return now >= float(record["obtained_at"]) + float(lifetime) - margin
