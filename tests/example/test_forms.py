"""The example bot's note form (actions/forms.py): a message over the reader's limit is refused before
the form reads any of it, and nothing is collected from it."""

from __future__ import annotations

from typing import Any

import pytest
from rasa_sdk import Tracker
from rasa_sdk.events import ActiveLoop, FollowupAction, SlotSet
from rasa_sdk.executor import CollectingDispatcher

from mcp_bridge.reading.reader import ConfirmationReader
from tests.support.example_form import load_form

FORM = load_form()
LIMIT = 5000


@pytest.fixture(autouse=True)
def reader(monkeypatch: pytest.MonkeyPatch) -> ConfirmationReader:
    """The form asks the plugin for the action server's reader; here, one with the default limit."""
    reader = ConfirmationReader(max_chars=LIMIT)
    monkeypatch.setattr(FORM, "confirmation_reader", lambda: reader)
    return reader


def _tracker(text: str, requested_slot: str | None, **slots: Any) -> Tracker:
    intent = {"name": "log_interaction" if requested_slot is None else "inform", "confidence": 0.99}
    return Tracker(
        "form-test",
        {"requested_slot": requested_slot, **slots},
        {"text": text, "intent": intent, "entities": []},
        [],
        False,
        None,
        {"name": "log_note_form"},
        "action_listen",
    )


async def _run(tracker: Tracker) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    dispatcher = CollectingDispatcher()
    events = await FORM.ValidateLogNoteForm().run(dispatcher, tracker, {"forms": {}})
    return events, dispatcher.messages


async def test_a_note_over_the_limit_is_refused_and_the_question_asked_again() -> None:
    events, said = await _run(_tracker("x" * (LIMIT + 1), "note_text", contact_email="dana@example.com"))
    assert [m["response"] for m in said] == ["utter_message_too_long"]
    assert said[0]["limit"] == LIMIT
    assert events == [SlotSet("note_text", None)]


async def test_a_request_over_the_limit_starts_nothing() -> None:
    request = "log a call with dana@example.com: " + "x" * LIMIT
    events, said = await _run(_tracker(request, None))
    assert [m["response"] for m in said] == ["utter_message_too_long"]
    # The form ends with nothing collected, not the address nor the note.
    assert SlotSet("contact_email", None) in events and SlotSet("note_text", None) in events
    assert events[-2:] == [ActiveLoop(None), FollowupAction("action_listen")]
    assert all(event["value"] is None for event in events if event["event"] == "slot")


async def test_a_way_out_over_the_limit_is_refused_too() -> None:
    # "cancel" and 5,000 spaces is not read as the way out: the form refuses it like any long text.
    events, said = await _run(_tracker("cancel" + " " * LIMIT, "note_text"))
    assert [m["response"] for m in said] == ["utter_message_too_long"]
    assert events == [SlotSet("note_text", None)]


def test_the_request_parsers_still_find_address_and_note() -> None:
    text = "log a call with Dana@Example.com: she asked about the VAT rate"
    assert FORM.find_email(text) == "Dana@Example.com"
    assert FORM.note_from_request(text) == "she asked about the VAT rate"
    assert FORM.find_email("it's dana@example.com, thanks.") == "dana@example.com"
    assert FORM.find_email("@@@ a@@ x@y") is None
    quoted = 'add a note to tom@example.org - "sent the contract"'
    assert FORM.note_from_request(quoted) == "sent the contract"
    assert FORM.note_from_request("no address here: just text") is None
