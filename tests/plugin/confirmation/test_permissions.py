"""Remembered permission (issue 21 part 3, executor rule 8): "yes, and don't ask again today" lets
later calls in the skill's scope run unasked, and nothing else: not another contact, not after the
expiry or a revocation, not in another conversation or for another person, never instead of a second
approver, never for a destructive tool unless the skill says so, never for a list of calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.confirmation import permissions
from mcp_bridge.confirmation.decisions import Decision
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.confirmation.gate import Ask, Gate, Reached
from mcp_bridge.contract import PENDING_SLOT, YES_NO_BUTTONS
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.record.database import open_database
from mcp_bridge.record.store import Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import RequiresConfirmation, load_skills
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.context import NOBODY
from mcp_bridge.tools.sources import Annotations
from tests.support.conversation import Conversation, responses

CONTACTS = {"dana@example.com": (1, "Dana Whitfield"), "priya@example.com": (2, "Priya Raman")}
GRANT = "yes, and don't ask again today"

SKILL = """\
skill: notes
tools:
  find_contact: local
  record_note: local
tool_constraints:
  - record_note:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_note
        utter_on_user_denial: utter_note_cancelled
        describe: 'Note on {contact_name}''s record: "{arg_text}"'
      requires_approval_from:
        role: supervisor
        when: {argument: text, contains_any: [refund]}
      allows_remembering:
        same_arguments: [contact_id]
        expires_after: 8h
        describe: "notes to {contact_name}"
steps:
  - execute_tool: find_contact
    for_each: {slot: contact_emails, as: contact_email}
    arguments: {email: {slot: contact_email}}
    fills: {contact_id: contact_id, contact_name: name}
  - execute_tool: record_note
    arguments: {contact_id: {slot: contact_id}, text: {slot: note_text}}
    on_success: utter_note_saved
reset_slots: [contact_email, contact_emails, note_text]
edits: {text: note_text, email: contact_email}
"""


class World:
    def __init__(
        self, tmp_path: Path, skill: str = SKILL, seal: Seal | None = None, record: Record | None = None
    ) -> None:
        self.now = 1_000_000.0
        self.notes: list[tuple[int, str, str | None]] = []
        self.audit_path = tmp_path / "audit.jsonl"

        async def find_contact(email: str) -> dict[str, Any]:
            contact_id, name = CONTACTS[email]
            return {"ok": True, "contact_id": contact_id, "name": name}

        async def record_note(
            contact_id: int, text: str, idempotency_key: str | None = None
        ) -> dict[str, Any]:
            self.notes.append((contact_id, text, idempotency_key))
            return {"ok": True}

        directory = tmp_path / "skills"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "notes.yml").write_text(skill)
        tools = {"find_contact": find_contact, "record_note": record_note}
        self.skills = load_skills(directory, local_tools=tools, mcp_servers=set(), responses=None)
        self.seal = seal or Seal(b"a secret every replica shares")
        self.executor = Executor(
            self.skills,
            ToolBox(tools, None),
            audit=AuditLog(self.audit_path),
            clock=lambda: self.now,
            seal=self.seal,
            record=record or Record(open_database(":memory:"), clock=lambda: self.now),
        )
        self.record = self.executor.record

    async def standing(self, conversation: str = "c1", user: str | None = "rest:alice") -> int:
        """How many permissions of ``user`` in ``conversation`` the action server's record holds now."""
        return len(await self.record.permissions(conversation, user))

    def chat(self, conversation: str = "c1", user: str | None = "rest:alice") -> Conversation:
        return Conversation(self.executor, conversation, user=user)

    def decisions(self) -> list[str]:
        return [json.loads(line)["decision"] for line in self.audit_path.read_text().splitlines()]


async def log(chat: Conversation, email: str, text: str, *, said: str | None = None) -> Decision:
    """The person asks for a note with ``text`` to ``email`` in a message that says ``said`` (by
    default the note itself, as the example's form takes it)."""
    chat.slots.update(contact_email=email, note_text=text)
    return await chat.start("notes", text=text if said is None else said)


async def granted(world: World, chat: Conversation) -> None:
    """Dana's first note, answered with a grant: written, and the permission kept."""
    asked = await log(chat, "dana@example.com", "First call")
    assert responses(asked) == ["utter_confirm_note"]
    decision = await chat.say(GRANT, "affirm")
    assert responses(decision) == ["utter_note_saved", "utter_permission_granted"]
    assert decision.say[1].variables["permission"] == "notes to Dana Whitfield"
    assert world.notes[-1][:2] == (1, "First call")
    assert await world.standing() == 1  # kept in the action server's record, not in the tracker


