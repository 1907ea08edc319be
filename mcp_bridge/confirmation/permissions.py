"""Remembered permission: "yes, and don't ask again today" lets later calls of a tool run unasked.

A skill allows it per tool (``allows_remembering`` beside ``requires_confirmation``,
:mod:`mcp_bridge.skills.files`): which calls a permission covers (the same values of some arguments,
or any arguments) and for how long at most. Which calls may be given one, and when one covers a
call, is the gate's rule ``remembered`` (:mod:`mcp_bridge.confirmation.gate`); this module keeps the
permissions:

* a permission is given only with a plain yes to one call (the reader's
  :class:`~mcp_bridge.reading.answers.Grant`, or the question's third button, :data:`GRANT_BUTTON`);
* it lives in the action server's record (:mod:`mcp_bridge.record.store`), sealed
  (:mod:`mcp_bridge.sealing`, kind ``permission``): bound to the conversation and to the person the
  channel named, granted, used, withdrawn there and nowhere else (no tracker carries it). One that
  the record holds as withdrawn or expired, that does not open, names another person, has expired by
  the skill's lifetime now (if that got shorter), or no longer fits what the skill allows covers
  nothing (:func:`covering`);
* a run under it writes only what the person sent (the executor's ``remembered`` rule) and is started
  by the person's newest message, once (:meth:`Permissions.use`);
* "stop saving without asking" (the plugin's ``action_revoke_permissions``) withdraws every
  permission of the conversation's person at once (:meth:`Permissions.revoke`).

Every grant, use and revocation is an audit entry (``decision``: ``permission_granted``,
``permission_used``, ``permission_revoked``), with the permission's id.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mcp_bridge.confirmation import templating
from mcp_bridge.confirmation.decisions import Turn
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.question import AskedCall, Question
from mcp_bridge.record.store import Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import AllowsRemembering, Skill

__all__ = ["GRANT_BUTTON", "KIND", "Permission", "Permissions", "covering", "until"]

log = logging.getLogger(__name__)

# At most this many permissions of a person in a conversation are read (the newest).
MAX_PERMISSIONS = 20
KIND = "permission"
# The question's third button, beside No / Yes, where a permission may be given: its payload is read
# as the words it says (a plain yes with "don't ask again today"), so the NLU must agree, as for a yes.
GRANT_BUTTON = {"title": "Yes, and don't ask again today", "payload": "yes, and don't ask again today"}


@dataclass(frozen=True)
class Permission:
    """One remembered permission, as it travels (sealed) in the slot."""

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
    # The slot values its MCP server sends in _meta, as sealed with the question it was given with.
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, record: Any) -> Permission | None:
        if not isinstance(record, dict):
            return None
        try:
            scope = record["scope"]
            user = record["user"]
            meta = record["meta"]
            if scope is not None and not isinstance(scope, dict) or not isinstance(meta, dict):
                return None
            if user is not None and not isinstance(user, str):
                return None
            return cls(
                id=str(record["id"]),
                skill=str(record["skill"]),
                tool=str(record["tool"]),
                source=str(record["source"]),
                scope=scope,
                user=user,
                granted_at=float(record["granted_at"]),
                expires_at=float(record["expires_at"]),
                label=str(record["label"]),
                meta=dict(meta),
            )
        except (KeyError, TypeError, ValueError):
            return None


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
    """The permission that covers this call, or None: the same skill, tool and source, given by the
    same person, in force (its own expiry and the skill's lifetime now), with the same scope."""
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
    """The permissions of a conversation as one executor keeps them: in its record, sealed with its seal,
    timed by its clock, each grant, use and revocation audited."""

    def __init__(self, seal: Seal, clock: Callable[[], float], audit: AuditLog, record: Record) -> None:
        self._seal = seal
        self._clock = clock
        self._audit = audit
        self._record = record

    async def standing(self, turn: Turn) -> list[Permission]:
        """The permissions the turn's person gave in the conversation that the record holds as standing."""
        standing = []
        for sealed in (await self._record.permissions(turn.conversation_id, turn.user))[-MAX_PERMISSIONS:]:
            permission = Permission.parse(self._seal.open(KIND, sealed, turn.conversation_id))
            if permission is None:
                log.warning("conversation %s: a permission in the record does not open", turn.conversation_id)
                continue
            standing.append(permission)
        return standing

    async def ended(self, turn: Turn) -> list[tuple[Permission, str]]:
        """The permissions the turn's person gave in the conversation that no longer stand, with why."""
        ended = []
        for sealed, why in await self._record.ended_permissions(turn.conversation_id, turn.user):
            permission = Permission.parse(self._seal.open(KIND, sealed, turn.conversation_id))
            if permission is not None:
                ended.append((permission, why))
        return ended

    async def grant(
        self, skill: Skill, allowed: AllowsRemembering, question: Question, call: AskedCall, turn: Turn
    ) -> Permission:
        """A new permission for calls like ``call``, kept in the record."""
        now = self._clock()
        variables = templating.variables(turn.slots, call.arguments, tool=call.tool)
        label = call.tool
        if allowed.describe:
            try:
                label = allowed.describe.format_map(variables)
            except (KeyError, ValueError, IndexError, AttributeError):
                pass  # a variable this call does not have: named by its tool instead
        permission = Permission(
            id=uuid.uuid4().hex,
            skill=skill.id,
            tool=call.tool,
            source=call.source,
            scope=scope_of(allowed, call.arguments),
            user=turn.user,
            granted_at=now,
            expires_at=now + allowed.seconds,
            label=label,
            meta=dict(call.meta),
        )
        await self._record.grant(
            permission_id=permission.id,
            conversation_id=turn.conversation_id,
            person=turn.user,
            sealed=self._seal.seal(KIND, asdict(permission), turn.conversation_id),
            granted_at=permission.granted_at,
            expires_at=permission.expires_at,
        )
        self._audit.record_question(
            turn.conversation_id, question, call, "permission_granted", None, permission=permission.id
        )
        return permission

    async def use(self, permission: Permission, turn: Turn) -> str | None:
        """Why a run under ``permission`` may not start from the turn's message (the record withdrew
        it, or the message started something already or is not the newest), or None when it starts."""
        refused = await self._record.use(permission.id, turn.conversation_id, turn.message())
        return refused.reason if refused is not None else None

    def variables(self, permission: Permission) -> dict[str, Any]:
        """What a response about ``permission`` says: its label and when it ends."""
        return {"permission": permission.label, "until": until(permission.expires_at, self._clock())}

    async def revoke(self, turn: Turn) -> int:
        """Every permission of this person in the conversation withdrawn (audited each); anyone else's
        stay. How many were in force."""
        now = self._clock()
        withdrawn = await self._record.withdraw(turn.conversation_id, turn.user)
        count = 0
        for sealed in withdrawn:
            permission = Permission.parse(self._seal.open(KIND, sealed, turn.conversation_id))
            if permission is None:
                continue
            count += permission.expires_at > now
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
        return count
