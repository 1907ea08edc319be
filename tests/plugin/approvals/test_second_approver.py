"""A second approver (mcp_bridge/approvals/second_approver.py): the rules, through the executor, on fixture
tools and a
real SQLite store. What is written is read from the notebook; what was decided from the store and
the audit trail."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from mcp_bridge.approvals.second_approver import Approvals, Approver, People
from mcp_bridge.approvals.store import open_store
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.errors import ConfigError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation, responses
from tests.support.fixture_tools import SKILLS, ContactId, Notebook, NoteResult, NoteText, local_tools

DANA = "dana@example.com"
SUPERVISOR = Approver("sam", frozenset({"supervisor"}))

_CONFIRM = "        utter_on_user_denial: utter_note_cancelled\n"


def skill_text(approval: str) -> str:
    """The fixture's log skill with ``approval`` (the lines under ``requires_approval_from:``)."""
    text = SKILLS["log_interaction"].format(source="local")
    assert _CONFIRM in text
    return text.replace(_CONFIRM, _CONFIRM + "      requires_approval_from:\n" + approval)


APPROVAL = "        role: supervisor\n        expires_after: 30m\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Bench:
    """An executor with approvals over a SQLite store, the notebook it writes to, a clock."""

    def __init__(
        self,
        tmp_path: Path,
        approval: str = APPROVAL,
        *,
        keyless: bool = False,
        slow: asyncio.Event | None = None,
    ) -> None:
        self.book = Notebook()
        self.clock = Clock()
        self.audit = AuditLog(tmp_path / "audit.jsonl")
        directory = tmp_path / "skills"
        directory.mkdir(exist_ok=True)
        (directory / "log_interaction.yml").write_text(skill_text(approval))
        tools = local_tools(self.book)
        if keyless:  # a tool that takes no idempotency key, so cannot keep one write per key
            keyed = tools["add_timeline_note"]

            async def add_timeline_note(contact_id: ContactId, text: NoteText) -> NoteResult:
                return await keyed(contact_id, text)  # type: ignore[no-any-return]

            tools["add_timeline_note"] = add_timeline_note
        if slow is not None:  # a tool that answers only once ``slow`` is set
            quick = tools["add_timeline_note"]

            async def slow_note(
                contact_id: ContactId, text: NoteText, idempotency_key: str | None = None
            ) -> NoteResult:
                await slow.wait()
                return await quick(contact_id, text, idempotency_key=idempotency_key)  # type: ignore[no-any-return]

            tools["add_timeline_note"] = slow_note
        skills = load_skills(directory, local_tools=tools, mcp_servers={}, responses=None)
        self.store = open_store(str(tmp_path / "approvals.sqlite3"))
        self.approvals = Approvals(self.store, self.audit, clock=self.clock)
        self.executor = Executor(
            skills,
            ToolBox(tools, MCPRuntime({})),
            audit=self.audit,
            clock=self.clock,
            approvals=self.approvals,
        )

    def conversation(self, user: str | None = "rest:alice", cid: str = "c1") -> Conversation:
        return Conversation(self.executor, cid, user=user, contact_email=DANA, note_text=NOTE)

    async def confirmed(self, conversation: Conversation | None = None) -> str:
        """The requester asks and says yes; the id of the request it left."""
        conversation = conversation or self.conversation()
        asked = await conversation.start()
        assert asked.outcome == "pending"
        held = await conversation.yes()
        assert held.outcome == "awaiting_approval", held
        assert responses(held) == ["utter_awaiting_approval"]
        [entry] = [e for e in self.audit.entries() if e["decision"] == "approval_requested"]
        return str(entry["approval"])

    def decisions(self) -> list[str]:
        return [e["decision"] for e in self.audit.entries()]


NOTE = "Dana asked for a refund of invoice 4471."


@pytest.fixture
async def bench(tmp_path: Path) -> AsyncIterator[Bench]:
    made = Bench(tmp_path)
    yield made
    await made.executor.aclose()


