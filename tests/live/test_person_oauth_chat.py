"""Acting as the person, in the chat: the example bot on a real Rasa server (REST channel, which names
the person ``rest:operator``), its action server, the real CRM MCP server and oidc-provider.

The person asks to log a note; the bot says they must sign in first and shows the link with its
domain; the link passes through the action server (a cookie binds the sign-in to that browser);
they sign in on the authorization server's page; the browser lands on the action server's
callback, which shows the account; "Use this account" stores the token and has Rasa go on with the
conversation (trigger_intent): the
question is asked without re-typing, a yes writes the note as that person (the CRM logs the token's
subject), and "disconnect my CRM" removes the token. No token is in the tracker, the audit trail or
any process's output. Whoever holds Rasa's API token and puts the sign-in's ticket, state or confirm
ticket in as the resume, or the real resume a second time (the record issue's case 7), starts nothing.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_bridge.approvals.second_approver import Approvals, Approver
from mcp_bridge.approvals.store import open_store as open_approval_store
from mcp_bridge.auth.person import CALLBACK_PATH
from mcp_bridge.auth.token_store import Keys, TokenStore
from mcp_bridge.contract import RESUME_ACTION, RESUME_ENTITY, RESUME_INTENT
from tests.live.proof.chat import RasaChat
from tests.live.test_person_oauth import KEY, SERVICE, code_in, log_in, origin_of, sign_in_in_browser
from tests.support import procs
from tests.support.conversation import notes_for
from tests.support.crm_db import authors_of
from tests.support.logged_stack import LoggedStack

DANA_EMAIL = "dana@example.com"
PERSON = "rest:operator"  # how the REST channel of credentials.yml names whoever holds its token


@contextmanager
def person_stack(tmp_path: Path, page_port: int | None = None) -> Iterator[dict[str, Any]]:
    """CRM, oidc-provider (with the person client), the CRM MCP server as a protected resource, the
    action server with the crm server acting as the person, and Rasa (letting in a chat page on
    `page_port`, which is then started too)."""
    stack = LoggedStack(tmp_path)
    if page_port is not None:
        stack.allow_pages(page_port)
    try:
        db = procs.seed_db(tmp_path / "crm.sqlite3")
        assert db is not None
        rest = stack.start_logged(procs.crm_rest(db))
        actions_port, mcp_port = procs.free_port(), procs.free_port()
        public = f"http://{procs.HOST}:{actions_port}"
        mcp_url = f"http://{procs.HOST}:{mcp_port}/mcp"
        person = procs.PersonClient(
            "crm-bridge-person", "person-client-secret-for-tests", public + CALLBACK_PATH
        )
        auth = stack.start_logged(procs.authorization_server(mcp_url, SERVICE, person=person))
        mcp = stack.start_logged(procs.crm_mcp(rest.url, port=mcp_port, issuer=auth.url, scope=SERVICE.scope))
        action_token = "action-server-token-for-tests-0123456789"
        endpoints = procs.write_endpoints(
            tmp_path / "endpoints.yml", f"{public}/webhook", action_token, mcp_person=True
        )
        stack.start_rasa_in_background(endpoints)
        audit = tmp_path / "audit.jsonl"
        tokens = tmp_path / "tokens.sqlite3"
        assert stack.rasa is not None
        actions = stack.start_logged(
            procs.action_server(
                endpoints=endpoints,
                crm_url=rest.url,
                mcp_url=mcp_url,
                mcp_token=None,
                audit_log=audit,
                port=actions_port,
                extra_env={
                    "ACTION_SERVER_TOKEN": action_token,
                    "ACTION_SERVER_PUBLIC_URL": public,
                    "CRM_PERSON_CLIENT_ID": person.client_id,
                    "CRM_PERSON_CLIENT_SECRET": person.client_secret,
                    "MCP_TOKEN_KEY": KEY,
                    "MCP_BRIDGE_DATABASE": str(tokens),
                    "RASA_URL": stack.rasa.url,
                    "RASA_AUTH_TOKEN": stack.access.api_token,
                },
            )
        )
        rasa_url = stack.wait_for_rasa()
        page = None
        if page_port is not None:
            page = stack.start_logged(
                procs.chat_page(rasa_url=rasa_url, chat_key=stack.access.chat_key, port=page_port)
            )
        yield {
            "page_url": page.url if page is not None else None,
            "stack": stack,
            "chat": RasaChat(rasa_url, stack.access),
            "rasa_url": rasa_url,
            "db": db,
            "auth": auth,
            "mcp": mcp,
            "actions": actions,
            "audit": audit,
            "tokens": tokens,
            "approvals": tokens,
            "person": person,
        }
    finally:
        stack.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with person_stack(tmp_path_factory.mktemp("person-chat")) as started:
        yield started


def _tracker(live: dict[str, Any], sender: str) -> dict[str, Any]:
    query = urllib.parse.urlencode({"token": live["stack"].access.api_token})
    url = f"{live['rasa_url']}/conversations/{urllib.parse.quote(sender)}/tracker?{query}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        tracker: dict[str, Any] = json.loads(answer.read())
    return tracker


def _bot_responses(tracker: dict[str, Any]) -> list[str]:
    return [
        str((event.get("metadata") or {}).get("utter_action"))
        for event in tracker["events"]
        if event.get("event") == "bot"
    ]


async def test_sign_in_from_the_chat_then_the_question_then_yes_writes_as_the_person(
    live: dict[str, Any],
) -> None:
    chat: RasaChat = live["chat"]
    sender = f"person-{time.time()}"
    note = f"Called about the VAT rate, signed in as Dana {time.time()}"
    said = chat.send(sender, f"log a call with {DANA_EMAIL}: {note}")
    auth_host = urllib.parse.urlparse(live["auth"].url).netloc
    prompt = next((text for text in said if "sign in at" in text), None)
    assert prompt is not None, said
    assert prompt.startswith(f"To write to the CRM as you, sign in at {auth_host} first: ")
    link = re.search(r"(http://\S+)", prompt)
    assert link is not None
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0
    assert "utter_confirm_note" not in _bot_responses(_tracker(live, sender))  # not asked yet

    # The browser: the link, sign in at oidc-provider, back to the action server's callback, which
    # shows the account; "Use this account". No action server token: a browser has none.
    callback = live["person"].redirect_uri
    async with httpx2.AsyncClient(follow_redirects=False, timeout=60) as browser:
        shown, page, answer = await sign_in_in_browser(
            link.group(1), "dana-agent", callback, browser=browser, code=code_in(said)
        )
        assert shown.status_code == 200 and "as <strong id=account>dana-agent</strong>" in shown.text, (
            shown.text
        )
        for header, value in (("cache-control", "no-store"), ("referrer-policy", "same-origin")):
            assert shown.headers[header] == value
        assert "frame-ancestors 'none'" in shown.headers["content-security-policy"]
        assert page.status_code == 200 and "Signed in; go back to the chat." in page.text, page.text
        # The same callback again (replayed): refused, and nothing changes.
        replayed = await browser.get(f"{callback}?{urllib.parse.urlencode(answer)}")
        assert replayed.status_code == 400 and "used already" in replayed.text, replayed.text

    # The conversation went on without re-typing: the question is asked, nothing is written yet.
    tracker = _tracker(live, sender)
    assert _bot_responses(tracker)[-1] == "utter_confirm_note", _bot_responses(tracker)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0
    said = chat.send(sender, "yes")
    assert any("saved" in text.lower() for text in said), said
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 1
    assert authors_of(live["db"], note) == ["dana-agent"]  # the note is stored as written by the person
    assert "written by client 'crm-bridge-person' (subject 'dana-agent')" in live["mcp"].output()
    said = chat.send(sender, f"show the recent notes for {DANA_EMAIL}")
    assert any(f", by dana-agent: {note}" in text for text in said), said

    store = TokenStore.open(str(live["tokens"]), Keys.from_secret(KEY.encode()))
    record = await store.get(PERSON, "crm")
    assert record is not None
    secrets = [record["token"]["access_token"], record["token"]["refresh_token"], answer["code"]]

    # The chat says which account it writes as, and signs out.
    said = chat.send(sender, "which CRM account are you using?")
    assert any("signed in through me to crm as dana-agent" in text for text in said), said
    said = chat.send(sender, "disconnect my CRM")
    assert any("forgotten your CRM sign-in" in text for text in said), said
    assert await store.get(PERSON, "crm") is None
    assert '"event":"grant_revoked"' in live["auth"].output()
    said = chat.send(sender, "which account am I signed in as?")
    assert any("not signed in to the CRM through me" in text for text in said), said

    # No token, refresh token or code in the tracker, the audit trail or any process's output.
    stack: LoggedStack = live["stack"]
    places = {"tracker events": json.dumps(_tracker(live, sender)), "audit trail": live["audit"].read_text()}
    places.update({log.name: log.read_text(errors="replace") for log in stack.logs.glob("*.log")})
    assert "action-server.log" in places and "rasa-server.log" in places
    for where, text in places.items():
        for secret in secrets:
            assert secret not in text, f"a token or code is in the {where}"
        # A channel's proof (mcp_bridge_proof, v1.<key>.<payload>.<mac>) has a base64 JSON payload too.
        unproved = re.sub(r"v1\.[\w-]+\.[\w-]+\.[\w-]+", "", text)
        assert "eyJ" not in unproved or where == "authorization-server.log", f"a JWT is in the {where}"


async def _sign_in(live: dict[str, Any], said: list[str], account: str = "dana-agent") -> None:
    """What the person does with the link the bot showed: sign in, land on the callback."""
    prompt = next(text for text in said if "sign in at" in text)
    link = re.search(r"(http://\S+)", prompt)
    assert link is not None
    _, page, _ = await sign_in_in_browser(
        link.group(1), account, live["person"].redirect_uri, code=code_in(said)
    )
    assert page.status_code == 200 and "Signed in" in page.text, page.text


def _said_soon(live: dict[str, Any], sender: str, response: str, after: int) -> list[str]:
    """The bot's responses once ``response`` is among those said after the first ``after``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        said = _bot_responses(_tracker(live, sender))
        if response in said[after:]:
            return said
        time.sleep(0.25)
    raise AssertionError(f"{response} not said: {_bot_responses(_tracker(live, sender))}")


