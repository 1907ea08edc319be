"""The answer rules: what an answer to the conversation's open question comes to. By name:

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

How an answer is read and what follows a yes depend on the question's form (the skill's own question
about one call, or a numbered list answered per call: :mod:`mcp_bridge.confirmation.forms`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from mcp_bridge.confirmation import asking, forms, planner
from mcp_bridge.confirmation.asking import Bound
from mcp_bridge.confirmation.decisions import Decision, Say, Scope, Turn, ended
from mcp_bridge.confirmation.gate import Ask, Reached
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.question import Question
from mcp_bridge.reading.answers import (
    Choices,
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
from mcp_bridge.skills.files import AllowsRemembering, SlotArgument

__all__ = [
    "answered",
    "cleared",
    "denied",
    "scope_of",
    "may_not_answer",
    "nothing_pending",
    "received_after",
    "refused",
    "rejected",
    "too_long",
]

log = logging.getLogger("mcp_bridge.confirmation.executor")

# An answer that cannot be matched to the calls it was asked about.
_NO_MATCH = "confirmation does not match a known call"
# A question asked in a turn no channel signed (the resume after a sign-in) has only the action
# server's clock: an answer the channel received more than this before it is refused as older.
CLOCK_SKEW_SECONDS = 2.0


async def answered(parts: Parts, question: Question, turn: Turn) -> Decision:
    """``only_the_persons_yes`` and ``every_other_answer``: the open ``question``, of one or more calls,
    answered by the turn's message (or the loop resumed after an interruption)."""
    scope = scope_of(parts, question, turn)
    bound = await asking.bind(parts, question, scope) if scope is not None else None
    if scope is None or bound is None:
        await parts.record.end(question.id, "rejected", reason=_NO_MATCH)
        return rejected(parts, turn, question, _NO_MATCH)
    if not turn.new_message:
        if question.user_turn == turn.user_turn:
            return Decision("pending")  # asked in this very turn
        parts.audit.record_calls(turn.conversation_id, question, "asked_again", None)
        return await _ask_again(parts, scope, question, bound, [Say(parts.responses.confirm_again)])
    # Who was asked is sealed, so it is compared only once the question opens.
    refusal = may_not_answer(turn, question)
    if refusal is not None:
        return refused(parts, turn, question, refusal)
    form, reading = forms.read(parts, question, turn)
    match reading:
        case Yes() | YesThisTime():
            # "yes, but ask me next time": a yes that keeps no permission, and says so where one could be.
            constraint = scope.skill.constraints.get(question.first.tool)
            once = (
                isinstance(reading, YesThisTime)
                and constraint is not None
                and (constraint.allows_remembering is not None)
            )
            return await _decided(parts, scope, form, question, bound, [True], once=once)
        case Grant() if (remember := await _may_remember(parts, scope, bound)) is not None:
            return await _decided(parts, scope, form, question, bound, [True], remember=remember)
        case Grant():
            reason = "a permission this call cannot be given"
        case Choices(approved=approved):
            return await _decided(parts, scope, form, question, bound, approved)
        case No():
            return await denied(parts, question, turn, scope)
        case Other():
            parts.audit.record_calls(turn.conversation_id, question, "handed_back", None)
            return Decision("handed_back")
        case TooLong():
            parts.audit.record_calls(turn.conversation_id, question, "unclear", reading.reason)
            return await _ask_again(parts, scope, question, bound, [too_long(parts, reading)])
        case EditCall():
            return await _edited_call(parts, scope, question, bound, reading)
        case Edit() | Redirect():
            slot = scope.skill.edits.get("text" if isinstance(reading, Edit) else "email")
            value = reading.text if isinstance(reading, Edit) else reading.email
            if slot is not None:
                return await _changed(parts, scope, question, slot, value)
            reason = f"an {reading.kind} this skill does not allow"
        case Unclear():
            reason = reading.reason
    if parts.policy.late(question.asked_at, parts.clock()):
        return await _expired(parts, scope, question, bound)
    parts.audit.record_calls(turn.conversation_id, question, "unclear", reason)
    return await _ask_again(parts, scope, question, bound, [Say(form.answer_again(parts.responses))])


def scope_of(parts: Parts, question: Question, turn: Turn) -> Scope | None:
    """The scope of an answer to ``question``: its skill (None when the skill is gone), and its calls made
    as the person asked, whoever sent the turn's message (someone else's answer is refused)."""
    skill = parts.skills.get(question.skill)
    return Scope.of(skill, replace(turn, user=question.user)) if skill is not None else None


async def denied(parts: Parts, question: Question, turn: Turn, scope: Scope | None) -> Decision:
    """No to the whole question: nothing is called; the person hears the skill's denial (its own
    question's), or that the calls were cancelled (a list). ``scope``: :func:`scope_of` the answer."""
    await parts.record.end(question.id, "refused", reason="the person said no")
    parts.audit.record_calls(turn.conversation_id, question, "denied", None)
    said = await forms.of(question).denial(parts, scope, question) if scope is not None else None
    skill = scope.skill if scope is not None else None
    return Decision("cancelled", [said or Say(parts.responses.confirmation_invalid)], ended(skill))


