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

The previous release sealed each call on its own (a flat slot for one call, ``{"calls": [...]}`` for
several); :func:`open_question` still opens those, so a question asked before an upgrade is
answered after it.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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


@dataclass(frozen=True)
class Question:
    """The calls the person is asked about, in the order they are numbered, and who was asked when."""

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
            self.skill, (call,), self.listed, self.asked_at, self.user_turn, self.user, self.asked_after
        )


@dataclass(frozen=True)
class Forged:
    """A value in the question's slot that does not open: edited, forged, from another
    conversation, or unreadable. ``question`` is what it claims, when it can be read (for the audit)."""

    question: Question | None


def open_question(
    value: Any, seal: Seal, conversation_id: str, *, narrowed: bool = False
) -> Question | Forged | None:
    """The question a slot (or a store row) holds: the question, :class:`Forged`, or None when it
    holds nothing. ``narrowed``: a store row's question, narrowed to the one call it holds (in the
    previous release's records, one call of a list then opens on its own)."""
    if value is None:
        return None
    if isinstance(value, Mapping) and "v" in value:
        record = seal.open(KIND, value, conversation_id)
        question = _parse(record if record is not None else _unsealed(value))
        if record is None or question is None or not _digests_hold(question):
            return Forged(question)
        return question
    return _previous_release(value, seal, conversation_id, narrowed=narrowed)


def claimed(value: Any) -> Question | None:
    """What a sealed question says, *without* opening it: for an audit entry written where the seal's
    key is not at hand (the approval page). Never for deciding anything."""
    if isinstance(value, Mapping) and "v" in value:
        return _parse(_unsealed(value))
    opened = _previous_release(value, Seal(b"claimed, not verified"), "")
    return opened.question if isinstance(opened, Forged) else opened


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
            skill=_text(record["skill"]),
            calls=tuple(_call(raw) for raw in calls),
            listed=_flag(record["listed"]),
            asked_at=_number(record["asked_at"]),
            user_turn=_whole(record["user_turn"]),
            user=_optional_text(record.get("user")),
            asked_after=_optional_number(record.get("asked_after")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _call(raw: Any) -> AskedCall:
    if not isinstance(raw, Mapping):
        raise TypeError("not a call")
    arguments, context = raw["arguments"], raw.get("context") or {}
    if not isinstance(arguments, dict) or not isinstance(context, dict):
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


# -- the previous release's slots: one sealed record per call ----------------------------------

# The fields the previous release signed only when set (a record from before they existed still held).
_SIGNED_ONLY_WHEN_SET: dict[str, Any] = {
    "user": None,
    "asked_after": None,
    "batch": "",
    "place": 0,
    "count": 0,
    "context": {},
}
_PREVIOUS_FIELDS = (
    "id",
    "skill",
    "tool",
    "step",
    "source",
    "arguments",
    "digest",
    "asked_at",
    "user_turn",
    "key",
    "user",
    "asked_after",
    "batch",
    "place",
    "count",
    "context",
)


def _previous_release(
    value: Any, seal: Seal, conversation_id: str, *, narrowed: bool = False
) -> Question | Forged:
    """A question the previous release left in a slot or a store row: one call's record on its own,
    or ``{"calls": [...]}``, each call signed field by field. It opens only when every call's
    signature and digest hold and together they are one question (one batch, each in its place,
    asked of one person in one turn)."""
    if isinstance(value, Mapping) and "calls" in value:
        raw_calls = value["calls"]
        if not isinstance(raw_calls, list) or len(value) != 1 or not raw_calls:
            return Forged(None)
    else:
        raw_calls = [value]
    records = [_previous_record(raw) for raw in raw_calls]
    if any(record is None for record in records):
        return Forged(None)
    checked = [record for record in records if record is not None]
    first = checked[0]
    listed = first["count"] > 0
    question = Question(
        skill=first["skill"],
        calls=tuple(
            AskedCall(
                id=r["id"],
                tool=r["tool"],
                step=r["step"],
                source=r["source"],
                arguments=r["arguments"],
                digest=r["digest"],
                key=r["key"],
                context=r["context"],
            )
            for r in checked
        ),
        listed=listed,
        asked_at=first["asked_at"],
        user_turn=first["user_turn"],
        user=first["user"],
        asked_after=first["asked_after"],
    )
    if not all(_previous_signature_holds(record, seal, conversation_id) for record in checked):
        return Forged(question)
    if not _digests_hold(question):
        return Forged(question)
    if len(checked) == 1 and (narrowed or not listed):
        return question
    one_question = all(
        record["batch"] == first["batch"]
        and record["batch"]
        and record["count"] == len(checked)
        and record["place"] == place
        and (record["skill"], record["user"], record["user_turn"], record["asked_at"])
        == (first["skill"], first["user"], first["user_turn"], first["asked_at"])
        for place, record in enumerate(checked, start=1)
    )
    return question if one_question else Forged(question)


def _previous_record(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    try:
        arguments, context = raw["arguments"], raw.get("context") or {}
        if not isinstance(arguments, dict) or not isinstance(context, dict):
            return None
        return {
            "id": str(raw["id"]),
            "skill": str(raw["skill"]),
            "tool": str(raw["tool"]),
            "step": int(raw["step"]),
            "source": str(raw["source"]),
            "arguments": dict(arguments),
            "digest": str(raw["digest"]),
            "asked_at": float(raw["asked_at"]),
            "user_turn": int(raw["user_turn"]),
            "key": str(raw.get("key") or raw["id"]),
            "user": _optional_text(raw.get("user")),
            "asked_after": _optional_number(raw.get("asked_after")),
            "batch": str(raw.get("batch") or ""),
            "place": int(raw.get("place") or 0),
            "count": int(raw.get("count") or 0),
            "context": dict(context),
            "mac": str(raw.get("mac", "")),
        }
    except (KeyError, TypeError, ValueError):
        return None


def _previous_signature_holds(record: Mapping[str, Any], seal: Seal, conversation_id: str) -> bool:
    signed = {name: record[name] for name in _PREVIOUS_FIELDS}
    for name, default in _SIGNED_ONLY_WHEN_SET.items():
        if signed[name] == default:
            del signed[name]
    return seal.verify_previous_fields(signed, record["mac"], conversation_id)