async def _approve(live: dict[str, Any], sender: str) -> str:
    """A supervisor approves the conversation's held call (the approval page's own calls), and the
    page tells the conversation through Rasa's HTTP API, which names nobody as the sender."""
    store = open_approval_store(str(live["approvals"]))
    try:
        [request] = [
            r for r in await store.pending({"supervisor"}, time.time()) if r.conversation_id == sender
        ]
        assert request.requester == PERSON
        decided = await Approvals(store).decide(request.id, Approver("sam", frozenset({"supervisor"})), True)
        assert decided.kind == "approved"
    finally:
        await store.aclose()
    _trigger(live, sender, request.id)
    return request.id


def _trigger(live: dict[str, Any], sender: str, approval_id: str) -> None:
    query = urllib.parse.urlencode({"token": live["stack"].access.api_token, "output_channel": "latest"})
    body = json.dumps({"name": "approval_decided", "entities": {"approval_id": approval_id}}).encode()
    url = f"{live['rasa_url']}/conversations/{urllib.parse.quote(sender)}/trigger_intent?{query}"
    trigger = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(trigger, timeout=30) as answer:
        assert answer.status == 200


async def _held(live: dict[str, Any], sender: str, note: str) -> None:
    """The person asks for a note that needs a supervisor, signs in if asked, says yes: it is held."""
    chat: RasaChat = live["chat"]
    said = chat.send(sender, f"log a call with {DANA_EMAIL}: {note}")
    if any("sign in at" in text for text in said):
        await _sign_in(live, said)
    _said_soon(live, sender, "utter_confirm_note", 0)
    chat.send(sender, "yes")
    assert _bot_responses(_tracker(live, sender))[-1] == "utter_awaiting_approval"
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0


