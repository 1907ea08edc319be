"""The confirmation-aware executor: runs a skill's steps and holds every constrained write for a "yes".

Plain data in (a :class:`Turn`: slots and what the person just said), a :class:`Decision` out
(responses to say, slots to set). The pending confirmation travels in a slot, sealed
(:mod:`mcp_bridge.sealing`), so the action server keeps no state and any replica can serve the "yes".
What counts as a yes is the reader's to say (:mod:`mcp_bridge.reading.reader`); which calls need one is
:mod:`mcp_bridge.confirmation.gate`'s; tools are resolved to one interface and called through its layers
(:mod:`mcp_bridge.skills.toolbox`, :mod:`mcp_bridge.tools.pipeline`).

Each entry point (:meth:`Executor.start`, :meth:`~Executor.answer`, :meth:`~Executor.deny`,
:meth:`~Executor.revoke`, :meth:`~Executor.approval_decided`; one per Rasa action) reads the turn, runs
what it must, and builds its one :class:`Decision` at the end; the steps on the way return small
immutable results (:class:`~mcp_bridge.confirmation.decisions.Run`) and change nothing they were given.

The rules, in order of importance:

1. A step whose tool needs a confirmation never runs in the turn that reaches it: the exact call is
   sealed into the tracker and the person is asked. The need is found by the tool's *name*, before
   the name is resolved, so it holds for local and MCP tools alike.
2. A tool from an MCP server that the skill gives no constraint needs a confirmation too, unless
   the server is marked ``trusted`` and annotates the tool read-only. A skill can switch it off
   explicitly (``enabled: false``).
3. Only a plain yes to the question just asked, from the person who was asked, runs the call:
   exactly the sealed arguments, once, with the question's idempotency key (the first question's
   id, kept when the same call is asked about again). A seal that does not verify, arguments that
   changed since, or a yes that came late or after other messages never write. An answer of any kind
   from someone else (another user the channel names), in a message no channel vouches for (its
   signature missing or not holding: :mod:`mcp_bridge.channels.proof`), or received before the
   question was asked (a replay) is refused and audited; the question waits for its person. A
   request no channel vouches for starts nothing.
4. A no calls nothing. An edit or a redirect replaces the question with a new one. An answer
   after the question expired is told so and that nothing was written, and the question is asked
   again (audited as expired). An unclear answer asks again, and so does a message over the
   reader's limit, which nothing reads. A message that is not an answer is handed back to the bot,
   and the question is asked again afterwards; a question left behind by a new request is dropped
   aloud.
5. The tool's name is resolved at dispatch time; a name that resolves to nothing is a loud error,
   and nothing runs.
6. A run that reaches several constrained calls (steps in a row, or one step over a list) asks about
   them in one question, a numbered list. Each call is sealed on its own, with its own idempotency
   key, and gets its own decision: the person answers each ("yes to 1, no to 2", "only the first",
   "all", "none", the buttons), and an answer that does not decide every call is asked again. On
   such an answer each approved call runs as rule 3 says, whatever happens to the others; each
   refused call runs not at all; every decision is audited per call. "change 2 to: ..." edits one
   call and asks about the list again. The skill ends with that answer (steps after the list do not
   run). A run that did not split into lines and reaches one call asks about it exactly as rules 1
   to 5 say; one call of a split run is a list of one (its context is not the conversation's)
   (:mod:`mcp_bridge.confirmation.several_calls`).
7. A confirmed call whose skill requires a second approver for it is held, not run: it waits for a
   person with the role, never the requester, and runs (once, with the question's key) only when
   the conversation is told it was approved in time (:mod:`mcp_bridge.approvals.second_approver`).
8. A skill may let the person answer one call's question with "yes, and don't ask again today" (the
   reader's grant, or the question's third button): the call runs as rule 3 says, and a sealed
   permission is kept in the tracker. A later new request whose one call it covers runs that call
   unasked, saying so; a list of several calls, an edit, a second approver or a destructive tool
   is asked about as before (:mod:`mcp_bridge.confirmation.permissions` says which calls a permission covers).

A server that acts as the person (:mod:`mcp_bridge.auth.person`) and has no usable sign-in of the
person is never called: its :class:`SignInRequiredError` goes up to the Rasa action, which shows the
sign-in link; the skill runs again after the sign-in and asks as usual (a sign-in is never a yes).
A held call released by its approver (rule 7) runs as the requester, whose yes was sealed with it.

Where the rules live: this module holds the entry points, the step loop and the rules for one
call (1, 3, 4), and the parts of 7 and 8 that run a call. Beneath it, each with a narrow job and none
importing this module:

* :mod:`mcp_bridge.confirmation.calls`: one call, from its tool's name to what its result says: rules 2 and 5,
  the "once, with the question's key" of rule 3, the audit, and holding a call for its approver (7);
* :mod:`mcp_bridge.confirmation.several_calls`: rule 6, a list of calls in one question;
* :mod:`mcp_bridge.approvals.second_approver`: rule 7's rules and store;
* :mod:`mcp_bridge.confirmation.permissions`: rule 8's rules, and a conversation's permissions as the
executor keeps
  them (:class:`~mcp_bridge.confirmation.permissions.Permissions`: granted, covering a call, revoked);
* :mod:`mcp_bridge.confirmation.server_questions`: a server's own questions during a call, resumed through
this
  module's step loop (:meth:`Executor.run_from`, the one hook it is given);
* :mod:`mcp_bridge.confirmation.decisions`: the plain data they share (:class:`Turn`, :class:`Say`,
  :class:`Decision`, :class:`Responses`, :class:`ConfirmationPolicy`; imported from here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.approvals.second_approver import Approvals
from mcp_bridge.auth.person import SignInRequiredError, acting
from mcp_bridge.confirmation import permissions, templating
from mcp_bridge.confirmation.calls import Calls, Planned, Resolved, found
from mcp_bridge.confirmation.decisions import (
    ConfirmationPolicy,
    Decision,
    Outcome,
    Responses,
    Run,
    Say,
    Turn,
    ended,
)
from mcp_bridge.confirmation.permissions import Permission, Permissions
from mcp_bridge.confirmation.server_questions import ServerQuestions
from mcp_bridge.confirmation.several_calls import SeveralCalls
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT, PERMISSIONS_SLOT
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.reading.reader import (
    ConfirmationReader,
    Edit,
    Grant,
    NluOpinion,
    No,
    Other,
    Redirect,
    TooLong,
    Unclear,
    Yes,
    YesThisTime,
)
from mcp_bridge.sealing import PendingConfirmation, Seal, question_from_slot
from mcp_bridge.skills.files import (
    AllowsRemembering,
    RequiresApproval,
    RequiresConfirmation,
    ResultArgument,
    Skill,
    SlotArgument,
    Step,
    resolve_arguments,
    runs_when,
    too_many_items,
)
from mcp_bridge.skills.toolbox import ToolBox

__all__ = ["ConfirmationPolicy", "Decision", "Executor", "Outcome", "Responses", "Say", "Turn"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Line:
    """One line of a run. A ``for_each`` step splits a run into one line per item of its list; each
    line has its own slots and results, and ``own`` holds the slot values it set itself."""

    slots: Mapping[str, Any]
    results: Mapping[str, Any] = field(default_factory=dict)
    own: Mapping[str, Any] = field(default_factory=dict)

    def set(self, values: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> _Line:
        return _Line({**self.slots, **values}, {**self.results, **(results or {})}, {**self.own, **values})


class Executor:
    """The confirmation rules over one set of skills and tools; one Decision per entry point."""

    def __init__(
        self,
        skills: Mapping[str, Skill],
        tools: ToolBox,
        *,
        policy: ConfirmationPolicy | None = None,
        responses: Responses | None = None,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.time,
        seal: Seal | None = None,
        reader: ConfirmationReader | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.skills = dict(skills)
        self.tools = tools
        self.policy = policy or ConfirmationPolicy()
        self.responses = responses or Responses()
        self.reader = reader or ConfirmationReader(
            affirm_intent=self.policy.affirm_intent,
            deny_intent=self.policy.deny_intent,
            min_confidence=self.policy.min_confidence,
            deny_margin=self.policy.deny_margin,
        )
        audit = audit or AuditLog(None)
        seal = seal or Seal.ephemeral()
        # Questions an MCP server asks during a call (mcp_bridge.confirmation.server_questions), resumed
        # through
        # this executor's step loop (run_from).
        self.questions = ServerQuestions(seal, self.responses, self.reader, self.skills, self.run_from)
        # One call: resolved, checked, sealed, dispatched once, audited; or held for an approver (rule 7).
        self.calls = Calls(
            self.skills,
            tools,
            policy=self.policy,
            responses=self.responses,
            audit=audit,
            clock=clock,
            seal=seal,
            questions=self.questions,
            approvals=approvals,
        )
        # Rule 6: several calls in one question.
        self.several = SeveralCalls(self.calls, self.reader)
        # Rule 8: remembered permissions.
        self.permissions = Permissions(seal, clock, audit)

    @property
    def approvals(self) -> Approvals | None:
        """Rule 7's store and rules; None: a call that needs a second approver is refused, unrun."""
        return self.calls.approvals

    @approvals.setter
    def approvals(self, approvals: Approvals | None) -> None:
        self.calls.approvals = approvals

    async def aclose(self) -> None:
        await self.tools.aclose()
        if self.approvals is not None:
            await self.approvals.store.aclose()

    # -- entry points: one per Rasa action ----------------------------------------------------

    async def start(self, skill_id: str, turn: Turn) -> Decision:
        """Run a skill from its first step, until it ends or asks (rule 1); not for a message over
        the reader's limit, which is refused unread, nor for one no channel vouches for (rule 3).

        A question still pending while the confirmation loop is active was interrupted: it stays
        and is asked again afterwards. One left behind outside the loop is dropped aloud (rule 4).
        """
        skill = self.skills[skill_id]
        if turn.unvouched is not None:
            # Posted to the action server, or appended through Rasa's API, not sent by the person
            # through a channel that authenticated them: nothing runs, not even a lookup.
            log.warning(
                "conversation %s: %s not started: %s; nothing ran",
                turn.conversation_id,
                skill_id,
                turn.unvouched,
            )
            return Decision("unvouched", [Say(self.responses.not_vouched)])
        too_long = self.reader.too_long(turn.text) if turn.new_message else None
        if too_long is not None:
            # Started by a message over the limit: whatever the NLU took from it is not used.
            return Decision("too_long", [self.calls.too_long(too_long)])
        crowded = too_many_items(skill, turn.slots) if turn.new_message else None
        if crowded is not None:
            # One message naming hundreds of addresses: no lookups, no question of hundreds of calls.
            self.calls.audit.record(
                event="too_many_items",
                conversation_id=turn.conversation_id,
                skill=skill.id,
                slot=crowded.slot,
                count=crowded.count,
                limit=crowded.limit,
            )
            variables = {"count": crowded.count, "limit": crowded.limit}
            return Decision("too_many_items", [Say(self.responses.too_many_items, variables)])
        said: list[Say] = []
        cleared: dict[str, Any] = {}
        raw = turn.slots.get(PENDING_SLOT)
        if turn.slots.get(ELICITATION_SLOT) is not None and not turn.loop_active:
            cleared[ELICITATION_SLOT] = None  # a server's question left behind: dropped unanswered
        if raw is not None and not turn.loop_active:
            cleared = {**cleared, PENDING_SLOT: None}
            left_behind = question_from_slot(raw)
            if left_behind is not None:
                for call in left_behind:
                    self.calls.record(turn, call, "dropped", "the person started something else")
                said = [Say(self.responses.question_dropped)]
        run = await self._run(skill, 0, turn, permitted=True)
        return run.decision(skill, said=said, slots=cleared, owns_question=not turn.loop_active)

    async def answer(self, turn: Turn) -> Decision:
        """The confirmation loop: read the answer to the pending question and act on it (rules 3, 4).

        With ``turn.new_message`` false the loop is resuming: right after the question was asked
        there is nothing to do; after an interruption the question is asked again.
        """
        if turn.slots.get(ELICITATION_SLOT) is not None:
            return await self.questions.answer(turn)  # a server's question, not a confirmation
        raw = turn.slots.get(PENDING_SLOT)
        question = question_from_slot(raw)
        if raw is not None and question is None:
            log.warning("conversation %s: malformed pending confirmation ignored", turn.conversation_id)
        if question is not None and question[0].in_batch:
            return await self.several.answer(question, turn)  # rule 6
        pending = question[0] if question is not None else None
        if not turn.new_message:
            return await self._resume(turn, pending, raw)
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        if pending is None:
            reading = self.reader.read(turn.text, nlu)
            if isinstance(reading, TooLong):
                return Decision("too_long", [self.calls.too_long(reading)], _clear(raw))
            if isinstance(reading, Yes | No):
                return Decision("nothing_pending", [Say(self.responses.nothing_pending)], _clear(raw))
            return Decision("handed_back")  # not an answer to anything: the bot's to handle
        bound = await self.calls.verified(pending, turn)
        if bound is None:
            return self.calls.reject(turn, pending, "confirmation does not match a known call")
        # Who was asked is sealed, so it is compared only once the seal holds.
        refusal = self.calls.unanswerable(turn, pending)
        if refusal is not None:
            return self.calls.refuse(turn, pending, refusal)
        skill, step, resolved = bound
        reading = self.reader.read(turn.text, nlu, pending.arguments)
        if isinstance(reading, Yes | YesThisTime):
            # "yes, but ask me next time": a yes that gives no permission, and says so where one could be.
            rule = skill.constraints.get(pending.tool)
            remembers = rule is not None and rule.allows_remembering is not None
            once = isinstance(reading, YesThisTime) and remembers
            return await self._confirmed(skill, step, resolved, pending, turn, once=once)
        if isinstance(reading, Grant):
            allowed = await permissions.may_remember(skill, pending.tool, found(resolved), pending.arguments)
            if allowed is not None:
                return await self._confirmed(skill, step, resolved, pending, turn, remember=allowed)
            reading = Unclear("a permission this call cannot be given")
        if isinstance(reading, No):
            return await self.deny(turn)
        if isinstance(reading, Other):
            self.calls.record(turn, pending, "handed_back", None)
            return Decision("handed_back")
        if isinstance(reading, TooLong):
            self.calls.record(turn, pending, "unclear", reading.reason)
            return await self._ask_again(skill, pending, turn, [self.calls.too_long(reading)])
        if isinstance(reading, Edit | Redirect):
            slot = skill.edits.get("text" if isinstance(reading, Edit) else "email")
            value = reading.text if isinstance(reading, Edit) else reading.email
            if slot is not None:
                return await self._changed(skill, pending, turn, slot, value)
            reason = f"an {reading.kind} this skill does not allow"
        else:
            reason = reading.reason
        if self.calls.late(pending):
            return await self._expired(skill, pending, turn)
        self.calls.record(turn, pending, "unclear", reason)
        return await self._ask_again(skill, pending, turn, [Say(self.responses.answer_yes_or_no)])

    async def deny(self, turn: Turn) -> Decision:
        """No: nothing is called, and the person hears the skill's denial."""
        if turn.slots.get(ELICITATION_SLOT) is not None:
            return await self.questions.cancel(turn)  # the server hears cancel
        raw = turn.slots.get(PENDING_SLOT)
        question = question_from_slot(raw)
        if question is None:
            return Decision("nothing_pending", [Say(self.responses.nothing_pending)], _clear(raw))
        pending = question[0]
        refusal = self.calls.unanswerable(turn, pending)
        if refusal is not None:
            return self.calls.refuse(turn, pending, refusal)
        if pending.in_batch:
            return self.several.deny(question, turn)  # rule 6
        self.calls.record(turn, pending, "denied", None)
        skill = self.skills.get(pending.skill)
        rule = await self.calls.needs_yes(skill, pending.tool) if skill is not None else None
        if rule is not None and rule.utter_on_user_denial:
            variables = templating.variables(turn.slots, pending.arguments, tool=pending.tool)
            said = Say(rule.utter_on_user_denial, variables)
        else:
            said = Say(self.responses.confirmation_invalid)
        return Decision("cancelled", [said], ended(skill))

    async def revoke(self, turn: Turn) -> Decision:
        """ "stop saving without asking": every permission of this person in the conversation is
        withdrawn (audited each); anyone else's stay."""
        count, slot = self.permissions.revoke(turn)
        said = Say(self.responses.permissions_revoked, {"count": count})
        return Decision("done", [said], {PERMISSIONS_SLOT: slot})

    async def approval_decided(self, turn: Turn, approval_id: str) -> Decision:
        """Rule 7, in the requester's conversation, told a decision: an approved call runs once,
        exactly as sealed, with the question's key (again, under that key, only when its run was lost:
        :mod:`mcp_bridge.approvals.second_approver` rule 5); a refusal or an expiry is said once; anything
        else
        (unknown, another conversation's, already run or told) says and changes nothing. The
        conversation may have moved on since, so no slot is set."""
        taken = await self.approvals.take(approval_id, turn.conversation_id) if self.approvals else None
        request = taken.request if taken is not None else None
        if taken is None or request is None or taken.kind == "nothing":
            return Decision("nothing_pending")
        variables = templating.variables(request.slots, request.arguments, tool=request.tool)
        if taken.kind not in ("run", "resume"):
            said = approvals.RESPONSES.refused if taken.kind == "refused" else approvals.RESPONSES.expired
            return Decision("cancelled", [Say(said, variables)])
        assert self.approvals is not None
        pending = self.approvals.sealed(request)  # the store's call, exactly as sealed, or None
        then = replace(turn, slots=request.slots)  # the conversation as the requester confirmed it
        bound = await self.calls.verified(pending, then) if pending is not None else None
        if pending is None or bound is None:
            log.warning("approval %s: the held call does not match a known call; nothing was run", request.id)
            await self.approvals.finish(request, "rejected: does not match a known call")
            return Decision("rejected", [Say(self.responses.confirmation_invalid)])
        skill, step, resolved = bound
        if taken.kind == "resume" and not approvals.may_run_again(found(resolved), request.attempts):
            # A lost run (its action server died) may have reached the tool: never repeated unkeyed.
            log.warning("approval %s: its run was lost; not repeated (no tool keeps its key)", request.id)
            await self.approvals.finish(request, "outcome unknown: its run was lost, not repeated")
            return Decision("unavailable", [Say(self.responses.tool_outcome_unknown, variables)])
        # Told by the approval page, not said by anyone: a server that acts as the person is called as
        # the requester, the person whose yes was sealed with the call; never as nobody or another.
        then = replace(then, user=pending.user)
        try:
            with acting(turn.conversation_id, pending.user, skill.id):
                if pending.in_batch:  # one call of a list: alone, with the context it was planned in
                    run = await self.several.run_one(skill, step, resolved, pending, then)
                else:
                    run = await self._run(skill, pending.step, then, confirmed=pending, resolved=resolved)
        except SignInRequiredError:
            # The requester's sign-in is gone (disconnected, or it could not be renewed): nothing was
            # sent, and the request is done; the action shows them the link, and the skill asks anew.
            await self.approvals.finish(request, "not run: the requester must sign in first")
            raise
        try:
            await self.approvals.finish(request, run.outcome)
        except Exception:  # the store failed after the call: the person hears what the call did
            log.exception("approval %s: ran (%s), but could not be marked done", request.id, run.outcome)
        return Decision(run.outcome, list(run.say))

    # -- answers --------------------------------------------------------------------------

    async def _resume(self, turn: Turn, pending: PendingConfirmation | None, raw: Any) -> Decision:
        if pending is None:
            return Decision("nothing_pending", [], _clear(raw))
        if pending.user_turn == turn.user_turn:
            return Decision("pending")  # asked in this very turn
        bound = await self.calls.verified(pending, turn)
        if bound is None:
            return self.calls.reject(turn, pending, "confirmation does not match a known call")
        self.calls.record(turn, pending, "asked_again", None)
        return await self._ask_again(bound[0], pending, turn, [Say(self.responses.confirm_again)])

    async def _confirmed(
        self,
        skill: Skill,
        step: Step,
        resolved: Resolved,
        pending: PendingConfirmation,
        turn: Turn,
        *,
        remember: AllowsRemembering | None = None,
        once: bool = False,
    ) -> Decision:
        """A plain yes: run exactly the sealed call, once, if it still holds (rule 3). ``resolved``:
        what the step's tool name resolved to when the question was checked. ``remember``: the yes
        also gives a permission, as the skill allows it (rule 8); ``once``: it refused one, and hears
        that it will be asked again."""
        if self.calls.late(pending):
            return await self._expired(skill, pending, turn)
        if turn.user_turn != pending.user_turn + 1:
            self.calls.record(turn, pending, "asked_again", None)
            return await self._ask_again(skill, pending, turn, [Say(self.responses.confirm_again)])
        current, _ = resolve_arguments(step, turn.slots)
        if current != pending.arguments:
            return self.calls.reject(turn, pending, "arguments changed after the question", skill)
        self.calls.record(turn, pending, "confirmed", None)
        second = approvals.required(skill, pending.tool, pending.arguments)
        if second is not None:
            return await self._hold(skill, second, pending, turn)
        run = await self._run(skill, pending.step, turn, confirmed=pending, resolved=resolved)
        if remember is None:
            decision = run.decision(skill, slots={PENDING_SLOT: None})
            if once:
                return replace(decision, say=[*decision.say, Say(self.responses.permission_declined)])
            return decision
        granted, slot = self.permissions.grant(skill, remember, pending, turn)
        said = Say(self.responses.permission_granted, self.permissions.variables(granted))
        decision = run.decision(skill, slots={PENDING_SLOT: None})
        return replace(decision, say=[*decision.say, said], slots={**decision.slots, PERMISSIONS_SLOT: slot})

    async def _hold(
        self, skill: Skill, rule: RequiresApproval, pending: PendingConfirmation, turn: Turn
    ) -> Decision:
        """Rule 7: the confirmed call is held for a second approver, and the requester told so."""
        outcome, said = await self.calls.hold(rule, pending, turn, turn.slots)
        return Decision(outcome, [said], ended(skill))

    async def _expired(self, skill: Skill, pending: PendingConfirmation, turn: Turn) -> Decision:
        """An answer after the question expired: the person hears that it expired and nothing was
        written, the audit says so, and the same call is asked again (it keeps its key)."""
        self.calls.record(turn, pending, "expired", None)
        return await self._ask_again(skill, pending, turn, [Say(self.responses.confirmation_expired)])

    async def _changed(
        self, skill: Skill, old: PendingConfirmation, turn: Turn, slot: str, value: str
    ) -> Decision:
        """An edit or a redirect: the skill runs again with ``slot`` changed and asks anew.

        The new arguments are checked like the first ones. If the run does not end in a new
        question (an unknown contact, a text the tool refuses), the person hears why and the old
        question is asked again, unchanged.
        """
        changed = replace(turn, slots={**turn.slots, slot: value})
        # An edit that changes nothing is the same call: it keeps its key (asked_before).
        run = await self._run(skill, 0, changed, asked_before=old)
        if run.waiting and run.asked is not None:
            new = run.asked[0]
            self.calls.record(
                turn, old, "edited", f"{slot} changed", new_digest=new.digest, new_confirmation=new.id
            )
            return run.decision(skill, then={slot: value})
        self.calls.record(turn, old, "unclear", f"the change of {slot} was refused")
        return await self._ask_again(skill, old, turn, run.say)

    async def _ask_again(
        self, skill: Skill, old: PendingConfirmation, turn: Turn, said: Sequence[Say]
    ) -> Decision:
        """Ask the pending question again after ``said``, bound to this turn (a new id and seal), of the
        same person. The same call keeps its idempotency key, so confirming it again cannot write it
        twice."""
        run = await self._run(skill, old.step, replace(turn, user=old.user), asked_before=old)
        return run.decision(skill, said=said, slots={PENDING_SLOT: None})

    # -- the step loop --------------------------------------------------------------------

    async def run_from(
        self, skill: Skill, start: int, turn: Turn, confirmed: PendingConfirmation | None
    ) -> Run:
        """The hook :mod:`mcp_bridge.confirmation.server_questions` resumes a call through, once a server's
        questions
        are answered: the step loop from step ``start``, ``confirmed`` the sealed call a yes authorised
        (run exactly as sealed, with its key) or None."""
        return await self._run(skill, start, turn, confirmed=confirmed)

    async def _run(
        self,
        skill: Skill,
        start: int,
        turn: Turn,
        *,
        confirmed: PendingConfirmation | None = None,
        asked_before: PendingConfirmation | None = None,
        resolved: Resolved | None = None,
        permitted: bool = False,
    ) -> Run:
        """Run ``skill`` from step ``start`` with the turn's slots; ``confirmed`` is the call a yes just
        authorised, ``asked_before`` the question a new one replaces (the same call keeps its key),
        ``resolved`` what the first step's tool name resolved to, if that is known already;
        ``permitted``: a new request, whose one call a remembered permission may cover (rule 8).

        Constrained calls are gathered, not run (rule 1): the run goes on past them while the next
        steps are constrained too and need nothing the gathered calls would give, then asks about
        all of them (rule 6). A run of one line that gathered one call asks as it always did.
        """
        lines = [_Line(dict(turn.slots))]
        said: list[Say] = []
        planned: list[Planned] = []
        for index in range(start, len(skill.steps)):
            step = skill.steps[index]
            if index != start or resolved is None:
                resolved = self.calls.resolve(skill, step.execute_tool)
            authorised = confirmed if confirmed is not None and index == confirmed.step else None
            rule: RequiresConfirmation | None = None
            if authorised is None:
                lines = _expand(step, lines)
                if not any(runs_when(step, line.slots, line.results) for line in lines):
                    continue
                rule = await self.calls.needs_yes(skill, step.execute_tool, resolved)
                if planned and (rule is None or _waits_for(step, planned, lines)):
                    break  # asked about after the gathered calls, in a question of its own
            updated: list[_Line] = []
            for position, line in enumerate(lines):
                if authorised is None and not runs_when(step, line.slots, line.results):
                    updated.append(line)
                    continue
                if authorised is not None:
                    arguments = dict(authorised.arguments)
                else:
                    arguments, missing = resolve_arguments(step, line.slots, line.results)
                    if missing:
                        response = step.on_missing_argument or self.responses.tool_failed
                        missed = Say(response, {"error": f"missing {', '.join(missing)}"})
                        return Run("missing_argument", (*said, missed), _filled(lines))
                    if rule is not None:
                        planned.append(Planned(index, step, resolved, rule, arguments, line.slots, line.own))
                        updated.append(line)
                        continue
                called = await self.calls.dispatch(
                    skill, step, resolved, arguments, line.slots, turn, authorised
                )
                if isinstance(called, Run):
                    return replace(called, say=(*said, *called.say), slots={**_filled(lines), **called.slots})
                results = {**line.results, **called.data}
                routed = self.calls.route(step, called, line.slots, arguments, results)
                said.extend(routed.say)
                line = line.set(routed.slots, called.data)
                updated.append(line)
                if routed.outcome is not None:
                    return Run(routed.outcome, tuple(said), _filled([*updated, *lines[position + 1 :]]))
            lines = updated
        if planned:
            if len(planned) == 1 and len(lines) == 1:
                one = planned[0]
                permission = None
                if permitted:  # rule 8
                    permission = await self.permissions.covering_call(
                        skill, one.step.execute_tool, found(one.resolved), one.arguments, turn
                    )
                if permission is not None:
                    ran = await self._run_permitted(skill, one, permission, turn)
                    return replace(ran, say=(*said, *ran.say), slots={**_filled(lines), **ran.slots})
                asked = await self._ask(
                    skill,
                    one.index,
                    one.step,
                    one.resolved,
                    one.rule,
                    one.arguments,
                    one.slots,
                    turn,
                    asked_before,
                )
            else:
                before = (asked_before,) if asked_before is not None else ()
                asked = await self.several.ask(skill, planned, turn, before)
            return replace(asked, say=(*said, *asked.say), slots={**_filled(lines), **asked.slots})
        return Run("done", tuple(said), _filled(lines))

    async def _ask(
        self,
        skill: Skill,
        index: int,
        step: Step,
        resolved: Resolved,
        rule: RequiresConfirmation,
        arguments: dict[str, Any],
        slots: Mapping[str, Any],
        turn: Turn,
        asked_before: PendingConfirmation | None,
    ) -> Run:
        """Rule 1: seal the exact call into the tracker and ask. Arguments the tool would refuse are
        refused now, before the person is asked about them. ``asked_before``: the question this one
        asks again; the same call keeps its idempotency key."""
        refused = await self.calls.refused(skill, step, resolved, arguments, turn)
        if refused is not None:
            return refused
        pending = self.calls.seal.sign(
            self.calls.pending(skill, index, step, arguments, turn, asked_before), turn.conversation_id
        )
        assert rule.utter_for_confirmation is not None
        variables = templating.variables(slots, arguments, tool=step.execute_tool)
        # Rule 8: a third button gives a permission, where the skill allows one for this call.
        remember = await permissions.may_remember(skill, step.execute_tool, found(resolved), arguments)
        buttons = (permissions.GRANT_BUTTON,) if remember else ()
        question = Say(rule.utter_for_confirmation, variables, buttons)
        self.calls.record(turn, pending, "asked", None)
        return Run("pending", (question,), {PENDING_SLOT: pending.to_slot()}, (pending,))

    async def _run_permitted(self, skill: Skill, one: Planned, permission: Permission, turn: Turn) -> Run:
        """Rule 8: a call a permission covers runs unasked, once, with a key of its own, from its step."""
        unsigned = self.calls.pending(skill, one.index, one.step, one.arguments, turn, None)
        pending = self.calls.seal.sign(unsigned, turn.conversation_id)
        self.calls.record(turn, pending, "permission_used", None, permission=permission.id)
        then = replace(turn, slots=one.slots)
        run = await self._run(skill, one.index, then, confirmed=pending, resolved=one.resolved)
        used = Say(self.responses.permission_used, {**self.permissions.variables(permission)})
        return replace(run, say=(*run.say, used))


