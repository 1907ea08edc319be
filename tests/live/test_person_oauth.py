"""Acting as the person, against a real authorization server (oidc-provider, its development login
page) and the real CRM MCP server as a protected resource: the sign-in link (a start link good for
one browser, then PKCE S256, the RFC 8707 resource, its domain), the callback refused in a browser
that did not open the link, the account shown and stored only on "Use this account" (encrypted),
"Not me" storing nothing, the note written as that
person (the CRM logs the token's subject), another person or nobody never using those tokens, a
forged, expired or replayed state refused, refresh before expiry, a failed refresh asking to sign in
again, disconnect removing (and revoking) the tokens, and no token in any log.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
import pytest

from devstack import engines
from devstack.services import TEST_CHANNEL_KEY
from mcp_bridge.auth.person import (
    CALLBACK_PATH,
    MAX_CODE_TRIES,
    Acting,
    PersonOAuth,
    SignInError,
    SignInLink,
    SignInRequiredError,
)
from mcp_bridge.auth.token_store import Keys, TokenStore, token_keys
from mcp_bridge.channels.proof import ChannelKeys
from mcp_bridge.config.servers import parse_mcp_servers
from mcp_bridge.errors import ConfigError, NotAuthorisedError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from tests.support import crm_db, procs
from tests.support.bots import mcp_bridge
from tests.support.conversation import notes_for
from tests.support.rasa_calls import FakeTracker, call_action, said

SERVICE = procs.OAuthClient("crm-bridge", "client-secret-for-tests")
DANA_EMAIL = "dana@example.com"
DANA, LEE = "socketio:dana", "socketio:lee"  # as the chat channel names them
KEY = "k7Qe9vX2mLp4RzT8wYb1NcH6jUa3FdG5sKo0EiWq"


def vouch(tracker: FakeTracker, user: str, key: str = TEST_CHANNEL_KEY) -> None:
    """What the channel that authenticated ``user`` adds to their latest message: who sent it, signed
    with the channel key (by default the one every test action server has; mcp_bridge.channels.proof)."""
    text = str(tracker.latest_message["text"])
    keys = ChannelKeys.parse(key)
    tracker.latest_message["metadata"] = keys.vouch({}, conversation=tracker.sender_id, user=user, text=text)


@dataclass
class Stack:
    auth: procs.ServiceProcess
    mcp: procs.ServiceProcess
    db: Path
    person: procs.PersonClient
    tokens_file: Path

    def runtime(self, clock: Any = time.time, issuer: str | None = None) -> MCPRuntime:
        entry = {
            "name": "crm",
            "url": self.mcp.url,
            "type": "http",
            "oauth": {
                "grant": "authorization_code",
                "client_id": self.person.client_id,
                "client_secret": "${CRM_PERSON_SECRET}",
                "scope": SERVICE.scope,
                "redirect_uri": self.person.redirect_uri,
                **({"issuer": issuer} if issuer else {}),
            },
        }
        servers = parse_mcp_servers(
            [entry], "endpoints.yml", env={"CRM_PERSON_SECRET": self.person.client_secret}
        )
        store = TokenStore.open(str(self.tokens_file), Keys.from_secret(KEY.encode()))
        return MCPRuntime(servers, person_oauth=PersonOAuth(servers, store, clock=clock))


def _start(tmp_path: Path, services: procs.Services, ttl: int = 600, named: str | None = None) -> Stack:
    """The stack; ``named``: the authorization server the CRM's MCP server names in its metadata
    (by default the real one)."""
    db = procs.seed_db(tmp_path / "crm.sqlite3")
    assert db is not None
    rest = services.start(procs.crm_rest(db))
    mcp_port = procs.free_port()
    mcp_url = f"http://{procs.HOST}:{mcp_port}/mcp"
    # The callback is not served here: the test reads the code off the redirect, as a browser would
    # carry it to the action server (tests of the action server's route follow it there).
    person = procs.PersonClient(
        "crm-bridge-person", "person-client-secret-for-tests", f"http://{procs.HOST}:1{CALLBACK_PATH}"
    )
    auth = services.start(procs.authorization_server(mcp_url, SERVICE, person=person, token_ttl=ttl))
    mcp = services.start(
        procs.crm_mcp(rest.url, port=mcp_port, issuer=named or auth.url, scope=SERVICE.scope)
    )
    return Stack(auth, mcp, db, person, tmp_path / "tokens.sqlite3")


@pytest.fixture
def stack(tmp_path: Path, services: procs.Services) -> Stack:
    return _start(tmp_path, services)


@pytest.fixture
async def closing() -> AsyncIterator[list[MCPRuntime]]:
    runtimes: list[MCPRuntime] = []
    yield runtimes
    for runtime in runtimes:
        await runtime.aclose()


def origin_of(url: str) -> dict[str, str]:
    """The Origin header a browser sends with a form posted from a page at ``url``."""
    parts = urlparse(url)
    return {"Origin": f"{parts.scheme}://{parts.netloc}"}


def code_in(texts: list[str]) -> str:
    """The code the chat showed beside a sign-in link (utter_mcp_sign_in_code)."""
    found = re.search(r"code: ([A-Z2-9]{3}-[A-Z2-9]{3})", "\n".join(texts))
    assert found is not None, texts
    return found.group(1)


async def log_in(
    link: str,
    account: str,
    redirect_uri: str,
    browser: httpx2.AsyncClient | None = None,
    code: str | None = None,
) -> dict[str, str]:
    """What a person does in the browser: open the link (the chat's link is the action server's page,
    where they type the ``code`` the chat showed), sign in on oidc-provider's login page; the query of
    the redirect back to ``redirect_uri`` (code, state, iss). ``browser`` keeps its cookies (one
    browser)."""
    if browser is None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as own:
            return await log_in(link, account, redirect_uri, own, code)
    url = link
    for _ in range(12):
        query = {key: values[0] for key, values in parse_qs(urlparse(url).query).items()}
        if "start" in query:
            shown = await browser.get(url)
            assert shown.status_code == 200 and "name=start" in shown.text, shown.text[-800:]
            assert code is not None, "the chat's link asks for the code the chat showed"
            # Posted where the page is, from the origin browsers reach the action server at.
            posted = await browser.post(
                url.split("?", 1)[0],
                data={"start": query["start"], "code": code},
                headers=origin_of(redirect_uri),
            )
            assert posted.status_code == 303, posted.text[-800:]
            url = urljoin(url, posted.headers["location"])
            continue
        if url.startswith(redirect_uri):
            return query
        page = await browser.get(url)
        if page.is_redirect:
            url = urljoin(url, page.headers["location"])
            continue
        form = re.search(r'<form[^>]*action="([^"]+)"', page.text)
        assert page.status_code == 200 and form and 'name="login"' in page.text, page.text[-1500:]
        posted = await browser.post(
            urljoin(url, form.group(1)), data={"prompt": "login", "login": account, "password": "any"}
        )
        assert posted.is_redirect, posted.text[:500]
        url = urljoin(url, posted.headers["location"])
    raise AssertionError("the sign-in never came back to the redirect URI")


async def sign_in_in_browser(
    link: str,
    account: str,
    redirect_uri: str,
    choice: str = "use",
    browser: httpx2.AsyncClient | None = None,
    *,
    code: str,
) -> tuple[httpx2.Response, httpx2.Response, dict[str, str]]:
    """The whole sign-in in one browser, against the action server's route: the chat's link and the
    code the chat showed, the login, the callback's "which account" page, then the person's choice.
    The callback page, the page after the choice, and the callback's query."""
    if browser is None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=60) as own:
            return await sign_in_in_browser(link, account, redirect_uri, choice, own, code=code)
    answer = await log_in(link, account, redirect_uri, browser, code)
    shown = await browser.get(f"{redirect_uri}?{urllib.parse.urlencode(answer)}")
    ticket = re.search(r'name=ticket value="([^"]+)"', shown.text)
    if ticket is None:
        return shown, shown, answer
    chosen = await browser.post(
        redirect_uri,
        data={"ticket": html.unescape(ticket.group(1)), "choice": choice},
        headers=origin_of(redirect_uri),
    )
    return shown, chosen, answer