async def test_a_held_call_released_by_its_approver_is_written_as_the_requester_or_not_at_all(
    live: dict[str, Any],
) -> None:
    """The approval reaches the conversation with no person on it (Rasa's API): the call is made as
    the requester whose yes was sealed with it. Once they have disconnected, nothing is written and
    they are shown the sign-in link instead."""
    sender = f"approval-{time.time()}"
    note = f"Dana asked for a refund of invoice 4471 ({time.time()})"
    await _held(live, sender, note)
    before = len(_bot_responses(_tracker(live, sender)))
    await _approve(live, sender)
    _said_soon(live, sender, "utter_note_saved", before)
    assert authors_of(live["db"], note) == ["dana-agent"]

    refund = f"Another refund for Dana, never written ({time.time()})"
    await _held(live, sender, refund)
    said = live["chat"].send(sender, "disconnect my CRM")
    assert any("forgotten your CRM sign-in" in text for text in said), said
    before = len(_bot_responses(_tracker(live, sender)))
    approval = await _approve(live, sender)
    said = _said_soon(live, sender, "utter_mcp_sign_in", before)
    assert "utter_note_saved" not in said[before:]
    assert notes_for(live["db"], DANA_EMAIL).count(refund) == 0
    store = open_approval_store(str(live["approvals"]))
    try:
        finished = await store.get(approval)
    finally:
        await store.aclose()
    # Done with, never to run later under anyone's identity; told again, nothing more happens.
    assert finished is not None and finished.result == "not run: the requester must sign in first"
    _trigger(live, sender, approval)
    await asyncio.sleep(0.5)  # trigger_intent answers once the action ran; a margin all the same
    assert _bot_responses(_tracker(live, sender)) == said
    assert notes_for(live["db"], DANA_EMAIL).count(refund) == 0
    assert "not run: the person must sign in first" in live["audit"].read_text()


