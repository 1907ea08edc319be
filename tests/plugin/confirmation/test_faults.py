"""Faults, with the real processes: the person is told plainly, nothing is lost, nothing is written twice.

The MCP server goes down, is slow past the timeout, or its connection is cut after it committed a
write (a TCP proxy between the bridge and the server does that, see tests/support/tcp_proxy.py);
the CRM's REST API goes down under a running MCP server; the action server restarts between the
question and the "yes"; and the confirming action is called directly with nothing, or something
forged, pending. Every check of what was written reads the CRM's SQLite file.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from crm.tools import CRM_UNREACHABLE, TOOLS

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.errors import OutcomeUnknownError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.sealing import call_digest
from mcp_bridge.skills.files import domain_responses, load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support import procs
from tests.support.conversation import (
    Conversation,
    all_notes,
    asked_call,
    notes_for,
    responses,
    skills_with_source,
)
from tests.support.crm_db import contact_id, count_notes_with_key
from tests.support.procs import EXAMPLE_BOT
from tests.support.rasa_calls import FakeTracker, call_action, said, slot_events
from tests.support.tcp_proxy import TcpProxy

BOT = EXAMPLE_BOT
DANA = "dana@example.com"
TOM = "tom@example.org"
TOKEN = "fault-tests-token-3Vb9Xk2Qm7Lp5Rt8"
# As deployed with no set-up: the key the record draws once and keeps.
NO_SECRET: dict[str, str | None] = {"CONFIRMATION_SECRET": None}
ADD_NOTE_CALL = (b'"tools/call"', b"add_timeline_note")


def unique(label: str) -> str:
    return f"{label} {uuid.uuid4().hex[:8]}"


def port_of(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


@pytest.fixture
async def make_executor(tmp_path: Path) -> AsyncIterator[Callable[..., Executor]]:
    """Executors whose CRM tools are MCP tools at the given URL (or local with source="local")."""
    made: list[Executor] = []

    def make(url: str, *, timeout: float = 10.0, source: str = "mcp:crm") -> Executor:
        servers = {
            "crm": MCPServerConfig(
                name="crm", url=url, timeout=timeout, trusted=True, honours_idempotency_key=True
            )
        }
        skills = load_skills(
            skills_with_source(tmp_path / f"skills-{len(made)}", source),
            local_tools=TOOLS,
            mcp_servers=servers,
            responses=domain_responses(BOT / "domain.yml"),
        )
        executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(servers, connect_timeout=3.0)))
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.aclose()


@pytest.fixture
def proxied_mcp(crm_rest: str, services: procs.Services) -> Iterator[TcpProxy]:
    """A CRM MCP server of this test's own, reached through a TCP proxy (``proxy.url("/mcp")``)."""
    server = services.start(procs.crm_mcp(crm_rest))
    with TcpProxy(port_of(server.url)) as proxy:
        yield proxy


async def asked(chat: Conversation) -> dict[str, Any]:
    """Start logging the note in ``chat`` and return the pending confirmation it asks about."""
    decision = await chat.start()
    assert responses(decision) == ["utter_confirm_note"], decision
    pending = chat.slots[PENDING_SLOT]
    assert isinstance(pending, dict)
    return asked_call(pending)


# -- the MCP server down, slow, cut off ---------------------------------------------------------


async def test_mcp_server_down_when_yes_arrives_then_back_on_the_same_port(
    crm_rest: str, crm_db: Path, services: procs.Services, make_executor: Callable[..., Executor]
) -> None:
    port = procs.free_port()
    server = services.start(procs.crm_mcp(crm_rest, port=port))
    executor = make_executor(server.url)
    first, second = unique("written while the server was down"), unique("written after the restart")
    before = notes_for(crm_db, DANA)
    chat = Conversation(executor, contact_email=DANA, note_text=first)
    await asked(chat)

    server.stop()
    decision = await chat.yes()
    assert decision.outcome == "unavailable"
    assert responses(decision) == ["utter_tool_unavailable"]
    assert chat.slots[PENDING_SLOT] is None
    assert notes_for(crm_db, DANA) == before

    # Same executor, same runtime: only the MCP server comes back.
    services.start(procs.crm_mcp(crm_rest, port=port))
    chat.slots.update(contact_email=DANA, note_text=second)
    await asked(chat)
    decision = await chat.yes()
    assert responses(decision) == ["utter_note_saved"]
    assert notes_for(crm_db, DANA) == [*before, second]


