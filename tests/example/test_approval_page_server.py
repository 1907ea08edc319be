"""The approval page's server (mcp_bridge/approvals/page.py) in-process, over real HTTP on a loopback port,
with a real SQLite approval store and its sessions there: who is let in, what a forged, stale or
logged-out cookie gets, what a POST without the page's Origin gets, how many logins it checks, the
roles as the approvers file says now, and the approvers file's errors. The round trip through the
action server, Rasa and the browser are tests/live/test_approvals.py."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from mcp_bridge.approvals import page as approval_page
from mcp_bridge.approvals.login_limit import LoginLimit, TooMany
from mcp_bridge.approvals.page import (
    Account,
    ActionServerNotifier,
    ApproversFile,
    SignedValues,
    check_password,
    hash_password,
    load_approvers,
    load_people,
    make_app,
)
from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals
from mcp_bridge.approvals.sessions import DatabaseSessions, Sessions
from mcp_bridge.approvals.store import open_store
from mcp_bridge.auth.browser import PageOrigin
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.record.database import open_database
from tests.support import procs

KEY = "k" * 16 + "an approval page key for tests"
SAM = "sam-password-for-tests"


def test_a_password_checks_only_against_its_own_hash() -> None:
    stored = hash_password(SAM)
    assert check_password(SAM, stored)
    assert not check_password(SAM + "x", stored)
    assert not check_password(SAM, "scrypt$not base64$x")
    assert not check_password(SAM, stored.replace("scrypt", "md5", 1))


def test_a_signed_login_cookie_cannot_be_forged_or_kept_past_its_expiry() -> None:
    sessions = SignedValues(KEY, 60)
    cookie = sessions.issue({"user": "sam"}, now=1000)
    assert sessions.read(cookie, now=1030) == {"user": "sam"}
    assert sessions.read(cookie, now=1061) is None  # expired
    body, mac = cookie.split(".")
    forged = SignedValues("another key, just as long as the first one", 60).issue({"user": "sam"}, now=1000)
    assert sessions.read(forged, now=1030) is None
    assert sessions.read(f"{body}x.{mac}", now=1030) is None
    # Another purpose's value (a login in progress) is no session.
    assert SignedValues(KEY, 60, b"another purpose").read(cookie, now=1030) is None


@pytest.mark.parametrize(
    ("text", "place", "reason"),
    [
        ("approvers: {}\n", "approvers", "a mapping of user names"),
        ('approvers:\n  "sam x": {roles: [s], password_hash: "h"}\n', "approvers.sam x", "a user name is"),
        ("approvers:\n  sam: {roles: [], password_hash: h}\n", "approvers.sam.roles", "a list of role names"),
        ("approvers:\n  sam: {roles: [s]}\n", "approvers.sam", "needs exactly 'roles' and 'password_hash'"),
        (
            'approvers:\n  sam: {roles: [s], password_hash: "${UNSET_HASH}"}\n',
            "approvers.sam.password_hash",
            "UNSET_HASH is not set",
        ),
        (
            "approvers:\n  sam: {roles: [s], password_hash: plain}\n",
            "approvers.sam.password_hash",
            "not a scrypt",
        ),
    ],
)
def test_the_approvers_file_is_refused_with_file_place_and_reason(
    tmp_path: Path, text: str, place: str, reason: str
) -> None:
    path = tmp_path / "approvers.yml"
    path.write_text(text)
    with pytest.raises(SystemExit) as caught:
        load_approvers(path, {})
    message = str(caught.value)
    assert message.startswith(f"{path}: {place}: ") and reason in message


@asynccontextmanager
async def serving(
    approvals: Approvals, accounts: Any, database: Path, **options: Any
) -> AsyncIterator[TestClient[Any, Any]]:
    """The page on a free loopback port, its sessions in ``database``; a client whose cookie jar
    sends the page's Secure cookies back over http on loopback, as a browser does."""
    port = procs.free_port()
    origin = PageOrigin.for_page(None, "127.0.0.1", port, trust_proxy=options.pop("trust_proxy", False))
    sessions = Sessions(DatabaseSessions(open_database(str(database))), 3600)
    # The action server is never reached here (port 9): the page tells it again later, and logs so.
    notifier = ActionServerNotifier("http://127.0.0.1:9", "t" * 32)
    app = make_app(approvals, accounts, notifier, origin, sessions, sweep_seconds=60, **options)
    jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=f"http://127.0.0.1:{port}")
    async with TestClient(TestServer(app, host="127.0.0.1", port=port), cookie_jar=jar) as client:
        yield client