async def test_a_confirmed_call_waits_for_the_approver_and_writes_nothing(bench: Bench) -> None:
    request_id = await bench.confirmed()
    assert bench.book.notes == []
    request = await bench.store.get(request_id)
    assert request is not None and request.status == "pending"
    # The exact call, the question's key, who asked, where, until when.
    assert request.tool == "add_timeline_note"
    assert request.arguments == {"contact_id": 1, "text": NOTE}
    confirmed = [e for e in bench.audit.entries() if e["decision"] == "confirmed"][0]
    assert request.key == confirmed["confirmation"]
    assert request.requester == "rest:alice" and request.conversation_id == "c1"
    assert request.expires_at == bench.clock.now + 30 * 60
    assert [r.id for r in await bench.approvals.pending(SUPERVISOR)] == [request_id]


async def test_approved_runs_exactly_once_even_when_told_twice(bench: Bench) -> None:
    request_id = await bench.confirmed()
    decided = await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    assert decided.kind == "approved"
    later = bench.conversation()
    told = await bench.executor.approval_decided(later.turn(None), request_id)
    assert told.outcome == "done" and responses(told) == ["utter_note_saved"]
    again = await bench.executor.approval_decided(later.turn(None), request_id)
    assert again.outcome == "nothing_pending" and again.say == []
    assert bench.book.notes_for(DANA) == [NOTE]
    # The second telling (whoever wrote it into the conversation) is audited with its reason.
    [rejected] = [e for e in bench.audit.entries() if e["decision"] == "approval_rejected"]
    assert rejected["approval"] == request_id and "already run or told" in rejected["result"]
    request = await bench.store.get(request_id)
    assert request is not None
    # Called with the question's idempotency key, once.
    assert [key for tool, key in bench.book.calls if tool == "add_timeline_note"] == [request.key]
    assert request.status == "done" and request.decided_by == "sam"
    approved = [e for e in bench.audit.entries() if e["decision"] == "approved"]
    assert approved[0]["decided_by"] == "sam"


async def test_two_triggers_at_once_write_once(bench: Bench) -> None:
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    turn = bench.conversation().turn(None)
    both = await asyncio.gather(*(bench.executor.approval_decided(turn, request_id) for _ in range(4)))
    assert sorted(d.outcome for d in both) == [
        "done",
        "nothing_pending",
        "nothing_pending",
        "nothing_pending",
    ]
    assert bench.book.notes_for(DANA) == [NOTE]


async def test_the_requester_cannot_approve_their_own_request(bench: Bench) -> None:
    request_id = await bench.confirmed()
    alice = Approver("alice", frozenset({"supervisor"}))  # "rest:alice" asked
    assert [r.id for r in await bench.approvals.pending(alice)] == []
    decided = await bench.approvals.decide(request_id, alice, approve=True)
    assert decided.kind == "own_request"
    request = await bench.store.get(request_id)
    assert request is not None and request.status == "pending"
    assert "approval_not_allowed" in bench.decisions()
    # Not even by the store's own update, whatever a caller skips.
    assert not await bench.store.decide(request_id, "approved", "socketio:ALICE", bench.clock.now)
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "nothing_pending" and bench.book.notes == []


async def test_only_the_role_decides(bench: Bench) -> None:
    request_id = await bench.confirmed()
    clerk = Approver("carol", frozenset({"clerk"}))
    assert (await bench.approvals.decide(request_id, clerk, approve=True)).kind == "not_allowed"
    assert await bench.approvals.pending(clerk) == []
    request = await bench.store.get(request_id)
    assert request is not None and request.status == "pending"


async def test_a_refused_request_writes_nothing_and_is_told_once(bench: Bench) -> None:
    request_id = await bench.confirmed()
    assert (await bench.approvals.decide(request_id, SUPERVISOR, approve=False)).kind == "refused"
    turn = bench.conversation().turn(None)
    told = await bench.executor.approval_decided(turn, request_id)
    assert told.outcome == "cancelled" and responses(told) == ["utter_approval_refused"]
    again = await bench.executor.approval_decided(turn, request_id)
    assert again.say == []
    assert bench.book.notes == [] and not [c for c in bench.book.calls if c[0] == "add_timeline_note"]
    assert "approval_refused" in bench.decisions()


