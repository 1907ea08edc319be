"""What a channel vouches for about a message, signed, and its check on the action server.

The person's identity is only as good as the place it is checked. Rasa passes a message's metadata
to the action server, but so does anyone who posts a tracker to the action server's ``/webhook`` or
appends an event through Rasa's HTTP API. So the channel that authenticated the person signs what
it vouches for, and the action server verifies it before any answer counts:

* the **conversation** the message belongs to (the tracker's sender id),
* the **person** who sent it (``<channel>:<who>``, as under :data:`~mcp_bridge.channels.USER_KEY`),
* a **digest of the exact text** (stripped, as Rasa stores it), so the proof of "hello" is no proof
  of "yes",
* the **time** the channel received it, in milliseconds on the channel's clock: an answer must be
  newer than the message that prompted its question, so a person's earlier "yes" replayed into a
  later question is refused,

HMAC-SHA256 under a key only the channels and the action servers hold
(:data:`KEY_ENV`, ``MCP_BRIDGE_CHANNEL_KEY``): neither Rasa's API token nor the action endpoint's
token, so whoever holds those can post trackers but cannot make a proof. The value may name several
keys, separated by spaces or commas: the first signs, every one verifies (rotation: add the new key
second everywhere, then move it first, then drop the old one).

The proof travels in the message metadata under :data:`PROOF_KEY` as
``v1.<key id>.<payload>.<signature>`` (base64url), the payload a small JSON object.

The same keys make **tags** (:meth:`ChannelKeys.tag`): a short signature of a value the channel sends
to a platform and the platform echoes back unchanged (a button's payload), bound to the conversation
it was sent to, so that a press of that button anywhere else is told apart and refused. This module
uses the standard library only: it runs in the Rasa server's process, which has none of the
plugin's dependencies, and in the action server's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_bridge.channels import USER_KEY
from mcp_bridge.config.random_values import looks_like_a_placeholder

__all__ = [
    "KEY_ENV",
    "MIN_KEY_CHARS",
    "PROOF_KEY",
    "TAG_CHARS",
    "ChannelKeys",
    "Unvouched",
    "Vouched",
    "text_digest",
]

# The message metadata key of the proof; the channel sets it, replacing whatever a client sent.
PROOF_KEY = "mcp_bridge_proof"
# The environment variable that holds the key (or keys) on the Rasa server and the action servers.
KEY_ENV = "MCP_BRIDGE_CHANNEL_KEY"
MIN_KEY_CHARS = 32
# A proof is a few hundred characters; anything much longer is refused unread.
MAX_PROOF_CHARS = 2048
_VERSION = "v1"
# A tag is the first 12 bytes of its HMAC-SHA256 (96 bits), 16 characters in base64url: short enough
# for the platforms that bound what a button carries (Telegram: 64 bytes).
TAG_CHARS = 16
_TAG_BYTES = 12


def text_digest(text: str) -> str:
    """The digest a proof carries of a message's text (stripped: Rasa stores it stripped)."""
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Vouched:
    """A message a channel vouched for: who sent it, when the channel received it (seconds), and its
    id (a digest of the proof, unique to the message: the action server's record uses each once)."""

    user: str
    said_at: float
    id: str