async def test_mcp_server_killed_mid_call_then_restarted(
    crm_rest: str, crm_db: Path, services: procs.Services, make_executor: Callable[..., Executor]
) -> None:
    port = procs.free_port()
    server = services.start(procs.crm_mcp(crm_rest, port=port))
    with TcpProxy(port) as proxy:
        executor = make_executor(proxy.url("/mcp"))
        note = unique("server killed mid-call")
        chat = Conversation(executor, contact_email=DANA, note_text=note)
        pending = await asked(chat)

        # The request is on its way (sent by the bridge, held by the proxy) when the server dies.
        proxy.request_delay = 1.0
        killer = threading.Timer(0.3, lambda: kill(server))
        killer.start()
        try:
            decision = await chat.yes()
        finally:
            killer.join()
        proxy.request_delay = 0.0
        # The bridge cannot know whether the request arrived, so it must not claim either way.
        assert responses(decision) in (["utter_tool_outcome_unknown"], ["utter_tool_unavailable"])
        assert count_notes_with_key(crm_db, pending["id"]) == 0
        assert note not in notes_for(crm_db, DANA)

        services.start(procs.crm_mcp(crm_rest, port=port))
        chat.slots.update(contact_email=DANA, note_text=note)
        await asked(chat)
        assert responses(await chat.yes()) == ["utter_note_saved"]
    assert notes_for(crm_db, DANA).count(note) == 1


def kill(server: procs.ServiceProcess) -> None:
    """SIGKILL: no graceful shutdown, no answer to anything in flight."""
    if server.process is not None:
        server.process.kill()
    server.stop()


async def test_mcp_tool_slow_past_the_timeout(
    crm_db: Path, proxied_mcp: TcpProxy, make_executor: Callable[..., Executor]
) -> None:
    proxy = proxied_mcp
    executor = make_executor(proxy.url("/mcp"), timeout=1.0)
    note = unique("answered too late")
    chat = Conversation(executor, contact_email=DANA, note_text=note)
    pending = await asked(chat)

    proxy.delay = 2.0
    started = time.monotonic()
    decision = await chat.yes()
    waited = time.monotonic() - started
    assert responses(decision) in (["utter_tool_outcome_unknown"], ["utter_tool_unavailable"])
    assert waited < 6.0, f"the person waited {waited:.1f} s for an answer"
    proxy.delay = 0.0
    assert (await chat.yes()).outcome == "nothing_pending"  # a repeated "yes" writes nothing more

    await asyncio.sleep(1.5)  # let the late answer through, in case anything reacts to it
    assert count_notes_with_key(crm_db, pending["id"]) <= 1
    assert notes_for(crm_db, DANA).count(note) <= 1

    # The session still serves the next conversation.
    other = unique("after the slow call")
    chat = Conversation(executor, contact_email=DANA, note_text=other)
    await asked(chat)
    assert responses(await chat.yes()) == ["utter_note_saved"]
    assert notes_for(crm_db, DANA).count(other) == 1


async def test_connection_cut_after_the_server_committed_is_retried_under_the_same_key(
    crm_db: Path, proxied_mcp: TcpProxy, make_executor: Callable[..., Executor]
) -> None:
    proxy = proxied_mcp
    executor = make_executor(proxy.url("/mcp"))
    note = unique("exactly once")
    before = notes_for(crm_db, DANA)
    chat = Conversation(executor, contact_email=DANA, note_text=note)
    pending = await asked(chat)

    proxy.cut_after_request(*ADD_NOTE_CALL)
    decision = await chat.yes()
    assert proxy.cuts_done == 1, "the proxy never saw the write"
    assert responses(decision) == ["utter_note_saved"]
    assert count_notes_with_key(crm_db, pending["id"]) == 1
    assert notes_for(crm_db, DANA) == [*before, note]
    assert (await chat.yes()).outcome == "nothing_pending"
    assert notes_for(crm_db, DANA) == [*before, note]