def nothing_pending(parts: Parts, turn: Turn, *, clear: bool, invalid: bool = False) -> Decision:
    """The loop ran with no question open: a yes or a no is told there is nothing to answer (or, with
    ``invalid``, that the question the tracker holds no longer matches, and nothing was saved); a
    message that is no answer is the bot's to handle."""
    if not turn.new_message:
        return Decision("nothing_pending", [], cleared(clear))
    reading = parts.reader.read(
        turn.text, NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
    )
    if isinstance(reading, TooLong):
        return Decision("too_long", [too_long(parts, reading)], cleared(clear))
    if isinstance(reading, Yes | No):
        said = parts.responses.confirmation_invalid if invalid else parts.responses.nothing_pending
        return Decision("rejected" if invalid else "nothing_pending", [Say(said)], cleared(clear))
    return Decision("handed_back")  # not an answer to anything: the bot's to handle


def may_not_answer(turn: Turn, question: Question) -> str | None:
    """Why this turn's message cannot answer ``question`` (only the person asked, in a message their
    channel vouches for, received after the question was asked); None when it can."""
    if turn.unvouched is not None:
        return f"no channel vouches for the answer: {turn.unvouched}"
    if question.user != turn.user:
        return "answered by someone other than the person asked"
    if turn.new_message and not received_after(turn, question):
        return "a message the channel received before the question was asked"
    return None


def received_after(turn: Turn, question: Question) -> bool:
    """The turn's message reached its channel after the question was asked, so it is no earlier
    message replayed into a later question: later than the signed message the question was asked
    in, or, when that one was unsigned, than the question itself (on the action server's clock)."""
    if question.asked_after is not None:
        return turn.said_at is not None and turn.said_at > question.asked_after
    if turn.said_at is not None:
        return turn.said_at > question.asked_at - CLOCK_SKEW_SECONDS
    return True


def refused(parts: Parts, turn: Turn, question: Question, reason: str) -> Decision:
    """An answer :func:`may_not_answer` refuses: nothing runs, and the question stays for its person."""
    log.warning(
        "conversation %s: an answer to confirmation %s was refused (%s); nothing was run",
        turn.conversation_id,
        question.first.id,
        reason,
    )
    parts.audit.record_question(
        turn.conversation_id, question, question.first, "refused", reason, answered_by=turn.user
    )
    said = parts.responses.not_vouched if turn.unvouched is not None else parts.responses.confirmation_invalid
    return Decision("refused", [Say(said)])


def rejected(parts: Parts, turn: Turn, question: Question, reason: str) -> Decision:
    """A question that does not hold: nothing runs, and it is dropped (ended in the record by its
    caller where it was still open)."""
    log.warning(
        "conversation %s: confirmation %s rejected (%s); nothing was run",
        turn.conversation_id,
        question.first.id,
        reason,
    )
    for call in question.calls[1:]:
        parts.audit.record_question(turn.conversation_id, question, call, "rejected", reason)
    parts.audit.record_question(turn.conversation_id, question, question.first, "rejected", reason)
    return Decision("rejected", [Say(parts.responses.confirmation_invalid)], ended(None))


def too_long(parts: Parts, reading: TooLong) -> Say:
    return Say(parts.responses.message_too_long, {"limit": reading.limit})


def cleared(clear: bool) -> dict[str, None]:
    """The question slots cleared (both: neither copy holds an open question any more)."""
    return {PENDING_SLOT: None, ELICITATION_SLOT: None} if clear else {}


# -- the rules' steps ---------------------------------------------------------------------------


async def _may_remember(parts: Parts, scope: Scope, bound: Sequence[Bound]) -> AllowsRemembering | None:
    """What a yes to the one call of ``bound`` may also keep as a permission (the gate's
    ``remembered``), or None."""
    if len(bound) != 1:
        return None
    (one,) = bound
    verdict = await parts.gate.verdict(
        scope.skill, one.call.tool, one.resolved, one.call.arguments, Reached(), scope.context
    )
    return verdict.remember if isinstance(verdict, Ask) else None


