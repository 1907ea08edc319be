"""Faults, with the real processes: the person is told plainly, nothing is lost, nothing is written twice.

The MCP server goes down, is slow past the timeout, or its connection is cut after it committed a
write (a TCP proxy between the bridge and the server does that, see tests/support/tcp_proxy.py);
the CRM's REST API goes down under a running MCP server; Rasa loses the events of a yes that wrote; the
audit trail fails after a call. Every check of what was written reads the CRM's SQLite file. (The
action server's own faults, its restarts and direct calls: test_faults_action_server.py.)
"""

from __future__ import annotations

import asyncio
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
    """SIGKILL to the server and every process below it: no graceful shutdown, no answer to anything in
    flight (killing only the main process left its worker answering once the proxy let go)."""
    server.kill()


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
