"""Pending confirmations, sealed: the state a question leaves in the tracker, and its signature.

The tracker carries the pending call between turns, so any replica can serve the "yes". Whatever
comes back from the tracker is untrusted: :class:`Seal` signs every field of a
:class:`PendingConfirmation` together with the conversation id (HMAC-SHA256, keyed with the action
servers' shared secret), and a value built or edited outside the action server, or replayed in
another conversation, fails :meth:`Seal.verify`. Among the signed fields is who was asked
(``user``: the person the channel authenticated, when it names one), so that whoever answers can be
compared with it and a changed name fails the signature.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
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
    mac: str = ""

    def to_slot(self) -> dict[str, Any]:
        return asdict(self)

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
                mac=str(value.get("mac", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None


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

    def _mac(self, pending: PendingConfirmation, conversation_id: str) -> str:
        # Every field but the signature itself, read as is (no deep copy: it is serialised at once).
        signed_fields = {f.name: getattr(pending, f.name) for f in fields(pending) if f.name != "mac"}
        if signed_fields["user"] is None:
            # Signed as before the field existed: a question asked then, of nobody named, still holds.
            del signed_fields["user"]
        signed_fields["conversation"] = conversation_id
        signed = _canonical(signed_fields).encode("ascii")
        return hmac.new(self._secret, signed, hashlib.sha256).hexdigest()
