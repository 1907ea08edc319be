"""``second_approver``, in the conversation: a call the person confirmed, held for its approver.

Where the gate says a yes is not enough (:class:`~mcp_bridge.confirmation.gate.Hold`), the confirmed
call (its question, narrowed to it, sealed) waits in the approvals store for a person with the role,
never the requester (:mod:`mcp_bridge.approvals.second_approver`), and the requester is told so. It runs
only when the conversation is told it was approved in time (:mod:`mcp_bridge.confirmation.release`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Outcome, Say, Scope
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.question import Question
from mcp_bridge.skills.files import RequiresApproval

__all__ = ["hold"]


async def hold(
    parts: Parts, scope: Scope, approver: RequiresApproval, question: Question, context: Mapping[str, Any]
) -> tuple[Outcome, Say]:
    """The confirmed call (``question``, narrowed to it) held for ``approver``, with the slots it was
    planned with (the conversation's and its ``context``); the outcome, and what the requester hears."""
    turn, call = scope.turn, question.first
    slots = {**turn.slots, **context}
    variables = templating.variables(slots, call.arguments, tool=call.tool)
    request = None
    if parts.approvals is not None:
        sealed = question.sealed(parts.seal, turn.conversation_id)
        request = await parts.approvals.hold(approver, question, sealed, turn.conversation_id, slots)
    if request is None:
        return "rejected", Say(parts.responses.approval_unavailable, variables)
    variables |= {"approval_role": approver.role, "approval_expires_after": approver.expires_after}
    return "awaiting_approval", Say(parts.responses.approval_waiting, variables)
