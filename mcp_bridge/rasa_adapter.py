"""The one module that speaks rasa_sdk: tracker in, :class:`Turn` out; :class:`Decision` in, events out."""

from typing import Any

from rasa_sdk import Tracker
from rasa_sdk.events import SlotSet
from rasa_sdk.executor import CollectingDispatcher

from mcp_bridge.audit import attribute_to
from mcp_bridge.executor import Decision, Turn


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
        slots=dict(tracker.slots),
        user_turn=sum(1 for event in tracker.events if event.get("event") == "user"),
        intent=intent.get("name"),
        intent_confidence=float(intent.get("confidence") or 0.0),
        intent_ranking=ranking,
    )


def apply_decision(decision: Decision, dispatcher: CollectingDispatcher) -> list[dict[str, Any]]:
    for say in decision.say:
        dispatcher.utter_message(response=say.response, **say.variables)
    return [SlotSet(slot, value) for slot, value in decision.slots.items()]


def attribute_calls(app: Any) -> None:
    """Attribute every tool call made while answering a webhook request to that request's conversation.

    ``app`` is the action server's Sanic app (``rasa_sdk.endpoint.create_app``). Rasa names the
    conversation in the request body (``sender_id``); the audit trail then records each call under
    it, whichever action made the call.
    """

    @app.middleware("request")  # type: ignore[untyped-decorator]
    async def _attribute(request: Any) -> None:
        sender = None
        if request.method == "POST":
            try:
                body = request.json
            except Exception:  # not JSON: rasa_sdk refuses the request itself
                body = None
            if isinstance(body, dict) and body.get("sender_id") is not None:
                sender = str(body["sender_id"])
        attribute_to(sender)
