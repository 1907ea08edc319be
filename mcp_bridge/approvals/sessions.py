"""The approval page's sessions, kept on the server: revocable, and worth nothing to whoever reads the store.

A login makes a session: its cookie holds 32 random bytes (``secrets.token_urlsafe(32)``), which only
the browser has; the store keeps the SHA-256 of them, the user, the roles an OpenID provider gave
(password logins keep none: their roles are read from the approvers file at every request), and the
expiry. So:

* logging out removes the session from the store: the cookie, copied before, opens nothing after;
* a reader of the store learns who is logged in, never a cookie that would let them in;
* every page replica finds every session: the store is shared.

Where (``APPROVAL_PAGE_SESSIONS``): a ``redis://`` (or ``rediss://``) URL, the sessions expiring in
Redis by themselves (as ``make cluster-up`` runs it; the ``redis`` package); otherwise the plugin's
database (``MCP_BRIDGE_DATABASE``: SQLite, or PostgreSQL through asyncpg; :mod:`mcp_bridge.record.database`),
table ``approval_page_sessions`` (:mod:`mcp_bridge.record.schema`).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_bridge.record.database import Database, open_database

__all__ = ["Session", "SessionStore", "Sessions", "open_sessions"]

_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32); fullmatch, linear
_REDIS_PREFIX = "mcp-bridge:approval-page:"


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


class DatabaseSessions:
    """Sessions in the plugin's database (the approvals'), which the page opens and closes."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def add(self, digest: str, session: Session) -> None:
        await self.database.execute("DELETE FROM approval_page_sessions WHERE expires_at < ?", time.time())
        await self.database.execute(
            "INSERT INTO approval_page_sessions (digest, user_name, roles, expires_at) VALUES (?, ?, ?, ?)",
            digest,
            session.user,
            _encode_roles(session.roles),
            session.expires_at,
        )

    async def get(self, digest: str, now: float) -> Session | None:
        rows = await self.database.fetch(
            "SELECT user_name, roles, expires_at FROM approval_page_sessions "
            "WHERE digest = ? AND expires_at > ?",
            digest,
            now,
        )
        return _decode(*rows[0]) if rows else None

    async def remove(self, digest: str) -> None:
        await self.database.execute("DELETE FROM approval_page_sessions WHERE digest = ?", digest)

    async def aclose(self) -> None:
        await self.database.aclose()


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


def open_sessions(where: str | None, database: str) -> SessionStore:
    """The session store ``where`` names (``APPROVAL_PAGE_SESSIONS``: a ``redis://`` URL), or, unset,
    the plugin's database at ``database`` (``MCP_BRIDGE_DATABASE``)."""
    if where:
        if not where.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"APPROVAL_PAGE_SESSIONS={where.split('://')[0]}://...: a redis:// URL, or unset for the "
                "plugin's database"
            )
        return RedisSessions(where)
    return DatabaseSessions(open_database(database))


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
