"""Putting a question: the calls a run gathered, made into one :class:`~mcp_bridge.question.Question`,
kept in the record, and said to the person; and a question asked before, bound to its skill as it is now.

How a question is put depends on its form, chosen once when it is asked
(:mod:`mcp_bridge.confirmation.forms`): the skill's own question about one call
(``utter_for_confirmation``, the call's arguments and the conversation's slots as its variables, with
No and Yes, and a third answer where the person may also give a permission), or a numbered list
(several calls, or one call of a run that split into several lines; each call on its line, the
constraint's ``describe`` or the tool's name and arguments, with "No to all", "Yes to all" and an
"Only <n>" per call when there are two to five). The answers travel with the question
(:attr:`~mcp_bridge.confirmation.decisions.Say.buttons`): the Rasa adapter shows them as buttons, or
as words to type where the channel shows no buttons.

``ask_before_write``'s half that asks: the exact calls are sealed and kept in the record as the
conversation's open question; arguments a tool would not take are turned away before the person is
asked about them; a question with new words is started by the person's message, which starts at most
one question or run, and only while it is their newest (:mod:`mcp_bridge.record.store`'s
``starts_once``). Each call keeps its idempotency key when the same call (the same digest) is asked
about again, so confirming it again cannot write it twice.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Run, Say, Scope, Turn
from mcp_bridge.confirmation.gate import Ask, Reached, declared
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.confirmation.permissions import GRANT_BUTTON
from mcp_bridge.contract import LIST_BUTTONS, PENDING_SLOT, YES_NO_BUTTONS, Responses
from mcp_bridge.question import AskedCall, Question
from mcp_bridge.sealing import call_digest
from mcp_bridge.skills.files import Skill, Step
from mcp_bridge.skills.toolbox import Resolved

__all__ = [
    "Bound",
    "Gathered",
    "Planned",
    "Putting",
    "bind",
    "describe",
    "put",
    "question_of",
    "replanned",
    "said_as_list",
    "said_as_the_skills",
]

log = logging.getLogger("mcp_bridge.confirmation.executor")

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


@dataclass(frozen=True)
class Gathered:
    """What a run came to when it reached calls to ask about (``ask_before_write``): the calls, not run;
    whether the run split into several lines (a ``for_each``); what it said and set before them."""

    calls: tuple[Planned, ...]
    split: bool
    said: tuple[Say, ...] = ()
    slots: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bound:
    """A call of an open question, matched to the skill as it is now: its step, what its tool
    resolves to, and the gate's question for it."""

    call: AskedCall
    step: Step
    resolved: Resolved
    ask: Ask


class Putting(Protocol):
    """What putting a question needs of its form (:mod:`mcp_bridge.confirmation.forms`)."""

    @property
    def listed(self) -> bool:
        """The question is answered per call (sealed with it as ``listed``)."""
        ...

    def context_of(self, planned: Planned) -> dict[str, Any]:
        """The slot values sealed as a call's context."""
        ...

    def said(
        self, skill: Skill, question: Question, planned: Sequence[Planned], responses: Responses, turn: Turn
    ) -> Say:
        """What the person hears."""
        ...


def question_of(
    skill: Skill,
    planned: Sequence[Planned],
    turn: Turn,
    form: Putting,
    *,
    now: float,
    asked_before: Question | None,
    meta: Iterable[str] = (),
) -> Question:
    """The question about ``planned``, in ``form``, asked of the turn's person now; a call
    ``asked_before`` asked about (the same digest) keeps its key. ``meta``: the slots an MCP server sends
    in ``_meta``, sealed with each call as they are now."""
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
                context=form.context_of(one),
                meta={name: one.slots.get(name) for name in sorted(meta) if one.slots.get(name) is not None},
            )
        )
    return Question(
        id=uuid.uuid4().hex,
        skill=skill.id,
        calls=tuple(calls),
        listed=form.listed,
        asked_at=now,
        user_turn=turn.user_turn,
        user=turn.user,
        asked_after=turn.said_at,
    )


