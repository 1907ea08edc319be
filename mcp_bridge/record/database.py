"""The plugin's one database: SQLite in a file by default, PostgreSQL for replicas; the same SQL on both.

``MCP_BRIDGE_DATABASE`` (:attr:`mcp_bridge.config.settings.Settings.database`) is a file path (default
``var/mcp_bridge.sqlite3``) or a ``postgresql://`` URL (asyncpg, the ``postgres`` extra). Statements
are written with ``?`` placeholders; on PostgreSQL they become ``$1, $2, ...``. Every change that must
happen once (a question answered, a message used, an approval taken) is one conditional ``UPDATE ...
RETURNING`` inside a :meth:`Database.transaction`, so the database decides which of two replicas wins.

SQLite: one connection per database object, used by one statement or transaction at a time; the file is
created owner-only (0600) before SQLite opens it, in WAL mode (readers never wait for the writer) with
``synchronous=NORMAL`` (a commit survives the process dying; the last commits may not survive the
machine losing power). Statements run on the caller's thread: each takes microseconds. Only waiting
for another process's write lock moves to a worker thread, so the event loop never waits on it.

PostgreSQL: a small pool per process, opened on first use.

The schema is migrated when the database is first used (:mod:`mcp_bridge.record.schema`), under a lock,
by whichever process comes first.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = [
    "Database",
    "PostgresDatabase",
    "SQLiteDatabase",
    "Tx",
    "open_database",
]

# How long a statement waits for another process's write lock before it fails.
LOCK_WAIT_SECONDS = 10.0

Row = tuple[Any, ...]
Dialect = Literal["sqlite", "postgresql"]


class Tx(Protocol):
    """Statements inside one transaction: all of them commit, or none."""

    dialect: Dialect

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Runs ``sql``; how many rows it changed."""
        ...


class Database(Protocol):
    dialect: Dialect
    # Where it is, for messages (a URL without its password).
    where: str

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def execute(self, sql: str, *args: Any) -> int: ...

    def transaction(self) -> Any:
        """``async with database.transaction() as tx:``: a :class:`Tx`, committed when the block ends
        and rolled back when it raises."""
        ...

    async def aclose(self) -> None: ...


def open_database(location: str) -> Database:
    """The database ``location`` names: a ``postgresql://`` URL, else a SQLite file (``:memory:`` for
    one in this process only)."""
    if location.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(location)
    return SQLiteDatabase(location)


# -- SQLite -----------------------------------------------------------------------------------------


class _SQLiteTx:
    dialect: Dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return self.fetch_now(sql, args)

    async def execute(self, sql: str, *args: Any) -> int:
        return self.execute_now(sql, args)

    def fetch_now(self, sql: str, args: Sequence[Any]) -> list[Row]:
        return [tuple(row) for row in self._connection.execute(sql, tuple(args)).fetchall()]

    def execute_now(self, sql: str, args: Sequence[Any]) -> int:
        return self._connection.execute(sql, tuple(args)).rowcount