# -- the record issue's case 7: a sign-in's ticket, state or confirm ticket as the resume entity -----

NOT_A_RESUME = "not a resume the sign-in sealed for this conversation, or past its lifetime"
RESUME_USED = "this message started a question or a run already"


def _resumed_by_a_tracker_writer(live: dict[str, Any], sender: str, value: str) -> None:
    """What whoever holds Rasa's API token can do with a value: trigger ``mcp_signed_in`` with it as the
    resume entity (as the action server does after a sign-in), and append that message themselves and
    run ``action_mcp_resume`` on it."""
    where = f"{live['rasa_url']}/conversations/{urllib.parse.quote(sender)}"
    token = urllib.parse.urlencode({"token": live["stack"].access.api_token})
    resumed = {
        "event": "user",
        "text": f"/{RESUME_INTENT}",
        "parse_data": {
            "intent": {"name": RESUME_INTENT, "confidence": 1.0},
            "entities": [{"entity": RESUME_ENTITY, "value": value}],
        },
    }
    for path, body in (
        ("trigger_intent", {"name": RESUME_INTENT, "entities": {RESUME_ENTITY: value}}),
        ("tracker/events", [resumed]),
        ("execute", {"name": RESUME_ACTION}),
        # Rasa's execute leaves no action_listen: put back, as after a normal turn.
        ("tracker/events", [{"event": "action", "name": "action_listen"}]),
    ):
        request = urllib.request.Request(
            f"{where}/{path}?{token}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200


def _audited(live: dict[str, Any], sender: str, decision: str) -> list[str]:
    entries = [json.loads(line) for line in live["audit"].read_text().splitlines() if line.strip()]
    return [
        str(e.get("result")) for e in entries if e.get("conversation") == sender and e["decision"] == decision
    ]


async def test_7_a_sign_in_ticket_state_or_confirm_ticket_resumes_nothing_and_a_resume_counts_once(
    live: dict[str, Any],
) -> None:
    """Whoever holds Rasa's API token puts the sign-in link's ticket, the OAuth state and the "which
    account" page's ticket (all sealed with the resume's key) into the conversation as the resume entity,
    before and after the person signs in: no skill starts as the person, nothing is written, each is
    audited. The real resume asks the question once; used again, it starts nothing; the person's yes
    writes the note once, as them."""
    chat: RasaChat = live["chat"]
    sender = f"record-7-{time.time()}"
    note = f"Called about the VAT rate, case 7 ({time.time()})"
    store = TokenStore.open(str(live["tokens"]), Keys.from_secret(KEY.encode()))
    said = chat.send(sender, f"log a call with {DANA_EMAIL}: {note}")
    prompt = next(text for text in said if "sign in at" in text)
    link = re.search(r"(http://\S+)", prompt)
    assert link is not None
    ticket = urllib.parse.parse_qs(urllib.parse.urlparse(link.group(1)).query)["start"][0]
    callback = live["person"].redirect_uri
    responses = _bot_responses(_tracker(live, sender))

    def nothing_started() -> None:
        assert _bot_responses(_tracker(live, sender)) == responses
        assert notes_for(live["db"], DANA_EMAIL).count(note) == 0

    async with httpx2.AsyncClient(follow_redirects=False, timeout=60) as browser:
        # Before the sign-in ends: the link's ticket, the state the authorization server sends back, and
        # the ticket of the page where the person chooses the account.
        _resumed_by_a_tracker_writer(live, sender, ticket)
        nothing_started()
        answer = await log_in(link.group(1), "dana-agent", callback, browser, code_in(said))
        _resumed_by_a_tracker_writer(live, sender, answer["state"])
        nothing_started()
        shown = await browser.get(f"{callback}?{urllib.parse.urlencode(answer)}")
        found = re.search(r'name=ticket value="([^"]+)"', shown.text)
        assert found is not None, shown.text
        confirm = html.unescape(found.group(1))
        _resumed_by_a_tracker_writer(live, sender, confirm)
        nothing_started()
        assert await store.get(PERSON, "crm") is None
        assert _audited(live, sender, "not_started") == [NOT_A_RESUME] * 6

        # The person chooses the account: the real resume asks the question, once.
        chosen = await browser.post(
            callback, data={"ticket": confirm, "choice": "use"}, headers=origin_of(callback)
        )
        assert chosen.status_code == 200 and "Signed in; go back to the chat." in chosen.text, chosen.text
    responses = _said_soon(live, sender, "utter_confirm_note", len(responses))
    assert responses.count("utter_confirm_note") == 1
    events = _tracker(live, sender)["events"]
    [real] = [
        entity["value"]
        for event in events
        if event["event"] == "user" and event["parse_data"]["intent"]["name"] == RESUME_INTENT
        for entity in event["parse_data"].get("entities") or []
        if entity["value"] not in (ticket, answer["state"], confirm)
    ]

    # After it, with the question open: the three again, and the real resume a second time. Triggered,
    # each reaches the open question's loop first, which takes no unsigned message as an answer; run
    # directly, the resume action starts nothing.
    for value in (ticket, answer["state"], confirm, real):
        _resumed_by_a_tracker_writer(live, sender, value)
    after = _bot_responses(_tracker(live, sender))
    assert after == [*responses, *["utter_not_vouched"] * 4, "utter_message_used"], after
    assert _audited(live, sender, "not_started") == [NOT_A_RESUME] * 9 + [RESUME_USED]
    assert (
        _audited(live, sender, "refused") == ["no channel vouches for the answer: no channel signature"] * 4
    )
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0

    # The person's own answer: asked once more (messages came between), then written once, as them.
    said = chat.send(sender, "yes")
    assert _bot_responses(_tracker(live, sender))[-2:] == ["utter_confirm_again", "utter_confirm_note"], said
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0
    said = chat.send(sender, "yes")
    assert any("saved" in text.lower() for text in said), said
    chat.send(sender, "yes")
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 1
    assert authors_of(live["db"], note) == ["dana-agent"]
    said = chat.send(sender, "disconnect my CRM")
    assert any("forgotten your CRM sign-in" in text for text in said), said
