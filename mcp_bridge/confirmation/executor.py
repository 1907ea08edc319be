"""The confirmation-aware executor: runs a skill's steps and holds every constrained write for a "yes".

Plain data in (a :class:`~mcp_bridge.confirmation.decisions.Turn`: slots and what the person just said),
a :class:`~mcp_bridge.confirmation.decisions.Decision` out (responses to say, slots to set). What
authorises a write is the action server's own record (:mod:`mcp_bridge.record.store`): the questions it
asked and how each ended, the messages it used, the permissions people gave; any replica reads the same
record. A question's sealed copy travels in a slot for Rasa, and decides nothing.

This module holds the entry points, one per Rasa action (:meth:`Executor.start`,
:meth:`~Executor.answer`, :meth:`~Executor.deny`, :meth:`~Executor.revoke`,
:meth:`~Executor.approval_decided`). Each reads where the conversation stands once
(:mod:`mcp_bridge.confirmation.state`), ``match``\\ es on it, hands the turn to the room that decides it,
and returns its one :class:`~mcp_bridge.confirmation.decisions.Decision`. The rooms, each with the rules
it holds:

* whether a call may run, must be asked about, waits for an approver or is rejected: the gate
  (:mod:`mcp_bridge.confirmation.gate`: ``declared``, ``local_unconstrained``, ``remote_asks``,
  ``second_approver``, ``remembered``, ``still_asked``), built once; nothing runs that a verdict of it
  has not let through;
* the step loop (:mod:`mcp_bridge.confirmation.planner`) and putting a question
  (:mod:`mcp_bridge.confirmation.asking`): ``ask_before_write``;
* a question's form, one call or a numbered list (:mod:`mcp_bridge.confirmation.forms`): ``per_call``;
* what an answer comes to (:mod:`mcp_bridge.confirmation.answering`): ``only_the_persons_yes``,
  ``every_other_answer``; what counts as a yes is the reader's (:mod:`mcp_bridge.reading.reader`);
* a new request under a remembered permission (:mod:`mcp_bridge.confirmation.permitted`), the
  permissions kept (:mod:`mcp_bridge.confirmation.permissions`);
* a call held for its second approver (:mod:`mcp_bridge.confirmation.holding`) and its release
  (:mod:`mcp_bridge.confirmation.release`);
* one call run (:mod:`mcp_bridge.confirmation.running`) and a server's questions asked in the
  conversation (:mod:`mcp_bridge.confirmation.server_asking`).

A server that acts as the person (:mod:`mcp_bridge.auth.person`) and has no usable sign-in of the
person is never called: its :class:`SignInRequiredError` goes up to the Rasa action, which shows the
sign-in link; the skill runs again after the sign-in and asks as usual (a sign-in is never a yes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from mcp_bridge.approvals.second_approver import Approvals
from mcp_bridge.confirmation import answering, forms, permitted, planner, release
from mcp_bridge.confirmation.asking import Gathered
from mcp_bridge.confirmation.decisions import ConfirmationPolicy, Decision, Run, Say, Scope, Turn
from mcp_bridge.confirmation.gate import Authorised, Gate
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.confirmation.permissions import Permissions
from mcp_bridge.confirmation.running import Runner
from mcp_bridge.confirmation.server_asking import ServerQuestions
from mcp_bridge.confirmation.state import Asking, Malformed, ServerAsking, read_state
from mcp_bridge.contract import Responses
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.reading.reader import ConfirmationReader
from mcp_bridge.record.database import open_database
from mcp_bridge.record.store import Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import RequiresConfirmation, Skill, too_many_items
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.context import Resume

__all__ = ["Executor"]

log = logging.getLogger(__name__)


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
        # None: a call that needs a second approver never runs (the person hears none is available).
        self.approvals = approvals
        # What authorises a write: the questions asked, the messages used, the permissions given. Without
        # one (tests), a record of this process only.
        self.record = record or Record(open_database(":memory:"), clock=clock)
        # The question for an MCP tool the skill gives no constraint (the gate's remote_asks).
        gate = Gate(
            RequiresConfirmation(
                enabled=True,
                utter_for_confirmation=self.responses.confirm_tool_call,
                utter_on_user_denial=self.responses.tool_call_cancelled,
            )
        )
        self.server_questions = ServerQuestions(
            self.seal,
            self.responses,
            self.reader,
            self.skills,
            tools,
            gate,
            self.record,
            self.policy,
            resume=self._resumed,
            audit=self.audit,
        )
        # The slots an MCP server's meta_map.from_slots sends in _meta: sealed with each question.
        servers = tools.runtime.servers.values() if tools.runtime is not None else ()
        self.parts = Parts(
            skills=self.skills,
            tools=tools,
            gate=gate,
            runner=Runner(self.responses, self.audit, self.server_questions),
            reader=self.reader,
            record=self.record,
            seal=self.seal,
            audit=self.audit,
            responses=self.responses,
            policy=self.policy,
            clock=clock,
            permissions=Permissions(self.seal, clock, self.audit, self.record),
            approvals=approvals,
            meta_slots=frozenset(entry.slot for server in servers for entry in server.meta_from_slots),
        )

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
        parts, skill = self.parts, self.skills[skill_id]
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
            return Decision("too_long", [answering.too_long(parts, too_long)])
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
                cleared = answering.cleared(True)
            case Asking(question, left_behind=True):
                await self.record.end(question.id, "dropped", reason="the person started something else")
                cleared = answering.cleared(True)
                self.audit.record_calls(
                    turn.conversation_id, question, "dropped", "the person started something else"
                )
                said = [Say(self.responses.question_dropped)]
            case Malformed(left_behind=True):
                cleared = answering.cleared(True)  # a copy of no open question: nothing to drop
        scope = Scope.of(skill, turn)
        ran = await planner.run_steps(parts, scope, 0)
        run = None
        if isinstance(ran, Gathered) and forms.chosen(ran) is forms.ONE_CALL:
            # remembered: a new request's one call may run unasked under a permission.
            run = await permitted.run_permitted(parts, scope, ran.calls[0])
            if run is not None:
                run = replace(run, say=(*ran.said, *run.say), slots={**ran.slots, **run.slots})
        if run is None:
            run = await forms.asked(parts, scope, ran, None)
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
                return await answering.answered(self.parts, question, turn)
            case Malformed(question, reason=reason, ended="answered"):
                # The tracker's copy of a question answered already (Rasa lost that turn's events, or a
                # replay): a yes to it writes nothing more, and the person is not told nothing was saved.
                if question is not None and turn.new_message:
                    self.audit.record_calls(turn.conversation_id, question, "rejected", reason)
                return answering.nothing_pending(self.parts, turn, clear=True)
            case Malformed(None, reason=reason):
                log.warning("conversation %s: a pending question ignored: %s", turn.conversation_id, reason)
                return answering.nothing_pending(self.parts, turn, clear=True, invalid=True)
            case Malformed(question, reason=reason) if question is not None:
                return answering.rejected(self.parts, turn, question, reason)
            case _:
                return answering.nothing_pending(self.parts, turn, clear=False)

    async def deny(self, turn: Turn) -> Decision:
        """No (the bot's own "stop"): nothing is called, and the person hears the skill's denial."""
        match await read_state(turn, self.seal, self.record):
            case ServerAsking(stored):
                return await self.server_questions.cancel(stored, turn)  # the server hears cancel
            case Asking(question):
                refusal = answering.may_not_answer(turn, question)
                if refusal is not None:
                    return answering.refused(self.parts, turn, question, refusal)
                scope = answering.scope_of(self.parts, question, turn)
                return await answering.denied(self.parts, question, turn, scope)
            case state:
                clear = isinstance(state, Malformed)
                return Decision(
                    "nothing_pending", [Say(self.responses.nothing_pending)], answering.cleared(clear)
                )

    async def revoke(self, turn: Turn) -> Decision:
        """ "stop saving without asking": every permission of this person in the conversation is
        withdrawn (audited each); anyone else's stay."""
        count = await self.parts.permissions.revoke(turn)
        return Decision("done", [Say(self.responses.permissions_revoked, {"count": count})])

    async def approval_decided(self, turn: Turn, approval_id: str) -> Decision:
        """``second_approver``, in the requester's conversation, told a decision on request
        ``approval_id`` (:mod:`mcp_bridge.confirmation.release`)."""
        return await release.released(self.parts, turn, approval_id)

    # -- the hook a server's questions resume a call through ----------------------------------

    async def _resumed(self, scope: Scope, start: int, authorised: Authorised | None, resume: Resume) -> Run:
        """A call a server stopped to ask about, sent again with the answers (under ``authorised``, the
        verdict that lets it run again, or as the gate says of it now); the skill goes on from it."""
        ran = await planner.run_steps(self.parts, scope, start, authorised, resume)
        return await forms.asked(self.parts, scope, ran, None)
