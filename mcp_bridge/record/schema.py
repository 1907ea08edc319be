"""The database's schema and its versioned migrations, the same on SQLite and PostgreSQL.

Each migration has a version; ``mcp_bridge_schema`` lists those applied. Opening a database applies the
missing ones in order, in one transaction, under a lock (SQLite's write lock, PostgreSQL's advisory
lock), so two replicas starting together migrate once. A migration never changes once released: a new
one is added instead.

1. The approvals and the people's tokens (the tables of 0.3.0, where each had a database of its own;
   a table already there is kept, and gains the columns added since it was made).
2. The action server's record (:mod:`mcp_bridge.record.store`): the questions it asked and how each
   ended, the signed messages it used, the permissions people gave and withdrew, and the key it seals
   with when no ``CONFIRMATION_SECRET`` is set.
3. The approval page's sessions (:mod:`mcp_bridge.approvals.sessions`), when not kept in Redis.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MIGRATIONS", "Migration", "migrate_postgres", "migrate_sqlite"]

_VERSIONS = (
    "CREATE TABLE IF NOT EXISTS mcp_bridge_schema (version INTEGER PRIMARY KEY, "
    "description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)
# Any fixed number: every PostgreSQL client migrating takes this lock first.
_LOCK = 0x4D434252  # "MCBR"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    # Columns a table made by an earlier release may lack: (table, column, SQL type).
    columns: tuple[tuple[str, str, str], ...] = ()


MIGRATIONS = (
    Migration(
        1,
        "approvals and the people's tokens",
        (
            """CREATE TABLE IF NOT EXISTS approval_requests (
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
            )""",
            "CREATE INDEX IF NOT EXISTS approval_requests_by_status "
            "ON approval_requests (status, expires_at)",
            "CREATE TABLE IF NOT EXISTS mcp_tokens (person TEXT NOT NULL, server TEXT NOT NULL, "
            "sealed TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (person, server))",
            "CREATE TABLE IF NOT EXISTS mcp_sign_ins (nonce TEXT PRIMARY KEY, sealed TEXT NOT NULL, "
            "expires_at DOUBLE PRECISION NOT NULL)",
        ),
        columns=(
            ("approval_requests", "running_until", "DOUBLE PRECISION"),
            ("approval_requests", "attempts", "INTEGER NOT NULL DEFAULT 0"),
        ),
    ),
    Migration(
        2,
        "the action server's record: questions, messages used, permissions",
        (
            # A question the action server asked (ours, or a server's, kind 'server'): who, when, the
            # sealed record itself, and how it ended. At most one is open per conversation.
            """CREATE TABLE record_questions (
                id TEXT PRIMARY KEY,
                conversation_id TEXT NOT NULL,
                kind TEXT NOT NULL,
                person TEXT,
                sealed TEXT NOT NULL,
                asked_at DOUBLE PRECISION NOT NULL,
                asked_after DOUBLE PRECISION,
                asked_by TEXT,
                state TEXT NOT NULL,
                ended_at DOUBLE PRECISION,
                ended_by TEXT,
                reason TEXT
            )""",
            "CREATE INDEX record_questions_open ON record_questions (conversation_id, state)",
            # A signed message the action server acted on (its proof's digest): what it answered and
            # what it started, each at most once.
            """CREATE TABLE record_messages (
                id TEXT PRIMARY KEY,
                conversation_id TEXT NOT NULL,
                person TEXT,
                said_at DOUBLE PRECISION,
                seen_at DOUBLE PRECISION NOT NULL,
                answered TEXT,
                started TEXT
            )""",
            "CREATE INDEX record_messages_by_conversation ON record_messages (conversation_id, said_at)",
            # A remembered permission: granted, then perhaps withdrawn; each use counted.
            """CREATE TABLE record_permissions (
                id TEXT PRIMARY KEY,
                conversation_id TEXT NOT NULL,
                person TEXT,
                sealed TEXT NOT NULL,
                granted_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                state TEXT NOT NULL,
                withdrawn_at DOUBLE PRECISION,
                uses INTEGER NOT NULL DEFAULT 0,
                last_used_at DOUBLE PRECISION
            )""",
            "CREATE INDEX record_permissions_by_person "
            "ON record_permissions (conversation_id, person, state)",
            "CREATE TABLE record_keys (name TEXT PRIMARY KEY, value TEXT NOT NULL, "
            "created_at DOUBLE PRECISION NOT NULL)",
        ),
    ),
    Migration(
        3,
        "the approval page's sessions",
        (
            # A login's session: the digest of its cookie (never the cookie), who, their OpenID roles.
            "CREATE TABLE IF NOT EXISTS approval_page_sessions (digest TEXT PRIMARY KEY, "
            "user_name TEXT NOT NULL, roles TEXT, expires_at DOUBLE PRECISION NOT NULL)",
        ),
    ),
)


def migrate_sqlite(begin: Callable[[bool], None], connection: sqlite3.Connection) -> None:
    """Apply the missing migrations to a SQLite database, in one transaction (``begin(wait)`` starts
    it, taking the write lock and waiting for it)."""
    begin(True)
    try:
        connection.execute(_VERSIONS)
        applied = {row[0] for row in connection.execute("SELECT version FROM mcp_bridge_schema")}
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            for statement in migration.statements:
                connection.execute(statement)
            for table, column, kind in migration.columns:
                have = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            connection.execute(
                "INSERT INTO mcp_bridge_schema (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, time.time()),
            )
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


async def migrate_postgres(connection: Any) -> None:
    """Apply the missing migrations to a PostgreSQL database (an asyncpg connection), in one transaction
    under an advisory lock."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        await connection.execute(_VERSIONS)
        applied = {row[0] for row in await connection.fetch("SELECT version FROM mcp_bridge_schema")}
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            for statement in migration.statements:
                await connection.execute(statement)
            for table, column, kind in migration.columns:
                await connection.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
            await connection.execute(
                "INSERT INTO mcp_bridge_schema (version, description, applied_at) VALUES ($1, $2, $3)",
                migration.version,
                migration.description,
                time.time(),
            )
