"""Thin actions: tracker state to the executor, its decision back as responses and events."""

import logging
from abc import abstractmethod
from typing import Any

from rasa_sdk import Action, Tracker
from rasa_sdk.executor import CollectingDispatcher
from rasa_sdk.types import DomainDict

from actions.setup import executor
from mcp_bridge.executor import Decision, Turn
from mcp_bridge.rasa_adapter import CONFIRMATION_LOOP, apply_decision, turn_from_tracker

log = logging.getLogger(__name__)


class _ExecutorAction(Action):
    """Runs one executor entry point; never lets an exception reach rasa_sdk."""

    action_name = ""

    def name(self) -> str:
        return self.action_name

    @abstractmethod
    async def decide(self, turn: Turn) -> Decision: ...

    async def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> list[dict[str, Any]]:
        turn = turn_from_tracker(tracker)
        try:
            decision = await self.decide(turn)
        except Exception:
            # rasa_sdk would answer 500 with the whole tracker and Rasa would drop our events.
            log.exception(
                "%s failed in conversation %s; nothing was written", self.name(), turn.conversation_id
            )
            decision = Decision("failed", slots={"pending_confirmation": None})
            dispatcher.utter_message(response="utter_tool_unavailable")
        return apply_decision(decision, dispatcher, action=self.name(), loop_active=turn.loop_active)


class _SkillAction(_ExecutorAction):
    @property
    @abstractmethod
    def skill_id(self) -> str: ...

    async def decide(self, turn: Turn) -> Decision:
        return await executor().start(self.skill_id, turn)


class ActionLogInteraction(_SkillAction):
    action_name = "action_log_interaction"
    skill_id = "log_interaction"  # type: ignore[assignment]


class ActionLookupContact(_SkillAction):
    action_name = "action_lookup_contact"
    skill_id = "lookup_contact"  # type: ignore[assignment]


class ActionShowNotes(_SkillAction):
    action_name = "action_show_notes"
    skill_id = "show_notes"  # type: ignore[assignment]


class ActionConfirmTool(_ExecutorAction):
    """The confirmation loop: every message while a question is pending comes here first."""

    action_name = CONFIRMATION_LOOP

    async def decide(self, turn: Turn) -> Decision:
        return await executor().answer(turn)


class ActionDenyTool(_ExecutorAction):
    action_name = "action_deny_tool"

    async def decide(self, turn: Turn) -> Decision:
        return await executor().deny(turn)