async def _decided(
    parts: Parts,
    scope: Scope,
    form: forms.Form,
    question: Question,
    bound: Sequence[Bound],
    approved: Sequence[bool],
    *,
    remember: AllowsRemembering | None = None,
    once: bool = False,
) -> Decision:
    """A yes or a no for each call: each approved call runs exactly as sealed, each refused one never.
    ``remember``: the yes also gives a permission; ``once``: it refused one, and hears that it will
    be asked again."""
    turn = scope.turn
    if not any(approved):  # a no to every call cancels, late or not: nothing runs
        await parts.record.end(question.id, "refused", reason="no to every call")
        parts.audit.record_calls(turn.conversation_id, question, "denied", None)
        return Decision("cancelled", [Say(parts.responses.calls_cancelled)], ended(scope.skill))
    if parts.policy.late(question.asked_at, parts.clock()):
        return await _expired(parts, scope, question, bound)
    if turn.user_turn != question.user_turn + 1:
        parts.audit.record_calls(turn.conversation_id, question, "asked_again", None)
        return await _ask_again(parts, scope, question, bound, [Say(parts.responses.confirm_again)])
    # only_the_persons_yes: the record's open question ends answered, once, by this message (two
    # replicas given the same yes run it once; a message that answered another question answers none).
    not_ended = await parts.record.end(question.id, "answered", message=turn.message())
    if not_ended is not None:
        return rejected(parts, turn, question, not_ended.reason)
    return await form.yes(parts, scope, question, bound, approved, remember, once)


async def _expired(parts: Parts, scope: Scope, question: Question, bound: Sequence[Bound]) -> Decision:
    """An answer after the question expired: the person hears that it expired and nothing was
    written, the audit says so, and the same calls are asked about again (they keep their keys)."""
    await parts.record.end(question.id, "expired", reason="answered after its lifetime")
    parts.audit.record_calls(scope.turn.conversation_id, question, "expired", None)
    return await _ask_again(parts, scope, question, bound, [Say(parts.responses.confirmation_expired)])


async def _changed(parts: Parts, scope: Scope, old: Question, slot: str, value: str) -> Decision:
    """An edit or a redirect of the skill's own question: the skill runs again with ``slot``
    changed and asks anew.

    The new arguments are checked like the first ones. If the run does not end in a new
    question (an unknown contact, a text the tool will not take), the person hears why and the old
    question is asked again, unchanged.
    """
    turn = scope.turn
    changed = scope.with_turn(replace(turn, slots={**turn.slots, slot: value}))
    # An edit that changes nothing is the same call: it keeps its key (asked_before).
    run = await forms.asked(parts, changed, await planner.run_steps(parts, changed, 0), old)
    if run.waiting and run.asked is not None:
        new = run.asked.first
        parts.audit.record_question(
            turn.conversation_id,
            old,
            old.first,
            "edited",
            f"{slot} changed",
            new_digest=new.digest,
            new_confirmation=new.id,
        )
        return run.decision(scope.skill, then={slot: value})
    parts.audit.record_question(
        turn.conversation_id, old, old.first, "unclear", f"the change of {slot} was refused"
    )
    bound = await asking.bind(parts, old, scope)
    assert bound is not None
    return await _ask_again(parts, scope, old, bound, run.say)


async def _edited_call(
    parts: Parts, scope: Scope, question: Question, bound: Sequence[Bound], edit: EditCall
) -> Decision:
    """ "change 2 to: ...": that call's text argument changes, and the list is asked about again."""
    skill, turn = scope.skill, scope.turn
    slot = skill.edits.get("text")
    old = question.calls[edit.place - 1]
    step = bound[edit.place - 1].step
    changed = [
        name
        for name, source in step.arguments.items()
        if slot is not None and isinstance(source, SlotArgument) and source.slot == slot
    ]
    if slot is None or not changed:
        parts.audit.record_calls(
            turn.conversation_id, question, "unclear", "an edit this call does not allow"
        )
        return await _ask_again(parts, scope, question, bound, [Say(parts.responses.answer_each_call)])
    planned = asking.replanned(bound)
    one = planned[edit.place - 1]
    planned[edit.place - 1] = replace(
        one,
        arguments={**one.arguments, **dict.fromkeys(changed, edit.text)},
        context={**one.context, slot: edit.text},
    )
    run = await asking.put(parts, scope, planned, forms.NUMBERED, question)
    if not run.waiting or run.asked is None:
        parts.audit.record_calls(
            turn.conversation_id, question, "unclear", f"the change of {slot} was refused"
        )
        return await _ask_again(parts, scope, question, bound, run.say)
    new = run.asked.calls[edit.place - 1]
    parts.audit.record_question(
        turn.conversation_id,
        question,
        old,
        "edited",
        f"{slot} changed",
        new_digest=new.digest,
        new_confirmation=new.id,
    )
    return Decision(run.outcome, list(run.say), dict(run.slots))


async def _ask_again(
    parts: Parts, scope: Scope, question: Question, bound: Sequence[Bound], said: Sequence[Say]
) -> Decision:
    """Ask the question again after ``said``, bound to this turn (a new id and seal), of the same
    person. The same calls keep their idempotency keys, so confirming again cannot write twice."""
    run = await forms.of(question).ask_again(parts, scope, question, bound)
    if not run.waiting:
        # Not asked again (its arguments went missing or are turned away now): it ends unanswered here,
        # as the tracker is told.
        await parts.record.end(question.id, "dropped", reason=f"not asked again: {run.outcome}")
    return run.decision(scope.skill, said=said, slots={PENDING_SLOT: None})