async def begin(person: PersonOAuth, link: SignInLink) -> tuple[str, str]:
    """What the start route does when a browser sends the chat's code from the link's page: the
    authorization URL, and the browser secret its cookie would hold."""
    ticket = parse_qs(urlparse(link.url).query)["start"][0]
    browser = secrets.token_urlsafe(32)
    return (await person.start(ticket, browser, link.code)).url, browser


async def _note(runtime: MCPRuntime, stack: Stack, text: str, person: str | None = DANA) -> dict[str, Any]:
    contact = crm_db.contact_id(stack.db, DANA_EMAIL)
    who = Acting("conversation-1", person, "log_interaction")
    result = await runtime.invoke(
        "crm", "add_timeline_note", {"contact_id": contact, "text": text}, acting=who
    )
    assert result.data.get("ok") is True, result
    return dict(result.data)


async def _signed_in(
    runtime: MCPRuntime, stack: Stack, person: str = DANA, account: str = "dana-agent"
) -> None:
    with pytest.raises(SignInRequiredError) as needed:
        await _note(runtime, stack, "never: not signed in", person)
    assert needed.value.link is not None and runtime.person_oauth is not None
    url, browser = await begin(runtime.person_oauth, needed.value.link)
    answer = await log_in(url, account, stack.person.redirect_uri)
    linked = await runtime.person_oauth.complete(
        answer["state"], answer["code"], answer.get("iss"), browser=browser
    )
    assert linked.account == account
    await runtime.person_oauth.confirm(linked.ticket, browser, use=True)


