"""The plugin's Rasa actions: the confirmation loop, the explicit "drop it", one action per skill.

Each action hands the tracker to the executor through the adapter and never lets an exception reach
rasa_sdk (which would answer 500 with the whole tracker, and Rasa would drop the action's events).
The base classes are abstract, so rasa_sdk registers only the concrete actions.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rasa_sdk import Action, Tracker
from rasa_sdk.executor import CollectingDispatcher
from rasa_sdk.types import DomainDict

from mcp_bridge.action_server.adapter import answers_typed, apply_decision, turn_from_tracker
from mcp_bridge.action_server.build import executor, settings, skill_files
from mcp_bridge.action_server.person_actions import sign_in_decision
from mcp_bridge.auth.person import SignInRequiredError
from mcp_bridge.confirmation.decisions import Decision, Turn
from mcp_bridge.contract import (
    APPROVAL_ACTION,
    APPROVAL_ENTITY,
    APPROVAL_INTENT,
    CONFIRMATION_LOOP,
    DENY_ACTION,
    PENDING_SLOT,
    REVOKE_ACTION,
)
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability import tracing

log = logging.getLogger(__name__)


class ExecutorAction(Action, ABC):
    """Runs one executor entry point for the action named ``action_name``.

    Abstract members are overridden by class attributes in the concrete actions, which is what
    makes them concrete (rasa_sdk registers only classes that ``inspect.isabstract`` says are not).
    """

    @property
    @abstractmethod
    def action_name(self) -> str: ...

    def name(self) -> str:
        return self.action_name

    @abstractmethod
    async def decide(self, turn: Turn) -> Decision: ...

    async def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> list[dict[str, Any]]:
        return await self.respond(turn_from_tracker(tracker), self.decide, dispatcher)

    async def respond(
        self, turn: Turn, decide: Callable[[Turn], Awaitable[Decision]], dispatcher: CollectingDispatcher
    ) -> list[dict[str, Any]]:
        # The skill's run, under rasa-sdk's action span when tracing is on (names only: the action,
        # the skill, what the executor decided).
        with tracing.span(
            "mcp-bridge skill_run", action=self.action_name, skill=getattr(self, "skill_id", None)
        ) as span:
            try:
                # A server that acts as the person is called as the person the channel named (the
                # executor passes the turn's person with every call).
                decision = await decide(turn)
            except SignInRequiredError as exc:
                # Nothing was sent: the person signs in first (the link), then the skill goes on.
                decision = sign_in_decision(exc, answering=self.action_name == CONFIRMATION_LOOP)
            except Exception:
                log.exception(
                    "%s failed in conversation %s; nothing was written", self.name(), turn.conversation_id
                )
                decision = Decision("failed", slots={PENDING_SLOT: None})
                dispatcher.utter_message(response="utter_tool_unavailable")
            tracing.note(span, outcome=decision.outcome)
            return apply_decision(
                decision,
                dispatcher,
                action=self.name(),
                loop_active=turn.loop_active,
                typed=answers_typed(turn.input_channel),
            )


class ConfirmTool(ExecutorAction):
    """The confirmation loop: every message while a question is pending comes here first."""

    action_name = CONFIRMATION_LOOP

    async def decide(self, turn: Turn) -> Decision:
        if turn.new_message and turn.intent == APPROVAL_INTENT:
            # A second approver's decision (Rasa's API), not the person's answer: handed back, so the
            # rule runs action_approval_decided; the question is asked again afterwards.
            return Decision("handed_back")
        return await executor().answer(turn)


class DenyTool(ExecutorAction):
    """Drops the pending question without running anything (for a bot's own "stop" rule)."""

    action_name = DENY_ACTION

    async def decide(self, turn: Turn) -> Decision:
        return await executor().deny(turn)


class ApprovalDecided(ExecutorAction):
    """A second approver decided (Rasa's API triggered ``approval_decided`` with the request's id):
    an approved call runs once, a refusal or an expiry is said
    (:mod:`mcp_bridge.approvals.second_approver`)."""

    action_name = APPROVAL_ACTION

    async def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> list[dict[str, Any]]:
        latest = tracker.latest_message or {}
        intent = (latest.get("intent") or {}).get("name")
        found = [
            e.get("value")
            for e in latest.get("entities") or []
            if isinstance(e, dict) and e.get("entity") == APPROVAL_ENTITY
        ]
        approval_id = found[0] if intent == APPROVAL_INTENT and len(found) == 1 else None
        if not isinstance(approval_id, str) or not _APPROVAL_ID.fullmatch(approval_id):
            return []  # not a decision the approval page sent: nothing to do, nothing said

        async def decide(turn: Turn) -> Decision:
            return await executor().approval_decided(turn, approval_id)

        return await self.respond(turn_from_tracker(tracker), decide, dispatcher)

    async def decide(self, turn: Turn) -> Decision:
        return Decision("nothing_pending")  # run() decides, with the request's id


class RevokePermissions(ExecutorAction):
    """ "stop saving without asking": withdraws the person's remembered permissions."""

    action_name = REVOKE_ACTION

    async def decide(self, turn: Turn) -> Decision:
        return await executor().revoke(turn)


_APPROVAL_ID = re.compile(r"[0-9a-f]{32}")


class SkillAction(ExecutorAction, ABC):
    @property
    @abstractmethod
    def skill_id(self) -> str: ...

    async def decide(self, turn: Turn) -> Decision:
        return await executor().start(self.skill_id, turn)


# rasa_sdk finds actions through Action.__subclasses__(), which holds weak references: keep them.
_SKILL_ACTIONS: dict[str, type[SkillAction]] = {}
# The same classes by their class name: rasa-sdk 3.21 (Sanic 25) pickles the registered actions into
# its worker processes, and pickle finds a class by its module and name (see ``__getattr__`` below).
_BY_CLASS_NAME: dict[str, type[SkillAction]] = {}


# The module a skill's action class names: the one a worker process imports to unpickle it
# (mcp_bridge.rasa sets itself, so that a worker imports the bot's line and its hook).
SERVED_FROM = __name__


def serve_skills(skills_dir: str | Path) -> dict[str, type[SkillAction]]:
    """Define one action class per skill file of ``skills_dir`` (its ``action:``, default
    ``action_<skill>``), from the files as :func:`mcp_bridge.action_server.build.skill_files` read them.

    A file that cannot be read, or whose action another file already has, gets no action: the
    start-up checks refuse it with the file, the place and the reason, and the server does not start.
    """
    try:
        files = skill_files(skills_dir)
    except ConfigError:
        return dict(_SKILL_ACTIONS)  # no skill files: reported by the start-up checks
    for _, parsed in files:
        if isinstance(parsed, ConfigError) or parsed.action_name in _SKILL_ACTIONS:
            continue
        action, class_name = parsed.action_name, _class_name(parsed.action_name)
        attributes = {"action_name": action, "skill_id": parsed.skill, "__module__": SERVED_FROM}
        cls = type(class_name, (SkillAction,), {**attributes, "__qualname__": class_name})
        _SKILL_ACTIONS[action] = _BY_CLASS_NAME[class_name] = cls
    return dict(_SKILL_ACTIONS)


def _class_name(action: str) -> str:
    """A Python identifier for ``action`` (``action_`` and letters, digits and underscores, as
    :data:`mcp_bridge.skills.files.ACTION_NAME` requires) that no other skill action of this process has."""
    base = "".join(part.capitalize() for part in action.split("_"))  # ActionLogInteraction
    name, n = base, 1
    while name in _BY_CLASS_NAME or name in globals():
        n += 1
        name = f"{base}{n}"
    return name


def __getattr__(name: str) -> type[SkillAction]:
    """A skill action class by name, defining the skill actions first if this process has none yet.

    A worker process that unpickles rasa_sdk's action registry imports this module and looks the
    classes up here; the skill files it reads are the ones the main process read (``SKILLS_DIR``).
    """
    if name not in _BY_CLASS_NAME and not name.startswith("__"):
        serve_skills(settings().skills_dir)
    try:
        return _BY_CLASS_NAME[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
