"""Where approval requests live: the plugin's database (:mod:`mcp_bridge.record.database`), shared by
every replica.

The requests are a table of the one database the action server keeps its record in (SQLite by default,
PostgreSQL for replicas: ``MCP_BRIDGE_DATABASE``; the table and its migrations are in
:mod:`mcp_bridge.record.schema`). Every change is one conditional ``UPDATE ... WHERE status = ...
RETURNING``: the database, not a check-then-write in this process, decides which of two replicas
deciding at the same moment wins. The store holds the exact call (the note text too): it is the record
an approver reads, so guard the database like the system of record it writes to.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from mcp_bridge.approvals.second_approver import ApprovalRequest, Status, person
from mcp_bridge.record.database import Database, open_database

__all__ = ["ApprovalTable", "open_store"]

_COLUMNS = (
    "id, conversation_id, requester, role, skill, tool, arguments, idempotency_key, question, slots, "
    "created_at, expires_at, status, decided_by, decided_at, told, result, attempts"
)

_INSERT = (
    "INSERT INTO approval_requests (id, conversation_id, requester, requester_name, role, skill, tool, "
    "arguments, idempotency_key, question, slots, created_at, expires_at, status) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')"
)
_GET = f"SELECT {_COLUMNS} FROM approval_requests WHERE id = ?"
_DECIDE = (
    "UPDATE approval_requests SET status = ?, decided_by = ?, decided_at = ? "
    f"WHERE id = ? AND status = 'pending' AND expires_at > ? AND requester_name <> ? RETURNING {_COLUMNS}"
)
_EXPIRE = (
    "UPDATE approval_requests SET status = 'expired', decided_at = ? "
    f"WHERE status = 'pending' AND expires_at <= ? RETURNING {_COLUMNS}"
)
# Decided and untold, or running past its lease (its action server died before the outcome was
# recorded): the conversation is told (again), and its action takes it up. A take clears notified_at,
# so a lost run is told at once, then again only every retry_after.
_UNTOLD = (
    "UPDATE approval_requests SET notified_at = ? WHERE ((status IN ('approved', 'refused', 'expired') "
    "AND told = 0) OR (status = 'running' AND running_until <= ?)) "
    f"AND (notified_at IS NULL OR notified_at <= ?) RETURNING {_COLUMNS}"
)
_RUN = (
    "UPDATE approval_requests SET status = 'running', told = 1, notified_at = NULL, running_until = ?, "
    "attempts = attempts + 1 "
    f"WHERE id = ? AND conversation_id = ? AND status = 'approved' AND expires_at > ? RETURNING {_COLUMNS}"
)
# A run whose lease passed without an outcome: taken again, by one caller, with a new lease.
_RESUME = (
    "UPDATE approval_requests SET notified_at = NULL, running_until = ?, attempts = attempts + 1 "
    f"WHERE id = ? AND conversation_id = ? AND status = 'running' AND running_until <= ? RETURNING {_COLUMNS}"
)
_LATE = (
    "UPDATE approval_requests SET status = 'expired', told = 1 "
    f"WHERE id = ? AND conversation_id = ? AND status = 'approved' AND expires_at <= ? RETURNING {_COLUMNS}"
)
_TELL = (
    "UPDATE approval_requests SET told = 1 WHERE id = ? AND conversation_id = ? "
    f"AND status IN ('refused', 'expired') AND told = 0 RETURNING {_COLUMNS}"
)
# The run's action server is alive and the run still going: its lease moves on (``attempts``: only the
# run that holds it, never one taken up again after it).
_RENEW = (
    "UPDATE approval_requests SET running_until = ? WHERE id = ? AND status = 'running' AND attempts = ? "
    f"RETURNING {_COLUMNS}"
)
_FINISH = "UPDATE approval_requests SET status = 'done', result = ? WHERE id = ? AND status = 'running'"
# Filled with one placeholder per role.
_PENDING = (
    f"SELECT {_COLUMNS} FROM approval_requests WHERE status = 'pending' AND expires_at > ? "
    "AND role IN ({roles}) ORDER BY created_at"
)


def _row(row: Sequence[Any]) -> ApprovalRequest:
    (id_, conversation, requester, role, skill, tool, arguments, key, question, slots) = row[:10]
    created, expires, status, decided_by, decided_at, told, result, attempts = row[10:]
    return ApprovalRequest(
        id=id_,
        conversation_id=conversation,
        requester=requester,
        role=role,
        skill=skill,
        tool=tool,
        arguments=json.loads(arguments),
        key=key,
        question=json.loads(question),
        slots=json.loads(slots),
        created_at=float(created),
        expires_at=float(expires),
        status=status,
        decided_by=decided_by,
        decided_at=None if decided_at is None else float(decided_at),
        told=bool(told),
        result=result,
        attempts=int(attempts or 0),
    )


def _insert_values(request: ApprovalRequest) -> tuple[Any, ...]:
    return (
        request.id,
        request.conversation_id,
        request.requester,
        _name(request.requester),
        request.role,
        request.skill,
        request.tool,
        json.dumps(request.arguments, ensure_ascii=False, sort_keys=True),
        request.key,
        json.dumps(request.question, ensure_ascii=False, sort_keys=True),
        json.dumps(request.slots, ensure_ascii=False, sort_keys=True),
        request.created_at,
        request.expires_at,
    )


def _name(user: str) -> str:
    return person(user).casefold()


class ApprovalTable:
    """Where requests live (:class:`~mcp_bridge.approvals.second_approver.ApprovalStore`): the rules in
    SQL, on the approvals table of the plugin's database."""

    def __init__(self, database: Database, *, owns: bool = False) -> None:
        """``owns``: the store opened ``database`` itself, and closes it."""
        self.database = database
        self._owns = owns

    async def _all(self, sql: str, *args: Any) -> list[ApprovalRequest]:
        return [_row(row) for row in await self.database.fetch(sql, *args)]

    async def _run(self, sql: str, *args: Any) -> None:
        await self.database.execute(sql, *args)

    async def _one(self, sql: str, *args: Any) -> ApprovalRequest | None:
        rows = await self._all(sql, *args)
        return rows[0] if rows else None

    async def add(self, request: ApprovalRequest) -> None:
        await self._run(_INSERT, *_insert_values(request))

    async def get(self, request_id: str) -> ApprovalRequest | None:
        return await self._one(_GET, request_id)

    async def pending(self, roles: Collection[str], now: float) -> list[ApprovalRequest]:
        roles = sorted(roles)
        if not roles:
            return []
        return await self._all(_PENDING.format(roles=", ".join("?" for _ in roles)), now, *roles)

    async def decide(self, request_id: str, status: Status, by: str, now: float) -> bool:
        if status not in ("approved", "refused"):
            raise ValueError(f"a decision is approved or refused, not {status!r}")
        return await self._one(_DECIDE, status, by, now, request_id, now, _name(by)) is not None

    async def expire_due(self, now: float) -> list[ApprovalRequest]:
        return await self._all(_EXPIRE, now, now)

    async def untold(self, now: float, retry_after: float) -> list[ApprovalRequest]:
        return await self._all(_UNTOLD, now, now, now - retry_after)

    async def take(
        self, request_id: str, conversation_id: str, now: float, lease: float
    ) -> ApprovalRequest | None:
        statements = (
            (_RUN, (now + lease, request_id, conversation_id, now)),
            (_RESUME, (now + lease, request_id, conversation_id, now)),
            (_LATE, (request_id, conversation_id, now)),
            (_TELL, (request_id, conversation_id)),
        )
        for sql, args in statements:
            taken = await self._one(sql, *args)
            if taken is not None:
                return taken
        return None

    async def renew(self, request_id: str, attempts: int, until: float) -> bool:
        return await self._one(_RENEW, until, request_id, attempts) is not None

    async def finish(self, request_id: str, result: str) -> None:
        await self._run(_FINISH, result, request_id)

    async def aclose(self) -> None:
        if self._owns:
            await self.database.aclose()


def open_store(where: str) -> ApprovalTable:
    """The store in the database ``where`` names (a SQLite file or a ``postgresql://`` URL), which it
    opens and closes itself."""
    return ApprovalTable(open_database(where), owns=True)