async def test_runtime_never_repeats_a_call_that_may_have_arrived(
    crm_db: Path, proxied_mcp: TcpProxy
) -> None:
    """Without an idempotency key, a call cut after the server ran it is reported, not repeated."""
    proxy = proxied_mcp
    runtime = MCPRuntime({"crm": MCPServerConfig(name="crm", url=proxy.url("/mcp"))})
    note = unique("sent once, answer lost")
    try:
        await runtime.tools("crm")
        proxy.cut_after_request(*ADD_NOTE_CALL)
        with pytest.raises(OutcomeUnknownError) as caught:
            await runtime.invoke(
                "crm", "add_timeline_note", {"contact_id": contact_id(crm_db, DANA), "text": note}
            )
        assert caught.value.may_have_run is True
        assert proxy.cuts_done == 1
    finally:
        await runtime.aclose()
    assert notes_for(crm_db, DANA).count(note) == 1


async def test_server_gone_after_committing_is_not_reported_as_nothing_saved(
    crm_db: Path, proxied_mcp: TcpProxy, make_executor: Callable[..., Executor]
) -> None:
    proxy = proxied_mcp
    executor = make_executor(proxy.url("/mcp"))
    note = unique("committed, then the server died")
    chat = Conversation(executor, contact_email=DANA, note_text=note)
    pending = await asked(chat)

    proxy.cut_after_request(*ADD_NOTE_CALL, then_refuse=True)
    decision = await chat.yes()
    assert proxy.cuts_done == 1
    assert count_notes_with_key(crm_db, pending["id"]) == 1  # it was saved ...
    assert responses(decision) == ["utter_tool_outcome_unknown"]  # ... so "nothing was saved" is wrong


# -- the CRM's REST API down under a running MCP server -----------------------------------------


