"""The executor's plain data: a :class:`Turn` in, a :class:`Decision` out, and its settings.

The Rasa adapter (:mod:`mcp_bridge.action_server.adapter`) makes a :class:`Turn` of the tracker and applies a
:class:`Decision`'s responses (:class:`Say`) and slots; :class:`ConfirmationPolicy` (and the Rasa
contract's one catalogue of responses, :class:`mcp_bridge.contract.Responses`) configure the executor.
They live here, beneath the executor and its rooms, so that each room can use them.

:class:`Scope` is what one entry point's runs share: the skill, the turn and the context every call
carries, built once per entry point. :class:`Run` is what running a skill from one step came to; the
rooms pass it between them, and the entry point turns it into the turn's one :class:`Decision`
(:meth:`Run.decision`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_bridge.contract import AFFIRM_INTENT, DENY_INTENT, PENDING_SLOT
from mcp_bridge.question import Question
from mcp_bridge.record.store import Message
from mcp_bridge.skills.files import Skill
from mcp_bridge.tools.context import CallContext

__all__ = ["ConfirmationPolicy", "Decision", "Outcome", "Run", "Say", "Scope", "Turn", "ended"]

# Outcomes after which a question is pending.
_WAITING = ("pending", "refused")


@dataclass(frozen=True)
class Turn:
    """What the executor needs to know about the conversation at this turn."""

    conversation_id: str
    slots: Mapping[str, Any]
    # How many messages the person has sent so far; binds a "yes" to the question just before it.
    user_turn: int
    intent: str | None = None
    intent_confidence: float = 1.0
    intent_ranking: Mapping[str, float] = field(default_factory=dict)
    # What the person just typed (or the button payload they sent).
    text: str = ""
    # True when this action runs in answer to a new message; False when the confirmation loop
    # resumes after another action (the question just asked, or an interruption the bot handled).
    new_message: bool = True
    # True when the confirmation loop is the conversation's active loop: a pending question is
    # being answered or was interrupted. A pending question without it was left behind.
    loop_active: bool = False
    # Who sent the message, as the channel authenticated and signed it ("socketio:...", "rest:...");
    # None when no channel vouches for anyone. A question is sealed to it, and only its answers count.
    user: str | None = None
    # When the channel received the message (its clock, seconds), from its signature; None unsigned.
    # An answer must be newer than the message its question was asked in.
    said_at: float | None = None
    # Why no channel vouches for the message (no signature where one is required, or one that does
    # not hold: mcp_bridge.channels.proof); None when one does, or none is required. Such a message
    # starts nothing and answers nothing.
    unvouched: str | None = None
    # The input channel of the latest message, as Rasa names it ("cmdline" for rasa shell).
    input_channel: str | None = None
    # The message's id in the action server's record (mcp_bridge.record.store.Message): the digest of
    # its channel's signature; unsigned (development), Rasa's id for it; after a sign-in, the resume's.
    # None: a message nothing vouches for, which the record never uses.
    message_id: str | None = None

    def message(self) -> Message | None:
        """The turn's message as the record knows it (None: nothing vouches for it)."""
        return Message(self.message_id, self.user, self.said_at) if self.message_id else None


@dataclass(frozen=True)
class Scope:
    """What one entry point's runs share: the skill, the turn, and the context every call of it carries
    (its conversation, the person it is made as, the skill), built once per entry point."""

    skill: Skill
    turn: Turn
    context: CallContext

    @classmethod
    def of(cls, skill: Skill, turn: Turn) -> Scope:
        """The scope of ``skill`` in ``turn``: its calls are made as the turn's person (a server that acts
        as the person is called as them, and as nobody when the channel names nobody)."""
        context = CallContext(conversation_id=turn.conversation_id, person=turn.user, skill=skill.id)
        return cls(skill, turn, context)

    def with_turn(self, turn: Turn) -> Scope:
        """The same skill and context, with the turn's slots (or person) as ``turn`` has them."""
        return Scope(self.skill, turn, self.context)


@dataclass(frozen=True)
class Say:
    response: str
    variables: Mapping[str, Any] = field(default_factory=dict)
    # A question's answers (mcp_bridge.contract.YES_NO_BUTTONS and the like): buttons where the channel
    # shows them, words to type where it does not (mcp_bridge.action_server.adapter). Nothing else has any.
    buttons: tuple[Mapping[str, str], ...] = ()


Outcome = Literal[
    "pending",  # a question is waiting for the person's answer
    "done",  # the skill ran to its end
    "cancelled",  # the person said no; nothing was called
    "handed_back",  # the message was not an answer; the bot handles it, the question waits
    "nothing_pending",
    "too_long",  # the message was over the reader's limit: refused unread, nothing pending or called
    "too_many_items",  # a for_each list over its max_items (mcp_bridge.skills.files): nothing ran
    "rejected",  # the pending confirmation did not hold; nothing was called
    "refused",  # an answer from someone other than the person asked; nothing called, the question waits
    "unvouched",  # a request no channel vouches for (mcp_bridge.channels.proof); nothing ran
    "failed",
    "not_found",
    "unavailable",
    "not_configured",
    "missing_argument",
    "awaiting_approval",  # confirmed, and held for a second approver; nothing called yet
]


@dataclass(frozen=True)
class Decision:
    """What the executor decided for one turn: built once, at the end, and not changed after."""

    outcome: Outcome
    say: list[Say] = field(default_factory=list)
    # slot name -> new value (None clears it)
    slots: dict[str, Any] = field(default_factory=dict)

    @property
    def waiting(self) -> bool:
        """A question is pending after this decision (the confirmation loop stays active)."""
        return self.outcome in _WAITING


@dataclass(frozen=True)
class ConfirmationPolicy:
    # A "yes" later than this asks again instead of writing.
    ttl_seconds: float = 300.0
    # The NLU's second opinion: a "yes" counts only at or above this confidence ...
    min_confidence: float = 0.6
    # ... and only when "no" is not within this margin of it.
    deny_margin: float = 0.25
    affirm_intent: str = AFFIRM_INTENT
    deny_intent: str = DENY_INTENT

    def late(self, asked_at: float, now: float) -> bool:
        """A question asked at ``asked_at`` is past its lifetime ``now``."""
        return now - asked_at > self.ttl_seconds


@dataclass(frozen=True)
class Run:
    """What running a skill from one step came to: all it said and set, and the question it ended on."""

    outcome: Outcome
    say: tuple[Say, ...] = ()
    slots: Mapping[str, Any] = field(default_factory=dict)
    asked: Question | None = None

    @property
    def waiting(self) -> bool:
        return self.outcome in _WAITING

    def decision(
        self,
        skill: Skill,
        *,
        said: Sequence[Say] = (),
        slots: Mapping[str, Any] | None = None,
        owns_question: bool = True,
        then: Mapping[str, Any] | None = None,
    ) -> Decision:
        """An entry point's one decision: what it ``said`` and set (``slots``) first, then the run's, then
        ``then``. A run that ends without a question ends the skill (its question and reset slots
        cleared) unless it interrupted a pending question (``owns_question`` false), which stays."""
        ended_ = ended(skill) if owns_question and not self.waiting else {}
        return Decision(
            self.outcome, [*said, *self.say], {**(slots or {}), **self.slots, **ended_, **(then or {})}
        )


def ended(skill: Skill | None) -> dict[str, Any]:
    """The slots that end a skill: no question pending, and the skill's reset slots cleared."""
    resets = skill.reset_slots if skill is not None else ()
    return {PENDING_SLOT: None, **{slot: None for slot in resets}}