async def test_decided_once(bench: Bench) -> None:
    request_id = await bench.confirmed()
    other = Approver("olga", frozenset({"supervisor"}))
    first, second = await asyncio.gather(
        bench.approvals.decide(request_id, SUPERVISOR, approve=False),
        bench.approvals.decide(request_id, other, approve=True),
    )
    assert sorted([first.kind, second.kind]) in (
        ["already_decided", "refused"],
        ["already_decided", "approved"],
    )
    again = await bench.approvals.decide(request_id, other, approve=True)
    assert again.kind == "already_decided"
    assert [e["decision"] for e in bench.audit.entries()].count("approved") + bench.decisions().count(
        "approval_refused"
    ) == 1


async def test_an_expired_request_is_refused_and_writes_nothing(bench: Bench) -> None:
    request_id = await bench.confirmed()
    bench.clock.now += 30 * 60 + 1
    assert (await bench.approvals.decide(request_id, SUPERVISOR, approve=True)).kind == "already_decided"
    expired = await bench.approvals.expire_due()
    assert [r.id for r in expired] == [request_id]
    assert await bench.approvals.expire_due() == []  # once
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert responses(told) == ["utter_approval_expired"]
    assert bench.book.notes == []
    assert "approval_expired" in bench.decisions()


async def test_approved_but_told_after_the_expiry_writes_nothing(bench: Bench) -> None:
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    bench.clock.now += 30 * 60 + 1
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert responses(told) == ["utter_approval_expired"]
    assert bench.book.notes == []


async def test_another_conversation_cannot_run_it(bench: Bench) -> None:
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    elsewhere = bench.conversation(cid="c2")
    told = await bench.executor.approval_decided(elsewhere.turn(None), request_id)
    assert told.outcome == "nothing_pending" and bench.book.notes == []
    request = await bench.store.get(request_id)
    assert request is not None and request.status == "approved"
    [rejected] = [e for e in bench.audit.entries() if e["decision"] == "approval_rejected"]
    assert rejected["conversation"] == "c2" and rejected["approval"] == request_id
    unknown = await bench.executor.approval_decided(elsewhere.turn(None), "f" * 5000)
    assert unknown.outcome == "nothing_pending"
    rejected_ids = [e["approval"] for e in bench.audit.entries() if e["decision"] == "approval_rejected"]
    assert rejected_ids[-1] == "f" * 64


async def test_a_requester_the_channel_does_not_name_cannot_ask_for_approval(bench: Bench) -> None:
    conversation = bench.conversation(user=None)
    await conversation.start()
    held = await conversation.yes()
    assert held.outcome == "rejected" and responses(held) == ["utter_approval_unavailable"]
    assert bench.book.notes == [] and await bench.approvals.pending(SUPERVISOR) == []


async def test_a_tampered_request_runs_nothing(bench: Bench) -> None:
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    # Someone with database access changes the note: the question's seal no longer holds.
    with closing(sqlite3.connect(bench.store.database.where)) as conn, conn:
        conn.execute(
            "UPDATE approval_requests SET question = json_set(question, '$.arguments.text', 'other')"
        )
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "rejected" and bench.book.notes == []


async def test_when_the_condition_does_not_hold_the_yes_writes(tmp_path: Path) -> None:
    bench = Bench(
        tmp_path, APPROVAL + "        when: {argument: text, contains_any: [Credit note, WRITE-OFF]}\n"
    )
    plain = bench.conversation()
    await plain.start()
    assert (await plain.yes()).outcome == "done"  # "refund" is not a listed word
    assert bench.book.notes_for(DANA) == [NOTE]
    risky = bench.conversation(cid="c3")
    risky.slots["note_text"] = "Agreed a write-off of 40 EUR."
    await risky.start()
    assert (await risky.yes()).outcome == "awaiting_approval"
    assert bench.book.notes_for(DANA) == [NOTE]
    await bench.executor.aclose()


