"""OAuth client credentials, end to end: a real authorization server (oidc-provider), the real CRM MCP
server as a protected resource, and the bridge's real runtime with an ``oauth:`` block.

What is proven: a note is written with a token and logged with the client that wrote it; the token
is reused and renewed after it expires (counted at the authorization server); a wrong secret, and a
server that refuses every token, write nothing and say "not authorised", never "may have run"; a
token the server stops accepting mid-session (signed with a retired key) costs one new token and one
retry, and the note is written once; forged tokens (expired, wrong audience, wrong scope, unsigned,
wrong key, wrong issuer) are refused by the CRM server; no token appears in a log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from mcp_bridge.auth.client_credentials import ClientCredentials
from mcp_bridge.config.servers import parse_mcp_servers
from mcp_bridge.errors import NotAuthorisedError, ToolCallError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from tests.support import crm_db, procs
from tests.support.conversation import notes_for
from tests.support.rasa_calls import FakeTracker, call_action, said
from tests.support.tcp_proxy import TcpProxy

# The action server's token (32+ random characters: a weak one stops the server).
SHARED = "shared-secret-4Fh8Lq2Zr7Wm5Kp9Tc3V"

CLIENT = procs.OAuthClient("crm-bridge", "client-secret-for-tests")
DANA = "dana@example.com"
_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def _private_jwks(path: Path, kid: str) -> rsa.RSAPrivateKey:
    """A new RSA key, written as the private JWKS the authorization server signs with."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    path.write_text(json.dumps({"keys": [{**jwk, "kid": kid, "alg": "RS256", "use": "sig"}]}))
    return key


@dataclass
class Stack:
    services: procs.Services
    auth: procs.ServiceProcess
    mcp: procs.ServiceProcess
    db: Path
    key: rsa.RSAPrivateKey
    kid: str

    def tokens_issued(self) -> int:
        return self.auth.output().count('"event":"token_issued"')

    def tokens_refused(self) -> int:
        return self.auth.output().count('"event":"token_refused"')

    def mint(self, key: rsa.RSAPrivateKey | None = None, kid: str | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {
            "iss": self.auth.url,
            "sub": CLIENT.client_id,
            "client_id": CLIENT.client_id,
            "aud": self.mcp.url,
            "scope": CLIENT.scope,
            "iat": now,
            "exp": now + 300,
            **claims,
        }
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid})

    def runtime(self, secret: str = CLIENT.client_secret, url: str | None = None, **oauth: Any) -> MCPRuntime:
        block = {
            "client_id": "${CRM_OAUTH_CLIENT_ID}",
            "client_secret": "${CRM_OAUTH_CLIENT_SECRET}",
            "token_url": f"{self.auth.url}/token",
            "scope": CLIENT.scope,
            **oauth,
        }
        entry = {
            "name": "crm",
            "url": url or self.mcp.url,
            "type": "http",
            "oauth": {key: value for key, value in block.items() if value is not None},  # None: left out
        }
        env = {"CRM_OAUTH_CLIENT_ID": CLIENT.client_id, "CRM_OAUTH_CLIENT_SECRET": secret}
        return MCPRuntime(parse_mcp_servers([entry], source="endpoints.yml", env=env))


def _start(
    tmp_path: Path,
    services: procs.Services,
    *,
    ttl: int = 600,
    audience: str | None = None,
    port: int | None = None,
    public_url: str | None = None,
) -> Stack:
    """A seeded CRM, its REST API, the authorization server and the CRM MCP server (on `port`,
    reached at `public_url` when a proxy stands in front of it)."""
    db = procs.seed_db(tmp_path / "crm.sqlite3")
    assert db is not None
    rest = services.start(procs.crm_rest(db))
    kid = "key-1"
    key = _private_jwks(tmp_path / "jwks.json", kid)
    port = port or procs.free_port()
    mcp_url = public_url or f"http://{procs.HOST}:{port}/mcp"
    auth = services.start(
        procs.authorization_server(mcp_url, CLIENT, token_ttl=ttl, jwks_file=tmp_path / "jwks.json")
    )
    mcp = services.start(
        procs.crm_mcp(
            rest.url, port=port, issuer=auth.url, scope=CLIENT.scope, audience=audience, resource=public_url
        )
    )
    return Stack(services, auth, mcp, db, key, kid)


@pytest.fixture
def stack(tmp_path: Path, services: procs.Services) -> Stack:
    return _start(tmp_path, services)


