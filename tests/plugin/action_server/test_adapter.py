"""The Rasa adapter: which loop events each decision becomes, and the hand-back."""

from __future__ import annotations

from rasa_sdk.events import ActionExecutionRejected, ActiveLoop, SlotSet
from rasa_sdk.executor import CollectingDispatcher

from mcp_bridge.action_server.adapter import answers_typed, apply_decision, typed_answers
from mcp_bridge.config.settings import Settings
from mcp_bridge.confirmation.decisions import Decision, Say
from mcp_bridge.contract import CONFIRMATION_LOOP, LIST_BUTTONS, PENDING_SLOT, RESPONSES, YES_NO_BUTTONS

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


def test_a_question_carries_its_answers_as_buttons_where_the_channel_shows_them() -> None:
    """The domain's question has no buttons: the plugin sends its answers (No to all, Yes to all, Only n)."""
    dispatcher = CollectingDispatcher()
    only = ({"title": "Only 1", "payload": "only 1"}, {"title": "Only 2", "payload": "only 2"})
    buttons = (*LIST_BUTTONS, *only)
    asked = Decision("pending", [Say("utter_confirm_calls", {"calls": "1. a\n2. b", "count": 2}, buttons)])
    apply_decision(asked, dispatcher, action=LOOP, loop_active=True)
    (message,) = dispatcher.messages
    assert message["response"] == "utter_confirm_calls" and message["calls"] == "1. a\n2. b"
    assert message["buttons"] == [dict(button) for button in buttons]
    dispatcher = CollectingDispatcher()
    apply_decision(
        Decision("pending", [Say("utter_confirm_note", {}, YES_NO_BUTTONS)]),
        dispatcher,
        action=LOOP,
        loop_active=True,
    )
    assert dispatcher.messages[0]["buttons"] == [
        {"title": "No", "payload": "/deny"},
        {"title": "Yes", "payload": "/affirm"},
    ]
    dispatcher = CollectingDispatcher()
    apply_decision(Decision("done", [Say("utter_note_saved")]), dispatcher, action=LOOP, loop_active=True)
    assert dispatcher.messages[0]["buttons"] == []  # not a question: nothing to answer


def test_where_the_channel_shows_no_buttons_a_question_is_followed_by_the_answers_to_type() -> None:
    """rasa shell shows buttons as a menu whose first entry Enter picks, and a typed "yes" never reaches a
    prompt: there, the question goes in words, then the answers to type, and no buttons at all."""
    dispatcher = CollectingDispatcher()
    grant = {"title": "Yes, and don't ask again today", "payload": "yes, and don't ask again today"}
    asked = Decision("pending", [Say("utter_confirm_note", {"arg_text": "hi"}, (*YES_NO_BUTTONS, grant))])
    apply_decision(asked, dispatcher, action=LOOP, loop_active=True, typed=True)
    question, answers = dispatcher.messages
    assert question["response"] == "utter_confirm_note" and question["buttons"] == []
    assert question["arg_text"] == "hi"
    assert answers["response"] == RESPONSES.type_your_answer and answers["buttons"] == []
    assert answers["answers"] == '"no", "yes" or "yes, and don\'t ask again today"'
    only = ({"title": "Only 1", "payload": "only 1"},)
    assert typed_answers((*LIST_BUTTONS, *only)) == '"no to all", "yes to all" or "only 1"'
    assert typed_answers(YES_NO_BUTTONS) == '"no" or "yes"'


def test_rasa_shell_answers_by_typing_and_the_list_of_such_channels_is_a_setting() -> None:
    def channels(env: dict[str, str]) -> tuple[str, ...]:
        return Settings.from_env(env).typed_answer_channels

    assert answers_typed("cmdline", channels({})) is True
    assert answers_typed("socketio", channels({})) is False and answers_typed(None, channels({})) is False
    setting = channels({"MCP_BRIDGE_TYPED_ANSWER_CHANNELS": "cmdline, twilio"})
    assert answers_typed("twilio", setting) is True and answers_typed("socketio", setting) is False
    assert answers_typed("cmdline", channels({"MCP_BRIDGE_TYPED_ANSWER_CHANNELS": ""})) is False
