"""The CRM store on PostgreSQL (asyncpg), used when `CRM_DATABASE_URL` is set.

Same tables and columns as the SQLite store, and the same rules:

* An email address is unique whatever its case: a UNIQUE index on `lower(email)` (SQLite: the
  column's NOCASE collation).
* An idempotency key is stored at most once: the column is UNIQUE and a note is written with
  `INSERT ... ON CONFLICT (idempotency_key) DO NOTHING`. Two requests with one key, on two
  CRM processes at the same moment, leave one note: the second insert waits for the first to
  commit, then does nothing, and both answer with the first note. The database enforces it, not
  a check-then-insert in this process. The key belongs to the request that stored it: the
  second request gets the note only if it names the same contact and text, else ConflictError.
* An unknown contact is refused by the foreign key; nothing is written.
* Notes and tasks carry their `author` (crm.store); a database made before that column gets it
  (`ADD COLUMN IF NOT EXISTS`, its rows NULL). Notes and tasks share one write-once insert.

Several processes may open the store at once (replicas starting together): the schema is
created under a transaction-scoped advisory lock, so `CREATE ... IF NOT EXISTS` never races.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import asyncpg

from crm.errors import NotFoundError
from crm.store import (
    DEMO_CONTACTS,
    Contact,
    Note,
    Row,
    Task,
    _utc_now,
    contact_from_row,
    note_from_row,
    replayed_note,
    replayed_task,
    task_from_row,
)
from crm.validation import (
    NOTES_LIMIT_DEFAULT,
    validate_author,
    validate_due_date,
    validate_email,
    validate_idempotency_key,
    validate_limit,
    validate_note_text,
    validate_task_title,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS contacts (
    id BIGSERIAL PRIMARY KEY,
    email TEXT NOT NULL,
    name TEXT NOT NULL,
    company TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS contacts_email_nocase ON contacts (lower(email));
CREATE TABLE IF NOT EXISTS notes (
    id BIGSERIAL PRIMARY KEY,
    contact_id BIGINT NOT NULL REFERENCES contacts(id),
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    author TEXT
);
ALTER TABLE notes ADD COLUMN IF NOT EXISTS author TEXT;
CREATE INDEX IF NOT EXISTS notes_by_contact ON notes (contact_id, id);
CREATE TABLE IF NOT EXISTS tasks (
    id BIGSERIAL PRIMARY KEY,
    contact_id BIGINT NOT NULL REFERENCES contacts(id),
    title TEXT NOT NULL,
    due_date TEXT NOT NULL,
    created_at TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    author TEXT
);
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS author TEXT;
CREATE INDEX IF NOT EXISTS tasks_by_contact ON tasks (contact_id, id);
"""
# Any fixed number: every process creating the schema takes this lock first.
_SCHEMA_LOCK = 0x43524D  # "CRM"
_POOL_MAX = 10


