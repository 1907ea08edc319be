"""Several calls, one question (executor rule 6): a decision per call, each call sealed on its own.

The tools are real local async functions that record what they were called with; the audit trail
is a real file. Nothing is mocked.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.approvals.second_approver import Approvals, Approver
from mcp_bridge.approvals.store import open_store
from mcp_bridge.confirmation.decisions import ConfirmationPolicy
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT, YES_NO_BUTTONS
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation, asked_call, responses

CONTACTS = {"dana@example.com": (1, "Dana Whitfield"), "priya@example.com": (2, "Priya Raman")}
NOTE = "Called about the renewal."

SKILL = """\
skill: notes
tools:
  find_contact: local
  record_note: local
  create_task: local
tool_constraints:
  - record_note:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_note
        utter_on_user_denial: utter_note_cancelled
        describe: 'Note on {contact_name}''s record: "{arg_text}"'
  - create_task:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_task
        utter_on_user_denial: utter_task_cancelled
        describe: "Task for {contact_name}, due {arg_due}"
steps:
  - execute_tool: find_contact
    for_each: {slot: contact_emails, as: contact_email}
    arguments: {email: {slot: contact_email}}
    fills: {contact_id: contact_id, contact_name: name}
    not_found_when_false: found
    on_not_found: utter_contact_not_found
  - execute_tool: record_note
    arguments: {contact_id: {slot: contact_id}, text: {slot: note_text}}
    on_success: utter_note_saved
    on_error: utter_tool_failed
  - execute_tool: create_task
    when: {slot: due}
    arguments: {contact_id: {slot: contact_id}, due: {slot: due}}
    on_success: utter_task_created
reset_slots: [contact_email, contact_emails, note_text, due]
edits: {text: note_text, email: contact_email}
"""


_TASK_APPROVER = "      requires_approval_from: {role: supervisor, expires_after: 30m}\n"


class World:
    """The tools, what they wrote, and an executor over them."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        failing_note_for: int | None = None,
        task_approver: bool = False,
        max_items: int | None = None,
    ) -> None:
        self.now = 1_000_000.0
        self.notes: list[tuple[int, str, str | None]] = []
        self.tasks: list[tuple[int, str, str | None]] = []
        self.lookups: list[str] = []
        self.audit_path = tmp_path / "audit.jsonl"

        async def find_contact(email: str) -> dict[str, Any]:
            self.lookups.append(email)
            found = CONTACTS.get(email)
            if found is None:
                return {"ok": True, "found": False}
            return {"ok": True, "found": True, "contact_id": found[0], "name": found[1]}

        async def record_note(
            contact_id: int, text: str, idempotency_key: str | None = None
        ) -> dict[str, Any]:
            if contact_id == failing_note_for:
                return {"ok": False, "error": "the record is locked"}
            self.notes.append((contact_id, text, idempotency_key))
            return {"ok": True}

        async def create_task(
            contact_id: int, due: str, idempotency_key: str | None = None
        ) -> dict[str, Any]:
            self.tasks.append((contact_id, due, idempotency_key))
            return {"ok": True}

        directory = tmp_path / "skills"
        directory.mkdir(exist_ok=True)
        skill = (
            SKILL
            if max_items is None
            else SKILL.replace("as: contact_email}", f"as: contact_email, max_items: {max_items}}}")
        )
        if task_approver:  # every task needs a supervisor after the person's yes; notes do not
            task_line = '        describe: "Task for {contact_name}, due {arg_due}"\n'
            skill = skill.replace(task_line, task_line + _TASK_APPROVER)
        (directory / "notes.yml").write_text(skill)
        tools = {"find_contact": find_contact, "record_note": record_note, "create_task": create_task}
        skills = load_skills(directory, local_tools=tools, mcp_servers=set(), responses=None)
        audit = AuditLog(self.audit_path)
        self.approvals = Approvals(
            open_store(str(tmp_path / "approvals.sqlite3")), audit, clock=lambda: self.now
        )
        self.executor = Executor(
            skills,
            ToolBox(tools, None),
            clock=lambda: self.now,
            audit=audit,
            policy=ConfirmationPolicy(ttl_seconds=60),
            approvals=self.approvals,
        )

    def chat(self, **slots: Any) -> Conversation:
        return Conversation(self.executor, "several", user="rest:ann", **slots)

    def decisions(self) -> list[tuple[str, str, str]]:
        """(tool, confirmation, decision) per audit line of a confirmation."""
        lines = [json.loads(line) for line in self.audit_path.read_text().splitlines()]
        return [(e["tool"], e["confirmation"], e["decision"]) for e in lines if "decision" in e]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def calls_of(chat: Conversation) -> list[dict[str, Any]]:
    slot = chat.slots[PENDING_SLOT]
    assert isinstance(slot, dict) and slot["kind"] == "question" and slot["listed"] is True, slot
    calls: list[dict[str, Any]] = slot["calls"]
    return calls


