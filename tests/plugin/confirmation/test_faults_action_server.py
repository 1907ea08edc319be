"""Faults of the action server, with the real processes: it restarts between the question and the "yes",
it is killed after the CRM committed, the confirming action is called directly with nothing or something
forged pending, and it keeps serving while the MCP server is slow or down. Every check of what was
written reads the CRM's SQLite file. (The MCP server's and the CRM's faults: test_faults.py.)
"""

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.sealing import call_digest
from tests.plugin.confirmation.test_faults import DANA, NO_SECRET, TOKEN, TOM, kill, port_of, unique
from tests.support import procs
from tests.support.conversation import (
    all_notes,
    asked_call,
    notes_for,
)
from tests.support.crm_db import contact_id, count_notes_with_key
from tests.support.rasa_calls import FakeTracker, call_action, said, slot_events
from tests.support.tcp_proxy import TcpProxy

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
