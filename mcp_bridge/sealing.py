"""The one codec for records that leave the action server's hands: sealed records.

A question, a server's question and a remembered permission are kept in the action server's record
(:mod:`mcp_bridge.record.store`), and sealed copies travel in the tracker's slots; a call held for an
approver is a row of the approvals table. Whatever comes back from a tracker or a database row is
untrusted, so every such record is *sealed*: one envelope, one signature scheme, for every kind::

    {"v": 2, "kind": "question", ...the record's fields..., "kid": "3f9a01c2", "mac": "<hex>"}

* ``mac`` is HMAC-SHA256 over the canonical JSON of everything else **and the conversation id**, so
  a record edited, forged, or copied into another conversation does not open;
* ``kind`` names the record, so a record of one kind never opens as another;
* ``v`` is the envelope's version; ``kid`` names the key that signed it.

The key ring may hold several secrets: the first seals, every one opens
(``CONFIRMATION_SECRET`` and ``CONFIRMATION_EXTRA_SECRETS``,
:func:`mcp_bridge.action_server.build.confirmation_seal`).
To rotate, add the new secret to the ring on every replica, then make it the one that seals, then drop
the old one once no record sealed with it can still be answered.

Without ``CONFIRMATION_SECRET`` the key is one the record draws once and keeps (so a restart keeps
it); with it, a database writer cannot forge what the seal protects. Release 0.2.0's formats (a
question's fields signed one by one; ``kind``-tagged data without ``v``) are no longer opened.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from typing import Any

__all__ = ["ENVELOPE_VERSION", "Seal", "call_digest", "canonical"]

log = logging.getLogger(__name__)

ENVELOPE_VERSION = 2
# The envelope's own fields, beside the record's.
_ENVELOPE = ("v", "kind", "kid", "mac")


def canonical(value: Any) -> str:
    """The one encoding a record is signed and digested in: sorted keys, no spaces, ASCII escapes
    (any text a person can type, unpaired surrogates included, has exactly one encoding)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def call_digest(skill: str, tool: str, source: str, arguments: Mapping[str, Any]) -> str:
    """A digest of exactly one call (skill, tool, source, arguments): what a yes authorises, and
    what the audit trail records instead of the arguments."""
    signed = canonical({"skill": skill, "tool": tool, "source": source, "arguments": arguments})
    return hashlib.sha256(signed.encode("ascii")).hexdigest()


def _whole_numbers(value: Any) -> Any:
    """``value`` with every integral float an int, at any depth (JSON data: dicts, lists, scalars)."""
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if kind is dict:
        return {name: _whole_numbers(item) for name, item in value.items()}
    if kind is list or kind is tuple:
        return [_whole_numbers(item) for item in value]
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if isinstance(value, Mapping):
        return {name: _whole_numbers(item) for name, item in value.items()}
    return value


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"mcp_bridge seal key id\x00" + key).hexdigest()[:8]


class Seal:
    """Seals and opens records with a key ring every replica shares: the first key seals, all open."""

    def __init__(self, *keys: bytes) -> None:
        if not keys or not all(keys):
            raise ValueError("a seal needs at least one key, and no key may be empty")
        self._keys = {_key_id(key): key for key in keys}
        self._sealing = _key_id(keys[0])

    @classmethod
    def ephemeral(cls) -> Seal:
        """A key for this object only: for tests and an executor built without a record."""
        return cls(secrets.token_bytes(32))

    # -- the envelope -------------------------------------------------------------------------

    def seal(self, kind: str, record: Mapping[str, Any], conversation_id: str) -> dict[str, Any]:
        """``record`` (JSON data, none of its keys an envelope field) sealed as ``kind`` for
        ``conversation_id``."""
        clash = set(record) & set(_ENVELOPE)
        if clash:
            raise ValueError(f"a record may not have the envelope's fields {sorted(clash)}")
        # Sealed as the tracker gives numbers back: over gRPC every number is a double (7 comes back
        # 7.0) and the Rasa adapter reads an integral one as an int, so an integral float is sealed
        # as an int.
        signed = {"v": ENVELOPE_VERSION, "kind": kind, **_whole_numbers(record), "kid": self._sealing}
        return {**signed, "mac": self._mac(self._keys[self._sealing], signed, conversation_id)}

    def open(self, kind: str, value: Any, conversation_id: str) -> dict[str, Any] | None:
        """The record ``value`` seals, if it is a ``kind`` sealed by one of our keys for
        ``conversation_id``; None for anything else (forged, edited, another kind or conversation,
        an unknown key, not a record at all)."""
        if not isinstance(value, Mapping) or value.get("v") != ENVELOPE_VERSION or value.get("kind") != kind:
            return None
        key = self._keys.get(str(value.get("kid")))
        mac = value.get("mac")
        if key is None or not isinstance(mac, str):
            return None
        signed = {name: item for name, item in value.items() if name != "mac"}
        try:
            expected = self._mac(key, signed, conversation_id)
            if not hmac.compare_digest(mac, expected):
                # Numbers given back as doubles by a transport that keeps them so (7.0 for 7).
                expected = self._mac(key, _whole_numbers(signed), conversation_id)
        except (TypeError, ValueError):  # not JSON data
            return None
        if not hmac.compare_digest(mac, expected):
            return None
        return {name: item for name, item in value.items() if name not in _ENVELOPE}

    @staticmethod
    def _mac(key: bytes, signed: Mapping[str, Any], conversation_id: str) -> str:
        message = canonical({**signed, "conversation": conversation_id}).encode("ascii")
        return hmac.new(key, message, hashlib.sha256).hexdigest()