async def two_notes(world: World, **extra: Any) -> Conversation:
    chat = world.chat(
        contact_email="dana@example.com",
        contact_emails=["dana@example.com", "priya@example.com"],
        note_text=NOTE,
        **extra,
    )
    decision = await chat.start("notes")
    assert decision.outcome == "pending"
    return chat


async def test_two_contacts_are_one_question_with_a_numbered_line_per_call(world: World) -> None:
    chat = await two_notes(world)
    calls = calls_of(chat)
    assert [c["arguments"] for c in calls] == [
        {"contact_id": 1, "text": NOTE},
        {"contact_id": 2, "text": NOTE},
    ]
    # Each call its own key; the question one seal over all of them, in their order.
    assert len({c["key"] for c in calls}) == 2 and len({c["id"] for c in calls}) == 2
    assert "mac" not in calls[0] and isinstance(chat.slots[PENDING_SLOT]["mac"], str)
    assert calls[1]["context"]["contact_name"] == "Priya Raman"
    assert world.notes == [] and world.tasks == []


async def test_the_list_quotes_each_call_and_offers_a_button_per_call(world: World) -> None:
    chat = world.chat(contact_emails=["dana@example.com", "priya@example.com"], note_text=NOTE)
    decision = await chat.start("notes")
    assert responses(decision) == ["utter_confirm_calls"]
    (question,) = decision.say
    assert question.variables["calls"] == (
        f'1. Note on Dana Whitfield\'s record: "{NOTE}"\n2. Note on Priya Raman\'s record: "{NOTE}"'
    )
    assert question.variables["count"] == 2
    assert [b["payload"] for b in question.buttons] == ["/deny", "/affirm", "only 1", "only 2"]


async def test_yes_to_1_no_to_2_writes_exactly_the_first_under_its_own_key(world: World) -> None:
    chat = await two_notes(world)
    first, second = calls_of(chat)
    decision = await chat.say("yes to 1, no to 2", "deny", 0.9)
    assert responses(decision) == ["utter_note_saved", "utter_call_skipped"]
    assert decision.say[0].variables["contact_name"] == "Dana Whitfield"
    assert decision.say[1].variables == {"place": 2, "call": f'Note on Priya Raman\'s record: "{NOTE}"'}
    assert world.notes == [(1, NOTE, first["key"])]
    assert chat.slots[PENDING_SLOT] is None
    decided = [(c, d) for tool, c, d in world.decisions() if d in ("confirmed", "denied", "executed")]
    assert decided == [(first["id"], "confirmed"), (first["id"], "executed"), (second["id"], "denied")]


async def test_all_writes_both_once_each_and_nothing_more(world: World) -> None:
    chat = await two_notes(world)
    first, second = calls_of(chat)
    decision = await chat.say("all", None)
    assert responses(decision) == ["utter_note_saved", "utter_note_saved"]
    assert decision.say[1].variables["contact_name"] == "Priya Raman"
    assert world.notes == [(1, NOTE, first["key"]), (2, NOTE, second["key"])]
    again = await chat.say("all", None)  # nothing is pending any more
    assert world.notes == [(1, NOTE, first["key"]), (2, NOTE, second["key"])]
    assert again.outcome == "handed_back"


@pytest.mark.parametrize("answer", ["/affirm", "yes", "yes to both", "both", "1 and 2 yes"])
async def test_every_way_of_saying_all_writes_both(world: World, answer: str) -> None:
    chat = await two_notes(world)
    await chat.say(answer, "affirm", 0.99)
    assert [n[:2] for n in world.notes] == [(1, NOTE), (2, NOTE)]


@pytest.mark.parametrize("answer", ["/deny", "no", "none", "neither", "no to both"])
async def test_every_way_of_saying_none_writes_nothing(world: World, answer: str) -> None:
    chat = await two_notes(world)
    decision = await chat.say(answer, "deny", 0.99)
    assert responses(decision) == ["utter_calls_cancelled"]
    assert world.notes == [] and chat.slots[PENDING_SLOT] is None
    assert [d for _, _, d in world.decisions()][-2:] == ["denied", "denied"]


