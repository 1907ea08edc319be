"""The confirmation-aware executor: runs a skill's steps and holds every constrained write for a "yes".

Plain data in (a :class:`Turn`: slots and what the person just said), a :class:`Decision` out
(responses to say, slots to set). What authorises a write is the action server's own record
(:mod:`mcp_bridge.record.store`): the questions it asked and how each ended, the messages it used, the
permissions people gave; any replica reads the same record. A question's sealed copy travels in a slot
for Rasa, and decides nothing. Each entry point (:meth:`Executor.start`, :meth:`~Executor.answer`,
:meth:`~Executor.deny`, :meth:`~Executor.revoke`, :meth:`~Executor.approval_decided`; one per Rasa
action) reads where the conversation stands once (:mod:`mcp_bridge.confirmation.state`), ``match``\\ es
on it, and builds its one :class:`Decision` at the end.

Who decides what:

* whether a call may run, must be asked about, waits for an approver or is refused: the gate,
  :func:`mcp_bridge.confirmation.gate.gate`, and nothing runs that it has not let through;
* what counts as a yes: the reader (:mod:`mcp_bridge.reading.reader`);
* how a question is put: :mod:`mcp_bridge.confirmation.asking`; how one call runs:
  :mod:`mcp_bridge.confirmation.running`;
* this module: the rules of a question and its answer, by name:

``ask_before_write``
    A call the gate says to ask about never runs in the turn that reaches it: the exact call is
    sealed, kept in the record as the conversation's open question, and the person is asked. A run
    goes on past it while the next steps need asking about too and need nothing it would give, then
    asks about all of them in one question. A question with new words is started by the person's
    message, which starts at most one question or run, and only while it is their newest.
``only_the_persons_yes``
    Only a plain yes to the question the record holds open, from the person who was asked, runs its
    calls: exactly as sealed (whatever the tracker's slots say by then), once (the record ends the
    question answered, and the message answers no other), each with its idempotency key (the first
    question's, kept when the same call is asked about again). A question the record does not hold
    open (answered, refused, replaced or never asked: a tracker's copy of it), or a yes that came late
    or after other messages, never writes. An answer of any kind from someone else (another user the
    channel names), in a message no channel vouches for (its signature missing or not holding:
    :mod:`mcp_bridge.channels.proof`), or received before the question was asked (a replay) is refused
    and audited; the question waits for its person. A request no channel vouches for starts nothing.
``every_other_answer``
    A no calls nothing. An edit or a redirect replaces the question with a new one. An answer after
    the question expired is told so and that nothing was written, and the question is asked again
    (audited as expired). An unclear answer asks again, and so does a message over the reader's
    limit, which nothing reads. A message that is not an answer is handed back to the bot, and the
    question is asked again afterwards; a question left behind by a new request is dropped aloud.
``per_call``
    A listed question (several calls, or one call of a run that split) is answered per call ("yes
    to 1, no to 2", "only the first", "all", "none", the buttons); an answer that does not decide
    every call is asked again. Each approved call runs as ``only_the_persons_yes`` says, whatever
    happens to the others; each refused call runs not at all; every decision is audited per call.
    "change 2 to: ..." edits one call and asks about the list again. The skill ends with that
    answer. A question about one call the skill asked itself goes on with the skill's next steps.
``second_approver``
    A confirmed call the gate holds waits for a person with the role, never the requester, and runs
    (once, with the question's key, as the requester) only when the conversation is told it was
    approved in time (:mod:`mcp_bridge.approvals.second_approver`).
``remembered``
    A yes to one call may also give a permission ("yes, and don't ask again today", the question's
    third button), where the gate allows one: the call runs, and the permission is kept in the
    record. A later new request whose one call it covers runs that call unasked, saying so, when every
    argument outside the permission's scope is in the signed message that started it (otherwise it is
    asked about like any other call) and the record still holds the permission. "yes, but ask me next
    time" runs the call and keeps nothing, and says so where one could have been kept
    (:mod:`mcp_bridge.confirmation.permissions`).

A server that acts as the person (:mod:`mcp_bridge.auth.person`) and has no usable sign-in of the
person is never called: its :class:`SignInRequiredError` goes up to the Rasa action, which shows the
sign-in link; the skill runs again after the sign-in and asks as usual (a sign-in is never a yes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals
from mcp_bridge.auth.person import SignInRequiredError
from mcp_bridge.confirmation import asking, templating
from mcp_bridge.confirmation.asking import Planned
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
from mcp_bridge.confirmation.gate import (
    Ask,
    Confirmed,
    Consent,
    Hold,
    MayBePermitted,
    Reached,
    Refuse,
    Released,
    RunConfirmed,
    RunPermitted,
    Verdict,
    gate,
)
from mcp_bridge.confirmation.permissions import Permissions
from mcp_bridge.confirmation.running import Resolved, Runner, context_of, found
from mcp_bridge.confirmation.server_questions import ServerQuestions
from mcp_bridge.confirmation.state import Asking, Malformed, ServerAsking, read_state
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.question import AskedCall, Question, open_question
from mcp_bridge.reading.reader import (
    Answer,
    Choices,
    ConfirmationReader,
    Edit,
    EditCall,
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
from mcp_bridge.record.database import open_database
from mcp_bridge.record.store import Message, Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import (
    AllowsRemembering,
    RequiresApproval,
    RequiresConfirmation,
    ResultArgument,
    Skill,
    SlotArgument,
    Step,
    runs_when,
    step_arguments,
    too_many_items,
)
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.context import Resume

__all__ = ["ConfirmationPolicy", "Decision", "Executor", "Outcome", "Responses", "Say", "Turn"]

log = logging.getLogger(__name__)

# An answer that cannot be matched to the calls it was asked about.
_NO_MATCH = "confirmation does not match a known call"


@dataclass(frozen=True)
class _Line:
    """One line of a run. A ``for_each`` step splits a run into one line per item of its list; each
    line has its own slots and results, and ``own`` holds the slot values it set itself."""

    slots: Mapping[str, Any]
    results: Mapping[str, Any] = field(default_factory=dict)
    own: Mapping[str, Any] = field(default_factory=dict)

    def set(self, values: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> _Line:
        return _Line({**self.slots, **values}, {**self.results, **(results or {})}, {**self.own, **values})


@dataclass(frozen=True)
class _Bound:
    """A call of an open question, matched to the skill as it is now: its step, what its tool
    resolves to, and the gate's question for it."""

    call: AskedCall
    step: Step
    resolved: Resolved
    ask: Ask


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
        record: Record | None = None,
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
        self.audit = audit or AuditLog(None)
        self.seal = seal or Seal.ephemeral()
        self.clock = clock
        # None: a call that needs a second approver is refused, unrun.
        self.approvals = approvals
        # What authorises a write: the questions asked, the messages used, the permissions given. Without
        # one (tests), a record of this process only.
        self.record = record or Record(open_database(":memory:"), clock=clock)
        # The slots an MCP server's meta_map.from_slots sends in _meta: sealed with each question.
        servers = tools.runtime.servers.values() if tools.runtime is not None else ()
        self.meta_slots = frozenset(entry.slot for server in servers for entry in server.meta_from_slots)
        # The question for an MCP tool the skill gives no constraint (the gate's remote_asks).
        self.generic = RequiresConfirmation(
            enabled=True,
            utter_for_confirmation=self.responses.confirm_tool_call,
            utter_on_user_denial=self.responses.tool_call_cancelled,
        )
        self.server_questions = ServerQuestions(
            self.seal, self.responses, self.reader, self.skills, self.run_from, self.record, self.policy
        )
        self.runner = Runner(tools, self.responses, self.audit, self.server_questions)
        self.permissions = Permissions(self.seal, clock, self.audit, self.record)

    async def aclose(self) -> None:
        await self.tools.aclose()
        if self.approvals is not None:
            await self.approvals.store.aclose()
        await self.record.database.aclose()

    # -- entry points: one per Rasa action ----------------------------------------------------

    async def start(self, skill_id: str, turn: Turn) -> Decision:
        """Run a skill from its first step, until it ends or asks; not for a message over the
        reader's limit, which is refused unread, nor for one no channel vouches for.

        A question still pending while the confirmation loop is active was interrupted: it stays
        and is asked again afterwards. One left behind outside the loop is dropped aloud.
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
        if turn.message_id is not None and await self.record.started(turn.message_id):
            # starts_once: the message started a question or a run already (a replayed tracker, a resume
            # triggered again); nothing runs, not even a lookup, and the open question stays as it is.
            reason = "this message started a question or a run already"
            log.warning("conversation %s: %s not started: %s", turn.conversation_id, skill_id, reason)
            self.audit.record(
                conversation=turn.conversation_id,
                user=turn.user,
                skill=skill.id,
                decision="not_started",
                result=reason,
            )
            return Decision("rejected", [Say(self.responses.message_used)])
        too_long = self.reader.too_long(turn.text) if turn.new_message else None
        if too_long is not None:
            # Started by a message over the limit: whatever the NLU took from it is not used.
            return Decision("too_long", [self._too_long(too_long)])
        crowded = too_many_items(skill, turn.slots) if turn.new_message else None
        if crowded is not None:
            # One message naming hundreds of addresses: no lookups, no question of hundreds of calls.
            self.audit.record(
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
        match await read_state(turn, self.seal, self.record):
            case ServerAsking(stored, left_behind=True):
                # A server's question left behind: dropped unanswered (and anything beside it).
                await self.record.end(stored.id, "dropped", reason="the person started something else")
                cleared = _cleared(True)
            case Asking(question, left_behind=True):
                await self.record.end(question.id, "dropped", reason="the person started something else")
                cleared = _cleared(True)
                for call in question.calls:
                    self._record(turn, question, call, "dropped", "the person started something else")
                said = [Say(self.responses.question_dropped)]
            case Malformed(left_behind=True):
                cleared = _cleared(True)  # a copy of no open question: nothing to drop
        run = await self._run(skill, 0, turn, may_be_permitted=True)
        return run.decision(skill, said=said, slots=cleared, owns_question=not turn.loop_active)

    async def answer(self, turn: Turn) -> Decision:
        """The confirmation loop: read the answer to the pending question and act on it.

        With ``turn.new_message`` false the loop is resuming: right after the question was asked
        there is nothing to do; after an interruption the question is asked again.
        """
        match await read_state(turn, self.seal, self.record):
            case ServerAsking(stored):
                return await self.server_questions.reply(stored, turn)  # a server's question, not ours
            case Asking(question):
                return await self._answered(question, turn)
            case Malformed(question, reason=reason, ended="answered"):
                # The tracker's copy of a question answered already (Rasa lost that turn's events, or a
                # replay): a yes to it writes nothing more, and the person is not told nothing was saved.
                if question is not None and turn.new_message:
                    self._record_all(turn, question, "rejected", reason)
                return self._nothing_pending(turn, clear=True)
            case Malformed(None, reason=reason):
                log.warning("conversation %s: a pending question ignored: %s", turn.conversation_id, reason)
                return self._nothing_pending(turn, clear=True, invalid=True)
            case Malformed(question, reason=reason) if question is not None:
                return self._reject(turn, question, reason)
            case _:
                return self._nothing_pending(turn, clear=False)

    async def deny(self, turn: Turn) -> Decision:
        """No (the bot's own "stop"): nothing is called, and the person hears the skill's denial."""
        match await read_state(turn, self.seal, self.record):
            case ServerAsking(stored):
                return await self.server_questions.cancel(stored, turn)  # the server hears cancel
            case Asking(question):
                refusal = self._may_not_answer(turn, question)
                if refusal is not None:
                    return self._refuse(turn, question, refusal)
                return await self._denied(question, turn)
            case state:
                clear = isinstance(state, Malformed)
                return Decision("nothing_pending", [Say(self.responses.nothing_pending)], _cleared(clear))

    async def revoke(self, turn: Turn) -> Decision:
        """ "stop saving without asking": every permission of this person in the conversation is
        withdrawn (audited each); anyone else's stay."""
        count = await self.permissions.revoke(turn)
        return Decision("done", [Say(self.responses.permissions_revoked, {"count": count})])

    async def approval_decided(self, turn: Turn, approval_id: str) -> Decision:
        """``second_approver``, in the requester's conversation, told a decision: an approved call runs
        once, exactly as sealed, with the question's key (again, under that key, only when its run was
        lost: :mod:`mcp_bridge.approvals.second_approver`'s ``lost_run``); a refusal or an expiry is
        said once; anything else (unknown, another conversation's, already run or told) says and
        changes nothing. The conversation may have moved on since, so no slot is set."""
        taken = await self.approvals.take(approval_id, turn.conversation_id) if self.approvals else None
        request = taken.request if taken is not None else None
        if taken is None or request is None or taken.kind == "nothing":
            return Decision("nothing_pending")
        variables = templating.variables(request.slots, request.arguments, tool=request.tool)
        if taken.kind not in ("run", "resume"):
            said = (
                self.responses.approval_refused
                if taken.kind == "refused"
                else self.responses.approval_expired
            )
            return Decision("cancelled", [Say(said, variables)])
        assert self.approvals is not None
        held = self.approvals.sealed(request, self.seal)  # the store's call, exactly as sealed, or None
        why = await self._not_held(held, request) if held is not None else "its sealed call does not open"
        bound = await self._bind(held, turn) if held is not None and why is None else None
        skill = self.skills[held.skill] if held is not None and bound is not None else None
        verdict = await self._gate(skill, bound[0], Released(), turn) if skill and bound else None
        if held is None or skill is None or bound is None or not isinstance(verdict, RunConfirmed):
            why = why or (verdict.reason if isinstance(verdict, Refuse) else "does not match a known call")
            log.warning("approval %s: the held call was not run: %s", request.id, why)
            await self.approvals.finish(request, f"rejected: {why}")
            if held is not None:
                self._record(turn, held, held.first, "rejected", why, approval=request.id)
            return Decision("rejected", [Say(self.responses.confirmation_invalid)])
        (one,) = bound
        if taken.kind == "resume" and not approvals.may_run_again(found(one.resolved), request.attempts):
            # A lost run (its action server died) may have reached the tool: never repeated unkeyed.
            log.warning("approval %s: its run was lost; not repeated (no tool keeps its key)", request.id)
            await self.approvals.finish(request, "outcome unknown: its run was lost, not repeated")
            return Decision("unavailable", [Say(self.responses.tool_outcome_unknown, variables)])
        # Told by the approval page, not said by anyone: a server that acts as the person is called as
        # the requester, the person whose yes was sealed with the call; never as nobody or another.
        then = replace(turn, slots=request.slots, user=held.user)
        try:
            async with self.approvals.leased(request):
                run = await self._run_confirmed(skill, held, one, then)
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

    async def _not_held(self, held: Question, request: ApprovalRequest) -> str | None:
        """Why the record does not hold ``held`` (a call a store row says waits for its approver) as a call
        the person confirmed in time; None when it does."""
        stored = await self.record.question(held.id)
        if stored is None or stored.conversation_id != request.conversation_id:
            return "the action server's record holds no such question in this conversation"
        if stored.state != "answered":
            return f"its question was {stored.state}, not confirmed"
        asked = open_question(stored.sealed, self.seal, request.conversation_id)
        calls = {call.id: call.digest for call in asked.calls} if isinstance(asked, Question) else {}
        if calls.get(held.first.id) != held.first.digest:
            return "the call is not one its question asked about"
        if stored.ended_at is None or request.created_at - stored.ended_at > self.policy.ttl_seconds:
            return "it was held long after its question was answered"
        return None

    # -- an answer to an open question ----------------------------------------------------------

    async def _answered(self, question: Question, turn: Turn) -> Decision:
        """``only_the_persons_yes``, ``every_other_answer`` and ``per_call``: one question, of one or more
        calls, answered (or the loop resumed after an interruption)."""
        bound = await self._bind(question, turn)
        if bound is None:
            await self.record.end(question.id, "rejected", reason=_NO_MATCH)
            return self._reject(turn, question, _NO_MATCH)
        skill = self.skills[question.skill]
        if not turn.new_message:
            if question.user_turn == turn.user_turn:
                return Decision("pending")  # asked in this very turn
            self._record_all(turn, question, "asked_again", None)
            return await self._ask_again(skill, question, bound, turn, [Say(self.responses.confirm_again)])
        # Who was asked is sealed, so it is compared only once the question opens.
        refusal = self._may_not_answer(turn, question)
        if refusal is not None:
            return self._refuse(turn, question, refusal)
        reading = self._read(question, turn)
        again = self.responses.answer_each_call if question.listed else self.responses.answer_yes_or_no
        match reading:
            case Yes() | YesThisTime():
                # "yes, but ask me next time": a yes that keeps no permission, and says so where one could be.
                constraint = skill.constraints.get(question.first.tool)
                once = (
                    isinstance(reading, YesThisTime)
                    and constraint is not None
                    and (constraint.allows_remembering is not None)
                )
                return await self._decided(skill, question, bound, [True], turn, once=once)
            case Grant() if (remember := await self._may_remember(skill, bound, turn)) is not None:
                return await self._decided(skill, question, bound, [True], turn, remember=remember)
            case Grant():
                reason = "a permission this call cannot be given"
            case Choices(approved=approved):
                return await self._decided(skill, question, bound, approved, turn)
            case No():
                return await self._denied(question, turn)
            case Other():
                self._record_all(turn, question, "handed_back", None)
                return Decision("handed_back")
            case TooLong():
                self._record_all(turn, question, "unclear", reading.reason)
                return await self._ask_again(skill, question, bound, turn, [self._too_long(reading)])
            case EditCall():
                return await self._edited_call(skill, question, bound, reading, turn)
            case Edit() | Redirect():
                slot = skill.edits.get("text" if isinstance(reading, Edit) else "email")
                value = reading.text if isinstance(reading, Edit) else reading.email
                if slot is not None:
                    return await self._changed(skill, question, turn, slot, value)
                reason = f"an {reading.kind} this skill does not allow"
            case Unclear():
                reason = reading.reason
        if self._late(question):
            return await self._expired(skill, question, bound, turn)
        self._record_all(turn, question, "unclear", reason)
        return await self._ask_again(skill, question, bound, turn, [Say(again)])

    async def _may_remember(
        self, skill: Skill, bound: Sequence[_Bound], turn: Turn
    ) -> AllowsRemembering | None:
        """What a yes to the one call of ``bound`` may also keep as a permission (the gate's
        ``remembered``), or None."""
        if len(bound) != 1:
            return None
        verdict = await self._gate(skill, bound[0], Reached(), turn)
        return verdict.remember if isinstance(verdict, Ask) else None

    def _read(self, question: Question, turn: Turn) -> Answer | Choices | EditCall:
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        if not question.listed:
            return self.reader.read(turn.text, nlu, question.first.arguments)
        names = [call.tool.rsplit("_", 1)[-1] for call in question.calls]
        return self.reader.read_calls(turn.text, nlu, [call.arguments for call in question.calls], names)

    async def _decided(
        self,
        skill: Skill,
        question: Question,
        bound: Sequence[_Bound],
        approved: Sequence[bool],
        turn: Turn,
        *,
        remember: AllowsRemembering | None = None,
        once: bool = False,
    ) -> Decision:
        """A yes or a no for each call: each approved call runs exactly as sealed, each refused one never.
        ``remember``: the yes also gives a permission; ``once``: it refused one, and hears that it will
        be asked again."""
        if not any(approved):  # a no to every call cancels, late or not: nothing runs
            await self.record.end(question.id, "refused", reason="no to every call")
            self._record_all(turn, question, "denied", None)
            return Decision("cancelled", [Say(self.responses.calls_cancelled)], ended(skill))
        if self._late(question):
            return await self._expired(skill, question, bound, turn)
        if turn.user_turn != question.user_turn + 1:
            self._record_all(turn, question, "asked_again", None)
            return await self._ask_again(skill, question, bound, turn, [Say(self.responses.confirm_again)])
        # only_the_persons_yes: the record's open question ends answered, once, by this message (two
        # replicas given the same yes run it once; a message that answered another question answers none).
        refused = await self.record.end(question.id, "answered", message=_message(turn))
        if refused is not None:
            return self._reject(turn, question, refused.reason)
        if not question.listed:
            return await self._confirmed_one(skill, question, bound[0], turn, remember=remember, once=once)
        said: list[Say] = []
        outcome: Outcome = "done"
        # A call its server stops to ask the person about keeps its question (the elicitation slot).
        kept: dict[str, Any] = {}
        asking_now: list[Say] = []
        for place, (one, yes) in enumerate(zip(bound, approved, strict=True), start=1):
            call = one.call
            if not yes:
                self._record(turn, question, call, "denied", None)
                variables = {"place": place, "call": asking.describe(skill, call, turn.slots)}
                said.append(Say(self.responses.call_skipped, variables))
                continue
            self._record(turn, question, call, "confirmed", None)
            verdict = await self._gate(skill, one, Confirmed(), turn)
            if isinstance(verdict, Hold):  # this call waits for its approver; the others do not
                held, waiting = await self._hold(verdict.approver, question.only(call), turn, call.context)
                said.append(waiting)
                outcome = held if outcome == "done" else outcome
                continue
            if isinstance(verdict, Refuse):
                said.append(self._refused_by_gate(turn, question, call, verdict))
                outcome = "rejected" if outcome == "done" else outcome
                continue
            # One server question waits at a time (mcp_bridge.confirmation.running): a later call that
            # stops to ask is not completed, and the person hears so.
            run = await self._run_confirmed(skill, question.only(call), one, turn)
            if run.slots.get(ELICITATION_SLOT) is not None:
                asking_now = list(run.say)  # said last: the question the person answers next
            else:
                said.extend(run.say)
            outcome = run.outcome if outcome == "done" else outcome
            kept.update(run.slots)
        return Decision(outcome, [*said, *asking_now], {**ended(skill), **kept})

    async def _confirmed_one(
        self,
        skill: Skill,
        question: Question,
        one: _Bound,
        turn: Turn,
        *,
        remember: AllowsRemembering | None,
        once: bool,
    ) -> Decision:
        """A yes to the skill's own question about one call: the call runs as sealed and the skill
        goes on from it; with ``remember``, a permission is kept too (``remembered``)."""
        self._record(turn, question, one.call, "confirmed", None)
        verdict = await self._gate(skill, one, Confirmed(), turn)
        if isinstance(verdict, Hold):
            outcome, waiting = await self._hold(verdict.approver, question, turn, {})
            return Decision(outcome, [waiting], ended(skill))
        if isinstance(verdict, Refuse):
            return Decision(
                "rejected", [self._refused_by_gate(turn, question, one.call, verdict)], ended(skill)
            )
        run = await self._run(skill, one.call.step, turn, authorised=question, resolved=one.resolved)
        decision = run.decision(skill, slots={PENDING_SLOT: None})
        if remember is None:
            if once:
                return replace(decision, say=[*decision.say, Say(self.responses.permission_declined)])
            return decision
        granted = await self.permissions.grant(skill, remember, question, one.call, turn)
        said = Say(self.responses.permission_granted, self.permissions.variables(granted))
        return replace(decision, say=[*decision.say, said])

    async def _run_confirmed(self, skill: Skill, question: Question, one: _Bound, turn: Turn) -> Run:
        """One confirmed call, exactly as sealed: a call of a list alone, with the slots it was planned
        with; the call of the skill's own question, and the skill's next steps after it."""
        if not question.listed:
            return await self._run(skill, one.call.step, turn, authorised=question, resolved=one.resolved)
        slots = {**turn.slots, **one.call.context}
        arguments = dict(one.call.arguments)
        called = await self.runner.dispatch(skill, one.step, one.resolved, arguments, slots, turn, question)
        if isinstance(called, Run):
            return called
        routed = self.runner.route(one.step, called, slots, one.call.arguments, called.data)
        return Run(routed.outcome or "done", tuple(routed.say), {})

    async def _hold(
        self, approver: RequiresApproval, question: Question, turn: Turn, context: Mapping[str, Any]
    ) -> tuple[Outcome, Say]:
        """``second_approver``: the confirmed call (``question``, narrowed to it) is held for its approver,
        and the requester told so."""
        call = question.first
        slots = {**turn.slots, **context}
        variables = templating.variables(slots, call.arguments, tool=call.tool)
        request = None
        if self.approvals is not None:
            sealed = question.sealed(self.seal, turn.conversation_id)
            request = await self.approvals.hold(approver, question, sealed, turn.conversation_id, slots)
        if request is None:
            return "rejected", Say(self.responses.approval_unavailable, variables)
        variables |= {"approval_role": approver.role, "approval_expires_after": approver.expires_after}
        return "awaiting_approval", Say(self.responses.approval_waiting, variables)

    async def _denied(self, question: Question, turn: Turn) -> Decision:
        """No to the whole question: nothing is called; the person hears the skill's denial (its own
        question's), or that the calls were cancelled (a list)."""
        skill = self.skills.get(question.skill)
        await self.record.end(question.id, "refused", reason="the person said no")
        self._record_all(turn, question, "denied", None)
        if question.listed:
            return Decision("cancelled", [Say(self.responses.calls_cancelled)], ended(skill))
        call = question.first
        rule = None
        if skill is not None:
            resolved = self.runner.resolve(skill, call.tool)
            verdict = await gate(
                skill,
                call.tool,
                resolved,
                call.arguments,
                Reached(),
                generic=self.generic,
                context=context_of(turn, skill),
            )
            rule = verdict.rule if isinstance(verdict, Ask) else None
        if rule is not None and rule.utter_on_user_denial:
            variables = templating.variables(turn.slots, call.arguments, tool=call.tool)
            said = Say(rule.utter_on_user_denial, variables)
        else:
            said = Say(self.responses.confirmation_invalid)
        return Decision("cancelled", [said], ended(skill))

    async def _expired(
        self, skill: Skill, question: Question, bound: Sequence[_Bound], turn: Turn
    ) -> Decision:
        """An answer after the question expired: the person hears that it expired and nothing was
        written, the audit says so, and the same calls are asked about again (they keep their keys)."""
        await self.record.end(question.id, "expired", reason="answered after its lifetime")
        self._record_all(turn, question, "expired", None)
        return await self._ask_again(skill, question, bound, turn, [Say(self.responses.confirmation_expired)])

    async def _changed(self, skill: Skill, old: Question, turn: Turn, slot: str, value: str) -> Decision:
        """An edit or a redirect of the skill's own question: the skill runs again with ``slot``
        changed and asks anew.

        The new arguments are checked like the first ones. If the run does not end in a new
        question (an unknown contact, a text the tool refuses), the person hears why and the old
        question is asked again, unchanged.
        """
        changed = replace(turn, slots={**turn.slots, slot: value})
        # An edit that changes nothing is the same call: it keeps its key (asked_before).
        run = await self._run(skill, 0, changed, asked_before=old)
        if run.waiting and run.asked is not None:
            new = run.asked.first
            self._record(
                turn,
                old,
                old.first,
                "edited",
                f"{slot} changed",
                new_digest=new.digest,
                new_confirmation=new.id,
            )
            return run.decision(skill, then={slot: value})
        self._record(turn, old, old.first, "unclear", f"the change of {slot} was refused")
        bound = await self._bind(old, turn)
        assert bound is not None
        return await self._ask_again(skill, old, bound, turn, run.say)

    async def _edited_call(
        self, skill: Skill, question: Question, bound: Sequence[_Bound], edit: EditCall, turn: Turn
    ) -> Decision:
        """ "change 2 to: ...": that call's text argument changes, and the list is asked about again."""
        slot = skill.edits.get("text")
        old = question.calls[edit.place - 1]
        step = bound[edit.place - 1].step
        changed = [
            name
            for name, source in step.arguments.items()
            if slot is not None and isinstance(source, SlotArgument) and source.slot == slot
        ]
        if slot is None or not changed:
            self._record_all(turn, question, "unclear", "an edit this call does not allow")
            return await self._ask_again(skill, question, bound, turn, [Say(self.responses.answer_each_call)])
        planned = _replanned(bound)
        one = planned[edit.place - 1]
        planned[edit.place - 1] = replace(
            one,
            arguments={**one.arguments, **dict.fromkeys(changed, edit.text)},
            context={**one.context, slot: edit.text},
        )
        run = await self._ask(skill, planned, replace(turn, user=question.user), question, listed=True)
        if not run.waiting or run.asked is None:
            self._record_all(turn, question, "unclear", f"the change of {slot} was refused")
            return await self._ask_again(skill, question, bound, turn, run.say)
        new = run.asked.calls[edit.place - 1]
        self._record(
            turn, question, old, "edited", f"{slot} changed", new_digest=new.digest, new_confirmation=new.id
        )
        return Decision(run.outcome, list(run.say), dict(run.slots))

    async def _ask_again(
        self, skill: Skill, question: Question, bound: Sequence[_Bound], turn: Turn, said: Sequence[Say]
    ) -> Decision:
        """Ask the question again after ``said``, bound to this turn (a new id and seal), of the same
        person. The same calls keep their idempotency keys, so confirming again cannot write twice.
        The skill's own question is asked by running the skill from its call again; a list is put again
        as it was."""
        again = replace(turn, user=question.user)
        if question.listed:
            run = await self._ask(skill, _replanned(bound), again, question, listed=True)
        else:
            run = await self._run(skill, question.first.step, again, asked_before=question)
        if not run.waiting:
            # Not asked again (its arguments went missing or are refused now): it ends unanswered here,
            # as the tracker is told.
            await self.record.end(question.id, "dropped", reason=f"not asked again: {run.outcome}")
        return run.decision(skill, said=said, slots={PENDING_SLOT: None})

    def _nothing_pending(self, turn: Turn, *, clear: bool, invalid: bool = False) -> Decision:
        """The loop ran with no question open: a yes or a no is told there is nothing to answer (or, with
        ``invalid``, that the question the tracker holds no longer matches, and nothing was saved); a
        message that is no answer is the bot's to handle."""
        if not turn.new_message:
            return Decision("nothing_pending", [], _cleared(clear))
        reading = self.reader.read(
            turn.text, NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        )
        if isinstance(reading, TooLong):
            return Decision("too_long", [self._too_long(reading)], _cleared(clear))
        if isinstance(reading, Yes | No):
            said = self.responses.confirmation_invalid if invalid else self.responses.nothing_pending
            return Decision("rejected" if invalid else "nothing_pending", [Say(said)], _cleared(clear))
        return Decision("handed_back")  # not an answer to anything: the bot's to handle

    # -- the question's binding and who may answer it ------------------------------------------

    async def _bind(self, question: Question, turn: Turn) -> list[_Bound] | None:
        """Each call of an open question matched to its skill as it is now (the step, the tool's
        source, and a gate that still asks about it); None when any call no longer matches."""
        skill = self.skills.get(question.skill)
        if skill is None:
            return None
        bound = []
        for call in question.calls:
            if not 0 <= call.step < len(skill.steps):
                return None
            step = skill.steps[call.step]
            source = skill.tools.get(call.tool)
            if step.execute_tool != call.tool or source is None or str(source) != call.source:
                return None
            resolved = self.runner.resolve(skill, call.tool)
            # Whether it is still asked about; what a yes may remember is asked only for a grant.
            consent = Reached(remembering=False)
            verdict = await self._gate_step(skill, step, resolved, call.arguments, consent, turn)
            if not isinstance(verdict, Ask):
                return None
            bound.append(_Bound(call, step, resolved, verdict))
        return bound

    def _may_not_answer(self, turn: Turn, question: Question) -> str | None:
        """Why this turn's message cannot answer ``question`` (only the person asked, in a message
        their channel vouches for, received after the question was asked); None when it can."""
        if turn.unvouched is not None:
            return f"no channel vouches for the answer: {turn.unvouched}"
        if question.user != turn.user:
            return "answered by someone other than the person asked"
        if turn.new_message and not received_after(turn, question):
            return "a message the channel received before the question was asked"
        return None

    def _refuse(self, turn: Turn, question: Question, reason: str) -> Decision:
        """An answer :meth:`_may_not_answer` refuses: nothing runs, and the question stays for its person."""
        log.warning(
            "conversation %s: an answer to confirmation %s was refused (%s); nothing was run",
            turn.conversation_id,
            question.first.id,
            reason,
        )
        self._record(turn, question, question.first, "refused", reason, answered_by=turn.user)
        said = (
            self.responses.not_vouched if turn.unvouched is not None else self.responses.confirmation_invalid
        )
        return Decision("refused", [Say(said)])

    def _reject(self, turn: Turn, question: Question, reason: str) -> Decision:
        """A question that does not hold: nothing runs, and it is dropped (ended in the record by its
        caller where it was still open)."""
        log.warning(
            "conversation %s: confirmation %s rejected (%s); nothing was run",
            turn.conversation_id,
            question.first.id,
            reason,
        )
        for call in question.calls[1:]:
            self._record(turn, question, call, "rejected", reason)
        self._record(turn, question, question.first, "rejected", reason)
        return Decision("rejected", [Say(self.responses.confirmation_invalid)], ended(None))

    def _refused_by_gate(self, turn: Turn, question: Question, call: AskedCall, verdict: Refuse) -> Say:
        log.warning("conversation %s: call %s not run: %s", turn.conversation_id, call.id, verdict.reason)
        self._record(turn, question, call, "rejected", verdict.reason)
        return Say(self.responses.confirmation_invalid)

    def _late(self, question: Question) -> bool:
        return self.clock() - question.asked_at > self.policy.ttl_seconds

    def _too_long(self, reading: TooLong) -> Say:
        return Say(self.responses.message_too_long, {"limit": reading.limit})

    def _record(
        self,
        turn: Turn,
        question: Question,
        call: AskedCall,
        decision: str,
        result: str | None,
        **extra: str | None,
    ) -> None:
        self.audit.record_question(turn.conversation_id, question, call, decision, result, **extra)

    def _record_all(self, turn: Turn, question: Question, decision: str, result: str | None) -> None:
        for call in question.calls:
            self._record(turn, question, call, decision, result)

    async def _gate(self, skill: Skill, one: _Bound, consent: Consent, turn: Turn) -> Verdict:
        return await self._gate_step(skill, one.step, one.resolved, one.call.arguments, consent, turn)

    async def _gate_step(
        self,
        skill: Skill,
        step: Step,
        resolved: Resolved,
        arguments: Mapping[str, Any],
        consent: Consent,
        turn: Turn,
    ) -> Verdict:
        """The gate (:func:`mcp_bridge.confirmation.gate.gate`), for a call of ``step`` in ``turn``."""
        return await gate(
            skill,
            step.execute_tool,
            resolved,
            arguments,
            consent,
            generic=self.generic,
            context=context_of(turn, skill),
        )

    # -- the step loop --------------------------------------------------------------------

    async def run_from(
        self, skill: Skill, start: int, turn: Turn, confirmed: Question | None, resume: Resume
    ) -> Run:
        """The hook :mod:`mcp_bridge.confirmation.server_questions` resumes a call through, once a
        server's questions are answered: the step loop from step ``start``, ``confirmed`` the question
        (narrowed to the call) a yes authorised, or None; the step's call carries ``resume``."""
        return await self._run(skill, start, turn, authorised=confirmed, resume=resume)

    async def _run(
        self,
        skill: Skill,
        start: int,
        turn: Turn,
        *,
        authorised: Question | None = None,
        asked_before: Question | None = None,
        resolved: Resolved | None = None,
        may_be_permitted: bool = False,
        resume: Resume | None = None,
    ) -> Run:
        """Run ``skill`` from step ``start`` with the turn's slots, each call as the gate says.

        ``authorised``: the question (of one call) the gate let through already (a yes, a permission);
        its call runs exactly as sealed. ``asked_before``: the question a new one replaces (the same
        call keeps its key). ``resolved``: what the first step's tool name resolved to, if known.
        ``may_be_permitted``: a new request, whose one call a remembered permission may cover.
        ``resume``: the answers to a server's questions, for the first call of step ``start`` (the
        call the server stopped).

        Calls to ask about are gathered, not run (``ask_before_write``): the run goes on past them while
        the next steps need asking about too and need nothing the gathered calls would give, then asks
        about all of them in one question.
        """
        lines = [_Line(dict(turn.slots))]
        said: list[Say] = []
        planned: list[Planned] = []
        for index in range(start, len(skill.steps)):
            step = skill.steps[index]
            if index != start or resolved is None:
                resolved = self.runner.resolve(skill, step.execute_tool)
            allowed = authorised if authorised is not None and index == authorised.first.step else None
            asks = False
            if allowed is None:
                lines = _expand(step, lines)
                runnable = [line for line in lines if runs_when(step, line.slots, line.results)]
                if not runnable:
                    continue
                # Whether the gate asks about the step's calls does not depend on their arguments.
                arguments, _ = step_arguments(step, runnable[0].slots, runnable[0].results)
                verdict = await self._gate_step(skill, step, resolved, arguments, Reached(), turn)
                asks, first_arguments = isinstance(verdict, Ask), arguments
                if planned and (not asks or _waits_for(step, planned, lines)):
                    break  # asked about after the gathered calls, in a question of its own
            updated: list[_Line] = []
            for position, line in enumerate(lines):
                if allowed is not None:
                    arguments = dict(allowed.first.arguments)
                else:
                    if not runs_when(step, line.slots, line.results):
                        updated.append(line)
                        continue
                    arguments, missing = step_arguments(step, line.slots, line.results)
                    if missing:
                        response = step.on_missing_argument or self.responses.tool_failed
                        missed = Say(response, {"error": f"missing {', '.join(missing)}"})
                        return Run("missing_argument", (*said, missed), _filled(lines))
                    if asks:
                        ask = verdict
                        if arguments != first_arguments:  # what a yes may remember depends on them
                            ask = await self._gate_step(skill, step, resolved, arguments, Reached(), turn)
                        assert isinstance(ask, Ask)
                        planned.append(Planned(index, step, resolved, ask, arguments, line.slots, line.own))
                        updated.append(line)
                        continue
                called = await self.runner.dispatch(
                    skill, step, resolved, arguments, line.slots, turn, allowed, resume
                )
                resume = None  # the answers go with the stopped call only
                if isinstance(called, Run):
                    return replace(called, say=(*said, *called.say), slots={**_filled(lines), **called.slots})
                results = {**line.results, **called.data}
                routed = self.runner.route(step, called, line.slots, arguments, results)
                said.extend(routed.say)
                line = line.set(routed.slots, called.data)
                updated.append(line)
                if routed.outcome is not None:
                    return Run(routed.outcome, tuple(said), _filled([*updated, *lines[position + 1 :]]))
            lines = updated
        if not planned:
            return Run("done", tuple(said), _filled(lines))
        one_call = len(planned) == 1 and len(lines) == 1
        if one_call and may_be_permitted:
            ran = await self._run_permitted(skill, planned[0], turn)
            if ran is not None:
                return replace(ran, say=(*said, *ran.say), slots={**_filled(lines), **ran.slots})
        asked = await self._ask(skill, planned, turn, asked_before, listed=not one_call)
        return replace(asked, say=(*said, *asked.say), slots={**_filled(lines), **asked.slots})

    async def _ask(
        self,
        skill: Skill,
        planned: Sequence[Planned],
        turn: Turn,
        asked_before: Question | None,
        *,
        listed: bool,
    ) -> Run:
        """``ask_before_write``: seal the exact calls into the tracker and ask. Arguments a tool would
        refuse are refused now, before the person is asked about them."""
        for one in planned:
            refused = await self.runner.refused(skill, one.step, one.resolved, one.arguments, turn)
            if refused is not None:
                return refused
        question = asking.question_of(
            skill,
            planned,
            turn,
            listed=listed,
            now=self.clock(),
            asked_before=asked_before,
            meta=self.meta_slots,
        )
        sealed = question.sealed(self.seal, turn.conversation_id)
        # The same calls asked again are no new words: only a question with new words is started by the
        # message (once, and only by the newest: mcp_bridge.record.store's starts_once).
        again = asked_before is not None and [c.digest for c in asked_before.calls] == [
            c.digest for c in question.calls
        ]
        not_asked = await self.record.asked(
            conversation_id=turn.conversation_id,
            kind="question",
            question_id=question.id,
            person=question.user,
            sealed=sealed,
            asked_after=question.asked_after,
            message=_message(turn),
            new_words=not again,
        )
        if not_asked is not None:
            log.warning(
                "conversation %s: question %s not asked (%s); nothing was run",
                turn.conversation_id,
                question.id,
                not_asked.reason,
            )
            for call in question.calls:
                self._record(turn, question, call, "not_asked", not_asked.reason)
            return Run("rejected", (Say(self.responses.message_used),))
        for call in question.calls:
            self._record(turn, question, call, "asked", None)
        said = asking.said(skill, question, planned, self.responses, turn.slots)
        return Run("pending", (said,), {PENDING_SLOT: sealed}, question)

    async def _permission_ended(self, skill: Skill, one: Planned, turn: Turn) -> None:
        """A permission that no longer stands but would have covered the call is audited
        (``permission_not_used``, with why: withdrawn or expired): the call is asked about, and the trail
        says why it did not run unasked."""
        for permission, why in await self.permissions.ended(turn):
            consent = MayBePermitted(
                [replace(permission, expires_at=float("inf"))], turn.user, permission.granted_at
            )
            verdict = await self._gate_step(skill, one.step, one.resolved, one.arguments, consent, turn)
            if isinstance(verdict, RunPermitted):
                question = asking.question_of(
                    skill, [one], turn, listed=False, now=self.clock(), asked_before=None
                )
                self._record(
                    turn,
                    question,
                    question.first,
                    "permission_not_used",
                    f"the permission was {why}",
                    permission=permission.id,
                )
                return

    async def _run_permitted(self, skill: Skill, one: Planned, turn: Turn) -> Run | None:
        """``remembered``: a new request's one call runs unasked, once, with a key of its own, from its
        step, when the gate finds a permission of the person's that covers it, every argument outside the
        permission's scope is in the signed message that started the run, and the record lets that
        message start it (the permission still stands, the message started nothing yet); None when not
        (the call is asked about like any other)."""
        held = await self.permissions.held(turn)
        consent = MayBePermitted(held, turn.user, self.clock())
        verdict = (
            await self._gate_step(skill, one.step, one.resolved, one.arguments, consent, turn)
            if held
            else None
        )
        if not isinstance(verdict, RunPermitted):
            await self._permission_ended(skill, one, turn)
            return None
        permission = verdict.permission
        question = asking.question_of(
            skill, [one], turn, listed=False, now=self.clock(), asked_before=None, meta=self.meta_slots
        )
        question = replace(question, calls=(replace(question.first, meta=dict(permission.meta)),))
        why = _not_sent(one, permission.scope, turn.text) or await self.permissions.use(permission, turn)
        if why is not None:
            self._record(turn, question, question.first, "permission_not_used", why, permission=permission.id)
            return None
        self._record(turn, question, question.first, "permission_used", None, permission=permission.id)
        then = replace(turn, slots=one.slots)
        run = await self._run(skill, one.index, then, authorised=question, resolved=one.resolved)
        used = Say(self.responses.permission_used, self.permissions.variables(permission))
        return replace(run, say=(*run.say, used))


# A question asked in a turn no channel signed (the resume after a sign-in) has only the action
# server's clock: an answer the channel received more than this before it is refused as older.
CLOCK_SKEW_SECONDS = 2.0


def received_after(turn: Turn, question: Question) -> bool:
    """The turn's message reached its channel after the question was asked, so it is no earlier
    message replayed into a later question: later than the signed message the question was asked
    in, or, when that one was unsigned, than the question itself (on the action server's clock)."""
    if question.asked_after is not None:
        return turn.said_at is not None and turn.said_at > question.asked_after
    if turn.said_at is not None:
        return turn.said_at > question.asked_at - CLOCK_SKEW_SECONDS
    return True


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


def _replanned(bound: Sequence[_Bound]) -> list[Planned]:
    """The calls of a question, as they were planned: to put them again."""
    return [
        Planned(
            one.call.step, one.step, one.resolved, one.ask, dict(one.call.arguments), {}, one.call.context
        )
        for one in bound
    ]


def _filled(lines: Sequence[_Line]) -> dict[str, Any]:
    """The slots a run sets in the conversation: its one line's, or what all its lines agree on."""
    if len(lines) == 1:
        return dict(lines[0].own)
    first, *others = lines
    return {k: v for k, v in first.own.items() if all(k in o.own and o.own[k] == v for o in others)}


def _cleared(clear: bool) -> dict[str, Any]:
    """The question slots cleared (both: neither copy holds an open question any more)."""
    return {PENDING_SLOT: None, ELICITATION_SLOT: None} if clear else {}


def _message(turn: Turn) -> Message | None:
    """The turn's message as the record knows it (None: nothing vouches for it)."""
    return Message(turn.message_id, turn.user, turn.said_at) if turn.message_id else None


def _not_sent(one: Planned, scope: Mapping[str, Any] | None, text: str) -> str | None:
    """Why a call under a permission would write something the person did not send, or None: every
    argument outside the permission's scope (all of them when it covers any arguments) that comes from a
    slot or a result must be in the text of the signed message that started the run."""
    for name, value in one.arguments.items():
        if scope is not None and name in scope:
            continue
        if value is None or not isinstance(one.step.arguments.get(name), SlotArgument | ResultArgument):
            continue  # nothing written from it, or the skill's own value
        written = value if isinstance(value, str) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            written = str(value)
        if written is None or not written.strip() or written.strip() not in text:
            return f"{name} is not in the message that started the run"
    return None