async def test_a_grant_lets_later_notes_to_the_same_contact_run_unasked_and_says_so(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    decision = await log(chat, "dana@example.com", "Second call")
    assert responses(decision) == ["utter_note_saved", "utter_permission_used"]
    assert decision.say[1].variables["permission"] == "notes to Dana Whitfield"
    assert decision.outcome == "done" and chat.slots[PENDING_SLOT] is None
    (first, second) = world.notes
    assert second[:2] == (1, "Second call") and second[2] and second[2] != first[2]  # a key of its own
    assert world.decisions().count("permission_granted") == 1
    assert world.decisions().count("permission_used") == 1


async def test_the_question_offers_the_third_button_only_where_a_grant_is_allowed(tmp_path: Path) -> None:
    world = World(tmp_path)
    asked = await log(world.chat(), "dana@example.com", "First call")
    assert asked.say[0].buttons == (*YES_NO_BUTTONS, permissions.GRANT_BUTTON)
    # The button sends the words: read as a grant, like typing them.
    assert permissions.GRANT_BUTTON["payload"] == GRANT
    refund = await log(world.chat("c2"), "dana@example.com", "A refund of 40 EUR")
    assert refund.say[0].buttons == YES_NO_BUTTONS  # needs a supervisor: never remembered
    without = SKILL[: SKILL.index("      allows_remembering:")] + SKILL[SKILL.index("steps:") :]
    plain = World(tmp_path / "plain", without)
    asked = await log(plain.chat(), "dana@example.com", "First call")
    assert asked.say[0].buttons == YES_NO_BUTTONS


async def test_outside_the_scope_the_question_is_asked(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    decision = await log(chat, "priya@example.com", "Another contact")
    assert responses(decision) == ["utter_confirm_note"]
    assert len(world.notes) == 1


async def test_after_the_expiry_the_question_is_asked(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    world.now += 8 * 3600 - 1
    assert responses(await log(chat, "dana@example.com", "Just in time")) == [
        "utter_note_saved",
        "utter_permission_used",
    ]
    world.now += 1
    assert responses(await log(chat, "dana@example.com", "Too late")) == ["utter_confirm_note"]
    assert [n[1] for n in world.notes] == ["First call", "Just in time"]


async def test_a_shorter_lifetime_in_the_skill_applies_to_permissions_already_given(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    # The same deployment (its record), its skill file changed to an hour.
    shorter = World(
        tmp_path / "shorter",
        SKILL.replace("expires_after: 8h", "expires_after: 1h"),
        world.seal,
        world.record,
    )
    world.now = shorter.now = world.now + 3601
    assert responses(await log(shorter.chat(), "dana@example.com", "After an hour")) == ["utter_confirm_note"]


async def test_stop_saving_without_asking_revokes(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    chat.next_message()
    revoked = chat.absorb(await world.executor.revoke(chat.turn("revoke_permissions")))
    assert responses(revoked) == ["utter_permissions_revoked"] and revoked.say[0].variables["count"] == 1
    assert await world.standing() == 0
    assert responses(await log(chat, "dana@example.com", "After revoking")) == ["utter_confirm_note"]
    assert len(world.notes) == 1
    assert "permission_revoked" in world.decisions()
    lines = [json.loads(line) for line in world.audit_path.read_text().splitlines()]
    assert [e["result"] for e in lines if e["decision"] == "permission_not_used"] == [
        "the permission was withdrawn"
    ]


@pytest.mark.parametrize("where", ["another conversation", "another person", "no person named"])
async def test_a_grant_covers_nothing_elsewhere(tmp_path: Path, where: str) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    other = {
        "another conversation": world.chat("c2"),
        "another person": world.chat("c1", user="rest:mallory"),
        "no person named": world.chat("c1", user=None),
    }[where]
    assert responses(await log(other, "dana@example.com", "Elsewhere")) == ["utter_confirm_note"]
    assert len(world.notes) == 1


@pytest.mark.parametrize("tamper", ["scope", "expiry", "user", "mac"])
async def test_a_grant_edited_in_the_database_covers_nothing(tmp_path: Path, tamper: str) -> None:
    """The record's row is sealed: a database writer without CONFIRMATION_SECRET cannot widen a
    permission, lengthen it, or give it to someone else."""
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    ((raw,),) = await world.record.database.fetch("SELECT sealed FROM record_permissions")
    grant = json.loads(raw)
    if tamper == "scope":
        grant["scope"] = None  # any contact
    elif tamper == "expiry":
        grant["expires_at"] += 86400
        await world.record.database.execute("UPDATE record_permissions SET expires_at = expires_at + 86400")
    elif tamper == "user":
        grant["user"] = None
    else:
        grant["mac"] = "0" * 64
    await world.record.database.execute("UPDATE record_permissions SET sealed = ?", json.dumps(grant))
    world.now += 9 * 3600 if tamper == "expiry" else 0
    email = "priya@example.com" if tamper == "scope" else "dana@example.com"
    assert responses(await log(chat, email, "Tampered")) == ["utter_confirm_note"]
    assert len(world.notes) == 1


async def test_a_run_under_a_permission_writes_only_what_the_person_sent(tmp_path: Path) -> None:
    """A tracker rewritten through Rasa's API relabels the person's "thanks" as a request and sets a note
    they never typed: the call is asked about, never written unasked, and the audit says why."""
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    decision = await log(chat, "dana@example.com", "Transfer 500 EUR to account 42", said="thanks")
    assert responses(decision) == ["utter_confirm_note"]
    assert [n[1] for n in world.notes] == ["First call"]
    assert "permission_not_used" in world.decisions()
    # The person's own message with the note in it runs unasked, as granted (the question is dropped).
    assert responses(await log(chat, "dana@example.com", "Called back")) == [
        "utter_question_dropped",
        "utter_note_saved",
        "utter_permission_used",
    ]


async def test_a_message_starts_at_most_one_run_under_a_permission(tmp_path: Path) -> None:
    """The same signed message run through the skill again (a tracker replayed to the action server):
    the first run wrote; the second starts nothing, not even a question."""
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    assert responses(await log(chat, "dana@example.com", "Once")) == [
        "utter_note_saved",
        "utter_permission_used",
    ]
    chat.slots.update(contact_email="dana@example.com", note_text="Once")  # the tracker as it was
    again = await world.executor.start("notes", chat.turn("notes", text="Once"))
    assert responses(again) == ["utter_message_used"] and again.outcome == "rejected"
    assert [n[1] for n in world.notes] == ["First call", "Once"]


async def test_a_withdrawn_permission_stays_withdrawn_whatever_the_tracker_carries(tmp_path: Path) -> None:
    """Withdrawn in the record: a tracker put back as it was before the withdrawal (a rewind, Rasa's API)
    brings nothing back."""
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    before = dict(chat.slots)
    chat.next_message()
    await world.executor.revoke(chat.turn("revoke_permissions"))
    chat.slots = before
    assert responses(await log(chat, "dana@example.com", "After the withdrawal")) == ["utter_confirm_note"]
    assert len(world.notes) == 1


async def test_a_second_approver_is_never_replaced(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    decision = await log(chat, "dana@example.com", "Agreed a refund")
    assert responses(decision) == ["utter_confirm_note"]
    # A grant in answer to that question is no answer: asked again, nothing written or granted.
    again = await chat.say(GRANT, "affirm")
    assert responses(again) == ["utter_answer_yes_or_no", "utter_confirm_note"]
    assert len(world.notes) == 1 and world.decisions().count("permission_granted") == 1


async def test_a_no_with_dont_ask_again_grants_nothing_and_dont_ask_again_alone_is_asked_again(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await log(chat, "dana@example.com", "First call")
    assert responses(await chat.say("don't ask again", "affirm")) == [
        "utter_answer_yes_or_no",
        "utter_confirm_note",
    ]
    assert responses(await chat.say("no, and don't ask again", "deny")) == ["utter_note_cancelled"]
    assert world.notes == [] and await world.standing() == 0
    assert responses(await log(chat, "dana@example.com", "Next")) == ["utter_confirm_note"]


async def test_a_yes_for_this_time_only_writes_grants_nothing_and_says_it_will_ask_again(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await log(chat, "dana@example.com", "First call")
    decision = await chat.say("yes, but ask me again next time", "affirm")
    assert responses(decision) == ["utter_note_saved", "utter_permission_declined"]
    assert world.notes[-1][:2] == (1, "First call")
    assert await world.standing() == 0 and "permission_granted" not in world.decisions()
    assert responses(await log(chat, "dana@example.com", "Next")) == ["utter_confirm_note"]
    assert len(world.notes) == 1
    # A plain yes says nothing about permissions; and where the skill remembers nothing, a yes for
    # this time only is a plain yes (there is no permission to refuse, and the bot need not word one).
    assert responses(await chat.say("yes", "affirm")) == ["utter_note_saved"]
    without = SKILL[: SKILL.index("      allows_remembering:")] + SKILL[SKILL.index("steps:") :]
    other = World(tmp_path / "without", without)
    chat = other.chat()
    await log(chat, "dana@example.com", "First call")
    assert responses(await chat.say("yes, just this once", "affirm")) == ["utter_note_saved"]
    assert other.notes[-1][:2] == (1, "First call")


async def test_a_list_of_several_calls_is_always_asked(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    chat.slots.update(contact_emails=["dana@example.com", "priya@example.com"], note_text="Both")
    decision = await chat.start("notes")
    assert responses(decision) == ["utter_confirm_calls"]
    assert len(world.notes) == 1
    # And a grant is no answer to a list.
    again = await chat.say(GRANT, "affirm")
    assert responses(again) == ["utter_answer_each_call", "utter_confirm_calls"]
    assert len(world.notes) == 1


class _Destructive:
    name, source = "record_note", "mcp:crm"

    async def annotations(self, context: object) -> Annotations:
        return Annotations(read_only=False, vouched=True, destructive=True)


async def test_a_destructive_tool_is_remembered_only_when_the_skill_says_so(tmp_path: Path) -> None:
    skill = World(tmp_path).skills["notes"]
    arguments = {"contact_id": 1, "text": "x"}
    gate = Gate(RequiresConfirmation(enabled=True, utter_for_confirmation="utter_confirm_tool_call"))
    timid = await gate.verdict(skill, "record_note", _Destructive(), arguments, Reached(), NOBODY)
    assert isinstance(timid, Ask) and timid.remember is None
    bold = World(
        tmp_path / "bold",
        SKILL.replace("expires_after: 8h", "expires_after: 8h\n        even_if_destructive: true"),
    )
    allowed = await gate.verdict(
        bold.skills["notes"], "record_note", _Destructive(), arguments, Reached(), NOBODY
    )
    assert isinstance(allowed, Ask) and allowed.remember is not None and allowed.remember.seconds == 8 * 3600


@pytest.mark.parametrize(
    ("block", "place", "reason"),
    [
        ("{expires_after: 8h}", "allows_remembering", "exactly one of same_arguments"),
        (
            "{same_arguments: [contact_id], any_arguments: true, expires_after: 8h}",
            "allows_remembering",
            "exactly one",
        ),
        (
            "{same_arguments: [contact], expires_after: 8h}",
            "allows_remembering.same_arguments[0]",
            "'contact' is not an argument",
        ),
        ("{any_arguments: true, expires_after: 2d}", "allows_remembering.expires_after", "at most one day"),
        ("{any_arguments: true, expires_after: soon}", "allows_remembering.expires_after", "a duration like"),
        ("{any_arguments: true}", "allows_remembering.expires_after", "Field required"),
        (
            "{any_arguments: true, expires_after: 1h, forever: true}",
            "allows_remembering.forever",
            "Extra inputs",
        ),
        (
            "{any_arguments: true, expires_after: 1h, describe: 'notes to {'}",
            "allows_remembering.describe",
            "",
        ),
    ],
)
def test_a_bad_allows_remembering_names_file_place_and_reason(
    tmp_path: Path, block: str, place: str, reason: str
) -> None:
    start = SKILL.index("      allows_remembering:")
    end = SKILL.index("steps:")
    skill = SKILL[:start] + f"      allows_remembering: {block}\n" + SKILL[end:]
    with pytest.raises(ConfigError) as caught:
        World(tmp_path, skill)
    message = str(caught.value)
    assert "notes.yml" in message and place in message and reason in message, message


def test_allows_remembering_needs_the_confirmation_it_answers(tmp_path: Path) -> None:
    approver = SKILL.index("      requires_approval_from:")
    skill = SKILL[:approver] + SKILL[SKILL.index("      allows_remembering:") :]
    skill = skill.replace("        enabled: true\n", "        enabled: false\n")
    with pytest.raises(ConfigError, match="allows_remembering: needs requires_confirmation enabled"):
        World(tmp_path, skill)


async def test_an_answer_that_moves_a_question_into_the_scope_is_asked_again(tmp_path: Path) -> None:
    """Only a new request runs unasked: "no, it's for dana@..." is not a yes, so it asks anew."""
    world = World(tmp_path)
    chat = world.chat()
    await granted(world, chat)
    assert responses(await log(chat, "priya@example.com", "Moved")) == ["utter_confirm_note"]
    moved = await chat.say("no, it's for dana@example.com", "deny")
    assert responses(moved) == ["utter_confirm_note"]
    assert len(world.notes) == 1