@pytest.mark.parametrize(
    "answer",
    [
        "yes to 1",
        "1",
        "yes to 3, no to 2",
        "1 and 2 no wait just 1",
        "yes to 1 and 2 no",
        "maybe both?",
        "oh sure, all",
    ],
)
async def test_an_answer_that_does_not_decide_every_call_writes_nothing_and_asks_again(
    world: World, answer: str
) -> None:
    chat = await two_notes(world)
    keys = [c["key"] for c in calls_of(chat)]
    decision = await chat.say(answer, "affirm", 0.99)
    assert responses(decision) == ["utter_answer_each_call", "utter_confirm_calls"]
    assert world.notes == []
    assert [c["key"] for c in calls_of(chat)] == keys, "asked again, each call keeps its key"
    await chat.say("only the first", "affirm", 0.99)
    assert world.notes == [(1, NOTE, keys[0])]


async def test_an_edit_names_its_call_and_only_that_call_changes(world: World) -> None:
    chat = await two_notes(world)
    first, second = calls_of(chat)
    decision = await chat.say("change 2 to: Priya wants a demo", None)
    assert responses(decision) == ["utter_confirm_calls"]
    new_first, new_second = calls_of(chat)
    assert new_first["arguments"] == first["arguments"] and new_first["key"] == first["key"]
    assert new_second["arguments"] == {"contact_id": 2, "text": "Priya wants a demo"}
    assert new_second["key"] != second["key"], "a changed call is a new call"
    assert "Priya wants a demo" in decision.say[0].variables["calls"]
    assert chat.slots["note_text"] == NOTE, "the other call's text is the conversation's, unchanged"
    await chat.say("all", None)
    assert world.notes == [(1, NOTE, first["key"]), (2, "Priya wants a demo", new_second["key"])]
    assert ("record_note", second["id"], "edited") in world.decisions()


async def test_an_edit_that_does_not_say_which_call_is_asked_again(world: World) -> None:
    chat = await two_notes(world)
    decision = await chat.say("change it to: something else", None)
    assert responses(decision) == ["utter_answer_each_call", "utter_confirm_calls"]
    assert [c["arguments"]["text"] for c in calls_of(chat)] == [NOTE, NOTE]
    decision = await chat.say("change 3 to: something else", None)
    assert responses(decision) == ["utter_answer_each_call", "utter_confirm_calls"]


async def test_a_date_adds_the_optional_task_to_the_same_question(world: World) -> None:
    chat = world.chat(contact_email="dana@example.com", note_text=NOTE, due="2026-12-04")
    decision = await chat.start("notes")
    assert "2. Task for Dana Whitfield, due 2026-12-04" in decision.say[0].variables["calls"]
    note, task = calls_of(chat)
    assert (note["tool"], task["tool"]) == ("record_note", "create_task")
    await chat.say("both but not the task", None)
    assert world.notes == [(1, NOTE, note["key"])] and world.tasks == []


async def test_one_call_is_asked_exactly_as_before(world: World) -> None:
    chat = world.chat(contact_email="dana@example.com", note_text=NOTE)
    decision = await chat.start("notes")
    assert responses(decision) == ["utter_confirm_note"] and decision.say[0].buttons == YES_NO_BUTTONS
    slot = chat.slots[PENDING_SLOT]
    assert slot["listed"] is False and [call["context"] for call in slot["calls"]] == [{}]
    assert (await chat.say("only the first", "affirm", 0.99)).outcome == "pending"  # not a yes to one call
    key = asked_call(chat.slots[PENDING_SLOT])["key"]
    assert asked_call(slot)["key"] == key, "asked again, the same call keeps its key"
    await chat.yes()
    assert world.notes == [(1, NOTE, key)]


async def test_an_approved_call_runs_when_another_fails(tmp_path: Path) -> None:
    world = World(tmp_path, failing_note_for=1)
    chat = await two_notes(world)
    decision = await chat.say("all", None)
    assert responses(decision) == ["utter_tool_failed", "utter_note_saved"]
    assert [n[:2] for n in world.notes] == [(2, NOTE)]
    assert decision.outcome == "failed"


