"""``second_approver``, in the requester's conversation: the approver's release of a held call.

The approval page tells the requester's conversation a decision
(:mod:`mcp_bridge.action_server.approval_tell`, through Rasa's API), and :func:`released` acts on it, once:

* an approved call runs once, exactly as sealed, with its question's key, as the requester (the person
  whose yes was sealed with the call, never nobody or another), only while the action server's record
  holds its question as answered in this conversation, the call as one its question asked about, held
  soon after that answer, and the gate still lets it run on an approver's release
  (:class:`~mcp_bridge.confirmation.gate.Released`); a one-call question's skill goes on after it;
* a run that was lost (its action server died) runs again, under the same key, only on a tool that
  keeps one write per key (:mod:`mcp_bridge.approvals.second_approver`'s ``lost_run``);
* a refusal or an expiry is said once; anything else (unknown, another conversation's, already run or
  told) says and changes nothing. The conversation may have moved on since, so no slot is set.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from mcp_bridge.approvals import second_approver
from mcp_bridge.approvals.second_approver import ApprovalRequest
from mcp_bridge.auth.person import SignInRequiredError
from mcp_bridge.confirmation import asking, forms, templating
from mcp_bridge.confirmation.decisions import Decision, Say, Scope, Turn
from mcp_bridge.confirmation.gate import Reject, Released, RunConfirmed
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.errors import ToolNotFoundError
from mcp_bridge.question import Question, open_question

__all__ = ["released"]

log = logging.getLogger("mcp_bridge.confirmation.executor")


async def released(parts: Parts, turn: Turn, approval_id: str) -> Decision:
    """The conversation told the decision on request ``approval_id``: what comes of it."""
    approvals = parts.approvals
    taken = await approvals.take(approval_id, turn.conversation_id) if approvals is not None else None
    request = taken.request if taken is not None else None
    if approvals is None or taken is None or request is None or taken.kind == "nothing":
        # Unknown, another conversation's, refused before it was held, already run or told: nothing to do,
        # and the attempt is audited (whoever can write a tracker can trigger this action).
        parts.audit.record(
            conversation=turn.conversation_id,
            user=turn.user,
            approval=approval_id[:64],
            decision="approval_rejected",
            result="no held call of this conversation waits for this decision (unknown, already run or told)",
        )
        return Decision("nothing_pending")
    variables = templating.variables(request.slots, request.arguments, tool=request.tool)
    if taken.kind not in ("run", "resume"):
        said = (
            parts.responses.approval_refused if taken.kind == "refused" else parts.responses.approval_expired
        )
        return Decision("cancelled", [Say(said, variables)])
    held = approvals.sealed(request, parts.seal)  # the store's call, exactly as sealed, or None
    why = await _not_held(parts, held, request) if held is not None else "its sealed call does not open"
    skill = parts.skills.get(held.skill) if held is not None and why is None else None
    # Told by the approval page, not said by anyone: a server that acts as the person is called as the
    # requester, the person whose yes was sealed with the call; never as nobody or another.
    scope = Scope.of(skill, replace(turn, slots=request.slots, user=held.user)) if held and skill else None
    bound = await asking.bind(parts, held, scope) if held is not None and scope is not None else None
    verdict = None
    if held is not None and scope is not None and bound is not None:
        one = bound[0]
        verdict = await parts.gate.verdict(
            scope.skill, one.call.tool, one.resolved, one.call.arguments, Released(held), scope.context
        )
    if held is None or scope is None or bound is None or not isinstance(verdict, RunConfirmed):
        why = why or (verdict.reason if isinstance(verdict, Reject) else "does not match a known call")
        log.warning("approval %s: the held call was not run: %s", request.id, why)
        await approvals.finish(request, f"rejected: {why}")
        if held is not None:
            parts.audit.record_question(
                turn.conversation_id, held, held.first, "rejected", why, approval=request.id
            )
        return Decision("rejected", [Say(parts.responses.confirmation_invalid)])
    (one,) = bound
    tool = None if isinstance(one.resolved, ToolNotFoundError) else one.resolved
    if taken.kind == "resume" and not second_approver.may_run_again(tool, request.attempts):
        # A lost run (its action server died) may have reached the tool: never repeated unkeyed.
        log.warning("approval %s: its run was lost; not repeated (no tool keeps its key)", request.id)
        await approvals.finish(request, "outcome unknown: its run was lost, not repeated")
        return Decision("unavailable", [Say(parts.responses.tool_outcome_unknown, variables)])
    try:
        async with approvals.leased(request):  # renewed while the run goes on: a slow tool is not lost
            run = await forms.of(held).run_confirmed(parts, scope, verdict, one)
    except SignInRequiredError:
        # The requester's sign-in is gone (disconnected, or it could not be renewed): nothing was
        # sent, and the request is done; the action shows them the link, and the skill asks anew.
        await approvals.finish(request, "not run: the requester must sign in first")
        raise
    try:
        await approvals.finish(request, run.outcome)
    except Exception:  # the store failed after the call: the person hears what the call did
        log.exception("approval %s: ran (%s), but could not be marked done", request.id, run.outcome)
    return Decision(run.outcome, list(run.say))


async def _not_held(parts: Parts, held: Question, request: ApprovalRequest) -> str | None:
    """Why the record does not hold ``held`` (a call a store row says waits for its approver) as a call
    the person confirmed in time; None when it does."""
    stored = await parts.record.question(held.id)
    if stored is None or stored.conversation_id != request.conversation_id:
        return "the action server's record holds no such question in this conversation"
    if stored.state != "answered":
        return f"its question was {stored.state}, not confirmed"
    asked = open_question(stored.sealed, parts.seal, request.conversation_id)
    calls = {call.id: call.digest for call in asked.calls} if isinstance(asked, Question) else {}
    if calls.get(held.first.id) != held.first.digest:
        return "the call is not one its question asked about"
    if stored.ended_at is None or request.created_at - stored.ended_at > parts.policy.ttl_seconds:
        return "it was held long after its question was answered"
    return None
