"""What release 0.3.0 wrote that this release still reads: every such reader is here, and release 0.5.0
(:data:`DROPPED_IN`) deletes this module.

Two of 0.3.0's formats are read:

* **a question as 0.3.0 sealed it** (the envelope is this release's, ``"v": 2``, kind ``question``):
  it has no ``id`` (0.3.0 kept no record to give it one) and its calls no ``meta``.
  :func:`question_record` gives it both, empty, so that what it *claims* can be read for the audit
  entry that rejects it (:func:`mcp_bridge.question.claimed`). It is never answered: the action
  server's record does not hold it, so a question pending during the upgrade is asked again
  (CHANGELOG.md, 0.4.0; ``tests/plugin/confirmation/test_rolling_upgrade.py``, with what 0.3.0 itself
  wrote, in ``tests/fixtures/release_0_3/``);
* **a person's OAuth token row as 0.3.0 encrypted it**: Fernet under a key derived from
  ``MCP_TOKEN_KEY`` for it alone, bound to no row (this release's start with ``v2.``: AES-GCM bound to
  their row, :class:`mcp_bridge.auth.token_store.Keys`). :class:`TokenRows` reads it; the store
  writes it this release's way the next time it changes.

Nothing else 0.3.0 left is read: its remembered permissions (the ``remembered_permissions`` slot),
server questions and held calls authorise nothing, as the record holds none of them. The database's
tables are not formats that travel: :mod:`mcp_bridge.record.schema` migrates 0.3.0's in place, and
keeps doing so. Release 0.2.0's formats are no longer read at all.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["DROPPED_IN", "RELEASE", "TokenRows", "question_record"]

# The release that wrote these formats, and the one that stops reading them (and deletes this module).
RELEASE = "0.3.0"
DROPPED_IN = "0.5.0"


def question_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A question's record (its envelope's fields taken off) as this release's reader takes it: what
    0.3.0 did not seal is given, empty (an ``id`` of ``""``, which the record never holds, and each
    call's ``meta``). A record this release sealed has both already, and keeps its own."""
    calls = record.get("calls")
    if isinstance(calls, list):
        calls = [{"meta": {}, **call} if isinstance(call, Mapping) else call for call in calls]
    return {"id": "", **record, "calls": calls}


@dataclass(frozen=True)
class TokenRows:
    """0.3.0's encryption of a person's token row: Fernet, under its own key, bound to no row."""

    key: Fernet

    @classmethod
    def derived(cls, derive: Callable[[bytes], bytes]) -> TokenRows:
        """The key as 0.3.0 derived it from ``MCP_TOKEN_KEY`` (``derive``: HKDF-SHA256 with a purpose)."""
        return cls(Fernet(base64.urlsafe_b64encode(derive(b"mcp-bridge tokens at rest"))))

    def read(self, sealed: str) -> bytes | None:
        """What 0.3.0 encrypted in ``sealed``, or None (another key's, edited, or not 0.3.0's)."""
        try:
            return self.key.decrypt(sealed.encode())
        except (InvalidToken, ValueError):
            return None