@pytest.mark.parametrize("source", ["mcp:crm", "local"])
async def test_crm_rest_down_while_mcp_is_up(
    source: str,
    fresh_crm_db: Path,
    services: procs.Services,
    make_executor: Callable[..., Executor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from crm import tools

    rest = services.start(procs.crm_rest(fresh_crm_db))
    mcp = services.start(procs.crm_mcp(rest.url))
    monkeypatch.setenv("CRM_URL", rest.url)  # for the local tools
    try:
        executor = make_executor(mcp.url, source=source)
        chat = Conversation(executor, contact_email=DANA, note_text="the CRM goes away before the yes")
        await asked(chat)
        rest.stop()
        # Let this loop see the REST server close its kept-alive connections, as a running action
        # server would; otherwise the write goes out on a dead pooled connection and the honest
        # answer becomes "not known whether the note was saved".
        await asyncio.sleep(0.2)

        decision = await chat.yes()
        assert decision.outcome == "failed"
        assert responses(decision) == ["utter_tool_failed"]
        assert decision.say[0].variables["error"] == CRM_UNREACHABLE
        assert "could not be reached" in CRM_UNREACHABLE

        chat.slots.update(contact_email=DANA, note_text="and a new request while it is down")
        decision = await chat.start()
        assert responses(decision) == ["utter_tool_failed"]
        assert decision.say[0].variables["error"] == CRM_UNREACHABLE
    finally:
        await tools.close_client()
    assert all_notes(fresh_crm_db) == []


# -- the action server: restarts, direct calls, other conversations -----------------------------


def write_action_endpoints(path: Path, *, timeout: float = 10.0) -> Path:
    """endpoints.yml for an action server whose MCP server is CRM_MCP_URL, with a short timeout."""
    path.write_text(
        "action_endpoint:\n"
        '  url: "http://127.0.0.1:1/webhook"\n'
        "mcp_servers:\n"
        "  - name: crm\n"
        '    url: "${CRM_MCP_URL}"\n'
        "    type: http\n"
        '    api_key: "${CRM_MCP_TOKEN}"\n'
        "    trusted: true\n"
        "    honours_idempotency_key: true\n"
        f"    timeout: {timeout}\n"
    )
    return path


def start_action_server(
    services: procs.Services,
    tmp: Path,
    crm_url: str,
    mcp_url: str,
    endpoints: Path | None = None,
    extra_env: dict[str, str | None] | None = None,
) -> procs.ServiceProcess:
    """An action server whose record is ``tmp``'s (so one started again on the same folder has it)."""
    return services.start(
        procs.action_server(
            endpoints=endpoints or procs.write_endpoints(tmp / "endpoints.yml", "http://127.0.0.1:1/webhook"),
            crm_url=crm_url,
            mcp_url=mcp_url,
            mcp_token=TOKEN,
            audit_log=tmp / "audit.jsonl",
            extra_env=extra_env,
        )
    )


def question(webhook: str, tracker: FakeTracker) -> dict[str, Any]:
    """Run action_log_interaction for ``tracker`` and return the pending confirmation it set."""
    status, answer, _ = call_action(webhook, "action_log_interaction", tracker)
    assert status == 200, answer
    assert said(answer) == ["utter_confirm_note"], answer
    tracker.apply("action_log_interaction", answer)
    pending = slot_events(answer)[PENDING_SLOT]
    assert isinstance(pending, dict)
    return pending


def test_action_server_restarted_between_question_and_yes(
    crm_rest: str, crm_db: Path, services: procs.Services, tmp_path: Path
) -> None:
    """As deployed with no set-up: no CONFIRMATION_SECRET, the record in its SQLite file (with the key
    it drew): the yes after a restart counts, once."""
    mcp = services.start(procs.crm_mcp(crm_rest, token=TOKEN))
    first = start_action_server(services, tmp_path, crm_rest, mcp.url, extra_env=NO_SECRET)
    note = unique('Dana called about the VAT rate on invoice 4471, "urgent"')
    before = notes_for(crm_db, DANA)
    tracker = FakeTracker(f"restart-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
    tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
    pending = asked_call(question(first.url, tracker))
    assert pending["arguments"]["text"] == note
    first.stop()

    second = start_action_server(services, tmp_path, crm_rest, mcp.url, extra_env=NO_SECRET)
    tracker.user("yes", "affirm", 1.0)
    status, answer, _ = call_action(second.url, "action_confirm_tool", tracker)
    assert status == 200, answer
    assert said(answer) == ["utter_note_saved"]
    assert slot_events(answer)[PENDING_SLOT] is None
    assert notes_for(crm_db, DANA) == [*before, note]
    assert count_notes_with_key(crm_db, pending["id"]) == 1

    # The same request delivered again (a replay of that tracker) finds the note already stored.
    status, replayed, _ = call_action(second.url, "action_confirm_tool", tracker)
    assert status == 200, replayed
    assert notes_for(crm_db, DANA) == [*before, note]
    tracker.apply("action_confirm_tool", answer)
    tracker.user("yes", "affirm", 1.0)
    status, again, _ = call_action(second.url, "action_confirm_tool", tracker)
    assert status == 200 and said(again) == ["utter_nothing_pending"]
    assert notes_for(crm_db, DANA) == [*before, note]

    # The audit trail has the question, the answer and the outcome, and never the note text.
    audit = (tmp_path / "audit.jsonl").read_text()
    entries = [json.loads(line) for line in audit.splitlines()]
    decisions = [entry["decision"] for entry in entries if entry["confirmation"] == pending["id"]]
    assert {"asked", "confirmed", "executed"} <= set(decisions)
    assert note not in audit
    assert note not in first.output() + second.output()


def test_a_withdrawn_permission_stays_withdrawn_across_a_restart(
    crm_rest: str, crm_db: Path, services: procs.Services, tmp_path: Path
) -> None:
    """Granted on one action server, withdrawn on the next, then a third: the note is asked about, and the
    tracker's own say (a permission slot put back) changes nothing."""
    mcp = services.start(procs.crm_mcp(crm_rest, token=TOKEN))
    tracker = FakeTracker(f"withdrawn-{uuid.uuid4().hex}", contact_email=DANA, note_text=unique("granted"))
    first = start_action_server(services, tmp_path, crm_rest, mcp.url, extra_env=NO_SECRET)
    tracker.user(f"log a call with {DANA}: {tracker.slots['note_text']}", "log_interaction", 0.97)
    question(first.url, tracker)
    tracker.user("yes, and don't ask again today", "affirm", 0.97)
    status, granted, _ = call_action(first.url, "action_confirm_tool", tracker)
    assert status == 200 and said(granted) == ["utter_note_saved", "utter_permission_granted"], granted
    tracker.apply("action_confirm_tool", granted)
    first.stop()

    second = start_action_server(services, tmp_path, crm_rest, mcp.url, extra_env=NO_SECRET)
    tracker.user("stop saving without asking", "revoke_permissions", 0.99)
    status, revoked, _ = call_action(second.url, "action_revoke_permissions", tracker)
    assert status == 200 and said(revoked) == ["utter_permissions_revoked"], revoked
    second.stop()

    third = start_action_server(services, tmp_path, crm_rest, mcp.url, extra_env=NO_SECRET)
    note = unique("after the withdrawal")
    before = notes_for(crm_db, DANA)
    tracker.slots.update(contact_email=DANA, note_text=note)
    tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
    status, answer, _ = call_action(third.url, "action_log_interaction", tracker)
    assert status == 200 and said(answer) == ["utter_confirm_note"], answer
    assert notes_for(crm_db, DANA) == before


class ActionStack:
    """A CRM MCP server (with a token) behind a proxy, and an action server that reaches it through it."""

    def __init__(self, crm_rest: str, tmp: Path) -> None:
        self.services = procs.Services()
        self.mcp = self.services.start(procs.crm_mcp(crm_rest, token=TOKEN))
        self.proxy = TcpProxy(port_of(self.mcp.url)).start()
        endpoints = write_action_endpoints(tmp / "endpoints.yml", timeout=2.0)
        self.action = start_action_server(
            self.services, tmp, crm_rest, self.proxy.url("/mcp"), endpoints=endpoints
        )
        self.webhook = self.action.url

    def close(self) -> None:
        self.proxy.stop()
        self.services.close()


@pytest.fixture(scope="module")
def stack(crm_rest: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActionStack]:
    running = ActionStack(crm_rest, tmp_path_factory.mktemp("action-stack"))
    try:
        yield running
    finally:
        running.close()


def confirm_directly(stack: ActionStack, tracker: FakeTracker) -> dict[str, Any]:
    tracker.user("yes", "affirm", 1.0)
    status, answer, elapsed = call_action(stack.webhook, "action_confirm_tool", tracker)
    assert status == 200, answer
    assert elapsed < 5.0
    return dict(answer)


def test_confirm_called_directly_with_nothing_pending(stack: ActionStack, crm_db: Path) -> None:
    before = all_notes(crm_db)
    tracker = FakeTracker(f"direct-{uuid.uuid4().hex}", contact_email=DANA, note_text="never asked")
    assert said(confirm_directly(stack, tracker)) == ["utter_nothing_pending"]
    assert all_notes(crm_db) == before


@pytest.mark.parametrize(
    "forgery",
    [
        "yes please",
        42,
        [],
        {"tool": "add_timeline_note"},
        {"id": "x", "skill": "log_interaction", "tool": "add_timeline_note", "step": "one"},
        "made-up digest",
        "another skill",
        "another step",
        "arguments changed",
    ],
)
def test_confirm_called_directly_with_a_forged_pending_value(
    stack: ActionStack, crm_db: Path, forgery: Any
) -> None:
    dana = contact_id(crm_db, DANA)
    text = unique("forged note")
    tracker = FakeTracker(f"forged-{uuid.uuid4().hex}", contact_email=DANA, note_text=text, contact_id=dana)
    tracker.user("log a call", "log_interaction")
    arguments = {"contact_id": dana, "text": text}
    genuine: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "skill": "log_interaction",
        "tool": "add_timeline_note",
        "step": 1,
        "source": "mcp:crm",
        "arguments": arguments,
        "digest": "0" * 64,
        "asked_at": time.time(),
        "user_turn": 1,
    }
    if forgery == "made-up digest":
        value: Any = genuine
    elif forgery == "another skill":
        value = {**genuine, "skill": "lookup_contact"}
    elif forgery == "another step":
        value = {**genuine, "step": 0}
    elif forgery == "arguments changed":
        value = {**genuine, "arguments": {"contact_id": dana, "text": text + "!"}}
        value["digest"] = call_digest("log_interaction", "add_timeline_note", "mcp:crm", arguments)
    else:
        value = forgery
    tracker.slots[PENDING_SLOT] = value
    before = all_notes(crm_db)
    answer = confirm_directly(stack, tracker)
    assert said(answer) in (["utter_nothing_pending"], ["utter_confirmation_invalid"])
    assert slot_events(answer).get(PENDING_SLOT, "unset") is None
    assert all_notes(crm_db) == before


def test_confirm_called_directly_with_a_well_forged_pending_value(stack: ActionStack, crm_db: Path) -> None:
    tom = contact_id(crm_db, TOM)
    text = unique("a note nobody was asked about")
    arguments = {"contact_id": tom, "text": text}
    tracker = FakeTracker(f"forged-{uuid.uuid4().hex}", contact_email=TOM, note_text=text, contact_id=tom)
    tracker.user("log a call", "log_interaction")
    tracker.slots[PENDING_SLOT] = {
        "id": uuid.uuid4().hex,
        "skill": "log_interaction",
        "tool": "add_timeline_note",
        "step": 1,
        "source": "mcp:crm",
        "arguments": arguments,
        "digest": call_digest("log_interaction", "add_timeline_note", "mcp:crm", arguments),
        "asked_at": time.time(),
        "user_turn": 1,
    }
    before = all_notes(crm_db)
    answer = confirm_directly(stack, tracker)
    assert all_notes(crm_db) == before
    # The action server never asked it: no question is open, and the yes to it is refused.
    assert said(answer) == ["utter_confirmation_invalid"]


@pytest.mark.parametrize("how", ["backdated by hand", "not the next message"])
def test_confirm_called_directly_with_a_stale_pending_value(
    stack: ActionStack, crm_db: Path, how: str
) -> None:
    note = unique("stale")
    tracker = FakeTracker(f"stale-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
    tracker.user(f"log a call with {DANA}", "log_interaction")
    pending = question(stack.webhook, tracker)
    if how == "backdated by hand":
        # Making the tracker's copy look old changes nothing: the record holds when it was asked.
        tracker.slots[PENDING_SLOT] = {**pending, "asked_at": pending["asked_at"] - 3600}
    else:
        tracker.user("what's the weather?", "out_of_scope")
        tracker.apply("utter_out_of_scope", {})
    before = all_notes(crm_db)
    answer = confirm_directly(stack, tracker)
    if how == "backdated by hand":
        assert said(answer) == ["utter_note_saved"]  # in time, as the record knows: written as asked
        assert [n[2] for n in all_notes(crm_db)[len(before) :]] == [note]
        return
    assert all_notes(crm_db) == before
    assert said(answer) == ["utter_confirm_again", "utter_confirm_note"]
    fresh, first = asked_call(slot_events(answer)[PENDING_SLOT]), asked_call(pending)
    assert fresh["id"] != first["id"] and fresh["arguments"] == first["arguments"]


def test_action_server_keeps_serving_while_the_mcp_server_is_slow(stack: ActionStack, crm_db: Path) -> None:
    slow_answer: list[tuple[int, Any, float]] = []
    tracker = FakeTracker(f"slow-{uuid.uuid4().hex}", contact_email=DANA, note_text=unique("slow"))
    tracker.user(f"log a call with {DANA}", "log_interaction")
    warm = FakeTracker(f"warm-{uuid.uuid4().hex}", lookup_email=DANA)
    warm.user(f"who is {DANA}?", "lookup_contact")
    status, answer, _ = call_action(stack.webhook, "action_lookup_contact", warm)  # opens the MCP session
    assert status == 200 and said(answer) == ["utter_contact_found"], answer
    stack.proxy.delay = 4.0
    try:
        worker = threading.Thread(
            target=lambda: slow_answer.append(call_action(stack.webhook, "action_log_interaction", tracker))
        )
        worker.start()
        time.sleep(0.3)  # the slow conversation is now waiting on the MCP server
        for attempt in range(3):
            other = FakeTracker(f"other-{uuid.uuid4().hex}")
            other.user("yes", "affirm", 1.0)
            status, answer, elapsed = call_action(stack.webhook, "action_confirm_tool", other)
            assert status == 200 and said(answer) == ["utter_nothing_pending"]
            assert elapsed < 1.0, f"another conversation waited {elapsed:.2f} s"
            if attempt == 0:
                assert worker.is_alive(), "the slow conversation was not slow; the test proves nothing"
        worker.join(15.0)
    finally:
        stack.proxy.delay = 0.0
    ((status, answer, elapsed),) = slow_answer
    assert status == 200, answer
    assert said(answer) in (["utter_tool_unavailable"], ["utter_tool_outcome_unknown"])
    assert elapsed < 6.0


def test_action_server_keeps_serving_while_the_mcp_server_is_down(
    crm_rest: str, crm_db: Path, services: procs.Services, tmp_path: Path
) -> None:
    mcp = services.start(procs.crm_mcp(crm_rest, token=TOKEN))
    action = start_action_server(services, tmp_path, crm_rest, mcp.url)
    tracker = FakeTracker(f"down-{uuid.uuid4().hex}", contact_email=DANA, note_text=unique("down"))
    tracker.user(f"log a call with {DANA}", "log_interaction")
    question(action.url, tracker)
    mcp.stop()
    before = all_notes(crm_db)

    tracker.user("yes", "affirm", 1.0)
    status, answer, elapsed = call_action(action.url, "action_confirm_tool", tracker)
    assert status == 200, answer
    assert said(answer) == ["utter_tool_unavailable"]
    assert elapsed < 5.0
    for _ in range(3):
        other = FakeTracker(f"other-{uuid.uuid4().hex}")
        other.user("yes", "affirm", 1.0)
        status, answer, elapsed = call_action(action.url, "action_confirm_tool", other)
        assert status == 200 and said(answer) == ["utter_nothing_pending"]
        assert elapsed < 1.0
    assert all_notes(crm_db) == before


# -- one key per call, and an audit trail that fails -------------------------------------------


async def test_a_yes_lost_after_commit_then_confirmed_again_writes_once(
    crm_mcp: str, crm_db: Path, make_executor: Callable[..., Executor]
) -> None:
    """The action server wrote and then Rasa lost its events: the tracker still holds the question, but
    the action server's record knows it was answered. The person's yes again writes nothing more: no
    question is open (and nobody is told that nothing was saved: something was)."""
    executor = make_executor(crm_mcp)
    note = unique("committed, events lost")
    before = notes_for(crm_db, DANA)
    chat = Conversation(executor, contact_email=DANA, note_text=note)
    pending = await asked(chat)

    chat.user_turn += 1  # "yes": the write lands, but Rasa never records the action's events
    lost = await executor.answer(chat.turn("affirm", text="yes"))
    assert responses(lost) == ["utter_note_saved"]
    assert notes_for(crm_db, DANA) == [*before, note]

    again = await chat.yes()  # the person says yes again to the tracker's stale copy
    assert again.outcome == "nothing_pending" and responses(again) == ["utter_nothing_pending"]
    assert chat.slots.get(PENDING_SLOT) is None
    assert notes_for(crm_db, DANA) == [*before, note]  # one note
    assert count_notes_with_key(crm_db, pending["key"]) == 1


def test_action_server_killed_after_commit_then_yes_again_writes_once(
    crm_rest: str, crm_db: Path, services: procs.Services, tmp_path: Path
) -> None:
    """The same, with real processes: the CRM committed the note, its answer is held back by the
    proxy, and the action server is SIGKILLed before it can answer Rasa, so Rasa keeps the tracker
    as it was. The person says yes again to a new action server on the same database: one note, and no
    question is open any more."""
    mcp = services.start(procs.crm_mcp(crm_rest, token=TOKEN))
    with TcpProxy(port_of(mcp.url)) as proxy:
        endpoints = write_action_endpoints(tmp_path / "endpoints.yml", timeout=60.0)
        first = start_action_server(services, tmp_path, crm_rest, proxy.url("/mcp"), endpoints=endpoints)
        note = unique("committed, then the action server was killed")
        before = notes_for(crm_db, DANA)
        tracker = FakeTracker(f"killed-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
        tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
        pending = asked_call(question(first.url, tracker))

        tracker.user("yes", "affirm", 1.0)
        proxy.delay = 60.0  # the server's answer to the write is held back
        lost: list[object] = []

        def confirm() -> None:
            try:
                lost.append(call_action(first.url, "action_confirm_tool", tracker, timeout=90))
            except OSError as dropped:  # what Rasa sees: the connection dies without an answer
                lost.append(dropped)

        call = threading.Thread(target=confirm)
        call.start()
        deadline = time.monotonic() + 30
        while notes_for(crm_db, DANA) == before:
            assert time.monotonic() < deadline, "the write never reached the CRM"
            time.sleep(0.05)
        kill(first)  # committed; the action server dies before it answers
        call.join(30)
        assert lost and isinstance(lost[0], OSError), f"Rasa got the killed server's answer: {lost}"
        proxy.delay = 0.0

        second = start_action_server(services, tmp_path, crm_rest, proxy.url("/mcp"), endpoints=endpoints)
        tracker.user("yes", "affirm", 1.0)  # the person, told nothing, says yes again
        status, answer, _ = call_action(second.url, "action_confirm_tool", tracker)
        assert status == 200, answer
        # The record (the same database, as after a restart) knows the question was answered.
        assert said(answer) == ["utter_nothing_pending"], answer
    assert notes_for(crm_db, DANA) == [*before, note]
    assert count_notes_with_key(crm_db, pending["key"]) == 1


async def test_an_edited_call_gets_a_new_key(crm_mcp: str, make_executor: Callable[..., Executor]) -> None:
    executor = make_executor(crm_mcp)
    chat = Conversation(executor, contact_email=DANA, note_text=unique("first text"))
    pending = await asked(chat)
    await chat.say(f"change it to: {unique('second text')}")
    edited = asked_call(chat.slots[PENDING_SLOT])
    assert edited["digest"] != pending["digest"] and edited["key"] == edited["id"] != pending["key"]


class AuditBreaksAfterConfirmation(AuditLog):
    """An audit trail whose file cannot be written any more once a "yes" was recorded (the disk
    filled, the volume went read-only): every later entry fails."""

    def record(self, **entry: Any) -> None:
        super().record(**entry)
        if entry.get("decision") == "confirmed" and self.path is not None:
            self.path = self.path.parent  # a directory: opening it for appending fails


async def test_an_audit_failure_after_a_successful_call_is_not_reported_as_nothing_saved(
    crm_rest: str, crm_mcp: str, crm_db: Path, tmp_path: Path
) -> None:
    servers = {"crm": MCPServerConfig(name="crm", url=crm_mcp, trusted=True, honours_idempotency_key=True)}
    skills = load_skills(
        skills_with_source(tmp_path / "skills", "mcp:crm"),
        local_tools=TOOLS,
        mcp_servers=servers,
        responses=domain_responses(BOT / "domain.yml"),
    )
    audit = AuditBreaksAfterConfirmation(tmp_path / "audit" / "audit.jsonl")
    executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(servers), audit=audit), audit=audit)
    try:
        note = unique("saved, audit full")
        before = notes_for(crm_db, DANA)
        chat = Conversation(executor, contact_email=DANA, note_text=note)
        await asked(chat)
        decision = await chat.yes()
        assert responses(decision) == ["utter_note_saved"]
        assert notes_for(crm_db, DANA) == [*before, note]
    finally:
        await executor.aclose()