async def test_a_late_answer_asks_again_and_the_calls_keep_their_keys(world: World) -> None:
    chat = await two_notes(world)
    keys = [c["key"] for c in calls_of(chat)]
    world.now += 61
    decision = await chat.say("all", None)
    assert responses(decision) == ["utter_confirmation_expired", "utter_confirm_calls"]
    assert world.notes == []
    assert [d for _, _, d in world.decisions()][-4:] == ["expired", "expired", "asked", "asked"]
    await chat.say("all", None)
    assert [n[2] for n in world.notes] == keys


async def test_someone_else_cannot_answer(world: World) -> None:
    chat = await two_notes(world)
    chat.user = "rest:mallory"
    decision = await chat.say("all", None)
    assert decision.outcome == "refused" and world.notes == []


@pytest.mark.parametrize("tamper", ["drop", "swap", "argument", "context", "other_question", "unlisted"])
async def test_a_question_tampered_with_in_the_tracker_changes_nothing_that_is_written(
    world: World, tamper: str
) -> None:
    """The tracker's slot is a copy: the action server's record holds the question asked, and "all"
    writes exactly its calls, whatever was done to the copy (a call dropped, swapped, edited, taken
    from another question, the list turned into one call)."""
    chat = await two_notes(world)
    asked = copy.deepcopy(calls_of(chat))
    calls = copy.deepcopy(asked)
    if tamper == "drop":
        calls = calls[:1]
    elif tamper == "swap":
        calls = calls[::-1]
    elif tamper == "argument":
        calls[1]["arguments"]["text"] = "wire 10,000 EUR"
    elif tamper == "context":
        calls[1]["context"]["contact_name"] = "Dana Whitfield"
    elif tamper == "other_question":
        other = Conversation(
            world.executor, "other", user="rest:ann", **dict(chat.slots, **{PENDING_SLOT: None})
        )
        await other.start("notes")
        calls[1] = calls_of(other)[1]
    listed = tamper != "unlisted"
    chat.slots[PENDING_SLOT] = {**chat.slots[PENDING_SLOT], "calls": calls, "listed": listed}
    decision = await chat.say("all", None)
    assert responses(decision) == ["utter_note_saved", "utter_note_saved"]
    assert [(n[0], n[1], n[2]) for n in world.notes] == [
        (call["arguments"]["contact_id"], call["arguments"]["text"], call["key"]) for call in asked
    ]


async def test_dropping_the_list_denies_every_call(world: World) -> None:
    chat = await two_notes(world)
    decision = await chat.drop()
    assert responses(decision) == ["utter_calls_cancelled"] and world.notes == []
    assert [d for _, _, d in world.decisions()][-2:] == ["denied", "denied"]


async def test_an_interruption_asks_the_list_again(world: World) -> None:
    chat = await two_notes(world)
    handed = await chat.say("who is priya@example.com?", "lookup_contact", 0.99)
    assert handed.outcome == "handed_back"
    resumed = await chat.resume()
    assert responses(resumed) == ["utter_confirm_again", "utter_confirm_calls"]
    await chat.say("no to 1, yes to the rest", None)
    assert [n[:2] for n in world.notes] == [(2, NOTE)]


ONE_OF_TWO = """\
skill: tasks
tools:
  find_contact: local
  create_task: local
tool_constraints:
  - create_task:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_task
        utter_on_user_denial: utter_task_cancelled
        describe: "Task for {contact_name}, due {arg_due}"
steps:
  - execute_tool: find_contact
    for_each: {slot: contact_emails, as: contact_email}
    arguments: {email: {slot: contact_email}}
    fills: {contact_id: contact_id, contact_name: name, wants_task: wants_task}
  - execute_tool: create_task
    when: {slot: wants_task}
    arguments: {contact_id: {slot: contact_id}, due: {slot: due}}
    on_success: utter_task_created
"""