class PostgresStore:
    """Contacts and timeline notes in a PostgreSQL database; a pool of connections per process."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: asyncpg.Pool | None = None

    def __str__(self) -> str:
        # Host, port and database; the URL's user and password stay out of logs.
        parts = urlsplit(self._url)
        return f"PostgreSQL {parts.hostname}:{parts.port or 5432}{parts.path}"

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool = await asyncpg.create_pool(self._url, min_size=1, max_size=_POOL_MAX)
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                await conn.execute(_SCHEMA)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("PostgresStore used before open()")
        return self._pool

    async def find_contact_by_email(self, email: str) -> Contact | None:
        address = validate_email(email)
        row = await self.pool.fetchrow("SELECT * FROM contacts WHERE lower(email) = lower($1)", address)
        return None if row is None else contact_from_row(row)

    async def get_contact(self, contact_id: int) -> Contact | None:
        row = await self.pool.fetchrow("SELECT * FROM contacts WHERE id = $1", contact_id)
        return None if row is None else contact_from_row(row)

    async def list_notes(self, contact_id: int, limit: int = NOTES_LIMIT_DEFAULT) -> list[Note]:
        count = validate_limit(limit)
        rows = await self.pool.fetch(
            "SELECT * FROM notes WHERE contact_id = $1 ORDER BY id DESC LIMIT $2", contact_id, count
        )
        return [note_from_row(row) for row in rows]

    async def _write_once(
        self, table: str, contact_id: int, key: str | None, values: dict[str, str | None]
    ) -> tuple[Row, bool]:
        """Insert a row of ``table`` (notes or tasks, our own names) for the contact, unless ``key``
        was used before: (the new row, False) or (the row stored under the key, True)."""
        columns = ["contact_id", *values, "created_at", "idempotency_key"]
        placeholders = ", ".join(f"${n}" for n in range(1, len(columns) + 1))
        insert = (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})"
            " ON CONFLICT (idempotency_key) DO NOTHING RETURNING *"
        )
        stored = f"SELECT * FROM {table} WHERE idempotency_key = $1"
        async with self.pool.acquire() as conn:
            if key is not None and (row := await conn.fetchrow(stored, key)) is not None:
                return row, True  # a key seen before: the caller checks it is the same request
            try:
                row = await conn.fetchrow(insert, contact_id, *values.values(), _utc_now(), key)
            except asyncpg.ForeignKeyViolationError:
                raise NotFoundError(f"There is no contact with id {contact_id}.") from None
            if row is not None:
                return row, False
            # Another request stored this key between our look-up and our insert; it has committed
            # (ON CONFLICT waited for it), so its row is there to return.
            row = await conn.fetchrow(stored, key)
            if row is None:  # pragma: no cover - the conflicting row cannot vanish: nothing is deleted
                raise RuntimeError(f"idempotency key conflicted but no row of {table} carries it")
            return row, True

    async def add_note(
        self, contact_id: int, text: str, idempotency_key: str | None = None, *, author: str | None = None
    ) -> tuple[Note, bool]:
        body, by = validate_note_text(text), validate_author(author)
        key = validate_idempotency_key(idempotency_key)
        row, replayed = await self._write_once("notes", contact_id, key, {"text": body, "author": by})
        if replayed:
            return replayed_note(row, contact_id, body, by), False  # the same request again, or refused
        return note_from_row(row), True

    async def add_task(
        self,
        contact_id: int,
        title: str,
        due_date: str,
        idempotency_key: str | None = None,
        *,
        author: str | None = None,
    ) -> tuple[Task, bool]:
        body, due, by = validate_task_title(title), validate_due_date(due_date), validate_author(author)
        key = validate_idempotency_key(idempotency_key)
        values = {"title": body, "due_date": due, "author": by}
        row, replayed = await self._write_once("tasks", contact_id, key, values)
        if replayed:
            return replayed_task(row, contact_id, body, due, by), False
        return task_from_row(row), True

    async def list_tasks(self, contact_id: int) -> list[Task]:
        rows = await self.pool.fetch("SELECT * FROM tasks WHERE contact_id = $1 ORDER BY id DESC", contact_id)
        return [task_from_row(row) for row in rows]

    async def count_notes(self, contact_id: int | None = None) -> int:
        value: Any
        if contact_id is None:
            value = await self.pool.fetchval("SELECT COUNT(*) FROM notes")
        else:
            value = await self.pool.fetchval("SELECT COUNT(*) FROM notes WHERE contact_id = $1", contact_id)
        return int(value)

    async def seed(self) -> list[Contact]:
        added: list[Contact] = []
        async with self.pool.acquire() as conn, conn.transaction():
            for email, name, company in DEMO_CONTACTS:
                row = await conn.fetchrow(
                    "INSERT INTO contacts (email, name, company) VALUES ($1, $2, $3)"
                    " ON CONFLICT (lower(email)) DO NOTHING RETURNING id",
                    email,
                    name,
                    company,
                )
                if row is not None:
                    added.append(Contact(int(row["id"]), email, name, company))
        return added