def accounts_of(*names: str) -> dict[str, Account]:
    return {name: Account(frozenset({"supervisor"}), hash_password(SAM)) for name in names}


@pytest.fixture
async def page(
    tmp_path: Path,
) -> AsyncIterator[tuple[Any, Approvals]]:
    database = tmp_path / "approvals.sqlite3"
    approvals = Approvals(open_store(str(database)))
    async with serving(approvals, accounts_of("sam", "operator"), database) as client:
        yield client, approvals


async def _held(
    approvals: Approvals, requester: str = "rest:operator", request_id: str = "a" * 32
) -> ApprovalRequest:
    now = time.time()
    request = ApprovalRequest(
        id=request_id,
        conversation_id="c1",
        requester=requester,
        role="supervisor",
        skill="log_interaction",
        tool="add_timeline_note",
        arguments={"contact_id": 1, "text": "<b>refund</b>"},
        key="k1",
        question={},
        slots={},
        created_at=now,
        expires_at=now + 600,
    )
    await approvals.store.add(request)
    return request


async def test_only_a_logged_in_approver_from_this_page_sees_and_decides(
    page: tuple[Any, Approvals],
) -> None:
    client, approvals = page
    request = await _held(approvals)
    origin = {"Origin": str(client.make_url("")).rstrip("/")}
    assert (await client.get("/api/pending")).status == 401
    decide = {"id": request.id, "approve": True}
    assert (await client.post("/api/decide", json=decide, headers=origin)).status == 401
    wrong = await client.post("/login", json={"user": "sam", "password": "nope"}, headers=origin)
    assert wrong.status == 401 and "Set-Cookie" not in wrong.headers
    unknown = await client.post("/login", json={"user": "nobody", "password": SAM}, headers=origin)
    assert unknown.status == 401
    # Another site's page cannot log in or decide in the approver's name.
    elsewhere = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    assert (
        await client.post("/login", json={"user": "sam", "password": SAM}, headers=elsewhere)
    ).status == 403
    assert (
        await client.post("/login", json={"user": "operator", "password": SAM}, headers=origin)
    ).status == 200
    assert (await client.get("/api/pending")).status == 200
    assert (await (await client.get("/api/pending")).json())["pending"] == []  # their own request
    own = await client.post("/api/decide", json=decide, headers=origin)
    assert own.status == 403
    assert (await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)).status == 200
    [shown] = (await (await client.get("/api/pending")).json())["pending"]
    assert shown["arguments"] == {"contact_id": 1, "text": "<b>refund</b>"} and "key" not in shown
    assert (await client.post("/api/decide", json=decide, headers=elsewhere)).status == 403
    assert (
        await client.post("/api/decide", json={"id": "../x", "approve": True}, headers=origin)
    ).status == 400
    assert (
        await client.post("/api/decide", json={"id": request.id, "approve": "yes"}, headers=origin)
    ).status == 400
    assert (await client.post("/api/decide", json=decide, headers=origin)).status == 200
    assert (await client.post("/api/decide", json=decide, headers=origin)).status == 409
    decided = await approvals.store.get(request.id)
    assert decided is not None and decided.status == "approved" and decided.decided_by == "sam"


PEOPLE_FILE = """\
approvers:
  sam: {roles: [supervisor], password_hash: "${SAM_HASH}"}
  asmith: {roles: [supervisor], password_hash: "${SAM_HASH}"}
people:
  sam: {chat: ["rest:sam"], approval_page: [sam]}
  alice: {chat: ["socketio:3f9a1c", "rest:alice"], approval_page: [asmith]}
  operator: {chat: ["rest:operator"]}
"""


