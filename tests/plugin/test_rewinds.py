"""Rewinds (Rasa's /back: ``action_back``'s two ``rewind`` events; an ``undo``) bring back nothing the
plugin ended: not a revoked permission, not a question already answered and run.

The conversation below keeps Rasa's event list the way Rasa sends it to the action server (every
event, the reverted ones too) and reverts its slots on /back the way Rasa's tracker does; each turn's
slots are read through the adapter's :func:`~mcp_bridge.rasa.rewinds.unrewound`, and one test reads a
real rasa_sdk tracker through :func:`~mcp_bridge.rasa.adapter.turn_from_tracker`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from rasa_sdk import Tracker

from mcp_bridge.confirmation.executor import Decision, Executor, Turn
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT, PERMISSIONS_SLOT
from mcp_bridge.rasa.adapter import turn_from_tracker, whole_numbers
from mcp_bridge.rasa.build import DEVELOPMENT_FLAG
from mcp_bridge.rasa.rewinds import unrewound
from tests.plugin.test_remembered_permission import GRANT, World, granted, log
from tests.support.conversation import Conversation, responses


class RasaConversation(Conversation):
    """A :class:`Conversation` whose slots travel as Rasa's events do, with /back."""

    def __init__(self, executor: Executor, conversation_id: str = "c1", *, user: str | None = None) -> None:
        super().__init__(executor, conversation_id, user=user)
        self.events: list[dict[str, Any]] = []
        # The slots before each message the person sent, as Rasa replays them on a rewind.
        self.before: list[dict[str, Any]] = []

    def turn(self, intent: str | None, *args: Any, new_message: bool = True, **kwargs: Any) -> Turn:
        if new_message:
            self.before.append(copy.deepcopy(self.slots))
            self.events.append({"event": "user", "text": kwargs.get("text", ""), "parse_data": {}})
        turn = super().turn(intent, *args, new_message=new_message, **kwargs)
        return Turn(
            turn.conversation_id,
            unrewound(turn.slots, self.events, whole_numbers),
            turn.user_turn,
            turn.intent,
            turn.intent_confidence,
            turn.intent_ranking,
            text=turn.text,
            new_message=turn.new_message,
            loop_active=turn.loop_active,
            user=turn.user,
        )

    def absorb(self, decision: Decision) -> Decision:
        self.events.append({"event": "action", "name": "action_under_test"})
        for name, value in decision.slots.items():
            self.events.append({"event": "slot", "name": name, "value": copy.deepcopy(value)})
        return super().absorb(decision)

    def back(self) -> None:
        """The person sends /back: Rasa's action_back reverts it and the message before it."""
        self.user_turn += 1
        self.events.append({"event": "user", "text": "/back", "parse_data": {}})
        self.events.append({"event": "action", "name": "action_back"})
        self.events += [{"event": "rewind"}, {"event": "rewind"}]
        self.slots = self.before.pop()


def rasa_chat(world: World) -> RasaConversation:
    return RasaConversation(world.executor, "c1", user="rest:alice")


async def test_back_after_a_revoke_brings_no_permission_back(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = rasa_chat(world)
    await granted(world, chat)
    chat.user_turn += 1
    revoked = chat.absorb(await world.executor.revoke(chat.turn("revoke_permissions")))
    assert responses(revoked) == ["utter_permissions_revoked"]
    chat.back()
    assert chat.slots[PERMISSIONS_SLOT] is not None  # Rasa's tracker has it again ...
    decision = await log(chat, "dana@example.com", "After revoking and /back")
    assert responses(decision) == ["utter_confirm_note"]  # ... and it covers nothing: asked again
    assert [n[1] for n in world.notes] == ["First call"]
    # A new grant after the rewind is a permission as any other.
    assert responses(await chat.say(GRANT, "affirm")) == ["utter_note_saved", "utter_permission_granted"]
    assert responses(await log(chat, "dana@example.com", "Later")) == [
        "utter_note_saved",
        "utter_permission_used",
    ]


async def test_back_after_a_grant_undoes_the_grant(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = rasa_chat(world)
    await granted(world, chat)
    assert responses(await log(chat, "dana@example.com", "Covered")) == [
        "utter_note_saved",
        "utter_permission_used",
    ]
    chat.back()  # reverts "Covered": the grant itself stays, as in the latest value
    assert responses(await log(chat, "dana@example.com", "Again covered")) == [
        "utter_note_saved",
        "utter_permission_used",
    ]


async def test_back_after_a_confirmed_question_runs_nothing_again(tmp_path: Path) -> None:
    world = World(tmp_path)
    chat = rasa_chat(world)
    asked = await log(chat, "dana@example.com", "Only once")
    assert responses(asked) == ["utter_confirm_note"]
    assert responses(await chat.yes()) == ["utter_note_saved"]
    chat.back()
    assert chat.slots[PENDING_SLOT] is not None  # the answered question is back in the tracker ...
    again = await chat.yes()
    assert again.outcome != "done" and "utter_note_saved" not in responses(again)  # ... and runs nothing
    assert [n[1] for n in world.notes] == ["Only once"]


def test_without_a_rewind_the_slots_are_taken_as_they_are() -> None:
    slots = {PENDING_SLOT: {"q": 1}, ELICITATION_SLOT: {"e": 1}, PERMISSIONS_SLOT: [{"id": "p"}]}
    assert unrewound(slots, []) == slots
    events = [{"event": "slot", "name": PENDING_SLOT, "value": {"q": 1}}, {"event": "undo"}]
    assert unrewound(slots, events) == {**slots, ELICITATION_SLOT: None, PERMISSIONS_SLOT: None}


def test_the_adapter_reads_a_real_tracker_with_reverted_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVELOPMENT_FLAG, "1")  # the message is unsigned: read as from nobody
    question = {"id": "q1", "mac": "x"}
    events: list[dict[str, Any]] = [
        {"event": "user", "text": "log a note", "parse_data": {}},
        {"event": "slot", "name": PENDING_SLOT, "value": question},
        {"event": "user", "text": "yes", "parse_data": {}},
        {"event": "slot", "name": PENDING_SLOT, "value": None},
        {"event": "slot", "name": ELICITATION_SLOT, "value": {"id": "e1", "n": 7}},
        {"event": "user", "text": "/back", "parse_data": {}},
        {"event": "action", "name": "action_back"},
        {"event": "rewind"},
        {"event": "rewind"},
    ]
    tracker = Tracker(
        "c1",
        # As Rasa's tracker has them after the rewind (the elicitation, over gRPC, with 7.0).
        {PENDING_SLOT: question, ELICITATION_SLOT: {"id": "e1", "n": 7.0}},
        {"text": "yes", "intent": {"name": "affirm", "confidence": 1.0}},
        events,
        False,
        None,
        {"name": "action_confirm_tool"},
        "action_listen",
    )
    turn = turn_from_tracker(tracker)
    assert turn.slots[PENDING_SLOT] is None
    assert turn.slots[ELICITATION_SLOT] == {"id": "e1", "n": 7}  # set last, so not brought back
