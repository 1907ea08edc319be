"""The one module that speaks rasa_sdk: tracker in, :class:`Turn` out; :class:`Decision` in, events out.

A pending question is a Rasa *loop*: the action that asks it activates ``action_confirm_tool`` as
the conversation's active loop, so Rasa sends the person's next message to that action whatever
intent the NLU gave it. The loop reads the answer; an answer that is not about the question is
handed back (the action rejects itself, Rasa's own rules handle the message), and Rasa runs the loop
again afterwards, which asks the question again.

The rejection is an ``action_execution_rejected`` event in a normal answer, not rasa_sdk's
``ActionExecutionRejection`` (HTTP 400): Rasa treats both alike (the loop is marked rejected, the
action is not recorded as run, the policies predict the next action), but logs the HTTP 400 at ERROR
level, and a hand-back is normal behaviour, not an error in a deployment's alerting.
"""

from typing import Any

from rasa_sdk import Tracker
from rasa_sdk.events import ActionExecutionRejected, ActiveLoop, SlotSet
from rasa_sdk.executor import CollectingDispatcher

from mcp_bridge.channels import USER_KEY
from mcp_bridge.contract import CONFIRMATION_LOOP, PENDING_SLOT
from mcp_bridge.executor import Decision, Turn
from mcp_bridge.rasa.rewinds import unrewound


def turn_from_tracker(tracker: Tracker) -> Turn:
    latest = tracker.latest_message or {}
    intent = latest.get("intent") or {}
    ranking = {
        str(item.get("name")): float(item.get("confidence") or 0.0)
        for item in latest.get("intent_ranking") or []
        if isinstance(item, dict)
    }
    return Turn(
        conversation_id=str(tracker.sender_id),
        # A rewind (/back) brings back no question already ended and no permission withdrawn.
        slots=unrewound(
            {name: whole_numbers(value) for name, value in tracker.slots.items()},
            tracker.events,
            whole_numbers,
        ),
        user_turn=sum(1 for event in tracker.events if event.get("event") == "user"),
        intent=intent.get("name"),
        intent_confidence=float(intent.get("confidence") or 0.0),
        intent_ranking=ranking,
        text=str(latest.get("text") or ""),
        new_message=tracker.latest_action_name == "action_listen",
        loop_active=tracker.active_loop_name == CONFIRMATION_LOOP,
        user=sender(latest),
    )


def sender(latest_message: dict[str, Any]) -> str | None:
    """Who sent the message, as the channel that received it says (:mod:`mcp_bridge.channels`).

    The channel writes it into the message's metadata, replacing whatever a client put there; Rasa
    passes the metadata on with the latest message. None when the channel names nobody (Rasa's own
    channels, ``rasa shell``).
    """
    metadata = latest_message.get("metadata")
    user = metadata.get(USER_KEY) if isinstance(metadata, dict) else None
    return user if isinstance(user, str) and user else None


def whole_numbers(value: Any) -> Any:
    """``value`` with every integral float as an int, at any depth.

    Over gRPC (rasa-sdk 3.21, Rasa Pro) slots travel as protobuf Structs, which carry every number as
    a double: the contact id 7 that a question sealed comes back as 7.0. JSON over HTTP keeps 7.
    Reading both as 7 keeps a sealed question's arguments, and its signature, the same either way.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def apply_decision(
    decision: Decision, dispatcher: CollectingDispatcher, *, action: str, loop_active: bool
) -> list[dict[str, Any]]:
    """Responses to the dispatcher, and the events to return."""
    if decision.outcome == "handed_back":
        # Rasa applies the rejection (the loop stays active, marked rejected), does not record the
        # action as run, and lets the bot's own rules answer; nothing is said here. Rasa's processor
        # reads an action_execution_rejected event among an action's events as a rejection by hand.
        return [ActionExecutionRejected(action)]
    for say in decision.say:
        if say.buttons:
            # Added to the response's own buttons by Rasa (a question about several calls).
            dispatcher.utter_message(
                response=say.response, buttons=[dict(b) for b in say.buttons], **say.variables
            )
        else:
            dispatcher.utter_message(response=say.response, **say.variables)
    events = [SlotSet(slot, value) for slot, value in decision.slots.items()]
    question_gone = PENDING_SLOT in decision.slots and decision.slots[PENDING_SLOT] is None
    if decision.waiting:
        events.append(ActiveLoop(CONFIRMATION_LOOP))
    elif action == CONFIRMATION_LOOP or (loop_active and question_gone):
        events.append(ActiveLoop(None))
    # Otherwise (a lookup that interrupted the question) the loop stays, and Rasa runs it next.
    return events