@pytest.mark.parametrize(
    ("text", "place", "reason"),
    [
        ("approvers: {}\n", "people", "a mapping of each person"),
        ("people: {sam: {}}\n", "people.sam", "needs 'chat'"),
        ("people: {sam: {chat: rest:sam}}\n", "people.sam.chat", "a list of"),
        ("people: {sam: {phone: [x]}}\n", "people.sam", "needs 'chat'"),
        (
            'people: {sam: {chat: ["rest:x"]}, lee: {chat: ["rest:x"]}}\n',
            "people.lee.chat",
            "'rest:x' is already sam's",
        ),
        ('people: {lee: {chat: ["rest:lee"]}}\n', "people", "the approvers sam are no person's"),
    ],
)
def test_the_people_mapping_is_refused_with_file_place_and_reason(
    tmp_path: Path, text: str, place: str, reason: str
) -> None:
    path = tmp_path / "approvers.yml"
    path.write_text(text)
    with pytest.raises(SystemExit) as caught:
        load_people(path, {"sam"})
    message = str(caught.value)
    assert message.startswith(f"{path}: {place}: ") and reason in message


def test_the_example_approvers_file_maps_every_approver(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "crm_bot" / "approvers.yml"
    people = load_people(example, {"sam", "alice"})
    assert people.approver("sam") == people.requester("socketio:sam") == "sam"
    assert people.requester("rest:operator") == "operator" and people.approver("operator") is None


async def test_the_same_person_logged_in_under_another_name_is_refused(tmp_path: Path) -> None:
    """Alice asked in the chat as socketio:3f9a1c; on the page she is asmith: refused, audited; sam,
    another person, decides. A requester the file does not name cannot be decided for."""
    path = tmp_path / "approvers.yml"
    path.write_text(PEOPLE_FILE)
    env = {"SAM_HASH": hash_password(SAM)}
    accounts = load_approvers(path, env)
    audit = AuditLog(tmp_path / "audit.jsonl")
    approvals = Approvals(
        open_store(str(tmp_path / "approvals.sqlite3")), audit, people=load_people(path, accounts)
    )
    async with serving(approvals, accounts, tmp_path / "approvals.sqlite3") as client:
        origin = {"Origin": str(client.make_url("")).rstrip("/")}
        hers = await _held(approvals, requester="socketio:3f9a1c")
        nobodys = await _held(approvals, requester="socketio:unlisted", request_id="b" * 32)
        login = {"user": "asmith", "password": SAM}
        assert (await client.post("/login", json=login, headers=origin)).status == 200
        assert (await (await client.get("/api/pending")).json())["pending"] == []
        own = await client.post("/api/decide", json={"id": hers.id, "approve": True}, headers=origin)
        assert own.status == 403 and (await own.json())["reason"] == "own_request"
        assert (
            await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)
        ).status == 200
        [shown] = (await (await client.get("/api/pending")).json())["pending"]
        assert shown["id"] == hers.id
        unknown = await client.post("/api/decide", json={"id": nobodys.id, "approve": True}, headers=origin)
        assert unknown.status == 403 and (await unknown.json())["reason"] == "unknown_person"
        decided = await client.post("/api/decide", json={"id": hers.id, "approve": True}, headers=origin)
        assert decided.status == 200
        stored = await approvals.store.get(nobodys.id)  # before the page closes its store
        assert stored is not None and stored.status == "pending"
    refusals = [e for e in audit.entries() if e["decision"] == "approval_not_allowed"]
    assert [(e["decided_by"], e["approval"]) for e in refusals] == [("asmith", hers.id), ("sam", nobodys.id)]


def _set_cookie(answer: aiohttp.ClientResponse) -> tuple[str, str, list[str]]:
    """The session cookie an answer sets: its name, its value and its attributes."""
    [header] = answer.headers.getall("Set-Cookie")
    pair, *attributes = [part.strip() for part in header.split(";")]
    name, _, value = pair.partition("=")
    return name, value, attributes


async def test_a_session_is_a_host_cookie_of_this_page_and_port_and_the_store_keeps_no_cookie(
    page: tuple[Any, Approvals], tmp_path: Path
) -> None:
    client, _ = page
    origin = {"Origin": str(client.make_url("")).rstrip("/")}
    answer = await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)
    assert answer.status == 200
    name, value, attributes = _set_cookie(answer)
    assert name == f"__Host-approver_session-{client.port}"
    assert sorted(attributes) == ["HttpOnly", "Max-Age=3600", "Path=/", "SameSite=Strict", "Secure"]
    assert len(value) == 43  # 32 random bytes: nothing of the user in it
    with sqlite3.connect(tmp_path / "approvals.sqlite3") as db:
        rows = db.execute("SELECT digest, user_name, roles FROM approval_page_sessions").fetchall()
    assert [(user, roles) for _, user, roles in rows] == [("sam", None)]  # roles: the file's, read fresh
    assert value not in repr(rows)  # a reader of the store gets no cookie that lets them in


