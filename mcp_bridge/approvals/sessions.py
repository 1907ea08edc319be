"""The approval page's sessions, kept on the server: revocable, and worth nothing to whoever reads the store.

A login makes a session: its cookie holds 32 random bytes (``secrets.token_urlsafe(32)``), which only
the browser has; the store keeps the SHA-256 of them, the user, the roles an OpenID provider gave
(password logins keep none: their roles are read from the approvers file at every request), and the
expiry. So:

* logging out removes the session from the store: the cookie, copied before, opens nothing after;
* a reader of the store learns who is logged in, never a cookie that would let them in;
* every page replica finds every session: the store is shared.

Where (``APPROVAL_PAGE_SESSIONS``): a ``redis://`` (or ``rediss://``) URL, the sessions expiring in
Redis by themselves (as ``make cluster-up`` runs it; the ``redis`` package); otherwise the approval
store's database (``APPROVALS_DATABASE``: SQLite, or PostgreSQL through asyncpg), table
``approval_page_sessions``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Collection
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mcp_bridge.approvals.store import DEFAULT_PATH

__all__ = ["Session", "SessionStore", "Sessions", "open_sessions"]

_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32); fullmatch, linear
_REDIS_PREFIX = "mcp-bridge:approval-page:"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_page_sessions (
    digest TEXT PRIMARY KEY,
    user_name TEXT NOT NULL,
    roles TEXT,
    expires_at DOUBLE PRECISION NOT NULL
);
"""


@dataclass(frozen=True)
class Session:
    """Who a session is: the user, their roles when an OpenID provider gave them (None: the approvers
    file's, read at every request), and until when (a Unix time)."""

    user: str
    roles: frozenset[str] | None
    expires_at: float


class SessionStore(Protocol):
    async def add(self, digest: str, session: Session) -> None: ...

    async def get(self, digest: str, now: float) -> Session | None: ...

    async def remove(self, digest: str) -> None: ...

    async def aclose(self) -> None: ...


def _encode_roles(roles: Collection[str] | None) -> str | None:
    return None if roles is None else json.dumps(sorted(roles))


def _decode(user: Any, roles: Any, expires_at: Any) -> Session:
    return Session(str(user), None if roles is None else frozenset(json.loads(roles)), float(expires_at))


class SQLiteSessions:
    """Sessions in a SQLite file (the approval store's); each statement on a connection of its own."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn:
            conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10, isolation_level=None)

    def _execute(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with closing(self._connect()) as conn:
            return conn.execute(sql, args).fetchall()

    async def _run(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._execute, sql, args)

    async def add(self, digest: str, session: Session) -> None:
        await self._run("DELETE FROM approval_page_sessions WHERE expires_at < ?", time.time())
        await self._run(
            "INSERT INTO approval_page_sessions (digest, user_name, roles, expires_at) VALUES (?, ?, ?, ?)",
            digest,
            session.user,
            _encode_roles(session.roles),
            session.expires_at,
        )

    async def get(self, digest: str, now: float) -> Session | None:
        rows = await self._run(
            "SELECT user_name, roles, expires_at FROM approval_page_sessions "
            "WHERE digest = ? AND expires_at > ?",
            digest,
            now,
        )
        return _decode(*rows[0]) if rows else None

    async def remove(self, digest: str) -> None:
        await self._run("DELETE FROM approval_page_sessions WHERE digest = ?", digest)

    async def aclose(self) -> None:
        return None


class PostgresSessions:
    """Sessions in a PostgreSQL database (the approval store's; asyncpg), a small pool per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: Any = None
        self._opening = asyncio.Lock()

    async def _connection_pool(self) -> Any:
        async with self._opening:
            if self._pool is None:
                import asyncpg  # the `postgres` extra

                pool = await asyncpg.create_pool(self.url, min_size=1, max_size=3)
                async with pool.acquire() as conn, conn.transaction():
                    # The same lock the approval store takes: one process creates a schema at a time.
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", 0x415050)
                    await conn.execute(_SCHEMA)
                self._pool = pool
            return self._pool

    async def add(self, digest: str, session: Session) -> None:
        pool = await self._connection_pool()
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM approval_page_sessions WHERE expires_at < $1", time.time())
            await conn.execute(
                "INSERT INTO approval_page_sessions (digest, user_name, roles, expires_at) "
                "VALUES ($1, $2, $3, $4)",
                digest,
                session.user,
                _encode_roles(session.roles),
                session.expires_at,
            )

    async def get(self, digest: str, now: float) -> Session | None:
        pool = await self._connection_pool()
        async with pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT user_name, roles, expires_at FROM approval_page_sessions "
                "WHERE digest = $1 AND expires_at > $2",
                digest,
                now,
            )
        return _decode(*row) if row is not None else None

    async def remove(self, digest: str) -> None:
        pool = await self._connection_pool()
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM approval_page_sessions WHERE digest = $1", digest)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


class RedisSessions:
    """Sessions in Redis (the ``redis`` package), each a key that expires with the session."""

    def __init__(self, url: str) -> None:
        import redis.asyncio  # only when a redis:// URL is configured

        self._redis: Any = redis.asyncio.Redis.from_url(url, socket_timeout=10)

    @staticmethod
    def _key(digest: str) -> str:
        return f"{_REDIS_PREFIX}session:{digest}"

    async def add(self, digest: str, session: Session) -> None:
        value = json.dumps({"u": session.user, "r": _encode_roles(session.roles), "e": session.expires_at})
        seconds = max(1, int(session.expires_at - time.time()) + 1)
        await self._redis.set(self._key(digest), value, ex=seconds)

    async def get(self, digest: str, now: float) -> Session | None:
        value = await self._redis.get(self._key(digest))
        if value is None:
            return None
        found = json.loads(value)
        session = _decode(found["u"], found["r"], found["e"])
        return session if session.expires_at > now else None

    async def remove(self, digest: str) -> None:
        await self._redis.delete(self._key(digest))

    async def aclose(self) -> None:
        await self._redis.aclose()


def open_sessions(where: str | None, approvals_database: str | None) -> SessionStore:
    """The session store ``where`` names (``APPROVAL_PAGE_SESSIONS``: a ``redis://`` URL), or, unset,
    the approval store's database ``approvals_database`` names (``APPROVALS_DATABASE``)."""
    if where:
        if not where.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"APPROVAL_PAGE_SESSIONS={where.split('://')[0]}://...: a redis:// URL, or unset for the "
                "approval store's database"
            )
        return RedisSessions(where)
    database = approvals_database or DEFAULT_PATH
    if database.startswith(("postgresql://", "postgres://")):
        return PostgresSessions(database)
    return SQLiteSessions(database)


def digest(value: str) -> str:
    return hashlib.sha256(b"approval page session\0" + value.encode("ascii")).hexdigest()


class Sessions:
    """The page's sessions over a store: started at a login, read at every request, ended at logout."""

    def __init__(self, store: SessionStore, seconds: int, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.seconds = seconds
        self._clock = clock

    async def start(self, user: str, roles: Collection[str] | None) -> str:
        """A new session for ``user``: the cookie's value (never stored)."""
        value = secrets.token_urlsafe(32)
        kept = None if roles is None else frozenset(roles)
        await self.store.add(digest(value), Session(user, kept, self._clock() + self.seconds))
        return value

    async def read(self, value: str) -> Session | None:
        """The session a cookie's value opens, if the store still has it and it has not expired."""
        if not _VALUE.fullmatch(value):
            return None
        return await self.store.get(digest(value), self._clock())

    async def end(self, value: str) -> None:
        if _VALUE.fullmatch(value):
            await self.store.remove(digest(value))