async def put(
    parts: Parts, scope: Scope, planned: Sequence[Planned], form: Putting, asked_before: Question | None
) -> Run:
    """``ask_before_write``: seal the exact calls, keep them in the record as the open question, and ask.
    Arguments a tool would not take are turned away now, before the person is asked about them."""
    skill, turn = scope.skill, scope.turn
    for one in planned:
        turned_away = await parts.runner.would_fail(scope, one.step, one.resolved, one.arguments)
        if turned_away is not None:
            return turned_away
    question = question_of(
        skill, planned, turn, form, now=parts.clock(), asked_before=asked_before, meta=parts.meta_slots
    )
    sealed = question.sealed(parts.seal, turn.conversation_id)
    # The same calls asked again are no new words: only a question with new words is started by the
    # message (once, and only by the newest: mcp_bridge.record.store's starts_once).
    again = asked_before is not None and [c.digest for c in asked_before.calls] == [
        c.digest for c in question.calls
    ]
    not_asked = await parts.record.asked(
        conversation_id=turn.conversation_id,
        kind="question",
        question_id=question.id,
        person=question.user,
        sealed=sealed,
        asked_after=question.asked_after,
        message=turn.message(),
        new_words=not again,
    )
    if not_asked is not None:
        log.warning(
            "conversation %s: question %s not asked (%s); nothing was run",
            turn.conversation_id,
            question.id,
            not_asked.reason,
        )
        parts.audit.record_calls(turn.conversation_id, question, "not_asked", not_asked.reason)
        return Run("rejected", (Say(parts.responses.message_used),))
    parts.audit.record_calls(turn.conversation_id, question, "asked", None)
    said = form.said(skill, question, planned, parts.responses, turn)
    return Run("pending", (said,), {PENDING_SLOT: sealed}, question)


async def bind(parts: Parts, question: Question, scope: Scope) -> list[Bound] | None:
    """Each call of an open question matched to its skill as it is now (the step, the tool's source, and
    a gate that still asks about it); None when any call no longer matches."""
    skill = scope.skill
    bound = []
    for call in question.calls:
        if not 0 <= call.step < len(skill.steps):
            return None
        step = skill.steps[call.step]
        source = skill.tools.get(call.tool)
        if step.execute_tool != call.tool or source is None or str(source) != call.source:
            return None
        resolved = parts.tools.find(skill, call.tool)
        # Whether it is still asked about; what a yes may remember is asked only for a grant.
        consent = Reached(remembering=False)
        verdict = await parts.gate.verdict(skill, call.tool, resolved, call.arguments, consent, scope.context)
        if not isinstance(verdict, Ask):
            return None
        bound.append(Bound(call, step, resolved, verdict))
    return bound


def replanned(bound: Sequence[Bound]) -> list[Planned]:
    """The calls of a question, as they were planned: to put them again."""
    return [
        Planned(
            one.call.step, one.step, one.resolved, one.ask, dict(one.call.arguments), {}, one.call.context
        )
        for one in bound
    ]


def said_as_the_skills(planned: Planned) -> Say:
    """The skill's own question about one call, its line's slots as its variables; a third button where a
    yes may also give a permission."""
    assert planned.ask.rule.utter_for_confirmation is not None
    variables = templating.variables(planned.slots, planned.arguments, tool=planned.step.execute_tool)
    grant = (GRANT_BUTTON,) if planned.ask.remember is not None else ()
    return Say(planned.ask.rule.utter_for_confirmation, variables, (*YES_NO_BUTTONS, *grant))


def said_as_list(skill: Skill, question: Question, responses: Responses, slots: Mapping[str, Any]) -> Say:
    """The numbered list: each call's line from ``slots`` (the conversation's) and the call's context."""
    numbered = list(enumerate(question.calls, start=1))
    lines = "\n".join(f"{place}. {describe(skill, call, slots)}" for place, call in numbered)
    if len(question.calls) == 1:
        return Say(responses.confirm_one_call, {"calls": lines, "count": 1}, YES_NO_BUTTONS)
    only = tuple({"title": f"Only {place}", "payload": f"only {place}"} for place, _ in numbered)
    return Say(
        responses.confirm_calls,
        {"calls": lines, "count": len(question.calls)},
        (*LIST_BUTTONS, *(only if 2 <= len(question.calls) <= _MAX_CALL_BUTTONS else ())),
    )


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