async def test_logging_out_revokes_the_session_a_copied_cookie_opens_nothing_after(
    page: tuple[Any, Approvals],
) -> None:
    client, _ = page
    origin = {"Origin": str(client.make_url("")).rstrip("/")}
    answer = await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)
    name, value, _ = _set_cookie(answer)
    copied = {"Cookie": f"{name}={value}"}
    assert (await client.get("/api/pending", headers=copied)).status == 200
    out = await client.post("/logout", headers=origin)
    assert out.status == 200
    assert _set_cookie(out)[1] == ""  # the browser's copy is cleared ...
    assert (
        await client.get("/api/me", headers=copied)
    ).status == 401  # ... and every other copy opens nothing
    decide = await client.post(
        "/api/decide", json={"id": "a" * 32, "approve": True}, headers={**copied, **origin}
    )
    assert decide.status == 401


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no Origin: no page's request
        {"Sec-Fetch-Site": "same-origin"},  # a browser's header, but no Origin
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9"},  # another port of the same host: another site's page
        {"Origin": "http://rebound.example:{port}"},  # a name rebound to 127.0.0.1
        {"Origin": "{page}", "Sec-Fetch-Site": "same-site"},
    ],
)
async def test_a_post_that_is_not_the_pages_own_is_refused(
    page: tuple[Any, Approvals], headers: dict[str, str]
) -> None:
    client, approvals = page
    request = await _held(approvals)
    own = {"Origin": str(client.make_url("")).rstrip("/")}
    assert (await client.post("/login", json={"user": "sam", "password": SAM}, headers=own)).status == 200
    sent = {k: v.format(page=own["Origin"], port=client.port) for k, v in headers.items()}
    login = await client.post("/login", json={"user": "sam", "password": SAM}, headers=sent)
    assert login.status == 403 and "Set-Cookie" not in login.headers
    decide = await client.post("/api/decide", json={"id": request.id, "approve": True}, headers=sent)
    assert decide.status == 403
    assert (await client.post("/logout", headers=sent)).status == 403
    assert (await client.get("/api/me")).status == 200  # still logged in: that logout was refused
    stored = await approvals.store.get(request.id)
    assert stored is not None and stored.status == "pending"


async def test_failed_logins_are_limited_per_client_and_per_user_name_before_any_password_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    real = approval_page.check_password

    def counted(password: str, stored: str) -> bool:
        checked.append(password)
        return real(password, stored)

    monkeypatch.setattr(approval_page, "check_password", counted)
    database = tmp_path / "approvals.sqlite3"
    approvals = Approvals(open_store(str(database)))
    limit = LoginLimit(per_client=3, per_user=4, window=60)
    async with serving(approvals, accounts_of("sam", "lee"), database, limit=limit) as client:
        origin = {"Origin": str(client.make_url("")).rstrip("/")}
        for _ in range(4):  # logins that succeed count for nothing
            right = await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)
            assert right.status == 200
        checked.clear()
        for _ in range(3):
            wrong = await client.post("/login", json={"user": "sam", "password": "guess"}, headers=origin)
            assert wrong.status == 401
        right = await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)
        assert right.status == 429 and 1 <= int(right.headers["Retry-After"]) <= 60
        other = await client.post("/login", json={"user": "lee", "password": SAM}, headers=origin)
        assert other.status == 429  # the same client, another name: still this client's limit
        assert len(checked) == 3  # refused unchecked: no scrypt ran for them
        # Another client's address is the peer's: a header any client can send changes nothing.
        forged = {**origin, "X-Forwarded-For": "203.0.113.9"}
        assert (
            await client.post("/login", json={"user": "lee", "password": SAM}, headers=forged)
        ).status == 429

    checked.clear()
    database = tmp_path / "behind-a-proxy.sqlite3"
    limit = LoginLimit(per_client=3, per_user=4, window=60)
    async with serving(approvals, accounts_of("sam"), database, limit=limit, trust_proxy=True) as client:
        origin = {"Origin": str(client.make_url("")).rstrip("/")}
        # Behind a proxy, each client as the proxy names it; one name, from many clients: its own limit.
        for number in range(4):
            sent = {**origin, "X-Forwarded-For": f"198.51.100.7, 203.0.113.{number}"}
            assert (
                await client.post("/login", json={"user": "sam", "password": "guess"}, headers=sent)
            ).status == 401
        sent = {**origin, "X-Forwarded-For": "203.0.113.99"}
        assert (
            await client.post("/login", json={"user": "sam", "password": SAM}, headers=sent)
        ).status == 429
        assert len(checked) == 4