@dataclass(frozen=True)
class Unvouched:
    """A message with no proof, or one that does not hold; ``reason`` says which, for the audit."""

    reason: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ChannelKeys:
    """The channel keys of a deployment: the first signs, every one verifies."""

    def __init__(self, keys: tuple[bytes, ...]) -> None:
        if not keys:
            raise ValueError("at least one channel key is required")
        self._keys = {self._key_id(key): key for key in keys}
        self._signing_id = self._key_id(keys[0])

    @classmethod
    def parse(cls, value: str) -> ChannelKeys:
        """The keys of ``value`` (separated by spaces or commas); ValueError names what is wrong,
        never a key."""
        keys = [part for part in value.replace(",", " ").split() if part]
        if not keys:
            raise ValueError("it is empty")
        for number, key in enumerate(keys, start=1):
            if len(key) < MIN_KEY_CHARS:
                raise ValueError(
                    f"key {number} is {len(key)} characters long, shorter than {MIN_KEY_CHARS}: use a "
                    "random value, e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                )
            if looks_like_a_placeholder(key):
                raise ValueError(
                    f"key {number} looks like a placeholder, not a random value: use one, e.g. "
                    "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                )
        return cls(tuple(key.encode("utf-8") for key in keys))

    @staticmethod
    def _key_id(key: bytes) -> str:
        return hashlib.sha256(b"mcp_bridge channel key id\x00" + key).hexdigest()[:8]

    # -- the channel's side ----------------------------------------------------------------------

    def proof(self, *, conversation: str, user: str, text: str, at: float | None = None) -> str:
        """The proof a channel attaches to a message it received from ``user`` just now."""
        payload = {
            "c": conversation,
            "u": user,
            "d": text_digest(text),
            "at": int((time.time() if at is None else at) * 1000),
        }
        body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        head = f"{_VERSION}.{self._signing_id}.{body}"
        return f"{head}.{_b64(self._mac(self._keys[self._signing_id], head))}"

    def vouch(self, metadata: Any, *, conversation: str, user: str, text: str) -> dict[str, Any]:
        """The client's metadata (a JSON object, else nothing) with the person and the proof set;
        whatever the client put under those keys is replaced."""
        own = dict(metadata) if isinstance(metadata, Mapping) else {}
        own[USER_KEY] = user
        own[PROOF_KEY] = self.proof(conversation=conversation, user=user, text=text)
        return own

    # -- the action server's side ----------------------------------------------------------------

    def check(self, metadata: Any, *, conversation: str, text: str) -> Vouched | Unvouched:
        """What the proof in a message's ``metadata`` vouches for, if it holds for this conversation
        and this exact text."""
        proof = metadata.get(PROOF_KEY) if isinstance(metadata, Mapping) else None
        if proof is None:
            return Unvouched("no channel signature")
        if not isinstance(proof, str) or len(proof) > MAX_PROOF_CHARS:
            return Unvouched("a malformed channel signature")
        parts = proof.split(".")
        if len(parts) != 4 or parts[0] != _VERSION:
            return Unvouched("a malformed channel signature")
        key = self._keys.get(parts[1])
        if key is None:
            return Unvouched("a channel signature under an unknown key")
        try:
            signature = _unb64(parts[3])
            payload = json.loads(_unb64(parts[2]))
        except (ValueError, UnicodeDecodeError):
            return Unvouched("a malformed channel signature")
        if not hmac.compare_digest(signature, self._mac(key, ".".join(parts[:3]))):
            return Unvouched("a channel signature that does not verify")
        if not isinstance(payload, dict):
            return Unvouched("a malformed channel signature")
        user, at = payload.get("u"), payload.get("at")
        if not isinstance(user, str) or not user or not isinstance(at, int) or isinstance(at, bool):
            return Unvouched("a malformed channel signature")
        if payload.get("c") != conversation:
            return Unvouched("a channel signature of another conversation")
        if not isinstance(payload.get("d"), str) or not hmac.compare_digest(payload["d"], text_digest(text)):
            return Unvouched("a channel signature of another text")
        if metadata.get(USER_KEY) not in (None, user):
            return Unvouched("a person named apart from the channel signature")
        return Vouched(user, at / 1000, hashlib.sha256(proof.encode("ascii")).hexdigest())

    # -- tags ------------------------------------------------------------------------------------

    def tag(self, purpose: str, *parts: str) -> str:
        """A tag of ``parts`` for ``purpose`` (:data:`TAG_CHARS` characters, base64url) under the
        signing key: sent with a value the platform echoes back, checked by :meth:`tag_holds`."""
        return self._tag(self._keys[self._signing_id], purpose, parts)

    def tag_holds(self, tag: str, purpose: str, *parts: str) -> bool:
        """Whether ``tag`` is the tag of ``parts`` for ``purpose`` under any of the keys."""
        return any(hmac.compare_digest(tag, self._tag(key, purpose, parts)) for key in self._keys.values())

    @staticmethod
    def _tag(key: bytes, purpose: str, parts: tuple[str, ...]) -> str:
        signed = json.dumps(["mcp_bridge tag", purpose, *parts], ensure_ascii=True).encode("ascii")
        return _b64(hmac.new(key, signed, hashlib.sha256).digest()[:_TAG_BYTES])

    @staticmethod
    def _mac(key: bytes, signed: str) -> bytes:
        return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