async def test_an_executor_without_approvals_refuses_the_call(tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    bench.executor = Executor(
        bench.executor.skills, bench.executor.tools, audit=bench.audit, clock=bench.clock
    )
    conversation = bench.conversation()
    await conversation.start()
    held = await conversation.yes()
    assert held.outcome == "rejected" and bench.book.notes == []


@pytest.mark.parametrize(
    ("approval", "place", "reason"),
    [
        ("        role: supervisor\n        expires_after: 30 minutes\n", "expires_after", "a duration like"),
        ("        role: supervisor\n        expires_after: 8d\n", "expires_after", "at most 7 days"),
        ("        role: super visor\n", "role", "pattern"),
        (
            "        role: supervisor\n        when: {argument: body, contains_any: [refund]}\n",
            "requires_approval_from.when.argument",
            "'body' is not an argument",
        ),
        ("        role: supervisor\n        when: {argument: text, contains_any: []}\n", "contains_any", ""),
    ],
)
def test_bad_approval_options_name_the_place(tmp_path: Path, approval: str, place: str, reason: str) -> None:
    directory = tmp_path / "skills"
    directory.mkdir()
    (directory / "log_interaction.yml").write_text(skill_text(approval))
    with pytest.raises(ConfigError) as caught:
        load_skills(directory, local_tools=local_tools(Notebook()), mcp_servers={}, responses=None)
    message = str(caught.value)
    assert "log_interaction.yml" in message and place in message and reason in message


def test_an_approval_needs_the_requesters_confirmation(tmp_path: Path) -> None:
    directory = tmp_path / "skills"
    directory.mkdir()
    text = skill_text(APPROVAL).replace("        enabled: true\n", "        enabled: false\n")
    (directory / "log_interaction.yml").write_text(text)
    with pytest.raises(ConfigError, match=r"requires_approval_from: needs requires_confirmation enabled"):
        load_skills(directory, local_tools=local_tools(Notebook()), mcp_servers={}, responses=None)


async def test_a_store_that_fails_after_the_call_does_not_hide_that_it_ran(bench: Bench) -> None:
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)

    async def broken(request_id: str, result: str) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    bench.store.finish = broken  # type: ignore[method-assign]
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "done" and responses(told) == ["utter_note_saved"]
    assert bench.book.notes_for(DANA) == [NOTE]


# -- rule 5: a run lost before its outcome was recorded ----------------------------------------------


async def lost_run(bench: Bench, *, reached_the_tool: bool) -> str:
    """An approved request whose action server took it to run and died: the store says running, the
    outcome was never recorded. ``reached_the_tool``: the call got there (the note is written)."""
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    taken = await bench.approvals.take(request_id, "c1")
    assert taken.kind == "run" and taken.request is not None
    if reached_the_tool:
        bench.book.add(1, NOTE, taken.request.key)
    return request_id


@pytest.mark.parametrize("reached_the_tool", [True, False])
async def test_a_lost_run_is_resumed_after_its_lease_under_its_key_and_writes_once(
    bench: Bench, reached_the_tool: bool
) -> None:
    request_id = await lost_run(bench, reached_the_tool=reached_the_tool)
    conversation = bench.conversation()
    # Within its lease the run may still be going: nobody takes it, nobody is told again.
    bench.clock.now += bench.approvals.run_lease - 1
    assert (await bench.executor.approval_decided(conversation.turn(None), request_id)).outcome == (
        "nothing_pending"
    )
    assert await bench.store.untold(bench.clock.now, 0) == []
    # Past its lease the page's sweep finds it, and its conversation runs it again, once.
    bench.clock.now += 2
    assert [r.id for r in await bench.store.untold(bench.clock.now, 0)] == [request_id]
    told = await bench.executor.approval_decided(conversation.turn(None), request_id)
    assert told.outcome == "done" and responses(told) == ["utter_note_saved"]
    assert bench.book.notes_for(DANA) == [NOTE]
    request = await bench.store.get(request_id)
    assert request is not None and request.status == "done" and request.attempts == 2
    keys = [key for tool, key in bench.book.calls if tool == "add_timeline_note"]
    assert keys == [request.key] * len(keys) and len(keys) == (2 if reached_the_tool else 1)
    assert "approval_resumed" in bench.decisions()
    again = await bench.executor.approval_decided(conversation.turn(None), request_id)
    assert again.outcome == "nothing_pending" and bench.book.notes_for(DANA) == [NOTE]
    bench.clock.now += 10 * bench.approvals.run_lease
    assert await bench.store.untold(bench.clock.now, 0) == []