@pytest.fixture
def caplog_all(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


async def _note(runtime: MCPRuntime, stack: Stack, text: str) -> dict[str, Any]:
    contact = crm_db.contact_id(stack.db, DANA)
    result = await runtime.invoke("crm", "add_timeline_note", {"contact_id": contact, "text": text})
    assert result.data.get("ok") is True, result
    return dict(result.data)


@pytest.fixture
async def closing() -> AsyncIterator[list[MCPRuntime]]:
    runtimes: list[MCPRuntime] = []
    yield runtimes
    for runtime in runtimes:
        await runtime.aclose()


def _provider(runtime: MCPRuntime) -> ClientCredentials:
    return runtime._auth["crm"]


async def test_a_note_is_written_with_a_token_and_stored_as_its_client(
    stack: Stack, closing: list[MCPRuntime], caplog_all: pytest.LogCaptureFixture
) -> None:
    # audience: sent as Rasa Pro sends it (Auth0 reads it); oidc-provider goes by the resource indicator.
    runtime = stack.runtime(audience=stack.mcp.url, timeout=5)
    closing.append(runtime)
    note = await _note(runtime, stack, "Called about the VAT rate")
    await _note(runtime, stack, "Sent the corrected invoice")
    await _note(runtime, stack, "Confirmed receipt")
    # One token for three calls (and for the catalogue read): reused, not asked for per call.
    assert stack.tokens_issued() == 1
    assert crm_db.count_notes(stack.db, crm_db.contact_id(stack.db, DANA)) >= 3
    assert f"note {note['note_id']} on contact" in stack.mcp.output()
    assert f"written by client {CLIENT.client_id!r}" in stack.mcp.output()
    # Client credentials: the token's subject is the service client, and the CRM stores it so.
    assert note["author"] == CLIENT.client_id
    assert crm_db.note_author(stack.db, note["note_id"]) == CLIENT.client_id
    token = _provider(runtime).context.current_tokens
    assert token is not None
    for where, text in {
        "bridge log": caplog_all.text,
        "CRM MCP log": stack.mcp.output(),
        "authorization server log": stack.auth.output(),
    }.items():
        assert token.access_token not in text, f"the access token is in the {where}"
        assert CLIENT.client_secret not in text, f"the client secret is in the {where}"
    assert CLIENT.client_secret not in repr(runtime.servers["crm"])


async def test_without_token_url_the_token_endpoint_is_discovered_and_an_issuer_pins_it(
    stack: Stack, closing: list[MCPRuntime]
) -> None:
    """The MCP client-credentials extension: no token_url, so the token endpoint comes from the
    server's 401 (its protected-resource metadata) and the authorization server's metadata."""
    before = crm_db.count_notes(stack.db)
    for issuer in (None, stack.auth.url):
        runtime = stack.runtime(token_url=None, issuer=issuer)
        closing.append(runtime)
        note = await _note(runtime, stack, f"Called about the VAT rate (issuer {issuer})")
        assert crm_db.note_author(stack.db, note["note_id"]) == CLIENT.client_id
    assert stack.tokens_issued() == 2
    assert crm_db.count_notes(stack.db) == before + 2

    # Pinned to another authorization server: the server's metadata names this one, so the secret
    # goes nowhere (no token request reaches the authorization server) and nothing is written.
    elsewhere = f"http://{procs.HOST}:{procs.free_port()}"
    runtime = stack.runtime(token_url=None, issuer=elsewhere)
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA)
    with pytest.raises(NotAuthorisedError) as refused:
        await runtime.invoke("crm", "add_timeline_note", {"contact_id": contact, "text": "never"})
    assert refused.value.may_have_run is False
    assert f"!= {elsewhere}" in str(refused.value), str(refused.value)
    assert (stack.tokens_issued(), stack.tokens_refused()) == (2, 0)
    assert crm_db.count_notes(stack.db) == before + 2


async def test_a_wrong_client_secret_is_refused_and_writes_nothing(
    stack: Stack, closing: list[MCPRuntime]
) -> None:
    before = crm_db.count_notes(stack.db)
    runtime = stack.runtime(secret="not-the-secret")
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA)
    with pytest.raises(NotAuthorisedError) as refused:
        await runtime.invoke("crm", "add_timeline_note", {"contact_id": contact, "text": "never"})
    assert refused.value.may_have_run is False
    assert "refused the bridge" in str(refused.value)
    assert "invalid_client" in str(refused.value)
    assert "not-the-secret" not in str(refused.value)
    assert stack.tokens_refused() >= 1 and stack.tokens_issued() == 0
    assert crm_db.count_notes(stack.db) == before


