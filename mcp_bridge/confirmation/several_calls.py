"""Rule 6 of :mod:`mcp_bridge.confirmation.executor`: several constrained calls, asked about in one question.

A run that reaches several constrained calls (steps in a row, or one step over a list) asks about
them in one question, a numbered list. Each call is sealed on its own, with its own idempotency key,
and gets its own decision: the person answers each ("yes to 1, no to 2", "only the first", "all",
"none", the buttons; :meth:`mcp_bridge.reading.reader.ConfirmationReader.read_calls` reads them), and an
answer that does not decide every call is asked again. On such an answer each approved call runs as
rule 3 says, whatever happens to the others; each refused call runs not at all; every decision is
audited per call. "change 2 to: ..." edits one call and asks about the list again. The skill ends
with that answer (steps after the list do not run). An approved call that needs a second approver
is held for it (rule 7), and the others run.

The executor's step loop gathers the calls and hands them to :meth:`SeveralCalls.ask`; its
confirmation loop hands the answer to :meth:`SeveralCalls.answer`, its "no" to
:meth:`SeveralCalls.deny`, and a held call of a list its approver released to
:meth:`SeveralCalls.run_one`. Everything else about a call (its check, seal, dispatch, audit) is
:mod:`mcp_bridge.confirmation.calls`'s; this module never calls back into the executor.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.calls import Calls, Planned, Resolved
from mcp_bridge.confirmation.decisions import Decision, Outcome, Run, Say, Turn, ended
from mcp_bridge.confirmation.gate import declared
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.reading.reader import Choices, ConfirmationReader, EditCall, NluOpinion, Other, TooLong
from mcp_bridge.sealing import PendingConfirmation, Question, call_digest, question_to_slot
from mcp_bridge.skills.files import ResultArgument, Skill, SlotArgument, Step, resolve_arguments

# Up to this many calls in a question, each gets an "Only <n>" button; more are answered in words.
_MAX_CALL_BUTTONS = 5


class SeveralCalls:
    """Asks about a list of calls and acts on the answer, for one executor (its calls and reader)."""

    def __init__(self, calls: Calls, reader: ConfirmationReader) -> None:
        self.calls = calls
        self.reader = reader
        self.responses = calls.responses

    async def ask(self, skill: Skill, planned: Sequence[Planned], turn: Turn, asked_before: Question) -> Run:
        """Rule 6: seal each call on its own, as one question, and ask with a numbered list. Arguments
        a tool would refuse are refused now, before anything is asked. A call asked about before
        (the same call, in ``asked_before``) keeps its idempotency key."""
        for one in planned:
            refused = await self.calls.refused(skill, one.step, one.resolved, one.arguments, turn)
            if refused is not None:
                return refused
        keys = {call.digest: call.key for call in asked_before}
        batch, now = uuid.uuid4().hex, self.calls.clock()
        calls: list[PendingConfirmation] = []
        for place, one in enumerate(planned, start=1):
            source = str(skill.tools[one.step.execute_tool])
            digest = call_digest(skill.id, one.step.execute_tool, source, one.arguments)
            question_id = uuid.uuid4().hex
            call = PendingConfirmation(
                id=question_id,
                skill=skill.id,
                tool=one.step.execute_tool,
                step=one.index,
                source=source,
                arguments=dict(one.arguments),
                digest=digest,
                asked_at=now,
                user_turn=turn.user_turn,
                key=keys.get(digest, question_id),
                user=turn.user,
                asked_after=turn.said_at,
                batch=batch,
                place=place,
                count=len(planned),
                context=dict(one.context),
            )
            calls.append(self.calls.seal.sign(call, turn.conversation_id))
        for call in calls:
            self.calls.record(turn, call, "asked", None)
        question = tuple(calls)
        return Run(
            "pending",
            (self._list(skill, question, turn.slots),),
            {PENDING_SLOT: question_to_slot(question)},
            question,
        )

    def _list(self, skill: Skill, calls: Question, slots: Mapping[str, Any]) -> Say:
        """The question about several calls: each on its numbered line, and a button per call."""
        lines = "\n".join(f"{call.place}. {self._describe(skill, call, slots)}" for call in calls)
        buttons = tuple({"title": f"Only {call.place}", "payload": f"only {call.place}"} for call in calls)
        if len(calls) == 1:
            return Say(self.responses.confirm_one_call, {"calls": lines, "count": 1})
        return Say(
            self.responses.confirm_calls,
            {"calls": lines, "count": len(calls)},
            buttons if 2 <= len(calls) <= _MAX_CALL_BUTTONS else (),
        )

    def _describe(self, skill: Skill, call: PendingConfirmation, slots: Mapping[str, Any]) -> str:
        """A call's line in the list: its tool's ``describe`` filled in, or its name and arguments."""
        variables = templating.variables({**slots, **call.context}, call.arguments, tool=call.tool)
        rule = declared(skill, call.tool)
        if rule is not None and rule.describe:
            try:
                return rule.describe.format_map(variables)
            except (KeyError, ValueError, IndexError, AttributeError):
                pass  # a variable this call does not have: named plainly instead
        return f"{call.tool} {variables['tool_arguments']}"

    async def answer(self, calls: Question, turn: Turn) -> Decision:
        """Rule 6: the answer to a question about several calls, read once, decided per call."""
        first = calls[0]
        bound = await self._verified(calls, turn)
        if bound is None:
            for call in calls[1:]:
                self.calls.record(turn, call, "rejected", "confirmation does not match a known call")
            return self.calls.reject(turn, first, "confirmation does not match a known call")
        # Who was asked is sealed, so it is compared only once the seal holds.
        refusal = self.calls.unanswerable(turn, first)
        if refusal is not None:
            return self.calls.refuse(turn, first, refusal)
        skill, steps = bound
        if not turn.new_message:
            if first.user_turn == turn.user_turn:
                return Decision("pending")  # asked in this very turn
            self._record_all(turn, calls, "asked_again", None)
            return await self._ask_again(skill, steps, calls, turn, [Say(self.responses.confirm_again)])
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        names = [call.tool.rsplit("_", 1)[-1] for call in calls]
        reading = self.reader.read_calls(turn.text, nlu, [call.arguments for call in calls], names)
        if isinstance(reading, Choices):
            return await self._decided(skill, steps, calls, reading.approved, turn)
        if isinstance(reading, Other):
            self._record_all(turn, calls, "handed_back", None)
            return Decision("handed_back")
        if isinstance(reading, TooLong):
            self._record_all(turn, calls, "unclear", reading.reason)
            return await self._ask_again(skill, steps, calls, turn, [self.calls.too_long(reading)])
        if isinstance(reading, EditCall):
            return await self._edited_call(skill, steps, calls, reading, turn)
        if self.calls.late(first):
            self._record_all(turn, calls, "expired", None)
            expired = [Say(self.responses.confirmation_expired)]
            return await self._ask_again(skill, steps, calls, turn, expired)
        self._record_all(turn, calls, "unclear", reading.reason)
        return await self._ask_again(skill, steps, calls, turn, [Say(self.responses.answer_each_call)])

    async def _decided(
        self,
        skill: Skill,
        steps: Sequence[tuple[Step, Resolved]],
        calls: Question,
        approved: Sequence[bool],
        turn: Turn,
    ) -> Decision:
        """A yes or no for each call: each approved call runs as rule 3 says, each refused one never."""
        first = calls[0]
        if not any(approved):  # a no to every call cancels, late or not: nothing runs
            self._record_all(turn, calls, "denied", None)
            return Decision("cancelled", [Say(self.responses.calls_cancelled)], ended(skill))
        if self.calls.late(first):
            self._record_all(turn, calls, "expired", None)
            expired = [Say(self.responses.confirmation_expired)]
            return await self._ask_again(skill, steps, calls, turn, expired)
        if turn.user_turn != first.user_turn + 1:
            self._record_all(turn, calls, "asked_again", None)
            return await self._ask_again(skill, steps, calls, turn, [Say(self.responses.confirm_again)])
        for call, (step, _) in zip(calls, steps, strict=True):
            if not _still_holds(step, call, turn.slots):
                for other in calls:
                    if other is not call:
                        self.calls.record(turn, other, "rejected", "another call of the question changed")
                return self.calls.reject(turn, call, "arguments changed after the question", skill)
        said: list[Say] = []
        outcome: Outcome = "done"
        # A call its server stops to ask the person about keeps its question (the elicitation slot).
        kept: dict[str, Any] = {}
        asking: list[Say] = []
        for call, (step, resolved), yes in zip(calls, steps, approved, strict=True):
            if not yes:
                self.calls.record(turn, call, "denied", None)
                variables = {"place": call.place, "call": self._describe(skill, call, turn.slots)}
                said.append(Say(self.responses.call_skipped, variables))
                continue
            self.calls.record(turn, call, "confirmed", None)
            second = approvals.required(skill, call.tool, call.arguments)
            if second is not None:  # rule 7: this call waits for its approver; the others do not
                held, waiting = await self.calls.hold(second, call, turn, {**turn.slots, **call.context})
                said.append(waiting)
                outcome = held if outcome == "done" else outcome
                continue
            run = await self.run_one(skill, step, resolved, call, turn)
            if ELICITATION_SLOT in kept and run.slots.get(ELICITATION_SLOT) is not None:
                # One server question waits at a time: this call's is not asked, and the call not
                # completed (its server hears nothing more; a held call is told cancel when its
                # wait runs out). The person hears so, and can ask for it again afterwards.
                self.calls.record(turn, call, "executed", "not completed: another call's question is waiting")
                error = "it has a question of its own while another is waiting; ask for it again after"
                said.append(Say(self.responses.tool_failed, {"error": error, "tool_name": call.tool}))
                continue
            if run.slots.get(ELICITATION_SLOT) is not None:
                asking = list(run.say)  # said last: the question the person answers next
            else:
                said.extend(run.say)
            outcome = run.outcome if outcome == "done" else outcome
            kept.update(run.slots)
        return Decision(outcome, [*said, *asking], {**ended(skill), **kept})

    async def run_one(
        self, skill: Skill, step: Step, resolved: Resolved, call: PendingConfirmation, turn: Turn
    ) -> Run:
        """One confirmed call of a list, exactly as sealed, with the slots it was planned with."""
        slots = {**turn.slots, **call.context}
        called = await self.calls.dispatch(skill, step, resolved, dict(call.arguments), slots, turn, call)
        if isinstance(called, Run):
            return called
        routed = self.calls.route(step, called, slots, call.arguments, called.data)
        return Run(routed.outcome or "done", tuple(routed.say), {})

    async def _edited_call(
        self,
        skill: Skill,
        steps: Sequence[tuple[Step, Resolved]],
        calls: Question,
        edit: EditCall,
        turn: Turn,
    ) -> Decision:
        """ "change 2 to: ...": that call's text argument changes, and the list is asked about again."""
        slot = skill.edits.get("text")
        old = calls[edit.place - 1]
        step = steps[edit.place - 1][0]
        changed = [
            name
            for name, source in step.arguments.items()
            if slot is not None and isinstance(source, SlotArgument) and source.slot == slot
        ]
        if slot is None or not changed:
            self._record_all(turn, calls, "unclear", "an edit this call does not allow")
            return await self._ask_again(skill, steps, calls, turn, [Say(self.responses.answer_each_call)])
        planned = self._replanned(skill, steps, calls)
        one = planned[edit.place - 1]
        planned[edit.place - 1] = replace(
            one,
            arguments={**one.arguments, **dict.fromkeys(changed, edit.text)},
            context={**one.context, slot: edit.text},
        )
        run = await self.ask(skill, planned, replace(turn, user=old.user), calls)
        if not run.waiting or run.asked is None:
            self._record_all(turn, calls, "unclear", f"the change of {slot} was refused")
            return await self._ask_again(skill, steps, calls, turn, run.say)
        new = run.asked[edit.place - 1]
        self.calls.record(
            turn, old, "edited", f"{slot} changed", new_digest=new.digest, new_confirmation=new.id
        )
        return Decision(run.outcome, list(run.say), dict(run.slots))

    async def _ask_again(
        self,
        skill: Skill,
        steps: Sequence[tuple[Step, Resolved]],
        calls: Question,
        turn: Turn,
        said: Sequence[Say],
    ) -> Decision:
        """The same list again after ``said``, bound to this turn, of the same person; each call keeps
        its idempotency key."""
        planned = self._replanned(skill, steps, calls)
        run = await self.ask(skill, planned, replace(turn, user=calls[0].user), calls)
        return run.decision(skill, said=said, slots={PENDING_SLOT: None})

    def _replanned(
        self, skill: Skill, steps: Sequence[tuple[Step, Resolved]], calls: Question
    ) -> list[Planned]:
        """The calls of a question, as they were planned: to seal them again."""
        planned = []
        for call, (step, resolved) in zip(calls, steps, strict=True):
            rule = declared(skill, call.tool) or self.calls.unconstrained
            planned.append(Planned(call.step, step, resolved, rule, dict(call.arguments), {}, call.context))
        return planned

    async def _verified(
        self, calls: Question, turn: Turn
    ) -> tuple[Skill, list[tuple[Step, Resolved]]] | None:
        """The skill and, per call, the step and what its tool resolves to, if the question's seals
        and binding hold (each call as :meth:`_verified` checks one, and together one question)."""
        skill = self.calls.skills.get(calls[0].skill)
        if skill is None or not self.calls.seal.verify_question(calls, turn.conversation_id):
            return None
        steps = []
        for call in calls:
            if call.skill != skill.id or not 0 <= call.step < len(skill.steps):
                return None
            step = skill.steps[call.step]
            source = skill.tools.get(call.tool)
            if step.execute_tool != call.tool or source is None or str(source) != call.source:
                return None
            resolved = self.calls.resolve(skill, call.tool)
            if await self.calls.needs_yes(skill, call.tool, resolved) is None:
                return None
            steps.append((step, resolved))
        return skill, steps

    def _record_all(self, turn: Turn, calls: Question, decision: str, result: str | None) -> None:
        for call in calls:
            self.calls.record(turn, call, decision, result)

    def deny(self, calls: Question, turn: Turn) -> Decision:
        """No to the whole list: nothing is called, and the person hears so."""
        for call in calls:
            self.calls.record(turn, call, "denied", None)
        return Decision(
            "cancelled", [Say(self.responses.calls_cancelled)], ended(self.calls.skills.get(calls[0].skill))
        )


def _still_holds(step: Step, call: PendingConfirmation, slots: Mapping[str, Any]) -> bool:
    """The call's arguments are still what its step makes of the slots (the conversation's, with
    the call's own context over them); results of earlier steps are not kept, so not compared."""
    current, _ = resolve_arguments(step, {**slots, **call.context})
    return all(
        current.get(name) == call.arguments.get(name)
        for name, source in step.arguments.items()
        if not isinstance(source, ResultArgument)
    )
