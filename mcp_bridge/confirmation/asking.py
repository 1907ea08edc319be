"""Putting a question: the calls a run gathered, made into one :class:`~mcp_bridge.question.Question`
and said to the person.

A run that gathered one call, on one line, is asked about with the skill's own question
(``utter_for_confirmation``, the call's arguments and the conversation's slots as its variables),
with No and Yes, and a third answer where the person may also give a permission. Anything else is
a numbered list (``listed``): several calls (steps in a row, or one step over a list), or one call
of a run that split into several lines; each call on its line (the constraint's ``describe``, or
the tool's name and arguments), with "No to all", "Yes to all" and an "Only <n>" per call when
there are two to five. The answers travel with the question (:attr:`Say.buttons`): the Rasa adapter
shows them as buttons, or as words to type where the channel shows no buttons.

Each call keeps its idempotency key when the same call (the same digest) is asked about again, so
confirming it again cannot write it twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Responses, Say, Turn
from mcp_bridge.confirmation.gate import Ask, declared
from mcp_bridge.confirmation.permissions import GRANT_BUTTON
from mcp_bridge.confirmation.running import Resolved
from mcp_bridge.contract import LIST_BUTTONS, YES_NO_BUTTONS
from mcp_bridge.question import AskedCall, Question
from mcp_bridge.sealing import call_digest
from mcp_bridge.skills.files import Skill, Step

__all__ = ["Planned", "describe", "question_of", "said"]

# Up to this many calls in a question, each gets an "Only <n>" button; more are answered in words.
_MAX_CALL_BUTTONS = 5


@dataclass(frozen=True)
class Planned:
    """A call a run reached that the gate says to ask about: to be asked about, not run."""

    index: int
    step: Step
    resolved: Resolved
    ask: Ask
    arguments: dict[str, Any]
    # The slots of its line when it was reached (the variables of the skill's own question).
    slots: Mapping[str, Any]
    # The slot values of its line that the conversation does not hold (sealed as the call's context).
    context: Mapping[str, Any] = field(default_factory=dict)


def question_of(
    skill: Skill,
    planned: Sequence[Planned],
    turn: Turn,
    *,
    listed: bool,
    now: float,
    asked_before: Question | None,
    meta: Iterable[str] = (),
) -> Question:
    """The question about ``planned``, asked of the turn's person now; a call ``asked_before`` asked
    about (the same digest) keeps its key. ``meta``: the slots an MCP server sends in ``_meta``, sealed
    with each call as they are now."""
    keys = {call.digest: call.key for call in asked_before.calls} if asked_before is not None else {}
    calls = []
    for one in planned:
        source = str(skill.tools[one.step.execute_tool])
        digest = call_digest(skill.id, one.step.execute_tool, source, one.arguments)
        call_id = uuid.uuid4().hex
        calls.append(
            AskedCall(
                id=call_id,
                tool=one.step.execute_tool,
                step=one.index,
                source=source,
                arguments=dict(one.arguments),
                digest=digest,
                key=keys.get(digest, call_id),
                context=dict(one.context) if listed else {},
                meta={name: one.slots.get(name) for name in sorted(meta) if one.slots.get(name) is not None},
            )
        )
    return Question(
        id=uuid.uuid4().hex,
        skill=skill.id,
        calls=tuple(calls),
        listed=listed,
        asked_at=now,
        user_turn=turn.user_turn,
        user=turn.user,
        asked_after=turn.said_at,
    )


def said(
    skill: Skill,
    question: Question,
    planned: Sequence[Planned],
    responses: Responses,
    slots: Mapping[str, Any],
) -> Say:
    """What the person hears: the skill's own question about one call (its line's slots), or the
    numbered list (each call's line from ``slots``, the conversation's, and the call's context)."""
    if not question.listed:
        one = planned[0]
        assert one.ask.rule.utter_for_confirmation is not None
        variables = templating.variables(one.slots, one.arguments, tool=one.step.execute_tool)
        grant = (GRANT_BUTTON,) if one.ask.remember is not None else ()
        return Say(one.ask.rule.utter_for_confirmation, variables, (*YES_NO_BUTTONS, *grant))
    lines = "\n".join(f"{place}. {describe(skill, call, slots)}" for place, call in numbered(question))
    if len(question.calls) == 1:
        return Say(responses.confirm_one_call, {"calls": lines, "count": 1}, YES_NO_BUTTONS)
    only = tuple({"title": f"Only {place}", "payload": f"only {place}"} for place, _ in numbered(question))
    return Say(
        responses.confirm_calls,
        {"calls": lines, "count": len(question.calls)},
        (*LIST_BUTTONS, *(only if 2 <= len(question.calls) <= _MAX_CALL_BUTTONS else ())),
    )


def numbered(question: Question) -> list[tuple[int, AskedCall]]:
    return list(enumerate(question.calls, start=1))


def describe(skill: Skill, call: AskedCall, slots: Mapping[str, Any]) -> str:
    """A call's line in a list: its constraint's ``describe`` filled in, or its name and arguments."""
    variables = templating.variables({**slots, **call.context}, call.arguments, tool=call.tool)
    rule = declared(skill, call.tool)
    if rule is not None and rule.describe:
        try:
            return rule.describe.format_map(variables)
        except (KeyError, ValueError, IndexError, AttributeError):
            pass  # a variable this call does not have: named plainly instead
    return f"{call.tool} {variables['tool_arguments']}"