class SQLiteDatabase:
    """A SQLite file (or ``:memory:``), migrated when opened."""

    dialect: Dialect = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.where = str(path)
        memory = self.where == ":memory:"
        if not memory:
            _create_private(Path(path))
        # Autocommit: a transaction is an explicit BEGIN IMMEDIATE ... COMMIT.
        self._connection = sqlite3.connect(
            self.where, timeout=0, isolation_level=None, check_same_thread=False
        )
        if not memory:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")
        # Never wait on the event loop: a statement that meets another process's write lock fails at
        # once and is run again in a worker thread, which may wait (_waiting).
        self._connection.execute("PRAGMA busy_timeout=0")
        # One statement or transaction at a time on the connection, whichever thread or loop asks.
        self._busy = threading.Lock()
        from mcp_bridge.record.schema import migrate_sqlite

        self._locked_sync(lambda: migrate_sqlite(self._begin_now, self._connection))

    # The connection is shared: every use holds ``_busy``. A use that must wait for another process
    # waits in a worker thread.

    def _begin_now(self, wait: bool) -> None:
        if wait:
            self._waiting(lambda: self._connection.execute("BEGIN IMMEDIATE"))
        else:
            self._connection.execute("BEGIN IMMEDIATE")

    def _waiting(self, work: Any) -> Any:
        """``work`` allowed to wait up to LOCK_WAIT_SECONDS for another process's write lock (in a
        worker thread, holding ``_busy``)."""
        self._connection.execute(f"PRAGMA busy_timeout={int(LOCK_WAIT_SECONDS * 1000)}")
        try:
            return work()
        finally:
            self._connection.execute("PRAGMA busy_timeout=0")

    def _locked_sync(self, work: Any) -> Any:
        with self._busy:
            return work()

    async def _acquire(self) -> None:
        # Polled: the connection is shared by whichever thread or event loop uses the database, and the
        # lock is held for microseconds, except while another process holds SQLite's write lock.
        while not self._busy.acquire(blocking=False):  # noqa: ASYNC110
            await asyncio.sleep(0.0005)

    async def _statement(self, sql: str, args: Sequence[Any], fetch: bool) -> Any:
        await self._acquire()
        try:
            tx = _SQLiteTx(self._connection)
            run = tx.fetch_now if fetch else tx.execute_now
            try:
                return run(sql, args)
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    raise
            # Another process holds the write lock: wait for it off the event loop.
            return await asyncio.to_thread(self._waiting, lambda: run(sql, args))
        finally:
            self._busy.release()

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        rows: list[Row] = await self._statement(sql, args, fetch=True)
        return rows

    async def execute(self, sql: str, *args: Any) -> int:
        count: int = await self._statement(sql, args, fetch=False)
        return count

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_SQLiteTx]:
        await self._acquire()
        try:
            try:
                self._begin_now(wait=False)
            except sqlite3.OperationalError as exc:
                if not _locked(exc):
                    raise
                await asyncio.to_thread(self._begin_now, True)
            try:
                yield _SQLiteTx(self._connection)
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")
        finally:
            self._busy.release()

    async def aclose(self) -> None:
        await self._acquire()
        try:
            self._connection.close()
        finally:
            self._busy.release()


def _locked(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _create_private(path: Path) -> None:
    """The file, created owner-only before SQLite opens it (never readable by others, not even for a
    moment); an existing file is narrowed to owner-only too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            path.chmod(0o600)
        except PermissionError:
            pass  # another user's file: SQLite says so when it cannot open it
    else:
        os.close(descriptor)


# -- PostgreSQL --------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\?")


@functools.lru_cache(maxsize=256)
def numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    count = iter(range(1, 10_000))
    return _PLACEHOLDER.sub(lambda _: f"${next(count)}", sql)


class _PostgresTx:
    dialect: Dialect = "postgresql"

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return [tuple(row) for row in await self._connection.fetch(numbered(sql), *args)]

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._connection.execute(numbered(sql), *args)
        return _changed(status)


def _changed(status: str) -> int:
    """The row count of an asyncpg status line ("UPDATE 1", "INSERT 0 1")."""
    last = status.rsplit(" ", 1)[-1] if status else ""
    return int(last) if last.isdigit() else 0


async def _nothing_to_reset(connection: Any) -> None:
    return None


class PostgresDatabase:
    """A PostgreSQL database (asyncpg); a small pool per process, opened and migrated on first use."""

    dialect: Dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)
        self._pool: Any = None
        self._opening = threading.Lock()

    async def _connection_pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        while not self._opening.acquire(blocking=False):  # noqa: ASYNC110 (as SQLiteDatabase._acquire)
            await asyncio.sleep(0.001)
        try:
            if self._pool is None:
                import asyncpg  # the `postgres` extra

                from mcp_bridge.record.schema import migrate_postgres

                # reset: nothing, where asyncpg's default sends a reset query (a round trip) every
                # time a connection goes back to the pool: the record sets no session state (no SET,
                # LISTEN, advisory lock or cursor), and an open transaction is still rolled back.
                pool = await asyncpg.create_pool(self.url, min_size=1, max_size=5, reset=_nothing_to_reset)
                async with pool.acquire() as connection:
                    await migrate_postgres(connection)
                self._pool = pool
            return self._pool
        finally:
            self._opening.release()

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        pool = await self._connection_pool()
        return [tuple(row) for row in await pool.fetch(numbered(sql), *args)]

    async def execute(self, sql: str, *args: Any) -> int:
        pool = await self._connection_pool()
        return _changed(await pool.execute(numbered(sql), *args))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_PostgresTx]:
        pool = await self._connection_pool()
        async with pool.acquire() as connection, connection.transaction():
            yield _PostgresTx(connection)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
