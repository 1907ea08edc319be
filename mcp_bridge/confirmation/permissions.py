"""Remembered permission: "yes, and don't ask again today" lets later calls of a tool run unasked.

A skill allows it per tool (``allows_remembering`` beside ``requires_confirmation``,
:mod:`mcp_bridge.skills.files`): which calls a permission covers (the same values of some arguments, or any
arguments) and for how long at most. The rules, in order of importance:

1. A permission is given only with a plain yes to one call (the reader's
:class:`~mcp_bridge.reading.reader.Grant`,
   or the question's third button), for a call :func:`may_remember` allows: the skill allows it for
   the tool, the call needs no second approver (:func:`mcp_bridge.approvals.second_approver.required`), and
   the tool
   is not destructive (its server's ``destructiveHint``; an MCP server nobody marked ``trusted`` is
   taken at its worst) unless the skill says ``even_if_destructive: true``.
2. A permission lives in the tracker (the ``remembered_permissions`` slot), sealed like a question
   (:class:`~mcp_bridge.sealing.Seal`): bound to the conversation and to the person the channel
   named. One that does not verify, names another person, has expired (its own expiry, or the
   skill's lifetime now, if that got shorter), or no longer fits what the skill allows covers
   nothing: the question is asked as before.
3. A covered call runs without a question, exactly once, with a key of its own, and the person is
   told it ran because they allowed it. A permission never stands in for a second approver, and
   never covers a call of a question about several calls (those are asked as before: the simplest
   safe rule, so one answer never mixes calls that were asked about with calls that were not).
4. "stop saving without asking" (the plugin's ``action_revoke_permissions``) withdraws every
   permission of the conversation's person at once.

Every grant, use and revocation is an audit entry (``decision``: ``permission_granted``,
``permission_used``, ``permission_revoked``), with the permission's id.

The executor applies these rules (its rule 8, :mod:`mcp_bridge.confirmation.executor`) through
:class:`Permissions`:
a grant with a yes, the permission that covers a new request's one call, a revocation. Running a
covered call is the executor's own (its step loop, from the call's step).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Turn
from mcp_bridge.contract import PERMISSIONS_SLOT
from mcp_bridge.errors import ToolArgumentsError, ToolCallError, ToolNotFoundError
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.sealing import PendingConfirmation, Seal
from mcp_bridge.skills.files import AllowsRemembering, Skill
from mcp_bridge.tools.sources import Tool

__all__ = [
    "GRANT_BUTTON",
    "Permission",
    "Permissions",
    "covering",
    "from_slot",
    "may_remember",
    "to_slot",
    "until",
]

log = logging.getLogger(__name__)

# At most this many permissions are kept in a conversation; a new one drops the oldest.
MAX_PERMISSIONS = 20
_KIND = "permission"
# The question's third button, beside No / Yes, where a permission may be given: its payload is read
# as the words it says (a plain yes with "don't ask again today"), so the NLU must agree, as for a yes.
GRANT_BUTTON = {"title": "Yes, and don't ask again today", "payload": "yes, and don't ask again today"}


@dataclass(frozen=True)
class Permission:
    """One remembered permission, as it travels in the slot."""

    id: str
    skill: str
    tool: str
    source: str
    # Argument name -> the value a covered call must have; None: any arguments.
    scope: dict[str, Any] | None
    # Who gave it, as the channel named them; None: the channel names nobody.
    user: str | None
    granted_at: float
    expires_at: float
    # How it is named to the person ("notes to Dana Whitfield").
    label: str
    mac: str = ""

    def signed(self) -> dict[str, Any]:
        data = asdict(self)
        del data["mac"]
        return {"kind": _KIND, **data}

    @classmethod
    def parse(cls, value: Any) -> Permission | None:
        if not isinstance(value, dict):
            return None
        try:
            scope = value["scope"]
            user = value["user"]
            if scope is not None and not isinstance(scope, dict):
                return None
            if user is not None and not isinstance(user, str):
                return None
            return cls(
                id=str(value["id"]),
                skill=str(value["skill"]),
                tool=str(value["tool"]),
                source=str(value["source"]),
                scope=scope,
                user=user,
                granted_at=float(value["granted_at"]),
                expires_at=float(value["expires_at"]),
                label=str(value["label"]),
                mac=str(value["mac"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def sign(permission: Permission, seal: Seal, conversation_id: str) -> Permission:
    return replace(permission, mac=seal.sign_data(permission.signed(), conversation_id))


def from_slot(value: Any, seal: Seal, conversation_id: str) -> list[Permission]:
    """The permissions in the slot whose seal holds for this conversation; anything else is dropped
    (and logged: a value edited or copied from elsewhere)."""
    if not isinstance(value, list):
        return []
    held = []
    for raw in value[:MAX_PERMISSIONS]:
        permission = Permission.parse(raw)
        if permission is None or not seal.verify_data(permission.signed(), permission.mac, conversation_id):
            log.warning("conversation %s: a permission that does not verify ignored", conversation_id)
            continue
        held.append(permission)
    return held


def to_slot(permissions: Sequence[Permission]) -> list[dict[str, Any]] | None:
    kept = list(permissions)[-MAX_PERMISSIONS:]
    return [asdict(p) for p in kept] or None


async def may_remember(
    skill: Skill, tool_name: str, tool: Tool | None, arguments: Mapping[str, Any]
) -> AllowsRemembering | None:
    """What the skill allows to remember for this call (rule 1), or None when nothing may be."""
    constraint = skill.constraints.get(tool_name)
    allowed = constraint.allows_remembering if constraint is not None else None
    if allowed is None or tool is None:
        return None
    if approvals.required(skill, tool_name, arguments) is not None:
        return None  # a second approver is never replaced
    if not allowed.even_if_destructive:
        try:
            destructive = (await tool.annotations()).destructive
        except (ToolCallError, ToolArgumentsError, ToolNotFoundError):
            destructive = True  # unknown: taken at its worst
        if destructive:
            return None
    return allowed


def scope_of(allowed: AllowsRemembering, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    if allowed.any_arguments:
        return None
    return {name: arguments.get(name) for name in allowed.same_arguments}


def covering(
    permissions: Sequence[Permission],
    allowed: AllowsRemembering,
    *,
    skill: str,
    tool: str,
    source: str,
    arguments: Mapping[str, Any],
    user: str | None,
    now: float,
) -> Permission | None:
    """The permission that covers this call (rule 2), or None."""
    wanted = scope_of(allowed, arguments)
    for permission in permissions:
        if (permission.skill, permission.tool, permission.source) != (skill, tool, source):
            continue
        if permission.user != user:
            continue
        if not now < min(permission.expires_at, permission.granted_at + allowed.seconds):
            continue
        if permission.scope is None:
            if wanted is None:
                return permission
            continue
        if wanted is not None and set(permission.scope) == set(wanted) and permission.scope == wanted:
            return permission
    return None


def until(expires_at: float, now: float) -> str:
    """When a permission ends, as the person reads it: "18:00", or "Tue 09:30" on another day."""
    then, today = time.localtime(expires_at), time.localtime(now)
    same_day = (then.tm_year, then.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M" if same_day else "%a %H:%M", then)


class Permissions:
    """The permissions of a conversation as one executor keeps them: sealed with its seal, timed by its
    clock, each grant and revocation audited."""

    def __init__(self, seal: Seal, clock: Callable[[], float], audit: AuditLog) -> None:
        self._seal = seal
        self._clock = clock
        self._audit = audit

    def held(self, turn: Turn) -> list[Permission]:
        """The permissions in the turn's slot that verify (rule 2)."""
        return from_slot(turn.slots.get(PERMISSIONS_SLOT), self._seal, turn.conversation_id)

    def grant(
        self, skill: Skill, allowed: AllowsRemembering, pending: PendingConfirmation, turn: Turn
    ) -> tuple[Permission, list[dict[str, Any]] | None]:
        """A new permission for calls like ``pending`` (rule 1), sealed, and the slot with it (expired
        ones dropped)."""
        now = self._clock()
        variables = templating.variables(turn.slots, pending.arguments, tool=pending.tool)
        label = pending.tool
        if allowed.describe:
            try:
                label = allowed.describe.format_map(variables)
            except (KeyError, ValueError, IndexError, AttributeError):
                pass  # a variable this call does not have: named by its tool instead
        permission = sign(
            Permission(
                id=uuid.uuid4().hex,
                skill=skill.id,
                tool=pending.tool,
                source=pending.source,
                scope=scope_of(allowed, pending.arguments),
                user=turn.user,
                granted_at=now,
                expires_at=now + allowed.seconds,
                label=label,
            ),
            self._seal,
            turn.conversation_id,
        )
        kept = [p for p in self.held(turn) if p.expires_at > now]
        self._audit.record_question(
            turn.conversation_id, pending, "permission_granted", None, permission=permission.id
        )
        return permission, to_slot([*kept, permission])

    def variables(self, permission: Permission) -> dict[str, Any]:
        """What a response about ``permission`` says: its label and when it ends."""
        return {"permission": permission.label, "until": until(permission.expires_at, self._clock())}

    async def covering_call(
        self, skill: Skill, tool_name: str, tool: Tool | None, arguments: Mapping[str, Any], turn: Turn
    ) -> Permission | None:
        """The permission that lets this one call run unasked (rules 1 to 3), or None."""
        held = self.held(turn)
        if not held:
            return None
        allowed = await may_remember(skill, tool_name, tool, arguments)
        if allowed is None:
            return None
        return covering(
            held,
            allowed,
            skill=skill.id,
            tool=tool_name,
            source=str(skill.tools[tool_name]),
            arguments=arguments,
            user=turn.user,
            now=self._clock(),
        )

    def revoke(self, turn: Turn) -> tuple[int, list[dict[str, Any]] | None]:
        """Rule 4: every permission of this person in the conversation withdrawn (audited each);
        anyone else's stay. How many were in force, and the slot with the rest."""
        held = self.held(turn)
        now = self._clock()
        mine = [p for p in held if p.user == turn.user]
        for permission in mine:
            self._audit.record(
                conversation=turn.conversation_id,
                user=turn.user,
                skill=permission.skill,
                tool=permission.tool,
                source=permission.source,
                confirmation=None,
                digest="",
                decision="permission_revoked",
                result="expired" if permission.expires_at <= now else None,
                permission=permission.id,
            )
        rest = [p for p in held if p.user != turn.user and p.expires_at > now]
        return sum(p.expires_at > now for p in mine), to_slot(rest)
