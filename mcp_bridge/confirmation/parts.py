"""What every room of the executor works with, built once per executor: plain data, no behaviour.

The executor (:mod:`mcp_bridge.confirmation.executor`) builds one :class:`Parts` and hands it to each
room it calls (the step loop, the answer rules, the forms of a question, the approver's release), the
way pydantic-ai hands its ``RunContext`` down: nothing travels in a global.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mcp_bridge.approvals.second_approver import Approvals
from mcp_bridge.confirmation.decisions import ConfirmationPolicy
from mcp_bridge.confirmation.gate import Gate
from mcp_bridge.confirmation.permissions import Permissions
from mcp_bridge.confirmation.running import Runner
from mcp_bridge.contract import Responses
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.reading.reader import ConfirmationReader
from mcp_bridge.record.store import Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import Skill
from mcp_bridge.skills.toolbox import ToolBox

__all__ = ["Parts"]


@dataclass(frozen=True)
class Parts:
    skills: Mapping[str, Skill]
    tools: ToolBox
    # The one gate every call passes.
    gate: Gate
    # Runs what a verdict lets run.
    runner: Runner
    reader: ConfirmationReader
    # What authorises a write: the questions asked, the messages used, the permissions given.
    record: Record
    seal: Seal
    audit: AuditLog
    responses: Responses
    policy: ConfirmationPolicy
    clock: Callable[[], float]
    permissions: Permissions
    # None: a call that needs a second approver never runs (the person hears that none is available).
    approvals: Approvals | None
    # The slots an MCP server's meta_map.from_slots sends in _meta: sealed with each question.
    meta_slots: frozenset[str]
