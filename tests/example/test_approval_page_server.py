"""The approval page's server (mcp_bridge/approvals/page.py) in-process, over real HTTP on a loopback port,
with a real SQLite approval store: who is let in, what a forged or stale cookie gets, the approvers
file's errors. The round trip through Rasa and the browser are tests/live/test_approvals.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from mcp_bridge.approvals.page import (
    COOKIE,
    Account,
    RasaNotifier,
    Sessions,
    check_password,
    hash_password,
    load_approvers,
    load_people,
    make_app,
)
from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals
from mcp_bridge.approvals.store import open_store
from mcp_bridge.observability.audit import AuditLog

KEY = "k" * 16 + "an approval page key for tests"
SAM = "sam-password-for-tests"


def test_a_password_checks_only_against_its_own_hash() -> None:
    stored = hash_password(SAM)
    assert check_password(SAM, stored)
    assert not check_password(SAM + "x", stored)
    assert not check_password(SAM, "scrypt$not base64$x")
    assert not check_password(SAM, stored.replace("scrypt", "md5", 1))


def test_a_session_cookie_cannot_be_forged_or_kept_past_its_expiry() -> None:
    sessions = Sessions(KEY, 60)
    cookie = sessions.issue({"user": "sam"}, now=1000)
    assert sessions.read(cookie, now=1030) == {"user": "sam"}
    assert sessions.read(cookie, now=1061) is None  # expired
    body, mac = cookie.split(".")
    forged = Sessions("another key, just as long as the first one", 60).issue({"user": "sam"}, now=1000)
    assert sessions.read(forged, now=1030) is None
    assert sessions.read(f"{body}x.{mac}", now=1030) is None
    # Another purpose's value (a login in progress) is no session.
    assert Sessions(KEY, 60, b"logins in progress").read(cookie, now=1030) is None


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


@pytest.fixture
async def page(
    tmp_path: Path,
) -> AsyncIterator[tuple[Any, Approvals]]:
    store = open_store(str(tmp_path / "approvals.sqlite3"))
    approvals = Approvals(store)
    accounts = {
        "sam": Account(frozenset({"supervisor"}), hash_password(SAM)),
        "operator": Account(frozenset({"supervisor"}), hash_password(SAM)),
    }
    # Rasa is never reached here (port 9): the page tells it again later, and says so in its log.
    app = make_app(approvals, accounts, RasaNotifier("http://127.0.0.1:9", "t"), KEY, sweep_seconds=60)
    async with TestClient(TestServer(app)) as client:
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
    assert wrong.status == 401 and COOKIE not in wrong.cookies
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
    app = make_app(approvals, accounts, RasaNotifier("http://127.0.0.1:9", "t"), KEY, sweep_seconds=60)
    async with TestClient(TestServer(app)) as client:
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
