"""Running one call: its tool's name resolved, its arguments checked, the call made once, its result
turned into what the person hears.

The executor decides *whether* a call runs (through :mod:`mcp_bridge.confirmation.gate`); this
module only runs what it is handed, and says what came of it:

* a name is resolved at dispatch time, and a name that resolves to nothing (no such local function,
  no server that serves it) is refused loudly: nothing runs (``utter_tool_not_configured``);
* arguments a tool's input schema refuses are refused before the person is asked about them;
* a confirmed call carries its question's idempotency key, and its outcome is audited
  (``executed``); the layers around every call (:mod:`mcp_bridge.tools.pipeline`) repeat it once
  under that key when its outcome is unknown and the tool honours the key;
* a failure says whether the call may have run (``utter_tool_outcome_unknown``) or not;
* a server that stops the call to ask the person a question of its own hands it to
  :mod:`mcp_bridge.confirmation.server_questions`, which asks it over the next turns.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_bridge.auth.person import SignInRequiredError
from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Outcome, Responses, Run, Say, Turn
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
from mcp_bridge.question import Question
from mcp_bridge.skills.files import Skill, Step
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.context import CallContext, Resume
from mcp_bridge.tools.pipeline import check_arguments
from mcp_bridge.tools.results import ToolResult
from mcp_bridge.tools.sources import Tool

# The executor's log: its parts log as one.
log = logging.getLogger("mcp_bridge.confirmation.executor")

_FAILURES = (ToolCallError, ToolArgumentsError, ToolNotFoundError)

# What a skill's tool name resolved to: the tool, or why nothing (refused loudly at dispatch).
Resolved = Tool | ToolNotFoundError


def found(resolved: Resolved) -> Tool | None:
    """The tool a name resolved to, or None."""
    return None if isinstance(resolved, ToolNotFoundError) else resolved


def context_of(turn: Turn, skill: Skill) -> CallContext:
    """The context of the calls a skill makes in a turn: its conversation, and the person the channel
    named (a server that acts as the person is called as them, and as nobody when none is named)."""
    return CallContext(conversation_id=turn.conversation_id, person=turn.user, skill=skill.id)


@dataclass(frozen=True)
class Routed:
    """What one step's result came to; ``outcome`` None: the skill goes on to its next step."""

    outcome: Outcome | None
    say: tuple[Say, ...] = ()
    # The slots the result fills (the step's ``fills``).
    slots: Mapping[str, Any] = field(default_factory=dict)


class Runner:
    """Runs the calls of one executor: its tools, the responses it says, its audit trail, and the
    server questions a call may stop for."""

    def __init__(
        self, tools: ToolBox, responses: Responses, audit: AuditLog, server_questions: ServerQuestions
    ) -> None:
        self.tools = tools
        self.responses = responses
        self.audit = audit
        self.server_questions = server_questions

    def resolve(self, skill: Skill, name: str) -> Resolved:
        try:
            return self.tools.resolve(skill, name)
        except ToolNotFoundError as exc:
            return exc

    async def refused(
        self, skill: Skill, step: Step, resolved: Resolved, arguments: Mapping[str, Any], turn: Turn
    ) -> Run | None:
        """Arguments the tool would refuse, refused before the person is asked about them: the run's end,
        or None. A name that resolves to nothing is asked about all the same; dispatch refuses it."""
        tool = found(resolved)
        if tool is None:
            return None
        try:
            await check_arguments(tool, arguments, context_of(turn, skill))
        except ToolNotFoundError:
            pass
        except _FAILURES as exc:
            return self.failure(skill, step, exc, turn)
        return None

    async def dispatch(
        self,
        skill: Skill,
        step: Step,
        resolved: Resolved,
        arguments: dict[str, Any],
        slots: Mapping[str, Any],
        turn: Turn,
        confirmed: Question | None,
        resume: Resume | None = None,
    ) -> ToolResult | Run:
        """Call the tool the name resolved to; ``confirmed``, the question (narrowed to this one call)
        a yes or a permission authorised it with: with its key, audited. ``resume``: the answers to
        the server's questions this call was stopped for. A failure comes back as the run's end.

        ``slots`` are the conversation's slots as the run has them now; an MCP server's
        ``meta_map.from_slots`` sends some of them in ``_meta``, but a confirmed call sends what was
        sealed with its question (or its permission) instead, never what the slots hold by now.
        """
        result: ToolResult | Run
        outcome = "not run"
        key = confirmed.first.key if confirmed else None
        sent = confirmed.first.meta if confirmed is not None else slots
        context = replace(context_of(turn, skill), idempotency_key=key, slots=sent, resume=resume)
        try:
            if isinstance(resolved, ToolNotFoundError):
                raise resolved
            result = await resolved.call(arguments, context)
            outcome = "ok" if result.ok else f"error: {result.error}"
        except InputRequiredError as exc:
            if await self.server_questions.waiting(turn):
                # One server question waits at a time: this call's is not asked, and the call not
                # completed (its server hears nothing more; a held call is told cancel when its wait
                # runs out). The person hears so, and can ask for it again afterwards.
                error = "it has a question of its own while another is waiting; ask for it again after"
                said = Say(self.responses.tool_failed, {"error": error, "tool_name": step.execute_tool})
                result, outcome = Run("failed", (said,)), "not completed: another call's question is waiting"
            else:
                rounds = resume.round if resume is not None else 1
                result = await self.server_questions.asked(
                    skill, step, arguments, turn, confirmed, exc, rounds
                )
                outcome = "stopped to ask the person"
        except _FAILURES as exc:
            if isinstance(exc, SignInRequiredError) and confirmed is not None:
                self.executed(turn, confirmed, "not run: the person must sign in first")
            result = self.failure(skill, step, exc, turn)
            if isinstance(exc, QuestionLapsedError):
                outcome = "outcome unknown: the server stopped waiting for the answer (told cancel)"
            elif isinstance(exc, ToolCallError) and exc.may_have_run:
                outcome = "outcome unknown"
        if confirmed is not None:
            try:
                self.executed(turn, confirmed, outcome)
            except AuditWriteError:
                pass  # logged; the call ran, and the person must hear what happened, not "nothing"
        return result

    def executed(self, turn: Turn, confirmed: Question, outcome: str) -> None:
        self.audit.record_question(turn.conversation_id, confirmed, confirmed.first, "executed", outcome)

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