async def test_the_token_is_renewed_after_it_expires(
    tmp_path: Path, services: procs.Services, closing: list[MCPRuntime]
) -> None:
    stack = _start(tmp_path, services, ttl=3)
    runtime = stack.runtime()
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA)
    before = crm_db.count_notes(stack.db, contact)
    await _note(runtime, stack, "first")
    await _note(runtime, stack, "second")
    assert stack.tokens_issued() == 1
    await asyncio.sleep(3.0)
    await _note(runtime, stack, "third, with a new token")
    assert stack.tokens_issued() == 2
    await _note(runtime, stack, "fourth, with the same new token")
    assert stack.tokens_issued() == 2
    assert crm_db.count_notes(stack.db, contact) == before + 4


async def test_a_token_refused_mid_session_costs_one_renewal_and_one_retry(
    stack: Stack, closing: list[MCPRuntime], tmp_path: Path
) -> None:
    runtime = stack.runtime()
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA)
    await _note(runtime, stack, "before the key was retired")
    assert stack.tokens_issued() == 1
    # Key rotation: the bridge holds a token signed with a key the authorization server no longer
    # publishes. The bridge thinks it valid; the CRM server refuses it (401) before anything runs.
    retired = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tokens = _provider(runtime).context.current_tokens
    assert tokens is not None
    tokens.access_token = stack.mint(key=retired, kid="retired-key")
    before = crm_db.count_notes(stack.db, contact)
    await _note(runtime, stack, "after the key was retired")
    assert stack.tokens_issued() == 2  # exactly one renewal
    assert crm_db.count_notes(stack.db, contact) == before + 1  # written once
    assert stack.mcp.output().count("access token refused") == 1
    assert runtime.sessions_opened == 1  # the retry was the SDK's, on the same session


async def test_calls_refused_together_share_one_renewal(stack: Stack, closing: list[MCPRuntime]) -> None:
    runtime = stack.runtime()
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA)
    await _note(runtime, stack, "before the key was retired")
    retired = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tokens = _provider(runtime).context.current_tokens
    assert tokens is not None
    tokens.access_token = stack.mint(key=retired, kid="retired-key")
    before = crm_db.count_notes(stack.db, contact)
    await asyncio.gather(*(_note(runtime, stack, f"refused together, then written: {n}") for n in range(4)))
    assert stack.tokens_issued() == 2  # one renewal for all four, not one each
    assert crm_db.count_notes(stack.db, contact) == before + 4  # each written once
    assert runtime.sessions_opened == 1


async def test_calls_to_one_server_run_side_by_side(
    tmp_path: Path, services: procs.Services, closing: list[MCPRuntime]
) -> None:
    # The SDK's flow holds a lock from sending a request until its answer; the bridge sends with a
    # valid token outside it. A slow link (a proxy holding each answer) shows whether calls overlap.
    port = procs.free_port()
    with TcpProxy(port) as proxy:
        stack = _start(tmp_path, services, port=port, public_url=proxy.url("/mcp"))
        runtime = stack.runtime(url=proxy.url("/mcp"))
        closing.append(runtime)
        lookup = {"email": DANA}
        await runtime.invoke("crm", "find_contact_by_email", lookup)  # token, session, catalogue
        proxy.delay = 0.5
        started = time.perf_counter()
        results = await asyncio.gather(
            *(runtime.invoke("crm", "find_contact_by_email", lookup) for _ in range(8))
        )
        elapsed = time.perf_counter() - started
        proxy.delay = 0.0
    assert all(result.ok for result in results)
    assert elapsed < 2.0, f"8 calls took {elapsed:.1f} s: one at a time (4 s or more), not side by side"
    assert stack.tokens_issued() == 1


