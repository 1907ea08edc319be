"""The Rasa adapter: which loop events each decision becomes, and the hand-back."""

from __future__ import annotations

from rasa_sdk.events import ActionExecutionRejected, ActiveLoop, SlotSet
from rasa_sdk.executor import CollectingDispatcher

from mcp_bridge.confirmation.executor import Decision, Say
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.rasa.adapter import CONFIRMATION_LOOP, apply_decision

LOOP = CONFIRMATION_LOOP


def events(decision: Decision, action: str, loop_active: bool) -> list[dict[str, object]]:
    return apply_decision(decision, CollectingDispatcher(), action=action, loop_active=loop_active)


def test_a_question_asked_activates_the_loop() -> None:
    asked = Decision("pending", [Say("utter_confirm_note")], {PENDING_SLOT: {"id": "x"}})
    assert events(asked, "action_log_interaction", False)[-1] == ActiveLoop(LOOP)
    assert events(asked, LOOP, True)[-1] == ActiveLoop(LOOP)


def test_an_answered_question_ends_the_loop() -> None:
    saved = Decision("done", [Say("utter_note_saved")], {PENDING_SLOT: None})
    assert events(saved, LOOP, True)[-1] == ActiveLoop(None)
    cancelled = Decision("cancelled", [], {PENDING_SLOT: None})
    assert events(cancelled, "action_deny_tool", True)[-1] == ActiveLoop(None)


def test_a_lookup_in_the_middle_leaves_the_loop_so_rasa_asks_again() -> None:
    found = Decision("done", [Say("utter_contact_found")], {})
    assert events(found, "action_lookup_contact", True) == []
    assert events(found, "action_lookup_contact", False) == []
    filled = Decision("done", [], {"lookup_email": "priya@example.com"})
    assert events(filled, "action_lookup_contact", True) == [SlotSet("lookup_email", "priya@example.com")]


def test_a_message_that_is_not_an_answer_is_handed_back_by_a_rejection_event_only() -> None:
    """Rasa reads the event as a rejection (the loop stays, marked rejected; the action is not recorded
    as run), as it would an HTTP 400, but an HTTP 400 is logged by Rasa at ERROR level."""
    dispatcher = CollectingDispatcher()
    handed = apply_decision(Decision("handed_back"), dispatcher, action=LOOP, loop_active=True)
    assert handed == [ActionExecutionRejected(LOOP)]
    assert dispatcher.messages == []


def test_a_list_of_calls_carries_its_per_call_buttons_to_rasa() -> None:
    """Rasa adds a custom action's buttons to the response's own (No to all / Yes to all)."""
    dispatcher = CollectingDispatcher()
    buttons = ({"title": "Only 1", "payload": "only 1"}, {"title": "Only 2", "payload": "only 2"})
    asked = Decision("pending", [Say("utter_confirm_calls", {"calls": "1. a\n2. b", "count": 2}, buttons)])
    apply_decision(asked, dispatcher, action=LOOP, loop_active=True)
    (message,) = dispatcher.messages
    assert message["response"] == "utter_confirm_calls" and message["calls"] == "1. a\n2. b"
    assert message["buttons"] == [dict(button) for button in buttons]
    dispatcher = CollectingDispatcher()
    apply_decision(
        Decision("pending", [Say("utter_confirm_note")]), dispatcher, action=LOOP, loop_active=True
    )
    assert dispatcher.messages[0]["buttons"] == []  # one call: only the response's own
