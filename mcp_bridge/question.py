"""A question: the exact calls the person is asked to confirm, as it travels between turns.

A question asks about one or more calls. It is sealed (:mod:`mcp_bridge.sealing`, kind
``question``) into the ``pending_confirmation`` slot, so any replica can read the answer, and opened
again with the conversation's id: a question edited, forged or carried into another conversation
does not open. Everything that binds an answer to it is in the record and under the seal: the
skill, each call's tool, step, source, exact arguments and idempotency key; who was asked (the person
the channel named) and the signed time of the message it was asked in; how many messages the person
had sent. A call held for a second approver is a question of that one call, sealed the same way, in
the approvals store.

``listed`` says how it was put to the person: a numbered list (several calls, or one call of a run
that split into several lines, answered by number) or the skill's own question about one call.

Only a question this release sealed opens. What a question sealed by release 0.3.0 claims is read
(:func:`claimed`, by :func:`mcp_bridge.release_0_3.question_record`) for the audit entry that rejects
it, never to answer it.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_bridge.release_0_3 import question_record
from mcp_bridge.sealing import Seal, call_digest

__all__ = ["KIND", "AskedCall", "Forged", "Question", "claimed", "open_question"]

KIND = "question"


@dataclass(frozen=True)
class AskedCall:
    """One call of a question: exactly what a yes to it runs."""

    # This call's id in the audit trail (``confirmation``).
    id: str
    tool: str
    # The skill's step that makes the call.
    step: int
    # Where the tool was to be found when asked ("local", "mcp:<server>"): a yes never runs it elsewhere.
    source: str
    arguments: dict[str, Any]
    digest: str
    # The idempotency key the call carries: the id of the first question about this exact call, kept
    # when the same call is asked about again (after a crash, a late yes), so it writes once.
    key: str
    # Slot values this call was planned with that the conversation does not hold (the item a
    # ``for_each`` step bound, what its lookup filled, an edit of this call alone).
    context: dict[str, Any] = field(default_factory=dict)
    # The slot values its MCP server's ``meta_map.from_slots`` sends in ``_meta``, as they were when the
    # person was asked: a yes sends these, never what the slots hold by then.
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    """The calls the person is asked about, in the order they are numbered, and who was asked when."""

    # Its id in the action server's record.
    id: str
    skill: str
    calls: tuple[AskedCall, ...]
    # Put as a numbered list (answered per call), or as the skill's own question about one call.
    listed: bool
    asked_at: float
    # How many messages the person had sent when asked; binds a "yes" to the next one.
    user_turn: int
    # Who was asked, as the channel named them ("socketio:...", "rest:..."); None: nobody named.
    user: str | None
    # When the channel received the message the question was asked in (its signature's time); None
    # when that message was unsigned. Only an answer the channel received later counts.
    asked_after: float | None
    # The call a one-call question asks about (the first of a list).
    first: AskedCall = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError("a question asks about at least one call")
        object.__setattr__(self, "first", self.calls[0])

    def sealed(self, seal: Seal, conversation_id: str) -> dict[str, Any]:
        """The slot's value."""
        record = {
            "id": self.id,
            "skill": self.skill,
            "calls": [
                {
                    "id": call.id,
                    "tool": call.tool,
                    "step": call.step,
                    "source": call.source,
                    "arguments": call.arguments,
                    "digest": call.digest,
                    "key": call.key,
                    "context": call.context,
                    "meta": call.meta,
                }
                for call in self.calls
            ],
            "listed": self.listed,
            "asked_at": self.asked_at,
            "user_turn": self.user_turn,
            "user": self.user,
            "asked_after": self.asked_after,
        }
        return seal.seal(KIND, record, conversation_id)

    def only(self, call: AskedCall) -> Question:
        """This question narrowed to one of its calls (a call held for its approver)."""
        return Question(
            self.id,
            self.skill,
            (call,),
            self.listed,
            self.asked_at,
            self.user_turn,
            self.user,
            self.asked_after,
        )


@dataclass(frozen=True)
class Forged:
    """A value in the question's slot that does not open: edited, forged, from another
    conversation, or unreadable. ``question`` is what it claims, when it can be read (for the audit)."""

    question: Question | None


def open_question(value: Any, seal: Seal, conversation_id: str) -> Question | Forged | None:
    """The question a sealed value holds: the question, :class:`Forged`, or None when it holds
    nothing."""
    if value is None:
        return None
    record = seal.open(KIND, value, conversation_id)
    question = _parse(record if record is not None else _unsealed(value))
    if record is None or question is None or not _digests_hold(question):
        return Forged(question)
    return question


def claimed(value: Any) -> Question | None:
    """What a sealed question says, *without* opening it: for an audit entry written where the seal's
    key is not at hand (the approval page, a question no record holds). Never for deciding anything."""
    if not isinstance(value, Mapping):
        return None
    return _parse(question_record(_unsealed(value)))


def _unsealed(value: Mapping[str, Any]) -> dict[str, Any]:
    return {name: item for name, item in value.items() if name not in ("v", "kind", "kid", "mac")}


def _digests_hold(question: Question) -> bool:
    return all(
        hmac.compare_digest(call.digest, call_digest(question.skill, call.tool, call.source, call.arguments))
        for call in question.calls
    )


def _parse(record: Any) -> Question | None:
    if not isinstance(record, Mapping):
        return None
    try:
        calls = record["calls"]
        if not isinstance(calls, list) or not calls:
            return None
        return Question(
            id=_text(record["id"]),
            skill=_text(record["skill"]),
            calls=tuple(_call(raw) for raw in calls),
            listed=_flag(record["listed"]),
            asked_at=_number(record["asked_at"]),
            user_turn=_whole(record["user_turn"]),
            user=_optional_text(record["user"]),
            asked_after=_optional_number(record["asked_after"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _call(raw: Any) -> AskedCall:
    if not isinstance(raw, Mapping):
        raise TypeError("not a call")
    arguments, context, meta = raw["arguments"], raw["context"], raw["meta"]
    if not isinstance(arguments, dict) or not isinstance(context, dict) or not isinstance(meta, dict):
        raise TypeError("not a mapping")
    return AskedCall(
        id=_text(raw["id"]),
        tool=_text(raw["tool"]),
        step=_whole(raw["step"]),
        source=_text(raw["source"]),
        arguments=dict(arguments),
        digest=_text(raw["digest"]),
        key=_text(raw["key"]),
        context=dict(context),
        meta=dict(meta),
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise TypeError("not a whole number")
    return int(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    return float(value)


def _optional_number(value: Any) -> float | None:
    return None if value is None else _number(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("not a flag")
    return value
