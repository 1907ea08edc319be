"""Where approval requests live: SQLite by default, PostgreSQL when configured; shared by every replica.

``APPROVALS_DATABASE`` is a file path (SQLite, default ``var/approvals.sqlite3``) or a
``postgresql://`` URL (asyncpg, installed with the ``postgres`` extra). Both run the same SQL, and
every change is one conditional ``UPDATE ... WHERE status = ... RETURNING``: the database, not a
check-then-write in this process, decides which of two replicas deciding at the same moment wins.
The store holds the exact call (the note text too): it is the record an approver reads, so guard
the database like the system of record it writes to.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Collection, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from mcp_bridge.approvals.second_approver import ApprovalRequest, ApprovalStore, Status, person

__all__ = ["PostgresApprovalStore", "SQLiteApprovalStore", "open_store"]

DEFAULT_PATH = "var/approvals.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_requests (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    requester TEXT NOT NULL,
    requester_name TEXT NOT NULL,
    role TEXT NOT NULL,
    skill TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    question TEXT NOT NULL,
    slots TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    decided_by TEXT,
    decided_at DOUBLE PRECISION,
    told INTEGER NOT NULL DEFAULT 0,
    notified_at DOUBLE PRECISION,
    result TEXT,
    running_until DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS approval_requests_by_status ON approval_requests (status, expires_at);
"""
# Columns added after the first release, for a table made before them (name, SQL type).
_ADDED = (("running_until", "DOUBLE PRECISION"), ("attempts", "INTEGER NOT NULL DEFAULT 0"))
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


class _SQLStore:
    """The store's rules in SQL; a subclass runs statements (``?`` placeholders) on its engine."""

    async def _all(self, sql: str, *args: Any) -> list[ApprovalRequest]:
        raise NotImplementedError

    async def _run(self, sql: str, *args: Any) -> None:
        raise NotImplementedError

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

    async def finish(self, request_id: str, result: str) -> None:
        await self._run(_FINISH, result, request_id)


class SQLiteApprovalStore(_SQLStore):
    """Requests in a SQLite file; each statement on a connection of its own, in a worker thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn:
            conn.executescript(_SCHEMA)
            have = {row[1] for row in conn.execute("PRAGMA table_info(approval_requests)")}
            for name, kind in _ADDED:
                if name not in have:
                    try:
                        conn.execute(f"ALTER TABLE approval_requests ADD COLUMN {name} {kind}")
                    except sqlite3.OperationalError as exc:  # another process added it just now
                        if "duplicate column" not in str(exc):
                            raise

    def _connect(self) -> sqlite3.Connection:
        # Autocommit: each statement is its own transaction; a writer waits up to 10 s for another.
        return sqlite3.connect(self.path, timeout=10, isolation_level=None)

    def _execute(self, sql: str, args: tuple[Any, ...]) -> list[ApprovalRequest]:
        with closing(self._connect()) as conn:
            return [_row(row) for row in conn.execute(sql, args).fetchall()]

    async def _all(self, sql: str, *args: Any) -> list[ApprovalRequest]:
        return await asyncio.to_thread(self._execute, sql, args)

    async def _run(self, sql: str, *args: Any) -> None:
        await asyncio.to_thread(self._execute, sql, args)

    async def aclose(self) -> None:
        return None


_PLACEHOLDER = re.compile(r"\?")
# Any fixed number: every process creating the schema takes this lock first.
_SCHEMA_LOCK = 0x415050  # "APP"


def _numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    count = iter(range(1, 10_000))
    return _PLACEHOLDER.sub(lambda _: f"${next(count)}", sql)


class PostgresApprovalStore(_SQLStore):
    """Requests in a PostgreSQL database (asyncpg); a small pool per process, opened on first use."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: Any = None
        self._opening = asyncio.Lock()

    async def _connection_pool(self) -> Any:
        async with self._opening:
            if self._pool is None:
                import asyncpg  # the `postgres` extra

                pool = await asyncpg.create_pool(self.url, min_size=1, max_size=5)
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                    await conn.execute(_SCHEMA)
                    for name, kind in _ADDED:
                        await conn.execute(
                            f"ALTER TABLE approval_requests ADD COLUMN IF NOT EXISTS {name} {kind}"
                        )
                self._pool = pool
            return self._pool

    async def _all(self, sql: str, *args: Any) -> list[ApprovalRequest]:
        pool = await self._connection_pool()
        async with pool.acquire() as conn:
            rows = await conn.fetch(_numbered(sql), *args)
        return [_row(tuple(row)) for row in rows]

    async def _run(self, sql: str, *args: Any) -> None:
        pool = await self._connection_pool()
        async with pool.acquire() as conn:
            await conn.execute(_numbered(sql), *args)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def open_store(where: str | None) -> ApprovalStore:
    """The store ``where`` names: a ``postgresql://`` URL, else a SQLite file (default
    :data:`DEFAULT_PATH`)."""
    where = where or DEFAULT_PATH
    if where.startswith(("postgresql://", "postgres://")):
        return PostgresApprovalStore(where)
    return SQLiteApprovalStore(where)