async def test_a_call_refused_twice_is_not_authorised_and_never_may_have_run(
    tmp_path: Path, services: procs.Services, closing: list[MCPRuntime]
) -> None:
    stack = _start(tmp_path, services)
    runtime = stack.runtime()
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA)
    await _note(runtime, stack, "while the server accepts the tokens")
    # The CRM server comes back on the same port expecting another audience: every token this
    # authorization server issues is refused from now on, the renewed one too.
    stack.mcp.stop()
    port = int(stack.mcp.url.rsplit(":", 1)[1].split("/")[0])
    rest_url = stack.mcp.env["CRM_URL"]
    stack.mcp = services.start(
        procs.crm_mcp(rest_url, port=port, issuer=stack.auth.url, scope=CLIENT.scope, audience="urn:another")
    )
    before, issued = crm_db.count_notes(stack.db, contact), stack.tokens_issued()
    with pytest.raises(ToolCallError) as refused:
        await runtime.invoke("crm", "add_timeline_note", {"contact_id": contact, "text": "never written"})
    assert isinstance(refused.value, NotAuthorisedError), refused.value
    assert refused.value.may_have_run is False
    assert "HTTP 401" in str(refused.value)
    assert stack.tokens_issued() == issued + 1  # one renewal, not one per attempt
    assert crm_db.count_notes(stack.db, contact) == before


def _post(url: str, token: str | None) -> int:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(_INIT).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_crm_server_refuses_forged_tokens(stack: Stack) -> None:
    url = stack.mcp.url
    now = int(time.time())
    assert _post(url, stack.mint()) == 200  # the key, issuer, audience and scope it expects
    assert _post(url, None) == 401
    assert _post(url, stack.mint(exp=now - 60, iat=now - 400)) == 401, "expired"
    assert _post(url, stack.mint(aud="http://127.0.0.1:1/mcp")) == 401, "wrong audience"
    assert _post(url, stack.mint(iss="http://127.0.0.1:1")) == 401, "wrong issuer"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert _post(url, stack.mint(key=other)) == 401, "signed with a key the issuer does not publish"
    unsigned = jwt.encode(
        jwt.decode(stack.mint(), options={"verify_signature": False}), None, algorithm="none"
    )
    assert _post(url, unsigned) == 401, "unsigned"
    assert _post(url, stack.mint(scope="crm.read")) == 403, "wrong scope"
    metadata = json.load(
        urllib.request.urlopen(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
    )
    assert metadata["resource"] == url
    assert metadata["authorization_servers"] == [stack.auth.url]
    assert metadata["scopes_supported"] == [CLIENT.scope]


def test_the_action_server_confirms_and_writes_with_oauth_and_leaks_no_token(
    stack: Stack, services: procs.Services, tmp_path: Path
) -> None:
    """The example bot's action server, configured as `make up` configures it: a confirmed note is
    written with a token from the authorization server, and no token (any JWT) or secret is in the
    action server's log, the audit trail or the events it returns to the tracker."""
    endpoints = procs.write_endpoints(
        tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook", mcp_oauth=True
    )
    audit = tmp_path / "audit.jsonl"
    actions = services.start(
        procs.action_server(
            endpoints=endpoints,
            crm_url=stack.mcp.env["CRM_URL"],
            mcp_url=stack.mcp.url,
            mcp_token=None,
            audit_log=audit,
            extra_env={"ACTION_SERVER_TOKEN": SHARED, **procs.oauth_env(CLIENT, stack.auth.url)},
        )
    )
    webhook = actions.url + "?token=" + SHARED
    note = f"OAuth end to end {time.time()}"
    tracker = FakeTracker(f"oauth-{time.time()}", contact_email=DANA, note_text=note)
    tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
    status, asked, _ = call_action(webhook, "action_log_interaction", tracker)
    assert status == 200 and said(asked) == ["utter_confirm_note"], asked
    tracker.apply("action_log_interaction", asked)
    tracker.user("yes", "affirm", 1.0)
    status, confirmed, _ = call_action(webhook, "action_confirm_tool", tracker)
    assert status == 200 and said(confirmed) == ["utter_note_saved"], confirmed
    assert notes_for(stack.db, DANA).count(note) == 1
    assert f"written by client {CLIENT.client_id!r}" in stack.mcp.output()
    assert stack.tokens_issued() == 1
    assert "add_timeline_note" in audit.read_text()
    for where, text in {
        "action server log": actions.output(),
        "audit trail": audit.read_text(),
        "tracker events": json.dumps([asked, confirmed]),
    }.items():
        assert "eyJ" not in text, f"a JWT is in the {where}"  # every JWT starts with '{"' in base64url
        assert CLIENT.client_secret not in text, f"the client secret is in the {where}"