async def test_a_run_slower_than_its_lease_keeps_it_and_is_neither_taken_up_again_nor_told_twice(
    tmp_path: Path,
) -> None:
    """The action server renews a run's lease while the run goes on: a tool slower than the lease is
    not a lost run (without the renewal, the sweep would tell the conversation again and a second run
    would say "Saved" a second time)."""
    answer = asyncio.Event()
    bench = Bench(tmp_path, slow=answer)
    bench.approvals.run_lease = 0.3  # on the bench's clock; renewed every 0.1 s of real time
    try:
        request_id = await bench.confirmed()
        await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
        turn = bench.conversation().turn(None)
        running = asyncio.create_task(bench.executor.approval_decided(turn, request_id))
        for _ in range(4):  # the run goes on for several of its leases
            bench.clock.now += 0.2
            await asyncio.sleep(0.5)
            assert await bench.store.untold(bench.clock.now, 0) == []
            assert (await bench.executor.approval_decided(turn, request_id)).outcome == "nothing_pending"
        answer.set()
        told = await running
        assert told.outcome == "done" and responses(told) == ["utter_note_saved"]
        assert bench.book.notes_for(DANA) == [NOTE]
        assert [tool for tool, _ in bench.book.calls].count("add_timeline_note") == 1
        request = await bench.store.get(request_id)
        assert request is not None and request.status == "done" and request.attempts == 1
        assert "approval_resumed" not in bench.decisions()
    finally:
        await bench.executor.aclose()


async def test_a_lost_run_of_a_tool_that_keeps_no_key_is_never_repeated(tmp_path: Path) -> None:
    bench = Bench(tmp_path, keyless=True)
    try:
        request_id = await lost_run(bench, reached_the_tool=True)
        bench.clock.now += bench.approvals.run_lease + 1
        told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
        assert told.outcome == "unavailable" and responses(told) == ["utter_tool_outcome_unknown"]
        assert bench.book.notes_for(DANA) == [NOTE]  # the lost run's, and no other
        assert [tool for tool, _ in bench.book.calls].count("add_timeline_note") == 1
        request = await bench.store.get(request_id)
        assert request is not None and request.status == "done" and request.result is not None
        assert request.result.startswith("outcome unknown")
    finally:
        await bench.executor.aclose()


async def test_a_call_that_keeps_killing_its_action_server_is_run_at_most_max_runs_times(
    bench: Bench,
) -> None:
    from mcp_bridge.approvals.second_approver import MAX_RUNS

    request_id = await lost_run(bench, reached_the_tool=False)
    for _ in range(MAX_RUNS - 1):  # each resumed run dies too
        bench.clock.now += bench.approvals.run_lease + 1
        assert (await bench.approvals.take(request_id, "c1")).kind == "resume"
    bench.clock.now += bench.approvals.run_lease + 1
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert responses(told) == ["utter_tool_outcome_unknown"] and bench.book.notes_for(DANA) == []


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("arguments", '{"contact_id": 1, "text": "Dana asked for nothing."}'),
        ("arguments", '{"contact_id": 2, "text": "Dana asked for a refund of invoice 4471."}'),
        ("tool", "create_follow_up_task"),
    ],
)
async def test_an_approved_row_changed_in_the_store_runs_nothing(
    bench: Bench, column: str, value: str
) -> None:
    """The store's copy and the sealed question must agree; a row edited after the yes (arguments,
    or the tool) runs nothing, the requester is told, and the audit says why."""
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    with closing(sqlite3.connect(bench.store.database.where)) as db, db:
        db.execute(f"UPDATE approval_requests SET {column} = ? WHERE id = ?", (value, request_id))
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "rejected" and responses(told) == ["utter_confirmation_invalid"]
    assert bench.book.notes == [] and not [c for c in bench.book.calls if c[0] != "find_contact_by_email"]
    [entry] = [e for e in bench.audit.entries() if e["decision"] == "approval_rejected"]
    assert entry["approval"] == request_id and "not run" in entry["result"]
    request = await bench.store.get(request_id)
    assert request is not None and request.status == "done"


PEOPLE = People(
    chat={"socketio:3f9a1c": "alice", "rest:alice": "alice", "socketio:sam-chat": "sam"},
    page={"asmith": "alice", "sam": "sam", "oidc|8f2e": "alice"},
)