def _expand(step: Step, lines: list[_Line]) -> list[_Line]:
    """A ``for_each`` step: each line becomes one line per item of its list (none: the line as is)."""
    if step.for_each is None:
        return lines
    out: list[_Line] = []
    for line in lines:
        items = line.slots.get(step.for_each.slot)
        if isinstance(items, list) and items:
            out.extend(line.set({step.for_each.as_: item}) for item in items)
        else:
            out.append(line)
    return out


def _waits_for(step: Step, planned: Sequence[Planned], lines: Sequence[_Line]) -> bool:
    """``step`` needs what a gathered call would give: a slot it fills, or a result not there yet."""
    filled_by_them = {slot for one in planned for slot in one.step.fills}
    for source in (*step.arguments.values(), step.when):
        if isinstance(source, SlotArgument) and source.slot in filled_by_them:
            return True
        if isinstance(source, ResultArgument) and any(source.result not in line.results for line in lines):
            return True
    return False


def _filled(lines: Sequence[_Line]) -> dict[str, Any]:
    """The slots a run sets in the conversation: its one line's, or what all its lines agree on."""
    if len(lines) == 1:
        return dict(lines[0].own)
    first, *others = lines
    return {k: v for k, v in first.own.items() if all(k in o.own and o.own[k] == v for o in others)}


def _clear(raw: Any) -> dict[str, Any]:
    return {PENDING_SLOT: None} if raw is not None else {}
