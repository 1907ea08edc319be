"""A server's questions asked in the conversation, then the call resumed.

A 2026-07-28 server that stops a call to ask the person (an input-required result) raises
:class:`~mcp_bridge.errors.InputRequiredError` from the call. Running the call hands it here
(:meth:`mcp_bridge.confirmation.running.Runner.run` calls :meth:`ServerQuestions.asked`); this module
asks the server's questions in the chat with the state machine of
:mod:`mcp_bridge.server_questions.elicitation`, one reply per turn, and keeps everything between turns in
the action server's record (:mod:`mcp_bridge.record.store`, a question of kind ``server``), sealed
(:mod:`mcp_bridge.sealing`, kind ``elicitation``), with a copy in the ``pending_elicitation`` slot for
Rasa: the skill, the step, the exact arguments, the question that authorised the call (if one did) and
how (the person's yes, an approver's release, a permission), the replies so far, the server's opaque
``request_state``, who was asked and when. Once every question is replied to (accepted, declined or
cancelled: the server hears which), the same call is sent again with the replies and that state (its
:class:`~mcp_bridge.tools.context.Resume`), and the skill goes on from its result, on whichever replica
serves that turn: through the one hook the executor gives this module, ``resume`` (the step loop from
the stopped step, :mod:`mcp_bridge.confirmation.planner`, and a question about what it gathers). The
executor hands the loop's turns here while a server's question is pending (:meth:`ServerQuestions.reply`,
and :meth:`ServerQuestions.cancel` for its "no"). Nothing here imports the executor or the step loop.

Safety:

* A call under a confirmation was confirmed before it ran and asked: the confirmation's sealed call
  is what is resumed (its arguments and idempotency key), only while the record holds its question
  as answered and the gate lets it run again under the consent it ran under (the person's yes, or an
  approver's release); nothing the person answers here is read as a yes
  (:mod:`mcp_bridge.reading.reader` never sees these replies).
* Only the record's open server question is answered, by the person asked, in a message their channel
  vouches for, received after the question was asked, in the turn after it, within its lifetime
  (``CONFIRMATION_TTL_SECONDS``), and once: a reply is one transition in the record. Anything else is
  refused (or, past its lifetime, the question is cancelled), and nothing is sent.
* "stop" (the bot's own rule, ``action_deny_tool``) cancels the server's question: the call is sent
  once more with ``cancel``, so the server ends it its own way.
* A reply that is plainly not an answer (it does not fit the question, it asks or requests
  something, and the confirmation reader reads it as something else) is handed back to the bot,
  and the question asked again afterwards, as a pending confirmation's is (:func:`_not_an_answer`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from mcp_bridge.confirmation.decisions import ConfirmationPolicy, Decision, Run, Say, Scope, Turn
from mcp_bridge.confirmation.gate import Authorised, Confirmed, Gate, Released, RunConfirmed, RunPermitted
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT, Responses
from mcp_bridge.errors import InputRequiredError
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.question import Question, open_question
from mcp_bridge.reading.answers import NluOpinion, Other
from mcp_bridge.reading.reader import ConfirmationReader
from mcp_bridge.record.store import Record, StoredQuestion
from mcp_bridge.sealing import Seal
from mcp_bridge.server_questions import elicitation
from mcp_bridge.server_questions.elicitation import MAX_ROUNDS, Asked, PendingElicitation, Replied
from mcp_bridge.skills.files import Skill, Step
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.context import Resume

log = logging.getLogger(__name__)

# The executor's hook: run the scope's skill from step ``start``, the step's call resumed with the
# answers: under the verdict that lets it run again (sent exactly as sealed, with its key), or, None, as
# the gate says of it now; what the run came to.
Resumes = Callable[[Scope, int, Authorised | None, Resume], Awaitable[Run]]
# How a call stopped to ask ran: under the person's yes, an approver's release or a permission.
Consented = Literal["yes", "release", "permission"]

KIND = "elicitation"


@dataclass(frozen=True)
class ServerQuestionState:
    """What the ``pending_elicitation`` slot carries."""

    # Its id in the action server's record; when it was asked (the record's clock) and after which
    # message (the channel's signed time; None in an unsigned turn).
    id: str
    asked_at: float
    asked_after: float | None
    skill: str
    step: int
    tool: str
    server: str
    arguments: dict[str, Any]
    # The question (of this one call) that authorised it, sealed as it travels, or None; and how it
    # did (``consent``: None when nothing did).
    confirmation: dict[str, Any] | None
    request_state: str | None
    # The server's questions not yet asked (key -> request), the one being asked, the answers so far.
    waiting: dict[str, dict[str, Any]]
    key: str
    asking: dict[str, Any]
    responses: dict[str, dict[str, Any]]
    user: str | None
    user_turn: int
    rounds: int = 1
    # A 2025-11-25 server's call kept open in the process that asked
    # (mcp_bridge.server_questions.waiting_calls).
    handle: str | None = None
    consent: Consented | None = None

    @classmethod
    def from_record(cls, record: Any) -> ServerQuestionState | None:
        if not isinstance(record, dict):
            return None
        try:
            # A state from before ``handle`` or ``consent`` existed has neither (a confirmation: a yes).
            optional = ("handle", "consent")
            names = [name for name in cls.__dataclass_fields__ if name in record or name not in optional]
            state = cls(**{name: record[name] for name in names})
        except (KeyError, TypeError):
            return None
        if state.confirmation is not None and state.consent is None:
            return replace(state, consent="yes")
        return state


class ServerQuestions:
    """Asks a server's questions for one executor: its seal, responses, reader, skills, tools, gate and
    record, and its step loop (``resume``) to resume a call through."""

    def __init__(
        self,
        seal: Seal,
        responses: Responses,
        reader: ConfirmationReader,
        skills: Mapping[str, Skill],
        tools: ToolBox,
        gate: Gate,
        record: Record,
        policy: ConfirmationPolicy,
        resume: Resumes,
        audit: AuditLog,
    ) -> None:
        self._seal = seal
        self._responses = responses
        self._reader = reader
        self._skills = skills
        self._tools = tools
        self._gate = gate
        self._record = record
        self._policy = policy
        self._resume_steps = resume
        self._audit = audit

    # -- a call stopped to ask ----------------------------------------------------------------

    async def asked(
        self,
        scope: Scope,
        step: Step,
        arguments: dict[str, Any],
        sealed: Authorised | None,
        stopped: InputRequiredError,
        rounds: int,
    ) -> Run:
        """The call stopped to ask (in its ``rounds``-th round of questions): the first question, and
        the state for the next turn. ``sealed``: the verdict it ran under, when it ran a sealed call."""
        skill, turn = scope.skill, scope.turn
        index = skill.steps.index(step)
        source = str(skill.tools[step.execute_tool])
        server = source.split(":", 1)[1] if source.startswith("mcp:") else source
        if rounds > MAX_ROUNDS:
            log.warning("MCP server %r kept asking (%d rounds); the call was stopped", server, rounds)
            error = "the server kept asking questions"
            return Run("failed", (Say(step.on_error or self._responses.tool_failed, {"error": error}),))
        waiting = dict(stopped.requests)
        state = ServerQuestionState(
            id="",
            asked_at=0.0,
            asked_after=turn.said_at,
            skill=skill.id,
            step=index,
            tool=step.execute_tool,
            server=server,
            arguments=dict(arguments),
            confirmation=sealed.question.sealed(self._seal, turn.conversation_id)
            if sealed is not None
            else None,
            consent=_consent(sealed),
            request_state=stopped.request_state,
            handle=stopped.handle,
            waiting=waiting,
            key="",
            asking={},
            responses={},
            user=turn.user,
            user_turn=turn.user_turn,
            rounds=rounds,
        )
        return await self._next(state, turn, ())

    async def _next(self, state: ServerQuestionState, turn: Turn, said: tuple[Say, ...]) -> Run:
        """Ask the next question; every question declined unasked (a URL nobody should open) is
        answered here and the next one tried."""
        waiting = dict(state.waiting)
        responses = dict(state.responses)
        while waiting:
            key, request = next(iter(waiting.items()))
            del waiting[key]
            step = elicitation.begin(state.server, request)
            if isinstance(step, Asked):
                new = replace(
                    state, waiting=waiting, key=key, asking=step.pending.to_slot(), responses=responses
                )
                sealed = await self._ask(new, turn)
                if sealed is None:
                    refused = Say(self._responses.message_used)
                    return Run("rejected", (*said, refused), {ELICITATION_SLOT: None})
                return Run("pending", (*said, *_say(step)), {ELICITATION_SLOT: sealed})
            responses[key] = _response(step)
        # Nothing the chat may ask (a link nobody should be sent to, a form it cannot ask): the call
        # stays stopped (under 2026-07-28 it has not run to completion) and the person hears why.
        log.warning(
            "MCP server %r asked for something the bridge will not ask; the call was stopped", state.server
        )
        error = "the server asked for something I can't ask here"
        return Run(
            "failed", (*said, Say(self._responses.tool_failed, {"error": error})), {ELICITATION_SLOT: None}
        )

    # -- the person's reply ------------------------------------------------------------------

    async def reply(self, stored: StoredQuestion, turn: Turn) -> Decision:
        """The loop's turn while a server's question (the record's open one, ``stored``) is pending."""
        state = self._open(stored, turn)
        if state is None:
            log.warning(
                "conversation %s: a server's question did not open; nothing was sent", turn.conversation_id
            )
            await self._record.end(stored.id, "rejected", reason="its record does not open")
            return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
        refusal = _may_not_reply(state, turn)
        if refusal is not None:
            log.warning("conversation %s: a reply to a server's question: %s", turn.conversation_id, refusal)
            self._refused(state, turn, refusal)
            return Decision("refused", [self._invalid()])
        pending = PendingElicitation.from_slot(state.asking)
        if not turn.new_message:
            if state.user_turn == turn.user_turn or pending is None:
                return Decision("pending")  # asked in this very turn
            # Back from an interruption: asked again, in this turn (a new question in the record).
            again = await self._ask(replace(state, user_turn=turn.user_turn), turn)
            if again is None:
                return Decision("rejected", [Say(self._responses.message_used)], {ELICITATION_SLOT: None})
            return Decision("pending", [_say_pending(pending)], {ELICITATION_SLOT: again})
        if pending is None:
            await self._record.end(stored.id, "rejected", reason="nothing is being asked")
            return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
        if self._record.now() - stored.asked_at > self._policy.ttl_seconds:
            # Past its lifetime: the server hears cancel, as for "stop"; nothing of the reply is used.
            return await self._cancelled(state, turn, "answered after its lifetime")
        if turn.user_turn != state.user_turn + 1:
            # Other messages came between: asked again, in this turn (a new question in the record).
            again = await self._ask(replace(state, user_turn=turn.user_turn), turn)
            if again is None:
                return Decision("rejected", [Say(self._responses.message_used)], {ELICITATION_SLOT: None})
            return Decision("pending", [_say_pending(pending)], {ELICITATION_SLOT: again})
        read = elicitation.reply(pending, turn.text)
        if isinstance(read, Asked) and _not_an_answer(self._reader, turn, read):
            # Handed back to the bot (the question waits, and is asked again afterwards).
            return Decision("handed_back")
        ended = await self._record.end(stored.id, "answered", message=turn.message())
        if ended is not None:
            log.warning(
                "conversation %s: a reply to a server's question: %s", turn.conversation_id, ended.reason
            )
            self._refused(state, turn, ended.reason)
            return Decision("refused", [self._invalid()])
        if isinstance(read, Asked):
            again = await self._ask(
                replace(state, asking=read.pending.to_slot(), user_turn=turn.user_turn), turn
            )
            if again is None:
                return Decision("rejected", [Say(self._responses.message_used)], {ELICITATION_SLOT: None})
            return Decision("pending", list(_say(read)), {ELICITATION_SLOT: again})
        responses = {**state.responses, state.key: _response(read)}
        state = replace(state, responses=responses, key="", asking={}, user_turn=turn.user_turn)
        if state.waiting:
            run = await self._next(state, turn, ())
            return Decision(run.outcome, list(run.say), dict(run.slots))
        return await self._resume(state, turn)

    async def cancel(self, stored: StoredQuestion, turn: Turn) -> Decision:
        """The bot's "stop": the server's question is cancelled, and the server hears so."""
        state = self._open(stored, turn)
        if state is None or state.user != turn.user or turn.unvouched:
            return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
        return await self._cancelled(state, turn, "the person said stop")

    async def _cancelled(self, state: ServerQuestionState, turn: Turn, reason: str) -> Decision:
        """The server's question ends unanswered (``reason``): the server hears cancel for it and for the
        ones not yet asked."""
        if await self._record.end(state.id, "refused", reason=reason) is not None:
            return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
        responses = {**state.responses, **({state.key: {"action": "cancel"}} if state.key else {})}
        responses.update({key: {"action": "cancel"} for key in state.waiting})
        return await self._resume(replace(state, responses=responses, waiting={}, key=""), turn)

    async def _resume(self, state: ServerQuestionState, turn: Turn) -> Decision:
        """Send the call again with the answers; the skill goes on from its result."""
        skill = self._skills.get(state.skill)
        if skill is None or not 0 <= state.step < len(skill.steps):
            return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
        scope = Scope.of(skill, turn)
        verdict = None
        if state.confirmation is not None:
            # The call a yes authorised: its question must be one the record holds as answered, and the
            # gate must let it run again under the consent it ran under.
            opened = open_question(state.confirmation, self._seal, turn.conversation_id)
            answered = await self._record.question(opened.id) if isinstance(opened, Question) else None
            if (
                not isinstance(opened, Question)
                or len(opened.calls) != 1
                or answered is None
                or answered.conversation_id != turn.conversation_id
                or answered.state != "answered"
            ):
                return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
            verdict = await self._again(scope, opened, state.consent)
            if verdict is None:
                return Decision("rejected", [self._invalid()], {ELICITATION_SLOT: None})
        answers = Resume(state.responses, state.request_state, state.handle, round=state.rounds + 1)
        # The confirmed call itself (its sealed arguments and key); a call that needed no
        # confirmation runs from the step again, as it did before it was stopped.
        run = await self._resume_steps(scope, state.step, verdict, answers)
        return run.decision(skill, slots={ELICITATION_SLOT: None, PENDING_SLOT: None})

    async def _again(
        self, scope: Scope, question: Question, consent: Consented | None
    ) -> RunConfirmed | None:
        """The gate's verdict on running ``question``'s call again under ``consent``; None unless it runs."""
        call = question.first
        given = (
            Released(question) if consent == "release" else Confirmed(question) if consent == "yes" else None
        )
        if given is None:
            return None  # a permission's run is no question the record answered: it never gets here
        resolved = self._tools.find(scope.skill, call.tool)
        verdict = await self._gate.verdict(
            scope.skill, call.tool, resolved, call.arguments, given, scope.context
        )
        return verdict if isinstance(verdict, RunConfirmed) else None

    # -- the record ---------------------------------------------------------------------------

    async def waiting(self, turn: Turn) -> bool:
        """A server's question of this conversation, asked in this turn, waits: another call stopped to
        ask in the same turn (a list's calls) may not ask over it."""
        stored = await self._record.open_question(turn.conversation_id)
        if stored is None or stored.kind != "server":
            return False
        state = ServerQuestionState.from_record(self._seal.open(KIND, stored.sealed, turn.conversation_id))
        return state is not None and state.user_turn == turn.user_turn

    async def _ask(self, state: ServerQuestionState, turn: Turn) -> dict[str, Any] | None:
        """Record ``state`` as the conversation's open question (a new id; the one before it ends); its
        sealed copy for the slot, or None when the record refuses (nothing is asked)."""
        # Asked after the turn's message (the reply that led to it, or the yes): a later reply must be
        # newer than that one.
        after = turn.said_at if turn.said_at is not None else state.asked_after
        asked = replace(state, id=uuid.uuid4().hex, asked_at=self._record.now(), asked_after=after)
        sealed = self._seal.seal(KIND, asdict(asked), turn.conversation_id)
        refused = await self._record.asked(
            conversation_id=turn.conversation_id,
            kind="server",
            question_id=asked.id,
            person=asked.user,
            sealed=sealed,
            asked_after=asked.asked_after,
            message=None,
            new_words=False,
        )
        return None if refused is not None else sealed

    def _open(self, stored: StoredQuestion, turn: Turn) -> ServerQuestionState | None:
        """The server's question the record holds, if it opens for this conversation."""
        state = ServerQuestionState.from_record(self._seal.open(KIND, stored.sealed, turn.conversation_id))
        return state if state is not None and state.id == stored.id else None

    def _refused(self, state: ServerQuestionState, turn: Turn, reason: str) -> None:
        """A reply to the server's question refused (nothing sent), in the audit trail with ``reason``."""
        self._audit.record(
            decision="rejected",
            conversation=turn.conversation_id,
            user=state.user,
            skill=state.skill,
            tool=state.tool,
            source=f"mcp:{state.server}",
            result=reason,
        )

    def _invalid(self) -> Say:
        return Say(self._responses.confirmation_invalid)


def _may_not_reply(state: ServerQuestionState, turn: Turn) -> str | None:
    """Why the turn's message cannot reply to the server's question: another person, no channel vouches
    for it, or the channel received it before the question was asked (an earlier message replayed)."""
    if turn.unvouched is not None:
        return f"no channel vouches for it: {turn.unvouched}"
    if state.user != turn.user:
        return "from someone other than the person asked"
    if turn.new_message and state.asked_after is not None:
        if turn.said_at is None or turn.said_at <= state.asked_after:
            return "a message the channel received before the question was asked"
    return None


def _consent(sealed: Authorised | None) -> Consented | None:
    """How a sealed call ran (None: it ran unasked)."""
    if isinstance(sealed, RunPermitted):
        return "permission"
    if isinstance(sealed, RunConfirmed):
        return "release" if sealed.released else "yes"
    return None


def _not_an_answer(reader: ConfirmationReader, turn: Turn, read: Asked) -> bool:
    """A reply is plainly not an answer when all three hold: it does not fit the question (the state
    machine refused it), it is a question or a new request (a "?", or "log a ..."), and the
    confirmation reader calls it something else (a confident intent that is neither yes nor no, and
    no yes or no in its words): "who is dana@example.com?" at a date field. "next friday" there is a
    wrong answer, refused with the reason; a reply that fits is always the answer, so a text field
    takes any reply."""
    if not read.say or read.say[0].response != elicitation.INVALID:
        return False
    if not reader.asks_or_requests(turn.text):
        return False
    nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
    return isinstance(reader.read(turn.text, nlu), Other)


def _response(answered: Replied) -> dict[str, Any]:
    return {"action": answered.action, **({"content": answered.content} if answered.content else {})}


def _say(step: Asked) -> tuple[Say, ...]:
    return tuple(Say(prompt.response, prompt.variables) for prompt in step.say)


def _say_pending(pending: PendingElicitation) -> Say:
    prompt = elicitation.prompt_again(pending)
    return Say(prompt.response, prompt.variables)