async def test_one_call_of_several_lines_is_a_list_of_one(tmp_path: Path) -> None:
    """Two contacts, a task for one only: asked as a list of one, since the contact it is for (its
    context) is not the conversation's; confirmed, it writes once, for that contact."""
    tasks: list[tuple[int, str, str | None]] = []

    async def find_contact(email: str) -> dict[str, Any]:
        contact_id, name = CONTACTS[email]
        return {"ok": True, "contact_id": contact_id, "name": name, "wants_task": contact_id == 2}

    async def create_task(contact_id: int, due: str, idempotency_key: str | None = None) -> dict[str, Any]:
        tasks.append((contact_id, due, idempotency_key))
        return {"ok": True}

    (tmp_path / "tasks.yml").write_text(ONE_OF_TWO)
    local = {"find_contact": find_contact, "create_task": create_task}
    skills = load_skills(tmp_path, local_tools=local, mcp_servers=set(), responses=None)
    chat = Conversation(Executor(skills, ToolBox(local, None)), "one-of-two", due="2026-12-04")
    chat.slots["contact_emails"] = ["dana@example.com", "priya@example.com"]
    decision = await chat.start("tasks")
    # Its own wording ("Shall I do this?"), not "Shall I do these 1?", and no "Only 1" button.
    assert responses(decision) == ["utter_confirm_one_call"]
    assert decision.say[0].variables["calls"] == "1. Task for Priya Raman, due 2026-12-04"
    assert decision.say[0].buttons == YES_NO_BUTTONS
    (call,) = calls_of(chat)
    assert (call["tool"], call["arguments"]["contact_id"]) == ("create_task", 2)
    decision = await chat.say("yes", "affirm", 0.99)
    assert responses(decision) == ["utter_task_created"]
    assert tasks == [(2, "2026-12-04", call["key"])]


async def test_a_call_of_the_list_that_needs_a_second_approver_waits_and_the_others_run(
    tmp_path: Path,
) -> None:
    """Rule 7 holds per call: "all" writes the note at once, but the task waits for a supervisor,
    and runs (that call alone, with its key and its contact) only when approved; told twice, once."""
    world = World(tmp_path, task_approver=True)
    chat = world.chat(contact_email="dana@example.com", note_text=NOTE, due="2026-12-04")
    assert (await chat.start("notes")).outcome == "pending"
    keys = {c["tool"]: c["key"] for c in calls_of(chat)}
    answered = await chat.say("all", None)
    assert answered.outcome == "awaiting_approval"
    assert responses(answered) == ["utter_note_saved", "utter_awaiting_approval"]
    assert world.notes == [(1, NOTE, keys["record_note"])] and world.tasks == []
    supervisor = Approver("sam", frozenset({"supervisor"}))
    [request] = await world.approvals.pending(supervisor)
    assert request.tool == "create_task" and request.arguments == {"contact_id": 1, "due": "2026-12-04"}
    assert world.tasks == []
    assert (await world.approvals.decide(request.id, supervisor, approve=True)).kind == "approved"
    told = await world.executor.approval_decided(chat.turn(None), request.id)
    assert told.outcome == "done" and responses(told) == ["utter_task_created"]
    assert (await world.executor.approval_decided(chat.turn(None), request.id)).say == []
    assert world.tasks == [(1, "2026-12-04", keys["create_task"])]
    assert world.notes == [(1, NOTE, keys["record_note"])]


def _addresses(count: int) -> list[str]:
    return [f"person{n}@example.com" for n in range(count)]


async def test_a_message_naming_200_addresses_starts_nothing_and_the_audit_says_so(world: World) -> None:
    chat = world.chat(contact_emails=_addresses(200), note_text=NOTE)
    decision = await chat.start("notes")
    assert decision.outcome == "too_many_items"
    assert responses(decision) == ["utter_too_many_items"]
    assert decision.say[0].variables == {"count": 200, "limit": 20}  # the default max_items
    assert world.lookups == [] and world.notes == [] and world.tasks == []  # no lookup ran
    assert PENDING_SLOT not in chat.slots or not chat.slots[PENDING_SLOT]  # nothing asked
    entries = [json.loads(line) for line in world.audit_path.read_text().splitlines()]
    (entry,) = [e for e in entries if e.get("event") == "too_many_items"]
    assert (entry["slot"], entry["count"], entry["limit"], entry["skill"]) == (
        "contact_emails",
        200,
        20,
        "notes",
    )
    assert "person0@example.com" not in json.dumps(entries)  # what was asked for stays out of the audit


async def test_a_list_at_the_limit_runs_and_one_over_it_does_not(tmp_path: Path) -> None:
    world = World(tmp_path, max_items=2)  # the bot owner's for_each max_items
    over = await world.chat(contact_emails=_addresses(3), note_text=NOTE).start("notes")
    assert over.outcome == "too_many_items" and over.say[0].variables == {"count": 3, "limit": 2}
    assert world.lookups == []
    at = await world.chat(contact_emails=["dana@example.com", "priya@example.com"], note_text=NOTE).start(
        "notes"
    )
    assert at.outcome == "pending" and world.lookups == ["dana@example.com", "priya@example.com"]