@pytest.mark.parametrize(
    ("approver", "kind", "why"),
    [
        # Alice asked as "rest:alice"; on the page she is the login asmith, or an OpenID subject.
        ("asmith", "own_request", "both are alice"),
        ("oidc|8f2e", "own_request", "both are alice"),
        # Looks like the requester's name: refused with or without a mapping.
        ("alice", "own_request", "their own request"),
        # Nobody the deployment names: refused, whoever they may be.
        ("olga", "unknown_person", "the approver is not in"),
    ],
)
async def test_the_same_person_under_another_name_cannot_approve(
    tmp_path: Path, approver: str, kind: str, why: str
) -> None:
    bench = Bench(tmp_path)
    bench.approvals.people = PEOPLE
    try:
        request_id = await bench.confirmed()
        who = Approver(approver, frozenset({"supervisor"}))
        assert await bench.approvals.pending(who) == []
        decided = await bench.approvals.decide(request_id, who, approve=True)
        assert decided.kind == kind
        [entry] = [e for e in bench.audit.entries() if e["decision"] == "approval_not_allowed"]
        assert why in entry["result"] and entry["decided_by"] == approver
        request = await bench.store.get(request_id)
        assert request is not None and request.status == "pending"
        # Another person may.
        decided = await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
        assert decided.kind == "approved"
    finally:
        await bench.executor.aclose()


async def test_a_requester_nobody_maps_cannot_be_approved_for(tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    bench.approvals.people = PEOPLE
    try:
        request_id = await bench.confirmed(bench.conversation(user="socketio:unlisted"))
        assert await bench.approvals.pending(SUPERVISOR) == []
        decided = await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
        assert decided.kind == "unknown_person"
        [entry] = [e for e in bench.audit.entries() if e["decision"] == "approval_not_allowed"]
        assert "the requester is not in" in entry["result"]
        assert bench.book.notes == []
    finally:
        await bench.executor.aclose()


# -- the release reads the action server's record (the record's issue, case 6) ----------------------


async def test_a_refused_question_put_into_an_approved_row_runs_nothing(bench: Bench) -> None:
    """A database writer swaps an approved row's sealed question for another question of the same
    conversation, one the person refused: still validly sealed, but the record holds it as refused."""
    request_id = await bench.confirmed()
    refused = bench.conversation()
    refused.slots["note_text"] = "Dana asked for a refund of invoice 9999."
    await refused.start()
    sealed = refused.slots[PENDING_SLOT]
    assert responses(await refused.no()) == ["utter_note_cancelled"]
    narrowed = {**sealed, "calls": sealed["calls"][:1]}
    await bench.store.database.execute(
        "UPDATE approval_requests SET question = ?, arguments = ?, idempotency_key = ? WHERE id = ?",
        json.dumps(narrowed),
        json.dumps(sealed["calls"][0]["arguments"]),
        sealed["calls"][0]["key"],
        request_id,
    )
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "rejected" and bench.book.notes == []
    assert "its question was refused, not confirmed" in (await bench.store.get(request_id)).result  # type: ignore[union-attr,operator]


async def test_a_release_of_a_call_the_skill_no_longer_holds_for_an_approver_runs_nothing(
    tmp_path: Path,
) -> None:
    """The skill's rule changed (the approver removed) after the call was held: the gate no longer holds
    such a call, so its release runs nothing; the person asks again under the rules as they are."""
    bench = Bench(tmp_path)
    request_id = await bench.confirmed()
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    skill = bench.executor.skills["log_interaction"]
    constraint = skill.constraints["add_timeline_note"]
    bench.executor.skills["log_interaction"] = dataclasses.replace(
        skill,
        constraints={
            **skill.constraints,
            "add_timeline_note": constraint.model_copy(update={"requires_approval_from": None}),
        },
    )
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "rejected" and bench.book.notes == []
    assert "no longer holds this call for an approver" in (await bench.store.get(request_id)).result  # type: ignore[union-attr,operator]
    await bench.executor.aclose()


async def test_a_row_held_long_after_its_question_was_answered_runs_nothing(bench: Bench) -> None:
    """A row made (or back-dated) well after the yes it claims: not a hold the yes made."""
    request_id = await bench.confirmed()
    await bench.store.database.execute(
        "UPDATE approval_requests SET created_at = created_at + 3600, expires_at = expires_at + 3600"
    )
    await bench.approvals.decide(request_id, SUPERVISOR, approve=True)
    told = await bench.executor.approval_decided(bench.conversation().turn(None), request_id)
    assert told.outcome == "rejected" and bench.book.notes == []
