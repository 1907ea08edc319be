"""A rolling upgrade: what release 0.2.0 left in a conversation is answered by this release.

tests/fixtures/previous_release/records.json was written by release 0.2.0's own code
(``make_records.py`` there, run against that release): a question about one call, a numbered list,
a remembered permission, a call held for an approver (its store row) and a server's question. During
an upgrade a replica of this release serves the next turn; each record must still open, and only
for its own conversation, and be answered exactly as it was asked.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals
from mcp_bridge.approvals.store import SQLiteApprovalStore
from mcp_bridge.confirmation.executor import Executor, Turn
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT, PERMISSIONS_SLOT
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation, responses

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "previous_release"
RECORDS: dict[str, Any] = json.loads((FIXTURES / "records.json").read_text())
CONTACTS = {"dana@example.com": (1, "Dana Whitfield"), "priya@example.com": (2, "Priya Raman")}


class World:
    """This release, with the previous one's secret (rotated: a new key seals, the old one opens)."""

    def __init__(self, tmp_path: Path, *, keys: tuple[bytes, ...] | None = None) -> None:
        self.notes: list[tuple[int, str, str | None]] = []
        self.now = float(RECORDS["now"]) + 5

        async def find_contact(email: str) -> dict[str, Any]:
            contact_id, name = CONTACTS[email]
            return {"ok": True, "contact_id": contact_id, "name": name}

        async def record_note(
            contact_id: int, text: str, idempotency_key: str | None = None
        ) -> dict[str, Any]:
            self.notes.append((contact_id, text, idempotency_key))
            return {"ok": True}

        skills_dir = tmp_path / "skills"
        skills_dir.mkdir(parents=True, exist_ok=True)
        (skills_dir / "notes.yml").write_text((FIXTURES / "notes.yml").read_text())
        tools = {"find_contact": find_contact, "record_note": record_note}
        self.store = SQLiteApprovalStore(tmp_path / "approvals.db")
        self.executor = Executor(
            load_skills(skills_dir, local_tools=tools, mcp_servers=set(), responses=None),
            ToolBox(tools, None),
            audit=AuditLog(None),
            clock=lambda: self.now,
            seal=Seal(*(keys or (b"a new secret, sealing from now on", RECORDS["secret"].encode()))),
            approvals=Approvals(self.store, clock=lambda: self.now),
        )

    def chat(self, record: str, conversation: str) -> Conversation:
        chat = Conversation(
            self.executor, conversation, user="rest:alice", **copy.deepcopy(RECORDS[record]["slots"])
        )
        chat.user_turn = RECORDS[record]["user_turn"]
        return chat


@pytest.fixture
async def world(tmp_path: Path) -> Any:
    made = World(tmp_path)
    yield made
    await made.store.aclose()


def old_key(record: str, place: int = 0) -> str:
    slot = RECORDS[record]["slots"][PENDING_SLOT]
    calls = slot["calls"] if "calls" in slot else [slot]
    return str(calls[place]["key"])


async def test_a_question_about_one_call_asked_before_the_upgrade_is_answered_after_it(world: World) -> None:
    chat = world.chat("one_call", "one-call")
    decision = await chat.yes()
    assert responses(decision) == ["utter_note_saved"]
    assert world.notes == [(1, "asked before the upgrade", old_key("one_call"))]


async def test_a_list_asked_before_the_upgrade_is_answered_per_call_after_it(world: World) -> None:
    chat = world.chat("list", "a-list")
    decision = await chat.say("yes to 2, no to 1", None)
    assert responses(decision) == ["utter_call_skipped", "utter_note_saved"]
    assert world.notes == [(2, "a list asked before the upgrade", old_key("list", 1))]


async def test_a_permission_given_before_the_upgrade_still_covers_the_same_calls(world: World) -> None:
    chat = world.chat("permission", "permission")
    chat.slots.update(contact_email="dana@example.com", note_text="after the upgrade")
    decision = await chat.start("notes")
    assert responses(decision) == ["utter_note_saved", "utter_permission_used"]
    assert world.notes[-1][:2] == (1, "after the upgrade")
    # Kept as it was: still the previous release's record, until it is granted again or revoked.
    assert chat.slots[PERMISSIONS_SLOT] == RECORDS["permission"]["slots"][PERMISSIONS_SLOT]


async def test_a_call_held_before_the_upgrade_runs_once_when_approved_after_it(world: World) -> None:
    request = ApprovalRequest(**RECORDS["held"]["row"])
    await world.store.add(request)
    assert await world.store.decide(request.id, "approved", "ops:sam", world.now)
    turn = Turn("held", {}, 2, "approval_decided", 1.0, {}, text="", new_message=True)
    decision = await world.executor.approval_decided(turn, request.id)
    assert responses(decision) == ["utter_note_saved"]
    assert world.notes == [(1, "a refund of 40 EUR", request.key)]


async def test_a_servers_question_asked_before_the_upgrade_is_asked_again_after_an_interruption(
    world: World,
) -> None:
    chat = world.chat("server_question", "server")
    chat.user_turn += 1
    decision = await chat.resume()
    assert decision.outcome == "pending" and responses(decision) == ["utter_elicitation_field"]


@pytest.mark.parametrize(
    ("record", "conversation"),
    [("one_call", "one-call"), ("list", "a-list"), ("server_question", "server")],
)
async def test_a_record_of_the_previous_release_opens_only_in_its_own_conversation(
    world: World, record: str, conversation: str
) -> None:
    elsewhere = world.chat(record, f"not-{conversation}")
    decision = await (elsewhere.resume() if record == "server_question" else elsewhere.yes())
    assert decision.outcome == "rejected" and world.notes == []


async def test_a_previous_release_question_edited_in_the_tracker_writes_nothing(world: World) -> None:
    chat = world.chat("one_call", "one-call")
    chat.slots[PENDING_SLOT]["arguments"]["text"] = "wire 10,000 EUR"
    chat.slots["note_text"] = "wire 10,000 EUR"
    decision = await chat.yes()
    assert decision.outcome == "rejected" and world.notes == []


async def test_without_the_previous_secret_nothing_of_the_previous_release_opens(tmp_path: Path) -> None:
    world = World(tmp_path, keys=(b"only a new secret, the old one dropped",))
    try:
        decision = await world.chat("one_call", "one-call").yes()
        assert decision.outcome == "rejected" and world.notes == []
    finally:
        await world.store.aclose()


async def test_a_question_answered_after_the_upgrade_is_sealed_the_new_way(world: World) -> None:
    chat = world.chat("one_call", "one-call")
    await chat.say("hmm, not sure", None)  # asked again: the new question is sealed by this release
    slot = chat.slots[PENDING_SLOT]
    assert slot["v"] == 2 and slot["kind"] == "question" and slot["calls"][0]["key"] == old_key("one_call")
    assert ELICITATION_SLOT not in chat.slots or chat.slots[ELICITATION_SLOT] is None
