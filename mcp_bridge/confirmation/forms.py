"""A question's form, chosen once when it is asked: the skill's own question about one call, or a
numbered list. The form says how the question is put, how its answer is read, what is said when the
answer is no or must be given again, and what follows a yes.

:data:`ONE_CALL` (``per_call`` does not apply): a run that gathered one call, on one line, is asked
with the skill's own question. A yes runs the call exactly as sealed and the skill goes on with its
next steps; a yes may also give a permission (``remembered``); a no says the skill's denial.

:data:`NUMBERED` (``per_call``): several calls (steps in a row, or one step over a list), or one call of
a run that split into several lines, are asked about as a numbered list and answered per call ("yes to
1, no to 2", "only the first", "all", "none", the buttons). Each approved call runs alone, exactly as
sealed, whatever happens to the others; the skill ends with that answer. A no to all says the calls
were cancelled.

The form is sealed with the question (its ``listed``), so whichever replica reads the answer reads it
in the form it was asked in (:func:`of`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from mcp_bridge.confirmation import asking, holding, planner, templating
from mcp_bridge.confirmation.asking import Bound, Gathered, Planned
from mcp_bridge.confirmation.decisions import Decision, Outcome, Run, Say, Scope, Turn, ended
from mcp_bridge.confirmation.gate import Ask, Confirmed, Hold, Reached, Reject, RunConfirmed
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT, Responses
from mcp_bridge.question import AskedCall, Question
from mcp_bridge.reading.answers import Answer, CallsAnswer, NluOpinion
from mcp_bridge.skills.files import AllowsRemembering, Skill

__all__ = ["NUMBERED", "ONE_CALL", "Form", "asked", "chosen", "of", "read", "rejected_by_gate"]

log = logging.getLogger("mcp_bridge.confirmation.executor")


class Form(Protocol):
    """How a question of this form is put, read, answered again, and what follows its yes and its no."""

    @property
    def listed(self) -> bool: ...

    def context_of(self, planned: Planned) -> dict[str, Any]: ...

    def said(
        self, skill: Skill, question: Question, planned: Sequence[Planned], responses: Responses, turn: Turn
    ) -> Say: ...

    def read(self, parts: Parts, question: Question, turn: Turn) -> Answer | CallsAnswer:
        """The person's answer, read from the turn's text (the NLU's reading a second opinion)."""
        ...

    def answer_again(self, responses: Responses) -> str:
        """The response that says how to answer, when an answer did not."""
        ...

    async def denial(self, parts: Parts, scope: Scope, question: Question) -> Say | None:
        """What a no to the whole question says; None: that the question is no longer valid."""
        ...

    async def yes(
        self,
        parts: Parts,
        scope: Scope,
        question: Question,
        bound: Sequence[Bound],
        approved: Sequence[bool],
        remember: AllowsRemembering | None,
        once: bool,
    ) -> Decision:
        """What follows a yes (to each call ``approved`` says) the record has taken: each approved call
        runs exactly as sealed, each refused one never. ``remember``: the yes also gives a permission;
        ``once``: it refused one, and hears that it will be asked again."""
        ...

    async def run_confirmed(self, parts: Parts, scope: Scope, verdict: RunConfirmed, one: Bound) -> Run:
        """One confirmed call, exactly as sealed (the verdict's question, narrowed to it)."""
        ...

    async def ask_again(self, parts: Parts, scope: Scope, question: Question, bound: Sequence[Bound]) -> Run:
        """The question asked again, bound to this turn (a new id and seal); its calls keep their keys."""
        ...


class _OneCall:
    """The skill's own question about one call."""

    listed = False

    def context_of(self, planned: Planned) -> dict[str, Any]:
        return {}

    def said(
        self, skill: Skill, question: Question, planned: Sequence[Planned], responses: Responses, turn: Turn
    ) -> Say:
        return asking.said_as_the_skills(planned[0])

    def read(self, parts: Parts, question: Question, turn: Turn) -> Answer:
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        return parts.reader.read(turn.text, nlu, question.first.arguments)

    def answer_again(self, responses: Responses) -> str:
        return responses.answer_yes_or_no

    async def denial(self, parts: Parts, scope: Scope, question: Question) -> Say | None:
        call = question.first
        resolved = parts.tools.find(scope.skill, call.tool)
        verdict = await parts.gate.verdict(
            scope.skill, call.tool, resolved, call.arguments, Reached(), scope.context
        )
        rule = verdict.rule if isinstance(verdict, Ask) else None
        if rule is None or not rule.utter_on_user_denial:
            return None
        variables = templating.variables(scope.turn.slots, call.arguments, tool=call.tool)
        return Say(rule.utter_on_user_denial, variables)

    async def yes(
        self,
        parts: Parts,
        scope: Scope,
        question: Question,
        bound: Sequence[Bound],
        approved: Sequence[bool],
        remember: AllowsRemembering | None,
        once: bool,
    ) -> Decision:
        """The call runs as sealed and the skill goes on from it; with ``remember``, a permission is kept
        too (``remembered``)."""
        skill, turn = scope.skill, scope.turn
        (one,) = bound
        parts.audit.record_question(turn.conversation_id, question, one.call, "confirmed", None)
        verdict = await parts.gate.verdict(
            skill, one.call.tool, one.resolved, one.call.arguments, Confirmed(question), scope.context
        )
        if isinstance(verdict, Hold):
            outcome, waiting = await holding.hold(parts, scope, verdict.approver, question, {})
            return Decision(outcome, [waiting], ended(skill))
        if isinstance(verdict, Reject):
            return Decision(
                "rejected", [rejected_by_gate(parts, turn, question, one.call, verdict)], ended(skill)
            )
        if not isinstance(verdict, RunConfirmed):
            raise TypeError(f"the gate gave {type(verdict).__name__} for a call the person confirmed")
        run = await self.run_confirmed(parts, scope, verdict, one)
        decision = run.decision(skill, slots={PENDING_SLOT: None})
        if remember is None:
            if once:
                return replace(decision, say=[*decision.say, Say(parts.responses.permission_declined)])
            return decision
        granted = await parts.permissions.grant(skill, remember, question, one.call, turn)
        said = Say(parts.responses.permission_granted, parts.permissions.variables(granted))
        return replace(decision, say=[*decision.say, said])

    async def run_confirmed(self, parts: Parts, scope: Scope, verdict: RunConfirmed, one: Bound) -> Run:
        """The call, then the skill's next steps after it."""
        ran = await planner.run_steps(parts, scope, one.call.step, verdict)
        return await asked(parts, scope, ran, None)

    async def ask_again(self, parts: Parts, scope: Scope, question: Question, bound: Sequence[Bound]) -> Run:
        """Asked by running the skill from its call again."""
        ran = await planner.run_steps(parts, scope, question.first.step)
        return await asked(parts, scope, ran, question)


class _Numbered:
    """A numbered list of calls, answered per call."""

    listed = True

    def context_of(self, planned: Planned) -> dict[str, Any]:
        return dict(planned.context)

    def said(
        self, skill: Skill, question: Question, planned: Sequence[Planned], responses: Responses, turn: Turn
    ) -> Say:
        return asking.said_as_list(skill, question, responses, turn.slots)

    def read(self, parts: Parts, question: Question, turn: Turn) -> CallsAnswer:
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        names = [call.tool.rsplit("_", 1)[-1] for call in question.calls]
        return parts.reader.read_calls(turn.text, nlu, [call.arguments for call in question.calls], names)

    def answer_again(self, responses: Responses) -> str:
        return responses.answer_each_call

    async def denial(self, parts: Parts, scope: Scope, question: Question) -> Say | None:
        return Say(parts.responses.calls_cancelled)

    async def yes(
        self,
        parts: Parts,
        scope: Scope,
        question: Question,
        bound: Sequence[Bound],
        approved: Sequence[bool],
        remember: AllowsRemembering | None,
        once: bool,
    ) -> Decision:
        """Each call alone; the skill ends with the answer."""
        skill, turn = scope.skill, scope.turn
        said: list[Say] = []
        outcome: Outcome = "done"
        # A call its server stops to ask the person about keeps its question (the elicitation slot).
        kept: dict[str, Any] = {}
        asking_now: list[Say] = []
        for place, (one, yes) in enumerate(zip(bound, approved, strict=True), start=1):
            call = one.call
            if not yes:
                parts.audit.record_question(turn.conversation_id, question, call, "denied", None)
                variables = {"place": place, "call": asking.describe(skill, call, turn.slots)}
                said.append(Say(parts.responses.call_skipped, variables))
                continue
            parts.audit.record_question(turn.conversation_id, question, call, "confirmed", None)
            narrowed = question.only(call)
            verdict = await parts.gate.verdict(
                skill, call.tool, one.resolved, call.arguments, Confirmed(narrowed), scope.context
            )
            if isinstance(verdict, Hold):  # this call waits for its approver; the others do not
                held, waiting = await holding.hold(parts, scope, verdict.approver, narrowed, call.context)
                said.append(waiting)
                outcome = held if outcome == "done" else outcome
                continue
            if isinstance(verdict, Reject):
                said.append(rejected_by_gate(parts, turn, question, call, verdict))
                outcome = "rejected" if outcome == "done" else outcome
                continue
            if not isinstance(verdict, RunConfirmed):
                raise TypeError(f"the gate gave {type(verdict).__name__} for a call the person confirmed")
            # One server question waits at a time (mcp_bridge.confirmation.running): a later call that
            # stops to ask is not completed, and the person hears so.
            run = await self.run_confirmed(parts, scope, verdict, one)
            if run.slots.get(ELICITATION_SLOT) is not None:
                asking_now = list(run.say)  # said last: the question the person answers next
            else:
                said.extend(run.say)
            outcome = run.outcome if outcome == "done" else outcome
            kept.update(run.slots)
        return Decision(outcome, [*said, *asking_now], {**ended(skill), **kept})

    async def run_confirmed(self, parts: Parts, scope: Scope, verdict: RunConfirmed, one: Bound) -> Run:
        """The call alone, with the slots it was planned with."""
        slots = {**scope.turn.slots, **one.call.context}
        ran = await parts.runner.run(scope, one.step, one.resolved, one.call.arguments, slots, {}, verdict)
        if isinstance(ran, Run):
            return ran
        return Run(ran.outcome or "done", tuple(ran.say), {})

    async def ask_again(self, parts: Parts, scope: Scope, question: Question, bound: Sequence[Bound]) -> Run:
        """Put again as it was."""
        return await asking.put(parts, scope, asking.replanned(bound), self, question)


ONE_CALL: Form = _OneCall()
NUMBERED: Form = _Numbered()


def of(question: Question) -> Form:
    """The form ``question`` was asked in."""
    return NUMBERED if question.listed else ONE_CALL


def read(parts: Parts, question: Question, turn: Turn) -> tuple[Form, Answer | CallsAnswer]:
    """The form ``question`` was asked in, and the turn's answer read in it."""
    form = of(question)
    return form, form.read(parts, question, turn)


def chosen(gathered: Gathered) -> Form:
    """The form of a question about what a run gathered: one call on one line is the skill's own
    question; anything else a numbered list."""
    return ONE_CALL if len(gathered.calls) == 1 and not gathered.split else NUMBERED


async def asked(parts: Parts, scope: Scope, ran: Run | Gathered, asked_before: Question | None) -> Run:
    """What a run came to: its end, or a question about the calls it gathered (``asked_before``: the
    question it replaces, whose calls keep their keys), after what it said and set."""
    if isinstance(ran, Run):
        return ran
    put = await asking.put(parts, scope, ran.calls, chosen(ran), asked_before)
    return replace(put, say=(*ran.said, *put.say), slots={**ran.slots, **put.slots})


def rejected_by_gate(parts: Parts, turn: Turn, question: Question, call: AskedCall, verdict: Reject) -> Say:
    """A confirmed call the gate rejects (its skill no longer asks about it): audited, never run."""
    log.warning("conversation %s: call %s not run: %s", turn.conversation_id, call.id, verdict.reason)
    parts.audit.record_question(turn.conversation_id, question, call, "rejected", verdict.reason)
    return Say(parts.responses.confirmation_invalid)
