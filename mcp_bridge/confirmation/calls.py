"""One call of a skill's step, from its tool's name to what its result says: the executor's layer beneath
its rules (:mod:`mcp_bridge.confirmation.executor` numbers them; this module holds rules 2 and 5, and the
"once, with
the question's key" of rule 3).

:class:`Calls` resolves a tool's name (rule 5: at dispatch time, and a name that resolves to nothing
is refused loudly), says whether a call needs a yes (rules 1 and 2, as :mod:`mcp_bridge.confirmation.gate`
decides them), checks arguments before anyone is asked about them, makes a pending confirmation of
a call, dispatches a call once (a confirmed one with its idempotency key, audited), routes its result
to what the person hears, holds a confirmed call for a second approver instead (rule 7,
:mod:`mcp_bridge.approvals.second_approver`), and checks that a question's seal and binding hold. It decides
nothing about an answer: that is the executor's (one call) or :mod:`mcp_bridge.confirmation.several_calls`'s
(a list of calls), and both call down into this module, never the other way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_bridge.approvals.second_approver import RESPONSES as APPROVAL_RESPONSES
from mcp_bridge.approvals.second_approver import Approvals
from mcp_bridge.auth.person import SignInRequiredError
from mcp_bridge.confirmation import templating
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
from mcp_bridge.confirmation.gate import needs_confirmation
from mcp_bridge.confirmation.server_questions import ServerQuestions
from mcp_bridge.errors import (
    InputRequiredError,
    QuestionLapsedError,
    ToolArgumentsError,
    ToolCallError,
    ToolNotFoundError,
    ToolResultInvalidError,
)
from mcp_bridge.observability.audit import AuditLog, AuditWriteError
from mcp_bridge.reading.reader import TooLong
from mcp_bridge.sealing import PendingConfirmation, Seal, call_digest
from mcp_bridge.skills.files import RequiresApproval, RequiresConfirmation, Skill, Step
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.pipeline import check_arguments
from mcp_bridge.tools.results import ToolResult
from mcp_bridge.tools.sources import Tool

# The executor's log: its parts log as one.
log = logging.getLogger("mcp_bridge.confirmation.executor")

_FAILURES = (ToolCallError, ToolArgumentsError, ToolNotFoundError)

# What a skill's tool name resolved to: the tool, or why nothing (refused loudly at dispatch, rule 5).
Resolved = Tool | ToolNotFoundError


def found(resolved: Resolved) -> Tool | None:
    """The tool a name resolved to, or None."""
    return None if isinstance(resolved, ToolNotFoundError) else resolved


@dataclass(frozen=True)
class Routed:
    """What one step's result came to; ``outcome`` None: the skill goes on to its next step."""

    outcome: Outcome | None
    say: tuple[Say, ...] = ()
    # The slots the result fills (the step's ``fills``).
    slots: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Planned:
    """A constrained call a run reached (rule 1): to be asked about, not run."""

    index: int
    step: Step
    resolved: Resolved
    rule: RequiresConfirmation
    arguments: dict[str, Any]
    slots: Mapping[str, Any]
    # The slot values of its line that the conversation does not hold (sealed as the call's context).
    context: Mapping[str, Any] = field(default_factory=dict)


