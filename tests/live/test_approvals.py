"""A second approver, end to end: the real Rasa server (REST channel, HTTP API with its token), the
real action server with the example bot, the CRM's MCP server and REST API over SQLite, and the
approval page (mcp_bridge/approvals/page.py) on one approval store.

The requester ("rest:operator", as the REST channel names whoever holds its token) logs a note
about a refund and says yes: nothing is written, the request waits. The requester, logged in to the
page as "operator" with the supervisor role, neither sees it nor can approve it. "sam" approves it:
the page triggers ``approval_decided`` on the conversation through Rasa's API, the plugin's action
runs the call, the conversation is told, the note is written once (also when the intent is triggered
again). A request nobody decides within its expiry (15 s here) is refused, the conversation told,
and nothing written. An action server killed while it runs an approved call leaves the request
running; after the run's lease (4 s here) the page tells the conversation again, and the restarted
action server runs it again under its key: the note is there once. Whoever holds Rasa's API token
and runs ``action_approval_decided`` themselves (the record issue's case 6) releases nothing the
approver did not release in that conversation, and each attempt is audited.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import secrets
import signal
import sqlite3
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from devstack.services import descendants
from mcp_bridge.approvals.page import CONVERSATION_SECRETS, TELL_PATH, hash_password
from mcp_bridge.approvals.second_approver import Approvals, Approver
from mcp_bridge.approvals.store import open_store as open_approval_store
from tests.support import procs
from tests.support.conversation import notes_for, skills_with_source
from tests.support.logged_stack import LoggedStack

DANA = "dana@example.com"
EXPIRES_AFTER = 15
RUN_LEASE = 4
PASSWORDS = {
    "sam": secrets.token_urlsafe(12),
    "operator": secrets.token_urlsafe(12),
    "olsen": secrets.token_urlsafe(12),
}


class Stack(LoggedStack):
    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.db = workdir / "crm.sqlite3"
        self.approvals_db = workdir / "approvals.sqlite3"
        self.audit = workdir / "audit.jsonl"
        self.page: procs.ServiceProcess | None = None
        self.crm: procs.ServiceProcess | None = None
        self.actions: procs.ServiceProcess | None = None
        self.action_server: Callable[[], procs.ServiceProcess] | None = None
        self.tell_token = ""
        self.actions_url = ""

    def start(self) -> None:
        token = secrets.token_urlsafe(24)
        action_port = procs.free_port()
        self.actions_url = f"http://{procs.HOST}:{action_port}"
        endpoints = procs.write_endpoints(
            self.workdir / "endpoints.yml", f"http://{procs.HOST}:{action_port}/webhook"
        )
        self.start_rasa_in_background(endpoints)
        procs.seed_db(self.db)
        crm = self.start_logged(procs.crm_rest(self.db))
        mcp = self.start_logged(procs.crm_mcp(crm.url, token=token))
        skills = skills_with_source(self.workdir / "skills", "mcp:crm")
        note_skill = skills / "log_interaction.yml"
        text = note_skill.read_text()
        assert "expires_after: 30m" in text
        note_skill.write_text(text.replace("expires_after: 30m", f"expires_after: {EXPIRES_AFTER}s"))
        # A run's lease (approvals rule 5) of a few seconds, so a lost run is resumed soon.
        shared = {"APPROVALS_DATABASE": str(self.approvals_db), "APPROVAL_RUN_LEASE_SECONDS": str(RUN_LEASE)}
        # The page asks the action server to tell a decision; the action server tells it through Rasa.
        assert self.rasa is not None  # its URL is known before it has loaded
        self.tell_token = secrets.token_urlsafe(32)
        shared |= {
            "APPROVAL_TELL_TOKEN": self.tell_token,
            "RASA_URL": self.rasa.url,
            "RASA_AUTH_TOKEN": self.access.api_token,
        }
        self.crm = crm
        self.action_server = lambda: procs.action_server(
            endpoints=endpoints,
            crm_url=crm.url,
            mcp_url=mcp.url,
            mcp_token=token,
            skills_dir=skills,
            audit_log=self.audit,
            port=action_port,
            extra_env=shared,
        )
        self.actions = self.start_logged(self.action_server())
        approvers = self.workdir / "approvers.yml"
        approvers.write_text(
            "approvers:\n"
            '  sam: {roles: [supervisor], password_hash: "${SAM_HASH}"}\n'
            '  operator: {roles: [supervisor], password_hash: "${OPERATOR_HASH}"}\n'
            '  olsen: {roles: [supervisor], password_hash: "${OLSEN_HASH}"}\n'
            # Who is who: the requester, "rest:operator", is the approver operator, who also logs in
            # as olsen (a name nothing but this mapping ties to the requester).
            "people:\n"
            '  sam: {chat: ["rest:sam"], approval_page: [sam]}\n'
            '  operator: {chat: ["rest:operator"], approval_page: [operator, olsen]}\n'
            "  carol: {approval_page: [carol]}\n"
        )
        self.wait_for_rasa()
        self.page = self.start_logged(
            procs.approval_page(
                actions_url=f"http://{procs.HOST}:{action_port}",
                tell_token=self.tell_token,
                page_key=secrets.token_urlsafe(32),
                approvers=approvers,
                database=str(self.approvals_db),
                audit_log=self.audit,
                sweep_seconds=0.5,
                extra_env={
                    "SAM_HASH": hash_password(PASSWORDS["sam"]),
                    "OPERATOR_HASH": hash_password(PASSWORDS["operator"]),
                    "OLSEN_HASH": hash_password(PASSWORDS["olsen"]),
                },
            )
        )

    # -- the conversation, through the REST channel and Rasa's API ---------------------------------

    def say(self, conversation: str, text: str) -> list[str]:
        assert self.rasa is not None
        answer = _json(
            "POST",
            f"{self.rasa.url}/webhooks/rest/webhook",
            {"sender": conversation, "message": text},
            headers=self.access.rest_headers(),
        )
        return [str(message.get("text", "")) for message in answer]

    def said(self, conversation: str) -> list[str]:
        """The responses the bot has said in the conversation, by name, in order."""
        assert self.rasa is not None
        tracker = _json(
            "GET", f"{self.rasa.url}/conversations/{conversation}/tracker?token={self.access.api_token}"
        )
        return [
            str((event.get("metadata") or {}).get("utter_action"))
            for event in tracker["events"]
            if event.get("event") == "bot"
        ]

    def trigger(self, conversation: str, approval_id: str) -> None:
        assert self.rasa is not None
        _json(
            "POST",
            f"{self.rasa.url}/conversations/{conversation}/trigger_intent?token={self.access.api_token}",
            {"name": "approval_decided", "entities": {"approval_id": approval_id}},
        )

    def wait_said(self, conversation: str, response: str, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            said = self.said(conversation)
            if response in said:
                return said
            time.sleep(0.25)
        raise AssertionError(
            f"{conversation}: {response} not said within {timeout} s: {self.said(conversation)}"
        )

    def audit_entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit.read_text().splitlines() if line.strip()]


class Page:
    """A browser session on the approval page: its cookie jar, and the page's own Origin."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        # Secure cookies go back to the loopback over http too, as a browser sends them.
        policy = http.cookiejar.DefaultCookiePolicy(secure_protocols=("https", "wss", "http"))
        self.jar = http.cookiejar.CookieJar(policy)
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Origin", self.url)
        try:
            with self.opener.open(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def login(self, user: str) -> None:
        status, body = self.call("POST", "/login", {"user": user, "password": PASSWORDS[user]})
        assert status == 200, body

    def pending(self) -> list[dict[str, Any]]:
        status, body = self.call("GET", "/api/pending")
        assert status == 200, body
        return list(body["pending"])


def _status_json(
    method: str, url: str, body: Any = None, *, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """The status and JSON body of a request, whatever the status."""
    try:
        return 200, _json(method, url, body, headers=headers)
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text or b"{}")
        except ValueError:
            return exc.code, text


def _json(method: str, url: str, body: Any = None, *, headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    made = Stack(tmp_path_factory.mktemp("approvals"))
    try:
        made.start()
        yield made
    finally:
        made.close()


def held(stack: Stack, conversation: str, note: str) -> None:
    """The requester logs ``note`` for Dana and says yes; the call is held."""
    stack.say(conversation, f"log a call with {DANA}: {note}")
    assert stack.said(conversation)[-1] == "utter_confirm_note"
    stack.say(conversation, "yes")
    assert stack.said(conversation)[-1] == "utter_awaiting_approval"
    assert note not in notes_for(stack.db, DANA)


def test_a_supervisor_approves_on_the_page_and_the_note_is_written_once(stack: Stack) -> None:
    note = f"Dana asked for a refund of invoice 4471 ({secrets.token_hex(4)})."
    held(stack, "approve-1", note)
    assert stack.page is not None

    requester = Page(stack.page.url)
    requester.login("operator")
    assert requester.pending() == []  # their own request is not theirs to decide
    sam = Page(stack.page.url)
    assert sam.call("GET", "/api/pending")[0] == 401  # not logged in
    sam.login("sam")
    [request] = [r for r in sam.pending() if r["conversation"] == "approve-1"]
    assert request["tool"] == "add_timeline_note" and request["arguments"]["text"] == note
    assert request["requester"] == "rest:operator"
    status, body = requester.call("POST", "/api/decide", {"id": request["id"], "approve": True})
    assert status == 403 and "yourself" in body["error"]
    # The same person under another login (the deployment's people: say olsen is the operator).
    olsen = Page(stack.page.url)
    olsen.login("olsen")
    assert olsen.pending() == []
    status, body = olsen.call("POST", "/api/decide", {"id": request["id"], "approve": True})
    assert status == 403 and "yourself" in body["error"]
    refused = [e for e in stack.audit_entries() if e["decision"] == "approval_not_allowed"]
    assert [e["decided_by"] for e in refused] == ["operator", "olsen"]
    assert note not in notes_for(stack.db, DANA)

    assert sam.call("POST", "/api/decide", {"id": request["id"], "approve": True}) == (
        200,
        {"decided": "approved"},
    )
    said = stack.wait_said("approve-1", "utter_note_saved")
    assert notes_for(stack.db, DANA).count(note) == 1
    # Told again (a second trigger, a second approver's click): nothing more is written or said.
    stack.trigger("approve-1", request["id"])
    assert sam.call("POST", "/api/decide", {"id": request["id"], "approve": True})[0] == 409
    time.sleep(1.0)
    assert notes_for(stack.db, DANA).count(note) == 1
    assert stack.said("approve-1").count("utter_note_saved") == said.count("utter_note_saved") == 1
    decided = [
        e for e in stack.audit_entries() if e.get("approval") == request["id"] and e["decision"] == "approved"
    ]
    assert decided[0]["decided_by"] == "sam"


def _tell(stack: Stack, body: Any, token: str) -> tuple[int, Any]:
    """The action server's route the approval page tells conversations through."""
    return _status_json(
        "POST", f"{stack.actions_url}{TELL_PATH}", body, headers={"Authorization": f"Bearer {token}"}
    )


def test_the_page_holds_nothing_that_writes_to_a_conversation_and_its_token_asks_only_to_tell(
    stack: Stack,
) -> None:
    """The page's process has no Rasa token (nor any other secret that writes to a conversation) in
    its environment, and the approvals above went through all the same. Its tell token is no token
    for Rasa's API; at the action server's tell route it has a request told only when there is
    something to tell, and then only in the request's own conversation."""
    assert stack.page is not None and stack.page.pid is not None
    environ = Path(f"/proc/{stack.page.pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert "APPROVAL_TELL_TOKEN" in names
    assert names.isdisjoint(CONVERSATION_SECRETS), names & set(CONVERSATION_SECRETS)

    assert stack.rasa is not None
    trigger = f"{stack.rasa.url}/conversations/tell-1/trigger_intent?token={stack.tell_token}"
    assert _status_json("POST", trigger, {"name": "greet"})[0] == 401

    note = f"Dana asked for a refund of invoice 4472 ({secrets.token_hex(4)})."
    held(stack, "tell-1", note)
    request_id = _pending_id(stack, "tell-1")
    said = stack.said("tell-1")
    assert _tell(stack, {"id": request_id}, "not-the-token")[0] == 401
    assert _tell(stack, {"id": request_id}, stack.access.api_token)[0] == 401  # nor Rasa's
    assert _tell(stack, {"id": "../tell-1"}, stack.tell_token)[0] == 400
    assert _tell(stack, {"id": "f" * 32}, stack.tell_token)[0] == 404
    assert _tell(stack, {"id": request_id}, stack.tell_token)[0] == 409  # undecided: nothing to tell
    time.sleep(1.0)
    assert stack.said("tell-1") == said and note not in notes_for(stack.db, DANA)

    sam = Page(stack.page.url)
    sam.login("sam")
    assert sam.call("POST", "/api/decide", {"id": request_id, "approve": False})[0] == 200
    stack.wait_said("tell-1", "utter_approval_refused")
    assert _tell(stack, {"id": request_id}, stack.tell_token)[0] == 409  # told already
    assert note not in notes_for(stack.db, DANA)

    # A writer of the approval store (the page has its access) moves a request to another
    # conversation and approves it there: its sealed question names the first, so nobody is told.
    other = f"Dana asked for a refund of invoice 4473 ({secrets.token_hex(4)})."
    held(stack, "tell-2", other)
    moved = _pending_id(stack, "tell-2")
    with closing(sqlite3.connect(stack.approvals_db)) as conn, conn:
        conn.execute(
            "UPDATE approval_requests SET conversation_id = 'tell-victim', status = 'approved' WHERE id = ?",
            (moved,),
        )
    assert _tell(stack, {"id": moved}, stack.tell_token)[0] == 409
    time.sleep(1.0)
    assert stack.said("tell-victim") == [] and other not in notes_for(stack.db, DANA)


def test_a_refused_request_writes_nothing(stack: Stack) -> None:
    note = f"Issue a credit note of 40 EUR to Dana ({secrets.token_hex(4)})."
    held(stack, "refuse-1", note)
    assert stack.page is not None
    sam = Page(stack.page.url)
    sam.login("sam")
    [request] = [r for r in sam.pending() if r["conversation"] == "refuse-1"]
    assert sam.call("POST", "/api/decide", {"id": request["id"], "approve": False}) == (
        200,
        {"decided": "refused"},
    )
    stack.wait_said("refuse-1", "utter_approval_refused")
    stack.trigger("refuse-1", request["id"])
    time.sleep(1.0)
    assert note not in notes_for(stack.db, DANA)
    assert stack.said("refuse-1").count("utter_approval_refused") == 1


NOTHING_TO_RELEASE = (
    "no held call of this conversation waits for this decision (unknown, already run or told)"
)


def _released_by_a_tracker_writer(stack: Stack, conversation: str, approval_id: str) -> None:
    """What whoever holds Rasa's API token can do with an id: trigger ``approval_decided`` with it (as the
    action server does when the page tells it), and append that message themselves and run the action."""
    assert stack.rasa is not None
    stack.trigger(conversation, approval_id)
    where = f"{stack.rasa.url}/conversations/{conversation}"
    token = f"token={stack.access.api_token}"
    decided = {
        "event": "user",
        "text": "/approval_decided",
        "parse_data": {
            "intent": {"name": "approval_decided", "confidence": 1.0},
            "entities": [{"entity": "approval_id", "value": approval_id}],
        },
    }
    _json("POST", f"{where}/tracker/events?{token}", [decided])
    _json("POST", f"{where}/execute?{token}", {"name": "action_approval_decided"})
    # Rasa's execute leaves no action_listen: put back, as after a normal turn, for the person's next one.
    _json("POST", f"{where}/tracker/events?{token}", [{"event": "action", "name": "action_listen"}])


def _nothing_released(stack: Stack, conversation: str, approval_id: str) -> list[str]:
    """The reasons the audit trail gives for the releases of ``approval_id`` in ``conversation`` not
    acted on."""
    return [
        e["result"]
        for e in stack.audit_entries()
        if e["decision"] == "approval_rejected"
        and e.get("conversation") == conversation
        and e.get("approval") == approval_id
    ]


def test_6_a_tracker_writer_releases_nothing_an_approver_did_not_release_in_that_conversation(
    stack: Stack,
) -> None:
    """The record issue's case 6. Whoever holds Rasa's API token runs ``action_approval_decided`` in the
    person's conversation with (d) the id of a question the person refused, (a) a request the approver
    refused, (b) an approved request after it ran, (c) another conversation's approved request before it
    ran: nothing runs, nothing more is said, each attempt is audited with its reason; the person's own
    held calls run once when their approver releases them."""
    conversation, other = (f"release-{name}-{secrets.token_hex(4)}" for name in ("mine", "other"))
    refused_question, refused, approved, elsewhere = (
        f"Dana asked for a refund, case 6, {what} ({secrets.token_hex(4)})."
        for what in ("refused question", "refused", "approved", "other")
    )

    # (d) A question the person refused: its id is in the tracker (the sealed slot is signed, not secret).
    stack.say(conversation, f"log a call with {DANA}: {refused_question}")
    assert stack.said(conversation)[-1] == "utter_confirm_note"
    stack.say(conversation, "no")
    assert stack.rasa is not None
    events = _json(
        "GET", f"{stack.rasa.url}/conversations/{conversation}/tracker?token={stack.access.api_token}"
    )["events"]
    [question_id] = [
        e["value"]["id"]
        for e in events
        if e["event"] == "slot" and e["name"] == "pending_confirmation" and e["value"]
    ]
    said = stack.said(conversation)
    _released_by_a_tracker_writer(stack, conversation, question_id)
    assert stack.said(conversation) == said
    assert _nothing_released(stack, conversation, question_id) == [NOTHING_TO_RELEASE] * 2

    # (a) A request the approver refused: told once, and then nothing.
    held(stack, conversation, refused)
    assert stack.page is not None
    sam = Page(stack.page.url)
    sam.login("sam")
    refused_id = _pending_id(stack, conversation)
    assert sam.call("POST", "/api/decide", {"id": refused_id, "approve": False})[0] == 200
    said = stack.wait_said(conversation, "utter_approval_refused")
    _released_by_a_tracker_writer(stack, conversation, refused_id)
    assert stack.said(conversation) == said
    assert _nothing_released(stack, conversation, refused_id) == [NOTHING_TO_RELEASE] * 2

    # (b) The person's own held call, released by its approver: written once; released again, nothing.
    held(stack, conversation, approved)
    approved_id = _pending_id(stack, conversation)
    _approve(stack, conversation)
    said = stack.wait_said(conversation, "utter_note_saved")
    _released_by_a_tracker_writer(stack, conversation, approved_id)
    assert stack.said(conversation) == said and said.count("utter_note_saved") == 1
    assert _nothing_released(stack, conversation, approved_id) == [NOTHING_TO_RELEASE] * 2

    # (c) Another conversation's request, approved and not yet run (the page, which would tell its own
    # conversation, is stopped meanwhile): released into this one, nothing runs here or there.
    held(stack, other, elsewhere)
    elsewhere_id = _pending_id(stack, other)
    assert stack.page is not None
    _signal_all(stack.page, signal.SIGSTOP)
    try:
        asyncio.run(_decided(stack, elsewhere_id))
        _released_by_a_tracker_writer(stack, conversation, elsewhere_id)
        assert stack.said(conversation) == said
        assert _status(stack, elsewhere_id)[0] == "approved"
        assert elsewhere not in notes_for(stack.db, DANA)
    finally:
        _signal_all(stack.page, signal.SIGCONT)
    assert _nothing_released(stack, conversation, elsewhere_id) == [NOTHING_TO_RELEASE] * 2
    # The page tells the request's own conversation: written once, there.
    stack.wait_said(other, "utter_note_saved")
    _released_by_a_tracker_writer(stack, conversation, elsewhere_id)
    time.sleep(1.0)
    assert stack.said(conversation) == said and stack.said(other).count("utter_note_saved") == 1
    notes = notes_for(stack.db, DANA)
    assert (
        notes.count(approved),
        notes.count(elsewhere),
        notes.count(refused),
        notes.count(refused_question),
    ) == (
        1,
        1,
        0,
        0,
    )


async def _decided(stack: Stack, request_id: str) -> None:
    """sam approves the request in the store, as the page does, without telling its conversation."""
    store = open_approval_store(str(stack.approvals_db))
    try:
        decided = await Approvals(store).decide(request_id, Approver("sam", frozenset({"supervisor"})), True)
    finally:
        await store.aclose()
    assert decided.kind == "approved"


def test_an_expired_request_is_refused_and_writes_nothing(stack: Stack) -> None:
    note = f"Agreed a write-off for Dana ({secrets.token_hex(4)})."
    held(stack, "expire-1", note)
    assert stack.page is not None
    sam = Page(stack.page.url)
    sam.login("sam")
    [request] = [r for r in sam.pending() if r["conversation"] == "expire-1"]
    stack.wait_said("expire-1", "utter_approval_expired", timeout=EXPIRES_AFTER + 20)
    assert sam.call("POST", "/api/decide", {"id": request["id"], "approve": True})[0] == 409
    stack.trigger("expire-1", request["id"])
    time.sleep(1.0)
    assert note not in notes_for(stack.db, DANA)
    assert [r for r in sam.pending() if r["id"] == request["id"]] == []


def test_the_approval_page_in_a_browser_quotes_the_call_as_text_and_approves_it(stack: Stack) -> None:
    """Chromium (headless, Debian's, through Playwright): a wrong password is refused, the call is
    quoted exactly (markup in the note is text, not HTML), Approve decides it, and it is written once."""
    from playwright.sync_api import expect, sync_playwright

    from tests.live.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    note = f"Refund agreed <b>40 EUR</b> <script>alert(1)</script> ({secrets.token_hex(4)})"
    held(stack, "browser-1", note)
    assert stack.page is not None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(stack.page.url)
            page.fill("#user", "sam")
            page.fill("#password", "not the password")
            page.click("#login button[type=submit]")
            expect(page.locator("#notice")).to_contain_text("wrong user name or password")
            page.fill("#password", PASSWORDS["sam"])
            page.click("#login button[type=submit]")
            expect(page.locator("#who")).to_have_text("sam (supervisor)")
            item = page.locator(".request").filter(has_text=note)
            expect(item).to_have_count(1)
            expect(item.locator(".call")).to_contain_text(note)
            expect(item.locator(".meta")).to_contain_text("Asked by rest:operator")
            expect(page.locator(".request b")).to_have_count(0)  # no element was made from the note
            expect(page.locator(".request script")).to_have_count(0)
            item.get_by_role("button", name="Approve").click()
            expect(page.locator("#notice")).to_contain_text("Approved")
            expect(page.locator(".request").filter(has_text=note)).to_have_count(0)
            # The session: the page's own __Host- cookie, for its port, kept by Chromium over http
            # on loopback; no script reads it; logging out ends it on the server too.
            port = urllib.parse.urlsplit(stack.page.url).port
            [cookie] = page.context.cookies()
            assert cookie["name"] == f"__Host-approver_session-{port}"
            assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"], cookie["path"]) == (
                True,
                True,
                "Strict",
                "/",
            )
            assert page.evaluate("document.cookie") == ""
            page.click("#logout")
            expect(page.locator("#login")).to_be_visible()
            copied = Page(stack.page.url)
            copied.jar.set_cookie(_cookie(cookie["name"], cookie["value"]))
            assert copied.call("GET", "/api/pending")[0] == 401
        finally:
            browser.close()
    stack.wait_said("browser-1", "utter_note_saved")
    assert notes_for(stack.db, DANA).count(note) == 1


def _cookie(name: str, value: str) -> http.cookiejar.Cookie:
    """A cookie for 127.0.0.1, as a browser had it."""
    return http.cookiejar.Cookie(
        0, name, value, None, False, procs.HOST, False, False, "/", True, True, None, False, None, None, {}
    )


def _approve(stack: Stack, conversation: str) -> None:
    assert stack.page is not None
    sam = Page(stack.page.url)
    sam.login("sam")
    [request] = [r for r in sam.pending() if r["conversation"] == conversation]
    assert sam.call("POST", "/api/decide", {"id": request["id"], "approve": True})[0] == 200


def test_a_decision_that_arrives_while_a_question_is_pending_is_told_and_the_question_asked_again(
    stack: Stack,
) -> None:
    refund = f"Dana asked for a refund of invoice 9001 ({secrets.token_hex(4)})."
    held(stack, "busy-question", refund)
    renewal = f"Called about the Q3 renewal ({secrets.token_hex(4)})."
    stack.say("busy-question", f"log a call with {DANA}: {renewal}")
    assert stack.said("busy-question")[-1] == "utter_confirm_note"
    _approve(stack, "busy-question")
    said = stack.wait_said("busy-question", "utter_note_saved")
    assert notes_for(stack.db, DANA).count(refund) == 1
    # The question is not refused or dropped: asked again after the news, and its yes writes it.
    assert said[-2:] == ["utter_confirm_again", "utter_confirm_note"], said
    assert "utter_confirmation_invalid" not in said
    stack.say("busy-question", "yes")
    assert stack.said("busy-question")[-1] == "utter_note_saved"
    assert notes_for(stack.db, DANA).count(renewal) == 1


def test_a_decision_that_arrives_while_the_form_asks_for_the_note_is_not_taken_as_the_note(
    stack: Stack,
) -> None:
    refund = f"Dana asked for a refund of invoice 9002 ({secrets.token_hex(4)})."
    held(stack, "busy-form", refund)
    stack.say("busy-form", f"log a call with {DANA}")
    assert stack.said("busy-form")[-1] == "utter_ask_note_text"
    _approve(stack, "busy-form")
    said = stack.wait_said("busy-form", "utter_note_saved")
    assert notes_for(stack.db, DANA).count(refund) == 1
    assert said[-1] == "utter_ask_note_text", said  # the form asks again; nothing was taken as the note
    follow_up = f"Booked a follow-up call ({secrets.token_hex(4)})."
    stack.say("busy-form", follow_up)
    assert stack.said("busy-form")[-1] == "utter_confirm_note"
    stack.say("busy-form", "no")
    assert follow_up not in notes_for(stack.db, DANA)
    assert not [n for n in notes_for(stack.db, DANA) if "EXTERNAL" in n]


@pytest.fixture(scope="module")
def oidc_page(stack: Stack) -> Iterator[str]:
    """A second approval page on the same store and Rasa, whose approvers log in at the example's
    OpenID provider (oidc-provider, examples/crm_bot/auth/server.mjs): sam (supervisor), carol (clerk)."""
    assert stack.rasa is not None
    port = procs.free_port()
    login = procs.ApproverLogin(
        "approval-page",
        secrets.token_urlsafe(24),
        f"http://{procs.HOST}:{port}/callback",
        {
            "sam": {"roles": ["supervisor"], "password_hash": hash_password(PASSWORDS["sam"])},
            "carol": {"roles": ["clerk"], "password_hash": hash_password(PASSWORDS["operator"])},
        },
    )
    issuer = stack.start_logged(
        procs.authorization_server(
            f"http://{procs.HOST}:9/mcp", procs.OAuthClient("unused", secrets.token_urlsafe(24)), login=login
        )
    )
    page = stack.start_logged(
        procs.approval_page(
            actions_url=stack.actions_url,
            tell_token=stack.tell_token,
            page_key=secrets.token_urlsafe(32),
            approvers=stack.workdir / "approvers.yml",
            database=str(stack.approvals_db),
            audit_log=stack.audit,
            sweep_seconds=0.5,
            port=port,
            oidc=(issuer.url, login),
        )
    )
    yield page.url


def test_approvers_log_in_at_the_openid_provider_and_their_roles_come_from_its_id_token(
    stack: Stack, oidc_page: str
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.live.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    note = f"Refund of 12 EUR for Dana ({secrets.token_hex(4)})."
    held(stack, "oidc-1", note)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            # A clerk logs in: the provider's roles say clerk, so nothing is theirs to decide.
            clerk = browser.new_page()
            clerk.goto(oidc_page)
            clerk.click("#sso-link")
            clerk.fill("#user", "carol")
            clerk.fill("#password", PASSWORDS["operator"])
            clerk.click("button[type=submit]")
            expect(clerk.locator("#who")).to_have_text("carol (clerk)")
            expect(clerk.locator("#empty")).to_be_visible()
            request_id = _pending_id(stack, "oidc-1")
            decide = (
                "async (id) => (await fetch('api/decide', {method: 'POST', credentials: 'same-origin', "
                "headers: {'Content-Type': 'application/json'}, "
                "body: JSON.stringify({id, approve: true})})).status"
            )
            status = clerk.evaluate(decide, request_id)
            assert status == 403

            page = browser.new_context().new_page()
            page.goto(oidc_page)
            page.click("#sso-link")
            page.fill("#user", "sam")
            page.fill("#password", "not the password")
            page.click("button[type=submit]")
            expect(page.locator("#error")).to_have_text("Wrong user name or password.")
            page.fill("#user", "sam")
            page.fill("#password", PASSWORDS["sam"])
            page.click("button[type=submit]")
            expect(page.locator("#who")).to_have_text("sam (supervisor)")
            item = page.locator(".request").filter(has_text=note)
            expect(item).to_have_count(1)
            item.get_by_role("button", name="Approve").click()
            expect(page.locator("#notice")).to_contain_text("Approved")
        finally:
            browser.close()
    stack.wait_said("oidc-1", "utter_note_saved")
    assert notes_for(stack.db, DANA).count(note) == 1
    decided = [
        e for e in stack.audit_entries() if e.get("approval") == request_id and e["decision"] == "approved"
    ]
    assert decided[0]["decided_by"] == "sam"


def _pending_id(stack: Stack, conversation: str) -> str:
    """The id of the conversation's pending request, as the store has it."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(stack.approvals_db)) as conn:
        [(found,)] = conn.execute(
            "SELECT id FROM approval_requests WHERE conversation_id = ? AND status = 'pending'",
            (conversation,),
        ).fetchall()
    return str(found)


def test_the_e2e_runner_logs_in_at_the_openid_provider_and_decides_on_the_page(
    stack: Stack, oidc_page: str
) -> None:
    """`mcp-bridge test e2e`'s approval steps against a page whose approvers log in at the provider:
    the runner fills the provider's login form, comes back with the page's session, and decides."""
    import asyncio

    from mcp_bridge.cli.e2e.approvals import ApprovalPage, ApproverError

    note = f"Refund of 7 EUR for Dana ({secrets.token_hex(4)})."
    held(stack, "oidc-runner", note)
    request_id = _pending_id(stack, "oidc-runner")

    async def drive() -> tuple[list[str], str, str]:
        page = ApprovalPage(oidc_page, {"sam": PASSWORDS["sam"], "carol": PASSWORDS["operator"]})
        wrong = ApprovalPage(oidc_page, {"sam": "not the password"})
        try:
            listed = [item["id"] for item in await page.pending("sam")]
            clerk = await page.decide("carol", request_id, True)
            with pytest.raises(ApproverError, match="refused 'sam'"):
                await wrong.pending("sam")
            return listed, str(clerk.kind), str((await page.decide("sam", request_id, True)).kind)
        finally:
            await page.aclose()
            await wrong.aclose()

    listed, clerk, sam = asyncio.run(drive())
    assert request_id in listed
    assert (clerk, sam) == ("not_allowed", "decided")
    stack.wait_said("oidc-runner", "utter_note_saved")
    assert notes_for(stack.db, DANA).count(note) == 1


def _status(stack: Stack, request_id: str) -> tuple[str, int]:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(stack.approvals_db)) as conn:
        [(status, attempts)] = conn.execute(
            "SELECT status, attempts FROM approval_requests WHERE id = ?", (request_id,)
        ).fetchall()
    return str(status), int(attempts)


def _signal_all(service: procs.ServiceProcess, signum: int) -> None:
    import os

    assert service.pid is not None
    for pid in [service.pid, *(child for child, _ in descendants(service.pid))]:
        os.kill(pid, signum)


def test_an_action_server_killed_while_it_runs_an_approved_call_leaves_it_resumed_and_written_once(
    stack: Stack,
) -> None:
    """A real kill in the worst place: the request is `running`, the call is on its way to the CRM
    (held there: the CRM is stopped, SIGSTOP), and the action server is killed (SIGKILL). The CRM then
    goes on and writes the note. The request stays running until its lease passes; the page tells the
    conversation again; the restarted action server runs it again under the same key; the CRM keeps
    one note per key. Last in this module: it restarts the action server."""
    import signal

    note = f"Refund of 99 EUR agreed with Dana ({secrets.token_hex(4)})."
    held(stack, "lost-run", note)
    request_id = _pending_id(stack, "lost-run")
    assert stack.page is not None and stack.crm is not None and stack.actions is not None
    assert stack.action_server is not None
    sam = Page(stack.page.url)
    sam.login("sam")
    _signal_all(stack.crm, signal.SIGSTOP)
    try:
        assert sam.call("POST", "/api/decide", {"id": request_id, "approve": True})[0] == 200
        deadline = time.monotonic() + 30
        while _status(stack, request_id)[0] != "running":
            assert time.monotonic() < deadline, _status(stack, request_id)
            time.sleep(0.1)
        time.sleep(0.5)  # the call leaves the action server for the MCP server, and on to the CRM
        stack.actions.kill()
    finally:
        _signal_all(stack.crm, signal.SIGCONT)
    # The lost run reached the CRM, which goes on and writes the note; nobody records the outcome.
    deadline = time.monotonic() + 20
    while notes_for(stack.db, DANA).count(note) == 0:
        assert time.monotonic() < deadline, "the lost run's call never reached the CRM"
        time.sleep(0.1)
    assert _status(stack, request_id) == ("running", 1)
    stack.actions = stack.start_logged(stack.action_server())
    said = stack.wait_said("lost-run", "utter_note_saved", timeout=RUN_LEASE + 40)
    assert said.count("utter_note_saved") == 1
    assert notes_for(stack.db, DANA).count(note) == 1
    assert _status(stack, request_id) == ("done", 2)
    entries = [e for e in stack.audit_entries() if e.get("approval") == request_id]
    assert "approval_resumed" in [e["decision"] for e in entries]
    # Told again, or decided again: nothing more.
    stack.trigger("lost-run", request_id)
    assert sam.call("POST", "/api/decide", {"id": request_id, "approve": True})[0] == 409
    time.sleep(RUN_LEASE + 1.0)
    assert notes_for(stack.db, DANA).count(note) == 1
    assert stack.said("lost-run").count("utter_note_saved") == 1