async def test_the_link_then_the_callback_store_the_token_encrypted_and_the_note_is_the_persons(
    stack: Stack, closing: list[MCPRuntime], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    runtime = stack.runtime()
    closing.append(runtime)
    contact = crm_db.contact_id(stack.db, DANA_EMAIL)
    before = crm_db.count_notes(stack.db, contact)
    with pytest.raises(SignInRequiredError) as needed:
        await _note(runtime, stack, "never: not signed in")
    assert needed.value.may_have_run is False
    link = needed.value.link
    assert link is not None and link.server == "crm"
    assert link.domain == urlparse(stack.auth.url).netloc  # shown plainly: 127.0.0.1:<port>
    # The chat's link is the action server's route with a start ticket; opening it is good once.
    assert link.url.startswith(f"{stack.person.redirect_uri}?start=")
    assert runtime.person_oauth is not None
    url, browser = await begin(runtime.person_oauth, link)
    with pytest.raises(SignInError, match="used already"):
        await begin(runtime.person_oauth, link)  # a second browser (or a second opening)
    query = parse_qs(urlparse(url).query)
    assert url.startswith(f"{stack.auth.url}/auth?")  # discovered: PRM, then the AS metadata
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["resource"] == [stack.mcp.url]  # RFC 8707, from the protected-resource metadata
    assert query["client_id"] == [stack.person.client_id] and query["scope"] == [SERVICE.scope]
    for shown in (link.url, url):
        assert "code_verifier" not in shown and stack.person.client_secret not in shown
        assert DANA not in shown and "conversation-1" not in shown  # sealed, not readable
        assert browser not in shown  # only its digest is in the state, the secret stays in the cookie
    assert crm_db.count_notes(stack.db, contact) == before  # nothing was sent

    answer = await log_in(url, "dana-agent", stack.person.redirect_uri)
    browser_log = caplog.text  # the test's own HTTP client, standing in for the browser, logs the code
    assert answer["code"] in browser_log  # (so the check below would see it if the bridge logged it)
    caplog.clear()
    # In a browser without the cookie, or with another one, the callback takes nothing.
    for other in (None, secrets.token_urlsafe(32)):
        with pytest.raises(SignInError, match="started in another browser"):
            await runtime.person_oauth.complete(
                answer["state"], answer["code"], answer.get("iss"), browser=other
            )
    linked = await runtime.person_oauth.complete(
        answer["state"], answer["code"], answer.get("iss"), browser=browser
    )
    assert (linked.account, linked.domain) == ("dana-agent", link.domain)  # shown before it is used
    assert await runtime.person_oauth.store.get(DANA, "crm") is None  # not the person's until confirmed
    with pytest.raises(SignInError, match="another browser"):
        await runtime.person_oauth.confirm(linked.ticket, secrets.token_urlsafe(32), use=True)
    signed = await runtime.person_oauth.confirm(linked.ticket, browser, use=True)
    assert signed is not None
    assert (signed.conversation, signed.person, signed.server, signed.skill) == (
        "conversation-1",
        DANA,
        "crm",
        "log_interaction",
    )
    with pytest.raises(SignInError, match="answered already"):
        await runtime.person_oauth.confirm(linked.ticket, browser, use=True)
    record = await runtime.person_oauth.store.get(DANA, "crm")
    assert record is not None
    access, refresh = record["token"]["access_token"], record["token"]["refresh_token"]
    raw = stack.tokens_file.read_bytes()
    for secret in (access, refresh, DANA):
        assert secret.encode() not in raw, "a token (or the person's name) is readable in the store's file"

    note = await _note(runtime, stack, "Called about the VAT rate, as Dana")
    assert crm_db.count_notes(stack.db, contact) == before + 1
    assert crm_db.note_author(stack.db, note["note_id"]) == "dana-agent"  # the person, not the client
    assert (
        f"note {note['note_id']} on contact {contact} written by client "
        f"'{stack.person.client_id}' (subject 'dana-agent')"
    ) in stack.mcp.output()

    # Lee has no token of his own, and Dana's is never his; nobody named gets no link at all.
    with pytest.raises(SignInRequiredError) as lee:
        await _note(runtime, stack, "never: Lee is not signed in", LEE)
    assert lee.value.link is not None
    with pytest.raises(SignInRequiredError) as nobody:
        await _note(runtime, stack, "never: nobody to act as", None)
    assert nobody.value.link is None
    assert crm_db.count_notes(stack.db, contact) == before + 1

    # The same answer again (a replayed callback) stores nothing and says why.
    with pytest.raises(SignInError, match="used already"):
        await runtime.person_oauth.complete(
            answer["state"], answer["code"], answer.get("iss"), browser=browser
        )
    for where, text in {
        "bridge log": caplog.text,
        "CRM MCP log": stack.mcp.output(),
        "authorization server log": stack.auth.output(),
    }.items():
        for secret in (access, refresh, answer["code"]):
            assert secret not in text, f"a token or code is in the {where}"


class Recorder(ThreadingHTTPServer):
    """An authorization server a hostile MCP server could name: it records every request it gets and
    answers with its OpenID configuration (what the CRM's server reads at its start) or 404."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                recorder.requests.append(f"{self.command} {self.path}")
                if self.path != "/.well-known/openid-configuration":
                    self.send_error(404)
                    return
                body = json.dumps({"issuer": recorder.url, "jwks_uri": f"{recorder.url}/jwks"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _record

            def log_message(self, format: str, *args: Any) -> None:
                return None

        super().__init__((procs.HOST, 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{procs.HOST}:{self.server_address[1]}"


async def test_a_pinned_issuer_refuses_another_authorization_server_and_sends_it_nothing(
    tmp_path: Path, services: procs.Services, closing: list[MCPRuntime]
) -> None:
    rogue = Recorder()
    try:
        stack = _start(tmp_path, services, named=rogue.url)
        rogue.requests.clear()  # the CRM's server read its keys' address at its start; the bridge starts now
        runtime = stack.runtime(issuer=stack.auth.url)
        closing.append(runtime)
        contact = crm_db.contact_id(stack.db, DANA_EMAIL)
        before = crm_db.count_notes(stack.db, contact)
        with pytest.raises(NotAuthorisedError) as refused:
            await _note(runtime, stack, "never: the server names another authorization server")
        assert not isinstance(refused.value, SignInRequiredError)  # no link to sign in anywhere
        assert refused.value.may_have_run is False
        assert str(refused.value) == (
            f"MCP server 'crm' names the authorization server {rogue.url}, but oauth.issuer allows only "
            f"{stack.auth.url}: nobody is sent to sign in there, and nothing was sent"
        )
        assert rogue.requests == []  # not even a metadata request
        assert crm_db.count_notes(stack.db, contact) == before
    finally:
        rogue.shutdown()
        rogue.server_close()


async def test_a_pinned_issuer_that_the_server_names_signs_in_there(
    stack: Stack, closing: list[MCPRuntime]
) -> None:
    runtime = stack.runtime(issuer=stack.auth.url)
    closing.append(runtime)
    await _signed_in(runtime, stack)
    note = await _note(runtime, stack, "Called about the VAT rate, signed in at the pinned issuer")
    assert crm_db.note_author(stack.db, note["note_id"]) == "dana-agent"


async def test_a_forged_or_expired_state_is_refused(stack: Stack, closing: list[MCPRuntime]) -> None:
    now = [time.time()]
    runtime = stack.runtime(clock=lambda: now[0])
    closing.append(runtime)
    person = runtime.person_oauth
    assert person is not None
    with pytest.raises(SignInRequiredError) as needed:
        await _note(runtime, stack, "never")
    assert needed.value.link is not None
    url, browser = await begin(person, needed.value.link)
    answer = await log_in(url, "dana-agent", stack.person.redirect_uri)
    state = answer["state"]
    forged = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
    with pytest.raises(SignInError, match="not valid"):
        await person.complete(forged, answer["code"], answer.get("iss"), browser=browser)
    other_key = TokenStore.open(
        str(stack.tokens_file), Keys.from_secret(b"another key, 32 bytes or longer!!!!")
    )
    sealed_elsewhere = other_key.keys.states.encrypt(
        b'{"t":"state","c":"x","p":"socketio:dana","s":"crm","k":null,"n":"x","b":"x"}'
    )
    with pytest.raises(SignInError, match="not valid"):
        await person.complete(sealed_elsewhere.decode(), answer["code"], answer.get("iss"), browser=browser)
    start_ticket = parse_qs(urlparse(needed.value.link.url).query)["start"][0]
    with pytest.raises(SignInError, match="not valid"):  # a start ticket is no state, nor the reverse
        await person.complete(start_ticket, answer["code"], answer.get("iss"), browser=browser)
    with pytest.raises(SignInError, match="not valid"):
        await person.start(state, browser, needed.value.link.code)
    now[0] += 11 * 60  # the link was good for ten minutes
    with pytest.raises(SignInError, match="expired"):
        await person.complete(state, answer["code"], answer.get("iss"), browser=browser)
    assert await person.store.get(DANA, "crm") is None


async def test_a_link_takes_nothing_when_opened_and_only_the_chats_code_starts_it(
    stack: Stack, closing: list[MCPRuntime]
) -> None:
    """Opening the link (its page) takes nothing, however often; the page names whose chat it serves.
    A wrong code is refused and leaves the link to its person, up to MAX_CODE_TRIES; the code as typed
    (lower case, a space) starts the sign-in, once. Five wrong codes spend a link for good."""
    runtime = stack.runtime()
    closing.append(runtime)
    person = runtime.person_oauth
    assert person is not None
    links = []
    for _ in range(2):
        with pytest.raises(SignInRequiredError) as needed:
            await _note(runtime, stack, "never")
        assert needed.value.link is not None
        links.append(needed.value.link)
    link, other = links
    assert re.fullmatch(r"[A-Z2-9]{3}-[A-Z2-9]{3}", link.code) and link.code not in link.url
    ticket = parse_qs(urlparse(link.url).query)["start"][0]
    for _ in range(3):
        invited = await person.invitation(ticket)
    assert (invited.person, invited.server, invited.skill) == (DANA, "crm", "log_interaction")
    assert invited.domain == link.domain and abs(invited.asked_at - time.time()) < 60
    wrong = "ABC-DEF" if link.code != "ABC-DEF" else "DEF-ABC"
    for _ in range(MAX_CODE_TRIES - 1):
        with pytest.raises(SignInError, match="not the code the chat showed"):
            await person.start(ticket, secrets.token_urlsafe(32), wrong)
    typed = link.code.lower().replace("-", " ")
    started = await person.start(ticket, secrets.token_urlsafe(32), typed)
    assert started.url.startswith(f"{stack.auth.url}/auth?")
    with pytest.raises(SignInError, match="used already"):
        await person.start(ticket, secrets.token_urlsafe(32), link.code)

    spent = parse_qs(urlparse(other.url).query)["start"][0]
    for _ in range(MAX_CODE_TRIES - 1):
        with pytest.raises(SignInError, match="not the code"):
            await person.start(spent, secrets.token_urlsafe(32), wrong)
    with pytest.raises(SignInError, match="too many wrong codes"):
        await person.start(spent, secrets.token_urlsafe(32), wrong)
    with pytest.raises(SignInError, match="used already"):
        await person.start(spent, secrets.token_urlsafe(32), other.code)


async def test_not_me_stores_nothing_and_undoes_the_sign_in(stack: Stack, closing: list[MCPRuntime]) -> None:
    runtime = stack.runtime()
    closing.append(runtime)
    person = runtime.person_oauth
    assert person is not None
    with pytest.raises(SignInRequiredError) as needed:
        await _note(runtime, stack, "never")
    assert needed.value.link is not None
    url, browser = await begin(person, needed.value.link)
    answer = await log_in(url, "lee-agent", stack.person.redirect_uri)
    linked = await person.complete(answer["state"], answer["code"], answer.get("iss"), browser=browser)
    assert linked.account == "lee-agent"
    assert await person.confirm(linked.ticket, browser, use=False) is None
    assert await person.store.get(DANA, "crm") is None
    assert '"event":"grant_revoked"' in stack.auth.output()
    with pytest.raises(SignInError, match="answered already"):
        await person.confirm(linked.ticket, browser, use=True)  # and it cannot be taken back
    assert await person.store.get(DANA, "crm") is None
    with pytest.raises(SignInRequiredError):
        await _note(runtime, stack, "never: Dana said it was not her account")


async def test_the_token_is_refreshed_and_a_failed_refresh_asks_to_sign_in_again(
    tmp_path: Path, services: procs.Services, closing: list[MCPRuntime]
) -> None:
    stack = _start(tmp_path, services, ttl=4)
    runtime = stack.runtime()
    closing.append(runtime)
    await _signed_in(runtime, stack)
    assert runtime.person_oauth is not None
    store = runtime.person_oauth.store
    await _note(runtime, stack, "with the first token")
    first = await store.get(DANA, "crm")
    assert first is not None
    await asyncio.sleep(4.5)  # the access token has expired
    await _note(runtime, stack, "with a refreshed token")
    second = await store.get(DANA, "crm")
    assert second is not None
    assert second["token"]["access_token"] != first["token"]["access_token"]
    assert '"grant_type":"refresh_token"' in stack.auth.output()
    assert "(subject 'dana-agent')" in stack.mcp.output().rsplit("written by", 1)[1]

    # A refresh token the authorization server does not know: the person signs in again; nothing
    # goes out under anyone else's identity, and the unusable token is gone.
    second["token"]["refresh_token"] = "not-a-refresh-token"
    second["obtained_at"] = 0
    await store.put(DANA, "crm", second)
    contact = crm_db.contact_id(stack.db, DANA_EMAIL)
    before = crm_db.count_notes(stack.db, contact)
    with pytest.raises(SignInRequiredError) as again:
        await _note(runtime, stack, "never: the refresh failed")
    assert again.value.again is True and again.value.link is not None
    assert await store.get(DANA, "crm") is None
    assert crm_db.count_notes(stack.db, contact) == before


async def test_disconnect_removes_and_revokes_the_token(stack: Stack, closing: list[MCPRuntime]) -> None:
    runtime = stack.runtime()
    closing.append(runtime)
    await _signed_in(runtime, stack)
    await _signed_in(runtime, stack, LEE, "lee-agent")
    assert runtime.person_oauth is not None
    await _note(runtime, stack, "before disconnecting")
    assert await runtime.person_oauth.disconnect(DANA) == ["crm"]
    assert await runtime.person_oauth.store.get(DANA, "crm") is None
    assert '"event":"grant_revoked"' in stack.auth.output()
    with pytest.raises(SignInRequiredError):
        await _note(runtime, stack, "never: disconnected")
    await _note(runtime, stack, "Lee is still signed in", LEE)  # only Dana's token went
    assert await runtime.person_oauth.disconnect(DANA) == []


def test_a_missing_short_or_placeholder_key_is_refused() -> None:
    for secret, reason in (
        (None, "MCP_TOKEN_KEY is not set"),
        ("short", "is 5 bytes long, shorter than 32"),
        ("change-me-please-change-me-please-0123", "looks like a placeholder"),
    ):
        with pytest.raises(ConfigError, match=reason):
            token_keys(secret)
    assert isinstance(token_keys(KEY), Keys)


async def test_the_store_on_postgresql_is_shared_encrypted_and_takes_a_sign_in_once(tmp_path: Path) -> None:
    """The cluster's store: two replicas (two TokenStore objects) on one PostgreSQL database."""
    if os.geteuid() != 0:
        pytest.skip("only root runs PostgreSQL as another user here")
    server = engines.Postgres(tmp_path / "postgres", secrets.token_urlsafe(16), durable=False)
    with server.service():
        url = server.create_database("mcp_tokens", "bridge", secrets.token_urlsafe(16))
        keys = Keys.from_secret(KEY.encode())
        one, two = TokenStore.open(url, keys), TokenStore.open(url, keys)
        try:
            token = {"token": {"access_token": "eyJ-access-for-the-test", "refresh_token": "rt-for-the-test"}}
            await one.put(DANA, "crm", {**token, "obtained_at": 1.0})
            assert await two.get(DANA, "crm") == {**token, "obtained_at": 1.0}
            assert await two.get(LEE, "crm") is None
            raw = server.sql(["SELECT person, sealed FROM mcp_tokens"], database="mcp_tokens")
            for secret in ("eyJ-access-for-the-test", "rt-for-the-test", DANA):
                assert secret not in raw, "a token (or the person's name) is readable in the database"
            await one.begin_sign_in("nonce-1", "the-verifier", time.time() + 60)
            assert "the-verifier" not in server.sql(
                ["SELECT sealed FROM mcp_sign_ins"], database="mcp_tokens"
            )
            taken = await asyncio.gather(two.take_sign_in("nonce-1"), one.take_sign_in("nonce-1"))
            assert sorted(taken, key=str) == sorted(["the-verifier", None], key=str)  # once, whoever asks
            assert await two.delete(DANA, "crm") is True
            assert await one.get(DANA, "crm") is None
        finally:
            await one.close()
            await two.close()


def test_the_action_server_uses_a_sign_in_stored_elsewhere_and_a_yes_whose_refresh_fails_writes_nothing(
    stack: Stack, services: procs.Services, tmp_path: Path
) -> None:
    """Another process (this test, standing in for another replica) stored the person's token; the
    action server asks with it. The token then lapses and cannot be renewed: the yes writes nothing,
    the person is asked to sign in again, the question is closed and audited as not run."""
    person = "rest:operator"
    runtime = stack.runtime()
    asyncio.run(_signed_in(runtime, stack, person))
    endpoints = procs.write_endpoints(
        tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook", mcp_person=True
    )
    audit = tmp_path / "audit.jsonl"
    actions = services.start(
        procs.action_server(
            endpoints=endpoints,
            crm_url=stack.mcp.env["CRM_URL"],
            mcp_url=stack.mcp.url,
            mcp_token=None,
            audit_log=audit,
            extra_env={
                "CRM_PERSON_CLIENT_ID": stack.person.client_id,
                "CRM_PERSON_CLIENT_SECRET": stack.person.client_secret,
                "ACTION_SERVER_PUBLIC_URL": "http://127.0.0.1:1",
                "MCP_TOKEN_KEY": KEY,
                "MCP_TOKEN_STORE": str(stack.tokens_file),
            },
        )
    )
    note = f"asked with a token stored elsewhere {time.time()}"

    def tracker_of(user: str | None) -> FakeTracker:
        tracker = FakeTracker(f"person-{time.time()}", contact_email=DANA_EMAIL, note_text=note)
        tracker.user(f"log a call with {DANA_EMAIL}: {note}", "log_interaction", 0.97)
        if user is not None:
            vouch(tracker, user)
        else:
            tracker.latest_message["metadata"] = {}  # unsigned, as Rasa's own channels send it
        return tracker

    status, nobody, _ = call_action(actions.url, "action_log_interaction", tracker_of(None))
    # A message no channel vouches for names nobody: nothing is sent (the action server says why).
    assert status == 200 and said(nobody) == ["utter_not_vouched"], nobody
    tracker = tracker_of(person)
    status, asked, _ = call_action(actions.url, "action_log_interaction", tracker)
    assert status == 200 and said(asked) == ["utter_confirm_note"], asked
    tracker.apply("action_log_interaction", asked)

    store = TokenStore.open(str(stack.tokens_file), Keys.from_secret(KEY.encode()))
    record = asyncio.run(store.get(person, "crm"))
    assert record is not None
    record["token"]["refresh_token"], record["obtained_at"] = "not-a-refresh-token", 0
    asyncio.run(store.put(person, "crm", record))
    tracker.user("yes", "affirm", 1.0)
    vouch(tracker, person)
    status, answered, _ = call_action(actions.url, "action_confirm_tool", tracker)
    assert status == 200 and said(answered) == ["utter_mcp_sign_in_again", "utter_mcp_sign_in_code"], answered
    assert {"event": "slot", "name": "pending_confirmation", "value": None} in [
        {key: event.get(key) for key in ("event", "name", "value")} for event in answered["events"]
    ]
    assert notes_for(stack.db, DANA_EMAIL).count(note) == 0
    assert asyncio.run(store.get(person, "crm")) is None
    assert "not run: the person must sign in first" in audit.read_text()
    asyncio.run(runtime.aclose())


def test_tools_and_check_live_say_where_people_sign_in_or_list_with_an_operators_token(
    stack: Stack, tmp_path: Path
) -> None:
    """Before anyone signs in, a server that acts as the person cannot be listed: `mcp-bridge tools`
    and `check --live` say so (the server, that it acts as the person, the authorization server they
    discovered, that tools are listed after a sign-in), or list it with MCP_OPERATOR_TOKEN."""
    endpoints = procs.write_endpoints(
        tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook", mcp_person=True
    )
    env: dict[str, str | None] = {
        "ENDPOINTS": str(endpoints),
        "CRM_MCP_URL": stack.mcp.url,
        "CRM_PERSON_CLIENT_ID": stack.person.client_id,
        "CRM_PERSON_CLIENT_SECRET": stack.person.client_secret,
        "ACTION_SERVER_PUBLIC_URL": "http://127.0.0.1:1",
        "MCP_TOKEN_KEY": KEY,
        "MCP_BRIDGE_DATABASE": str(tmp_path / "check-tokens.sqlite3"),
        "MCP_OPERATOR_TOKEN": None,
    }
    said = mcp_bridge("tools", "crm", cwd=procs.EXAMPLE_BOT, env=env)
    assert said.returncode == 0, said.stderr
    assert said.stdout.splitlines() == [
        f"server: crm ({stack.mcp.url})",
        "auth: oauth acting as the person (authorization code with PKCE; client_id crm-bridge-person, "
        f"scope crm.notes, redirect_uri {stack.person.redirect_uri})",
        f"authorization server: {stack.auth.url} (discovered from the server's protected-resource metadata)",
        "tools: not listed: this server acts as the person in the conversation and answers only with a "
        "person's token, so its tools are listed after someone signs in (the bot shows the link); to list "
        "them now, set MCP_OPERATOR_TOKEN to an access token of yours for this server",
    ]
    checked = mcp_bridge("check", "--live", cwd=procs.EXAMPLE_BOT, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "live: 0 MCP tool(s) checked" in checked.stdout
    assert (
        f"authorization server: {stack.auth.url}" in checked.stdout and "tools: not listed" in checked.stdout
    )

    # The operator signs in once (as anyone does) and lists the tools with that access token.
    runtime = stack.runtime()
    asyncio.run(_signed_in(runtime, stack, "socketio:operator", "lee-agent"))
    assert runtime.person_oauth is not None
    record = asyncio.run(runtime.person_oauth.store.get("socketio:operator", "crm"))
    asyncio.run(runtime.aclose())
    assert record is not None
    token = record["token"]["access_token"]
    env["MCP_OPERATOR_TOKEN"] = token
    listed = mcp_bridge("tools", "crm", cwd=procs.EXAMPLE_BOT, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "listed with the token in MCP_OPERATOR_TOKEN" in listed.stdout
    assert "add_timeline_note" in listed.stdout and "find_contact_by_email" in listed.stdout
    checked = mcp_bridge("check", "--live", cwd=procs.EXAMPLE_BOT, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"live: [1-9]\d* MCP tool\(s\) checked", checked.stdout), checked.stdout
    assert "tools: not listed" not in checked.stdout
    for output in (said, checked, listed):
        assert token not in output.stdout + output.stderr and "Traceback" not in output.stderr


async def test_two_action_servers_on_one_postgresql_store_share_sign_ins_and_tokens(
    stack: Stack, services: procs.Services, tmp_path: Path
) -> None:
    """The cluster's arrangement: replicas share MCP_TOKEN_STORE (PostgreSQL) and MCP_TOKEN_KEY. The
    link shown by one replica is completed at the other's callback; the token one stored, the other
    asks and writes with (as the person); a disconnect on one is a sign-out on both."""
    if os.geteuid() != 0:
        pytest.skip("only root runs PostgreSQL as another user here")
    server = engines.Postgres(tmp_path / "postgres", secrets.token_urlsafe(16), durable=False)
    with server.service():
        url = server.create_database("mcp_tokens", "bridge", secrets.token_urlsafe(16))
        endpoints = procs.write_endpoints(
            tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook", mcp_person=True
        )
        replicas = [
            services.start(
                procs.action_server(
                    endpoints=endpoints,
                    crm_url=stack.mcp.env["CRM_URL"],
                    mcp_url=stack.mcp.url,
                    mcp_token=None,
                    audit_log=tmp_path / f"audit-{n}.jsonl",
                    extra_env={
                        "CRM_PERSON_CLIENT_ID": stack.person.client_id,
                        "CRM_PERSON_CLIENT_SECRET": stack.person.client_secret,
                        "ACTION_SERVER_PUBLIC_URL": "http://127.0.0.1:1",
                        "MCP_TOKEN_KEY": KEY,
                        "MCP_BRIDGE_DATABASE": url,
                    },
                )
            )
            for n in (1, 2)
        ]
        one, two = (replica.url for replica in replicas)
        person, note = "rest:operator", f"written on one replica, signed in on the other {time.time()}"
        tracker = FakeTracker(f"replicas-{time.time()}", contact_email=DANA_EMAIL, note_text=note)

        def ask(webhook: str, action: str, text: str, intent: str) -> dict[str, Any]:
            tracker.user(text, intent, 1.0)
            vouch(tracker, person)
            status, answer, _ = call_action(webhook, action, tracker)
            assert status == 200, answer
            return dict(answer)

        shown = ask(two, "action_log_interaction", f"log a call with {DANA_EMAIL}: {note}", "log_interaction")
        assert said(shown) == ["utter_mcp_sign_in", "utter_mcp_sign_in_code"], shown
        # The link names replica two's address (ACTION_SERVER_PUBLIC_URL is shared); the browser
        # opens it at replica one, signs in, lands on replica two, and confirms at replica one.
        link = shown["responses"][0]["link"]
        callback_one = one.removesuffix("/webhook") + CALLBACK_PATH
        callback_two = two.removesuffix("/webhook") + CALLBACK_PATH
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as browser:
            start = link.replace(stack.person.redirect_uri, callback_one)
            code = shown["responses"][1]["code"]
            answer = await log_in(start, "dana-agent", stack.person.redirect_uri, browser, code)
            choice = await browser.get(f"{callback_two}?{urllib.parse.urlencode(answer)}")
            ticket = re.search(r'name=ticket value="([^"]+)"', choice.text)
            assert choice.status_code == 200 and ticket is not None, choice.text
            page = await browser.post(
                callback_one,
                data={"ticket": html.unescape(ticket.group(1)), "choice": "use"},
                headers=origin_of(stack.person.redirect_uri),
            )
        assert page.status_code == 200 and "Signed in" in page.text, page.text

        asked = ask(two, "action_log_interaction", f"log a call with {DANA_EMAIL}: {note}", "log_interaction")
        assert said(asked) == ["utter_confirm_note"], asked
        tracker.apply("action_log_interaction", asked)
        saved = ask(one, "action_confirm_tool", "yes", "affirm")
        assert said(saved) == ["utter_note_saved"], saved
        assert crm_db.authors_of(stack.db, note) == ["dana-agent"]

        gone = ask(two, "action_mcp_disconnect", "disconnect my CRM", "disconnect_crm")
        assert said(gone) == ["utter_mcp_disconnected"], gone
        again = ask(one, "action_log_interaction", f"log a call with {DANA_EMAIL}: {note}", "log_interaction")
        assert said(again) == ["utter_mcp_sign_in", "utter_mcp_sign_in_code"], again
        assert crm_db.authors_of(stack.db, note) == ["dana-agent"]
