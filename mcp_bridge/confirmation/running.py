"""Running one call: its tool's name resolved, its arguments checked, the call made once, its result
turned into what the person hears.

The gate decides *whether* a call runs (:mod:`mcp_bridge.confirmation.gate`); this module only runs
what a verdict lets run (:data:`~mcp_bridge.confirmation.gate.Runs`), and says what came of it:

* a name is resolved at dispatch time, and a name that resolves to nothing (no such local function,
  no server that serves it) is turned away loudly: nothing runs (``utter_tool_not_configured``);
* arguments a tool's input schema does not take are turned away before the person is asked about them;
* a sealed call (the verdict :data:`~mcp_bridge.confirmation.gate.Authorised`) carries its question's
  idempotency key, and its outcome is audited (``executed``); the layers around every call
  (:mod:`mcp_bridge.tools.pipeline`) repeat it once under that key when its outcome is unknown and the
  tool honours the key;
* a failure says whether the call may have run (``utter_tool_outcome_unknown``) or not;
* a server that stops the call to ask the person a question of its own hands it to
  :mod:`mcp_bridge.confirmation.server_asking`, which asks it over the next turns.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_bridge.auth.person import SignInRequiredError
from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Outcome, Run, Say, Scope
from mcp_bridge.confirmation.gate import Authorised, Runs, RunUnasked
from mcp_bridge.confirmation.server_asking import ServerQuestions
from mcp_bridge.contract import Responses
from mcp_bridge.errors import (
    InputRequiredError,
    QuestionLapsedError,
    ToolArgumentsError,
    ToolCallError,
    ToolNotFoundError,
    ToolResultInvalidError,
)
from mcp_bridge.observability.audit import AuditLog, AuditWriteError
from mcp_bridge.skills.files import Step
from mcp_bridge.skills.toolbox import Resolved
from mcp_bridge.tools.context import Resume
from mcp_bridge.tools.pipeline import check_arguments
from mcp_bridge.tools.results import ToolResult

# The executor's log: its rooms log as one.
log = logging.getLogger("mcp_bridge.confirmation.executor")

_FAILURES = (ToolCallError, ToolArgumentsError, ToolNotFoundError)


@dataclass(frozen=True)
class Routed:
    """What one call came to; ``outcome`` None: the skill goes on to its next step."""

    outcome: Outcome | None
    say: tuple[Say, ...] = ()
    # The slots the result fills (the step's ``fills``).
    slots: Mapping[str, Any] = field(default_factory=dict)
    # The tool's result (its keys are the step's results).
    data: Mapping[str, Any] = field(default_factory=dict)


class Runner:
    """Runs the calls of one executor: its responses, its audit trail, and the server questions a call
    may stop for."""

    def __init__(self, responses: Responses, audit: AuditLog, server_questions: ServerQuestions) -> None:
        self.responses = responses
        self.audit = audit
        self.server_questions = server_questions

    async def would_fail(
        self, scope: Scope, step: Step, resolved: Resolved, arguments: Mapping[str, Any]
    ) -> Run | None:
        """Arguments the tool would not take, turned away before the person is asked about them: the run's
        end, or None. A name that resolves to nothing is asked about all the same; running it says so."""
        if isinstance(resolved, ToolNotFoundError):
            return None
        try:
            await check_arguments(resolved, arguments, scope.context)
        except ToolNotFoundError:
            pass
        except _FAILURES as exc:
            return self.failure(scope, step, exc)
        return None

    async def run(
        self,
        scope: Scope,
        step: Step,
        resolved: Resolved,
        arguments: Mapping[str, Any],
        slots: Mapping[str, Any],
        results: Mapping[str, Any],
        verdict: Runs,
        resume: Resume | None = None,
    ) -> Routed | Run:
        """Run the call the gate's ``verdict`` lets run, and say what its result comes to (what to say,
        the slots it fills, whether the skill goes on: ``results`` are the run's results before it). A
        failure, or a server that stops to ask, comes back as the run's end."""
        called = await self._call(scope, step, resolved, dict(arguments), slots, verdict, resume)
        if isinstance(called, Run):
            return called
        return self._route(step, called, slots, arguments, {**results, **called.data})

    async def _call(
        self,
        scope: Scope,
        step: Step,
        resolved: Resolved,
        arguments: dict[str, Any],
        slots: Mapping[str, Any],
        verdict: Runs,
        resume: Resume | None,
    ) -> ToolResult | Run:
        """Call the tool the name resolved to; a sealed call (``verdict`` :data:`Authorised`, the question
        narrowed to this one call) with its key, audited. ``resume``: the answers to the server's
        questions this call was stopped for. A failure comes back as the run's end.

        ``slots`` are the conversation's slots as the run has them now; an MCP server's
        ``meta_map.from_slots`` sends some of them in ``_meta``, but a sealed call sends what was
        sealed with its question (or its permission) instead, never what the slots hold by now.
        """
        result: ToolResult | Run
        outcome = "not run"
        sealed: Authorised | None = None if isinstance(verdict, RunUnasked) else verdict
        key = sealed.question.first.key if sealed is not None else None
        sent = sealed.question.first.meta if sealed is not None else slots
        context = replace(scope.context, idempotency_key=key, slots=sent, resume=resume)
        try:
            if isinstance(resolved, ToolNotFoundError):
                raise resolved
            result = await resolved.call(arguments, context)
            outcome = "ok" if result.ok else f"error: {result.error}"
        except InputRequiredError as exc:
            if await self.server_questions.waiting(scope.turn):
                # One server question waits at a time: this call's is not asked, and the call not
                # completed (its server hears nothing more; a held call is told cancel when its wait
                # runs out). The person hears so, and can ask for it again afterwards.
                error = "it has a question of its own while another is waiting; ask for it again after"
                said = Say(self.responses.tool_failed, {"error": error, "tool_name": step.execute_tool})
                result, outcome = Run("failed", (said,)), "not completed: another call's question is waiting"
            else:
                rounds = resume.round if resume is not None else 1
                result = await self.server_questions.asked(scope, step, arguments, sealed, exc, rounds)
                outcome = "stopped to ask the person"
        except _FAILURES as exc:
            if isinstance(exc, SignInRequiredError) and sealed is not None:
                self._executed(scope, sealed, "not run: the person must sign in first")
            result = self.failure(scope, step, exc)
            if isinstance(exc, QuestionLapsedError):
                outcome = "outcome unknown: the server stopped waiting for the answer (told cancel)"
            elif isinstance(exc, ToolCallError) and exc.may_have_run:
                outcome = "outcome unknown"
        if sealed is not None:
            try:
                self._executed(scope, sealed, outcome)
            except AuditWriteError:
                pass  # logged; the call ran, and the person must hear what happened, not "nothing"
        return result

    def _executed(self, scope: Scope, sealed: Authorised, outcome: str) -> None:
        question = sealed.question
        self.audit.record_question(scope.turn.conversation_id, question, question.first, "executed", outcome)

    def _route(
        self,
        step: Step,
        result: ToolResult,
        slots: Mapping[str, Any],
        arguments: Mapping[str, Any],
        results: Mapping[str, Any],
    ) -> Routed:
        """What follows the result: what to say, the slots it fills, and whether the skill goes on."""
        data = result.data
        if not result.ok:
            error = result.error or "the tool reported a failure"
            said = Say(step.on_error or self.responses.tool_failed, {"error": error})
            return Routed("failed", (said,), data=data)
        empty_list = step.not_found_when_empty and not result.data.get(step.not_found_when_empty)
        false_flag = step.not_found_when_false and result.data.get(step.not_found_when_false) is False
        if empty_list or false_flag:
            if not step.on_not_found:
                return Routed("not_found", data=data)
            variables = templating.variables(slots, arguments, results, list_format=step.list_format)
            return Routed("not_found", (Say(step.on_not_found, variables),), data=data)
        fills = {slot: result.data.get(key) for slot, key in step.fills.items()}
        if not step.on_success:
            return Routed(None, (), fills, data)
        variables = templating.variables({**slots, **fills}, arguments, results, list_format=step.list_format)
        return Routed(None, (Say(step.on_success, variables),), fills, data)

    def failure(self, scope: Scope, step: Step, exc: Exception) -> Run:
        skill, tool = scope.skill, step.execute_tool
        if isinstance(exc, SignInRequiredError):
            raise exc  # nothing was sent; the action shows the sign-in link, the skill resumes after
        if isinstance(exc, ToolNotFoundError):
            log.error(
                "REFUSED: tool %r of skill %r resolves to neither a local function nor an MCP tool "
                "(%s); nothing was run (conversation %s)",
                tool,
                skill.id,
                exc,
                scope.turn.conversation_id,
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