async def test_at_most_two_password_checks_run_at_once_and_a_few_more_wait() -> None:
    limit = LoginLimit(concurrent=2, waiting=1)
    inside = 0
    most = 0
    gate = asyncio.Event()

    async def check() -> str:
        nonlocal inside, most
        try:
            async with limit.checking():
                inside += 1
                most = max(most, inside)
                await gate.wait()
                inside -= 1
                return "checked"
        except TooMany:
            return "refused"

    running = [asyncio.create_task(check()) for _ in range(4)]
    await asyncio.sleep(0.05)
    gate.set()
    assert sorted(await asyncio.gather(*running)) == ["checked", "checked", "checked", "refused"]
    assert most == 2


async def test_roles_are_read_from_the_approvers_file_as_it_is_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sam logs in as a supervisor; the file is changed to make sam a clerk: the next request has
    sam's new roles, in the same session. A file that no longer loads leaves the last good one."""
    monkeypatch.setattr(approval_page, "RELOAD_SECONDS", 0.0)
    path = tmp_path / "approvers.yml"
    path.write_text(PEOPLE_FILE)
    env = {"SAM_HASH": hash_password(SAM)}
    database = tmp_path / "approvals.sqlite3"
    approvals = Approvals(open_store(str(database)))
    approvers = ApproversFile(path, env, approvals)
    async with serving(approvals, approvers, database) as client:
        origin = {"Origin": str(client.make_url("")).rstrip("/")}
        request = await _held(approvals)
        assert (
            await client.post("/login", json={"user": "sam", "password": SAM}, headers=origin)
        ).status == 200
        assert [r["id"] for r in (await (await client.get("/api/pending")).json())["pending"]] == [request.id]

        path.write_text(PEOPLE_FILE.replace("sam: {roles: [supervisor]", "sam: {roles: [clerk]"))
        assert (await (await client.get("/api/me")).json())["roles"] == ["clerk"]
        assert (await (await client.get("/api/pending")).json())["pending"] == []
        decide = await client.post("/api/decide", json={"id": request.id, "approve": True}, headers=origin)
        assert decide.status == 403 and (await decide.json())["reason"] == "not_allowed"

        path.write_text("approvers: [not, a, mapping]\n")
        assert (await (await client.get("/api/me")).json())["roles"] == ["clerk"]  # the last good one


@pytest.mark.parametrize(
    ("env", "args", "said"),
    [
        ({"RASA_AUTH_TOKEN": "x" * 40}, [], "RASA_AUTH_TOKEN is set in its environment"),
        ({"REST_CHANNEL_TOKEN": "x" * 40}, [], "REST_CHANNEL_TOKEN is set in its environment"),
        ({"APPROVAL_TELL_TOKEN": "short"}, [], "APPROVAL_TELL_TOKEN must be at least 32"),
        ({}, ["--public-url", "http://approvals.example.com"], "plain http on another host"),
    ],
)
def test_the_page_refuses_to_start_holding_what_writes_to_a_conversation_or_misconfigured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], args: list[str], said: str
) -> None:
    path = tmp_path / "approvers.yml"
    path.write_text(PEOPLE_FILE)
    for name in approval_page.CONVERSATION_SECRETS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPROVAL_TELL_TOKEN", "t" * 40)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        approval_page.main(["--actions-url", "http://127.0.0.1:9", "--approvers", str(path), *args])
    assert said in str(stopped.value)
