"""``remembered``, when a new request comes: its one call run unasked under a permission the person gave.

A new request's run that gathered exactly one call, on one line, runs that call unasked, once, with a
key of its own, from its step, when the gate finds a permission of the person's that covers it
(:class:`~mcp_bridge.confirmation.gate.RunPermitted`), every argument outside the permission's scope is
in the signed message that started the run (:func:`_not_sent`: a run under a permission writes only
what the person sent), and the record lets that message start it (the permission still stands, the
message started nothing yet: :meth:`mcp_bridge.confirmation.permissions.Permissions.use`). Otherwise
the call is asked about like any other, and a permission that would have covered it but no longer
stands (withdrawn, expired) is audited as not used, with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mcp_bridge.confirmation import asking, forms, planner
from mcp_bridge.confirmation.asking import Planned
from mcp_bridge.confirmation.decisions import Run, Say, Scope
from mcp_bridge.confirmation.gate import MayBePermitted, RunPermitted
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.skills.files import ResultArgument, SlotArgument

__all__ = ["run_permitted"]


async def run_permitted(parts: Parts, scope: Scope, one: Planned) -> Run | None:
    """The run of ``one`` (a new request's one gathered call) under a permission, or None when no
    permission lets it run unasked (it is asked about like any other call)."""
    skill, turn = scope.skill, scope.turn
    question = asking.question_of(
        skill, [one], turn, forms.ONE_CALL, now=parts.clock(), asked_before=None, meta=parts.meta_slots
    )
    standing = await parts.permissions.standing(turn)
    verdict = None
    if standing:
        consent = MayBePermitted(standing, turn.user, parts.clock(), question)
        verdict = await parts.gate.verdict(
            skill, one.step.execute_tool, one.resolved, one.arguments, consent, scope.context
        )
    if not isinstance(verdict, RunPermitted):
        await _permission_ended(parts, scope, one)
        return None
    permission, question = verdict.permission, verdict.question
    why = _not_sent(one, permission.scope, turn.text) or await parts.permissions.use(permission, turn)
    if why is not None:
        parts.audit.record_question(
            turn.conversation_id,
            question,
            question.first,
            "permission_not_used",
            why,
            permission=permission.id,
        )
        return None
    parts.audit.record_question(
        turn.conversation_id, question, question.first, "permission_used", None, permission=permission.id
    )
    then = scope.with_turn(replace(turn, slots=one.slots))
    ran = await planner.run_steps(parts, then, one.index, verdict)
    run = await forms.asked(parts, then, ran, None)
    used = Say(parts.responses.permission_used, parts.permissions.variables(permission))
    return replace(run, say=(*run.say, used))


async def _permission_ended(parts: Parts, scope: Scope, one: Planned) -> None:
    """A permission that no longer stands but would have covered the call is audited
    (``permission_not_used``, with why: withdrawn or expired): the call is asked about, and the trail
    says why it did not run unasked."""
    skill, turn = scope.skill, scope.turn
    for permission, why in await parts.permissions.ended(turn):
        question = asking.question_of(
            skill, [one], turn, forms.ONE_CALL, now=parts.clock(), asked_before=None
        )
        consent = MayBePermitted(
            [replace(permission, expires_at=float("inf"))], turn.user, permission.granted_at, question
        )
        verdict = await parts.gate.verdict(
            skill, one.step.execute_tool, one.resolved, one.arguments, consent, scope.context
        )
        if isinstance(verdict, RunPermitted):
            parts.audit.record_question(
                turn.conversation_id,
                question,
                question.first,
                "permission_not_used",
                f"the permission was {why}",
                permission=permission.id,
            )
            return


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
