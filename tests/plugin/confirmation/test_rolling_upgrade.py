"""An upgrade from 0.3.0: what that release left in a conversation is never answered by this one.

tests/fixtures/release_0_3/records.json was written by release 0.3.0's own code (``make_records.py``
there, run against that release): a question about one call, a numbered list, a remembered permission
(in the tracker's slot, where 0.3.0 kept it), a call held for an approver (its store row) and a server's
question. 0.3.0 kept no record of what it asked: its questions travelled in the tracker alone, so this
release, which lets only the questions its own record holds be answered, cannot tell one of them from a
forgery made with ``CONFIRMATION_SECRET``. Each is therefore refused, nothing is written, the person is
told, and asking again works (CHANGELOG.md, 0.4.0: questions pending during the upgrade are asked again).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals
from mcp_bridge.approvals.store import open_store
from mcp_bridge.confirmation.decisions import Turn
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation, responses

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "release_0_3"
RECORDS: dict[str, Any] = json.loads((FIXTURES / "records.json").read_text())
CONTACTS = {"dana@example.com": (1, "Dana Whitfield"), "priya@example.com": (2, "Priya Raman")}


class World:
    """This release, with 0.3.0's secret (so its seals still verify: what is refused is refused because the
    record does not hold it, not because the seal broke)."""

    def __init__(self, tmp_path: Path) -> None:
        self.notes: list[tuple[int, str, str | None]] = []
        self.now = float(RECORDS["now"]) + 5
        self.audit_path = tmp_path / "audit.jsonl"

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
        self.store = open_store(str(tmp_path / "mcp_bridge.sqlite3"))
        self.executor = Executor(
            load_skills(skills_dir, local_tools=tools, mcp_servers=set(), responses=None),
            ToolBox(tools, None),
            audit=AuditLog(self.audit_path),
            clock=lambda: self.now,
            seal=Seal(RECORDS["secret"].encode()),
            approvals=Approvals(self.store, clock=lambda: self.now),
        )

    def chat(self, record: str, conversation: str) -> Conversation:
        chat = Conversation(
            self.executor, conversation, user="rest:alice", **copy.deepcopy(RECORDS[record]["slots"])
        )
        chat.user_turn = RECORDS[record]["user_turn"]
        return chat

    def reasons(self) -> list[str]:
        return [json.loads(line).get("result") or "" for line in self.audit_path.read_text().splitlines()]


@pytest.fixture
async def world(tmp_path: Path) -> Any:
    made = World(tmp_path)
    yield made
    await made.store.aclose()


@pytest.mark.parametrize("record", ["one_call", "list"])
async def test_a_question_asked_by_0_3_is_refused_and_asked_again_by_starting_over(
    world: World, record: str
) -> None:
    chat = world.chat(record, record)
    decision = await chat.say("all" if record == "list" else "yes", "affirm")
    assert decision.outcome == "rejected" and responses(decision) == ["utter_confirmation_invalid"]
    assert world.notes == [] and chat.slots[PENDING_SLOT] is None
    assert "the action server's record holds no such question here" in world.reasons()
    # The person asks again: a question of this release, answered as usual.
    chat.slots.update(
        contact_email="dana@example.com", contact_emails=None, note_text="asked again after the upgrade"
    )
    assert responses(await chat.start("notes")) == ["utter_confirm_note"]
    assert responses(await chat.yes()) == ["utter_note_saved"]
    assert [n[:2] for n in world.notes] == [(1, "asked again after the upgrade")]


async def test_a_permission_0_3_kept_in_the_tracker_covers_nothing(world: World) -> None:
    chat = world.chat("permission", "permission")
    assert chat.slots.get("remembered_permissions")  # 0.3.0's slot, still in the tracker
    chat.slots.update(contact_email="dana@example.com", note_text="after the upgrade")
    decision = await chat.start("notes", text="after the upgrade")
    assert responses(decision) == ["utter_confirm_note"] and world.notes == []


async def test_a_call_0_3_held_for_an_approver_is_not_run_when_approved_after_the_upgrade(
    world: World,
) -> None:
    request = ApprovalRequest(**RECORDS["held"]["row"])
    await world.store.add(request)
    assert await world.store.decide(request.id, "approved", "ops:sam", world.now)
    turn = Turn("held", {}, 2, "approval_decided", 1.0, {}, text="", new_message=True)
    decision = await world.executor.approval_decided(turn, request.id)
    assert decision.outcome == "rejected" and responses(decision) == ["utter_confirmation_invalid"]
    assert world.notes == []
    assert (await world.store.get(request.id)).status == "done"  # type: ignore[union-attr]


async def test_a_servers_question_0_3_asked_is_not_answered(world: World) -> None:
    chat = world.chat("server_question", "server")
    decision = await chat.say("2026-12-03")
    assert decision.outcome == "handed_back"  # no question open: the bot's to handle
    assert (await chat.resume()).outcome == "nothing_pending" and chat.slots[ELICITATION_SLOT] is None
