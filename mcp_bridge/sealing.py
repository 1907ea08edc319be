"""Pending confirmations, sealed: the state a question leaves in the tracker, and its signature.

The tracker carries the pending call between turns, so any replica can serve the "yes". Whatever
comes back from the tracker is untrusted: :class:`Seal` signs every field of a
:class:`PendingConfirmation` together with the conversation id (HMAC-SHA256, keyed with the action
servers' shared secret), and a value built or edited outside the action server, or replayed in
another conversation, fails :meth:`Seal.verify`. Among the signed fields is who was asked
(``user``: the person the channel authenticated, when it names one), so that whoever answers can be
compared with it and a changed name fails the signature.

A question may ask about several calls at once (a numbered list). Each call is still its own
:class:`PendingConfirmation`, with its own signature and idempotency key; the calls of one question
share a ``batch`` id and know their ``place`` in it and how many there are (``count``), all signed,
so a call cannot be dropped from a question, moved in it, or carried into another. The slot then holds
``{"calls": [...]}`` (a list of one, when one call of several lines of a run is asked about); a
question about one call keeps the slot as it always was.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingConfirmation:
    """The exact call a question asks about, as it travels in the ``pending_confirmation`` slot."""

    id: str
    skill: str
    tool: str
    step: int
    source: str
    arguments: dict[str, Any]
    digest: str
    asked_at: float
    # How many messages the person had sent when asked; binds a "yes" to the next one.
    user_turn: int
    # The idempotency key the call will carry: the id of the first question about this exact call,
    # kept when the same call is asked about again (after a crash, a late yes), so it writes once.
    key: str = ""
    # Who was asked, as the channel named them ("socketio:...", "rest:..."); None: the channel names
    # nobody. Only an answer from the same name counts.
    user: str | None = None
    # When the channel received the message this question was asked in (its signature's time);
    # None when it was unsigned. Only an answer the channel received later counts.
    asked_after: float | None = None
    # Several calls asked about together: the question's id, this call's place (1-based) and how many
    # calls it asks about. Empty and 0 for a question about one call.
    batch: str = ""
    place: int = 0
    count: int = 0
    # Slot values this call was planned with that the conversation does not hold (the item a
    # ``for_each`` step bound, what its lookup filled, an edit of this call alone): what its
    # arguments were made from, and what the responses about it show.
    context: dict[str, Any] = field(default_factory=dict)
    mac: str = ""

    @property
    def in_batch(self) -> bool:
        return self.count > 0

    def to_slot(self) -> dict[str, Any]:
        # A call asked about on its own travels exactly as before questions could hold several.
        slot = asdict(self)
        for name in (*_BATCH_FIELDS, "asked_after"):
            if slot[name] == _SIGNED_ONLY_WHEN_SET[name]:
                del slot[name]
        return slot

    @classmethod
    def from_slot(cls, value: Any) -> PendingConfirmation | None:
        """Parse the slot; anything malformed is treated as no confirmation at all."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(
                id=str(value["id"]),
                skill=str(value["skill"]),
                tool=str(value["tool"]),
                step=int(value["step"]),
                source=str(value["source"]),
                arguments=dict(value["arguments"]),
                digest=str(value["digest"]),
                asked_at=float(value["asked_at"]),
                user_turn=int(value["user_turn"]),
                key=str(value.get("key") or value["id"]),
                user=_optional_text(value.get("user")),
                asked_after=_optional_number(value.get("asked_after")),
                batch=str(value.get("batch") or ""),
                place=int(value.get("place") or 0),
                count=int(value.get("count") or 0),
                context=dict(value.get("context") or {}),
                mac=str(value.get("mac", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None


# The calls one question asks about, in the order they are numbered.
Question = tuple[PendingConfirmation, ...]


def question_to_slot(calls: Question) -> dict[str, Any]:
    """The slot's value: one call as it always was, several as ``{"calls": [...]}``."""
    if len(calls) == 1 and not calls[0].in_batch:
        return calls[0].to_slot()
    return {"calls": [call.to_slot() for call in calls]}


def question_from_slot(value: Any) -> Question | None:
    """Parse the slot; anything malformed (a call of it included) is no question at all."""
    if isinstance(value, dict) and "calls" in value:
        raw_calls = value["calls"]
        if not isinstance(raw_calls, list) or len(value) != 1 or not raw_calls:
            return None
        calls = tuple(PendingConfirmation.from_slot(raw) for raw in raw_calls)
        parsed = tuple(call for call in calls if call is not None)
        return parsed if len(parsed) == len(calls) else None
    single = PendingConfirmation.from_slot(value)
    return None if single is None or single.in_batch else (single,)


def _optional_number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    return float(value)


def _optional_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError("not a string")


def call_digest(skill: str, tool: str, source: str, arguments: Mapping[str, Any]) -> str:
    """A digest of exactly the call a confirmation authorises (for the audit trail and binding)."""
    canonical = _canonical({"skill": skill, "tool": tool, "source": source, "arguments": arguments})
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _canonical(value: Any) -> str:
    # ASCII escapes: any text a person can type, unpaired surrogates included, has one encoding.
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


_BATCH_FIELDS = ("batch", "place", "count", "context")
_SIGNED_ONLY_WHEN_SET: dict[str, Any] = {
    "user": None,
    "asked_after": None,
    "batch": "",
    "place": 0,
    "count": 0,
    "context": {},
}


class Seal:
    """Signs and verifies pending confirmations with a secret every replica shares."""

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("a confirmation secret must not be empty")
        self._secret = secret

    @classmethod
    def ephemeral(cls, key: bytes | None = None) -> Seal:
        """A key for this process (and its workers, which pass ``key`` on) only: a question asked
        before a restart, or by another replica, cannot be confirmed after it. For tests and trials."""
        whose = "drawn at start, shared by this server's workers only" if key else "for this process only"
        log.warning(
            "no CONFIRMATION_SECRET configured: using a key %s, so a question asked before a restart "
            "(or by another replica) cannot be confirmed after it",
            whose,
        )
        return cls(key or secrets.token_bytes(32))

    def sign(self, pending: PendingConfirmation, conversation_id: str) -> PendingConfirmation:
        return replace(pending, mac=self._mac(pending, conversation_id))

    def verify(self, pending: PendingConfirmation, conversation_id: str) -> bool:
        """The signature matches, and the digest is the digest of exactly these arguments."""
        if not hmac.compare_digest(pending.mac, self._mac(pending, conversation_id)):
            return False
        expected = call_digest(pending.skill, pending.tool, pending.source, pending.arguments)
        return hmac.compare_digest(expected, pending.digest)

    def sign_data(self, data: Mapping[str, Any], conversation_id: str) -> str:
        """The signature of other state the tracker carries (``data`` names its ``kind``, so no
        signature of one kind of state verifies another)."""
        signed = _canonical({**data, "conversation": conversation_id}).encode("ascii")
        return hmac.new(self._secret, signed, hashlib.sha256).hexdigest()

    def verify_data(self, data: Mapping[str, Any], mac: str, conversation_id: str) -> bool:
        return "kind" in data and hmac.compare_digest(str(mac), self.sign_data(data, conversation_id))

    def verify_question(self, calls: Question, conversation_id: str) -> bool:
        """Every call verifies, and together they are exactly one question: one call on its own, or
        all the calls of one batch, each in its place, asked of one person in one turn."""
        if not calls or not all(self.verify(call, conversation_id) for call in calls):
            return False
        if len(calls) == 1 and not calls[0].in_batch:
            return True
        first = calls[0]
        return all(
            call.batch == first.batch
            and call.batch
            and call.count == len(calls)
            and call.place == place
            and (call.skill, call.user, call.user_turn, call.asked_at)
            == (first.skill, first.user, first.user_turn, first.asked_at)
            for place, call in enumerate(calls, start=1)
        )

    def _mac(self, pending: PendingConfirmation, conversation_id: str) -> str:
        # Every field but the signature itself, read as is (no deep copy: it is serialised at once).
        signed_fields = {f.name: getattr(pending, f.name) for f in fields(pending) if f.name != "mac"}
        # Fields at their defaults are signed as before they existed: a question asked then still holds.
        for name, default in _SIGNED_ONLY_WHEN_SET.items():
            if signed_fields[name] == default:
                del signed_fields[name]
        signed_fields["conversation"] = conversation_id
        signed = _canonical(signed_fields).encode("ascii")
        return hmac.new(self._secret, signed, hashlib.sha256).hexdigest()