class Calls:
    """One executor's calls: its skills, tools, seal, clock, audit trail and second approvers."""

    def __init__(
        self,
        skills: Mapping[str, Skill],
        tools: ToolBox,
        *,
        policy: ConfirmationPolicy,
        responses: Responses,
        audit: AuditLog,
        clock: Callable[[], float],
        seal: Seal,
        questions: ServerQuestions,
        approvals: Approvals | None,
    ) -> None:
        self.skills = skills
        self.tools = tools
        self.policy = policy
        self.responses = responses
        self.audit = audit
        self.clock = clock
        self.seal = seal
        # Questions an MCP server asks during a call (mcp_bridge.confirmation.server_questions).
        self.questions = questions
        # Rule 7's store and rules; None: a call that needs a second approver is refused, unrun.
        self.approvals = approvals
        # Rule 2's question, for an MCP tool the skill gives no constraint.
        self.unconstrained = RequiresConfirmation(
            enabled=True,
            utter_for_confirmation=responses.confirm_tool_call,
            utter_on_user_denial=responses.tool_call_cancelled,
        )

    # -- before a call: its tool, its question ------------------------------------------------

    def resolve(self, skill: Skill, name: str) -> Resolved:
        try:
            return self.tools.resolve(skill, name)
        except ToolNotFoundError as exc:
            return exc

    async def needs_yes(
        self, skill: Skill, name: str, resolved: Resolved | None = None
    ) -> RequiresConfirmation | None:
        """Rules 1 and 2, as :mod:`mcp_bridge.confirmation.gate` decides them."""
        resolved = self.resolve(skill, name) if resolved is None else resolved
        return await needs_confirmation(skill, name, found(resolved), default=self.unconstrained)

    async def refused(
        self, skill: Skill, step: Step, resolved: Resolved, arguments: Mapping[str, Any], turn: Turn
    ) -> Run | None:
        """Arguments the tool would refuse, refused before the person is asked about them: the run's end,
        or None. A name that resolves to nothing (no such local function, or a server that does not
        serve it) is asked about all the same; dispatch refuses it loudly (rule 5)."""
        tool = found(resolved)
        if tool is None:
            return None
        try:
            await check_arguments(tool, arguments)
        except ToolNotFoundError:
            pass
        except _FAILURES as exc:
            return self.failure(skill, step, exc, turn)
        return None

    def pending(
        self,
        skill: Skill,
        index: int,
        step: Step,
        arguments: Mapping[str, Any],
        turn: Turn,
        asked_before: PendingConfirmation | None,
    ) -> PendingConfirmation:
        """The exact call of ``step``, unsigned, as a question about it (or a permission's use) holds
        it; the same call as ``asked_before`` keeps its idempotency key."""
        source = str(skill.tools[step.execute_tool])
        digest = call_digest(skill.id, step.execute_tool, source, arguments)
        question_id = uuid.uuid4().hex
        same_call = asked_before is not None and asked_before.digest == digest
        return PendingConfirmation(
            id=question_id,
            skill=skill.id,
            tool=step.execute_tool,
            step=index,
            source=source,
            arguments=dict(arguments),
            digest=digest,
            asked_at=self.clock(),
            user_turn=turn.user_turn,
            key=asked_before.key if same_call and asked_before is not None else question_id,
            user=turn.user,
            asked_after=turn.said_at,
        )

    # -- the call ---------------------------------------------------------------------------

    async def dispatch(
        self,
        skill: Skill,
        step: Step,
        resolved: Resolved,
        arguments: dict[str, Any],
        slots: Mapping[str, Any],
        turn: Turn,
        confirmed: PendingConfirmation | None,
    ) -> ToolResult | Run:
        """Call the tool the name resolved to (rule 5); a confirmed call with its key, exactly once
        (rule 3). A failure comes back as the run's end.

        ``slots`` are the conversation's slots as the run has them now (an MCP server's
        ``meta_map.from_slots`` sends some of them in ``_meta``).
        """
        result: ToolResult | Run
        outcome = "not run"
        try:
            if isinstance(resolved, ToolNotFoundError):
                raise resolved
            key = confirmed.key if confirmed else None
            result = await resolved.call(arguments, idempotency_key=key, slots=slots)
            outcome = "ok" if result.ok else f"error: {result.error}"
        except InputRequiredError as exc:
            result = self.questions.asked(skill, step, arguments, turn, confirmed, exc)
            outcome = "stopped to ask the person"
        except _FAILURES as exc:
            if isinstance(exc, SignInRequiredError) and confirmed is not None:
                self.record(turn, confirmed, "executed", "not run: the person must sign in first")
            result = self.failure(skill, step, exc, turn)
            if isinstance(exc, QuestionLapsedError):
                outcome = "outcome unknown: the server stopped waiting for the answer (told cancel)"
            elif isinstance(exc, ToolCallError) and exc.may_have_run:
                outcome = "outcome unknown"
        if confirmed is not None:
            try:
                self.record(turn, confirmed, "executed", outcome)
            except AuditWriteError:
                pass  # logged; the call ran, and the person must hear what happened, not "nothing"
        return result

    def route(
        self,
        step: Step,
        result: ToolResult,
        slots: Mapping[str, Any],
        arguments: Mapping[str, Any],
        results: Mapping[str, Any],
    ) -> Routed:
        """What follows the result: what to say, the slots it fills, and whether the skill goes on."""
        if not result.ok:
            error = result.error or "the tool reported a failure"
            return Routed("failed", (Say(step.on_error or self.responses.tool_failed, {"error": error}),))
        empty_list = step.not_found_when_empty and not result.data.get(step.not_found_when_empty)
        false_flag = step.not_found_when_false and result.data.get(step.not_found_when_false) is False
        if empty_list or false_flag:
            if not step.on_not_found:
                return Routed("not_found")
            variables = templating.variables(slots, arguments, results, list_format=step.list_format)
            return Routed("not_found", (Say(step.on_not_found, variables),))
        fills = {slot: result.data.get(key) for slot, key in step.fills.items()}
        if not step.on_success:
            return Routed(None, (), fills)
        variables = templating.variables({**slots, **fills}, arguments, results, list_format=step.list_format)
        return Routed(None, (Say(step.on_success, variables),), fills)

    def failure(self, skill: Skill, step: Step, exc: Exception, turn: Turn) -> Run:
        tool = step.execute_tool
        if isinstance(exc, SignInRequiredError):
            raise exc  # nothing was sent; the action shows the sign-in link, the skill resumes after
        if isinstance(exc, ToolNotFoundError):
            log.error(
                "REFUSED: tool %r of skill %r resolves to neither a local function nor an MCP tool "
                "(%s); nothing was run (conversation %s)",
                tool,
                skill.id,
                exc,
                turn.conversation_id,
            )
            return Run("not_configured", (Say(self.responses.tool_not_configured),))
        if isinstance(exc, ToolArgumentsError):
            log.warning("tool %r of skill %r: %s", tool, skill.id, exc)
            return Run("failed", (Say(step.on_error or self.responses.tool_failed, {"error": str(exc)}),))
        log.warning("tool %r of skill %r failed: %s", tool, skill.id, exc)
        if isinstance(exc, QuestionLapsedError | ToolResultInvalidError):
            said = (
                self.responses.elicitation_lapsed
                if isinstance(exc, QuestionLapsedError)
                else self.responses.tool_result_invalid
            )
            return Run("unavailable", (Say(said, {"tool_name": tool}),))
        unknown = isinstance(exc, ToolCallError) and exc.may_have_run
        said = self.responses.tool_outcome_unknown if unknown else self.responses.tool_unavailable
        return Run("unavailable", (Say(said),))

    async def hold(
        self, rule: RequiresApproval, pending: PendingConfirmation, turn: Turn, slots: Mapping[str, Any]
    ) -> tuple[Outcome, Say]:
        """Hold one confirmed call for its approver (rule 7): what to say, and whether it is held."""
        variables = templating.variables(slots, pending.arguments, tool=pending.tool)
        held = None
        if self.approvals is not None:
            held = await self.approvals.hold(rule, pending, turn.conversation_id, slots)
        if held is None:
            return "rejected", Say(APPROVAL_RESPONSES.unavailable, variables)
        variables |= {"approval_role": rule.role, "approval_expires_after": rule.expires_after}
        return "awaiting_approval", Say(APPROVAL_RESPONSES.waiting, variables)

    # -- the question's binding -----------------------------------------------------------

    async def verified(self, pending: PendingConfirmation, turn: Turn) -> tuple[Skill, Step, Resolved] | None:
        """The skill and step a pending confirmation names, and what its tool resolves to, if its seal
        and binding hold."""
        skill = self.skills.get(pending.skill)
        if skill is None or not 0 <= pending.step < len(skill.steps):
            return None
        step = skill.steps[pending.step]
        source = skill.tools.get(pending.tool)
        if step.execute_tool != pending.tool or source is None or str(source) != pending.source:
            return None
        if not self.seal.verify(pending, turn.conversation_id):
            return None
        resolved = self.resolve(skill, pending.tool)
        if await self.needs_yes(skill, pending.tool, resolved) is None:
            return None
        return skill, step, resolved

    def late(self, pending: PendingConfirmation) -> bool:
        return self.clock() - pending.asked_at > self.policy.ttl_seconds

    def reject(
        self, turn: Turn, pending: PendingConfirmation, reason: str, skill: Skill | None = None
    ) -> Decision:
        log.warning(
            "conversation %s: confirmation %s rejected (%s); nothing was run",
            turn.conversation_id,
            pending.id,
            reason,
        )
        self.record(turn, pending, "rejected", reason)
        return Decision("rejected", [Say(self.responses.confirmation_invalid)], ended(skill))

    def unanswerable(self, turn: Turn, pending: PendingConfirmation) -> str | None:
        """Why this turn's message cannot answer the question ``pending`` was asked in (rule 3: only
        the person asked, in a message their channel vouches for, received after the question was
        asked); None when it can."""
        if turn.unvouched is not None:
            return f"no channel vouches for the answer: {turn.unvouched}"
        if pending.user != turn.user:
            return "answered by someone other than the person asked"
        if turn.new_message and not received_after(turn, pending):
            return "a message the channel received before the question was asked"
        return None

    def refuse(self, turn: Turn, pending: PendingConfirmation, reason: str) -> Decision:
        """Rule 3: an answer that :meth:`unanswerable` refuses. Nothing runs; the question stays for
        its person."""
        log.warning(
            "conversation %s: an answer to confirmation %s was refused (%s); nothing was run",
            turn.conversation_id,
            pending.id,
            reason,
        )
        self.record(turn, pending, "refused", reason, answered_by=turn.user)
        unvouched = turn.unvouched is not None
        said = self.responses.not_vouched if unvouched else self.responses.confirmation_invalid
        return Decision("refused", [Say(said)])

    def too_long(self, reading: TooLong) -> Say:
        return Say(self.responses.message_too_long, {"limit": reading.limit})

    def record(
        self,
        turn: Turn,
        pending: PendingConfirmation,
        decision: str,
        result: str | None,
        **extra: str | None,
    ) -> None:
        self.audit.record_question(turn.conversation_id, pending, decision, result, **extra)


# A question asked in a turn no channel signed (the resume after a sign-in) has only the action
# server's clock: an answer the channel received more than this before it is refused as older.
CLOCK_SKEW_SECONDS = 2.0


def received_after(turn: Turn, pending: PendingConfirmation) -> bool:
    """The turn's message reached its channel after the question was asked, so it is no earlier
    message replayed into a later question: later than the signed message the question was asked
    in, or, when that one was unsigned, than the question itself (on the action server's clock)."""
    if pending.asked_after is not None:
        return turn.said_at is not None and turn.said_at > pending.asked_after
    if turn.said_at is not None:
        return turn.said_at > pending.asked_at - CLOCK_SKEW_SECONDS
    return True
