"""What the action server really called, read from its audit trail (see
:mod:`mcp_bridge.observability.audit`).

Each call entry names the tool, where it ran, the conversation, whether the request could have
reached the tool, and one digest per argument, never the values. An expected argument is
checked by computing its digest the same way, under the audit key the entry names (the action
server's ``AUDIT_KEY``, which the runner reads from its own environment too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_bridge.observability.audit import CALLED, AuditKeys

# The audit entry of a call held for a second approver (mcp_bridge.approvals.second_approver).
APPROVAL_REQUESTED = "approval_requested"


@dataclass(frozen=True)
class Call:
    tool: str
    source: str
    result: str
    sent: bool
    confirmation: str | None = None
    arguments: Mapping[str, str] = field(default_factory=dict)  # name -> digest
    # The audit key the entry was written under (None: an entry from before keys were named).
    kid: str | None = None
    # The keys its digests are checked with (the runner's AUDIT_KEY and AUDIT_EXTRA_KEYS).
    keys: AuditKeys = field(default_factory=AuditKeys, compare=False, repr=False)

    def mismatches(self, expected: Mapping[str, Any]) -> list[str]:
        """The expected arguments this call did not have (by name), empty when all match."""
        keys = self.keys
        wrong = []
        for name, value in expected.items():
            digest = self.arguments.get(name)
            if digest is None:
                wrong.append(f"{name} (not passed)")
            elif keys.key(self.kid) is None:
                wrong.append(f"{name} (written under audit key {self.kid}, which AUDIT_KEY does not hold)")
            elif digest != keys.argument_digest(name, value, self.kid):
                wrong.append(f"{name} (other value)")
        return wrong

    def describe(self) -> str:
        reached = "" if self.sent else ", never reached the tool"
        confirmed = f", confirmation {self.confirmation[:8]}" if self.confirmation else ""
        return f"{self.tool} ({self.source}, {self.result}{confirmed}{reached})"


class CallLog:
    """The call entries of one audit trail file, by conversation, read again on every look."""

    def __init__(self, path: Path, keys: AuditKeys | None = None) -> None:
        self.path = path
        self.keys = keys or AuditKeys()

    def conversations(self) -> set[str]:
        """Every conversation with an entry of any kind (question, answer, call)."""
        found: set[str] = set()
        if self.path.exists():
            with self.path.open(encoding="utf-8") as handle:
                for line in handle:
                    try:
                        entry = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(entry, dict) and entry.get("conversation"):
                        found.add(str(entry["conversation"]))
        return found

    def _entries(self, conversation_id: str, decision: str) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        found = []
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written right now
                if (
                    isinstance(entry, dict)
                    and entry.get("decision") == decision
                    and entry.get("conversation") == conversation_id
                ):
                    found.append(entry)
        return found

    def approvals(self, conversation_id: str) -> list[str]:
        """The ids of the calls the conversation held for a second approver, oldest first."""
        return [
            str(entry["approval"])
            for entry in self._entries(conversation_id, APPROVAL_REQUESTED)
            if entry.get("approval")
        ]

    def calls(self, conversation_id: str) -> list[Call]:
        calls = []
        for entry in self._entries(conversation_id, CALLED):
            calls.append(
                Call(
                    tool=str(entry.get("tool")),
                    source=str(entry.get("source")),
                    result=str(entry.get("result")),
                    sent=bool(entry.get("sent", True)),
                    confirmation=entry.get("confirmation"),
                    arguments=dict(entry.get("arguments") or {}),
                    kid=str(entry["kid"]) if entry.get("kid") else None,
                    keys=self.keys,
                )
            )
        return calls
