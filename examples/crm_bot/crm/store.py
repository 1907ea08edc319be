"""The system of record: contacts and their timeline notes, in SQLite or PostgreSQL.

`CRMStore` is the interface the REST API and `python -m crm seed` use; `open_store()` picks the
engine from the environment: PostgreSQL (`crm.pg_store`) when `CRM_DATABASE_URL` is set, else the
embedded SQLite file at `CRM_DB`. Both keep the same schema and the same rule for a repeated
idempotency key, and both enforce it in the database (the key column is UNIQUE): a key belongs to
the request that first used it. The same request again (same contact, same text) returns the note
first stored under it and writes nothing; the key with another contact or another text is refused
with ConflictError and writes nothing, so a reused key never answers with another request's note.

Each note and task keeps its `author`: who wrote it as the caller named them (the MCP server passes
the verified access token's subject), or NULL when no caller was named (a note written before the
column existed, a REST caller that names nobody). A request is "the same" only from the same author.

`SQLiteStore`: each operation opens its own short-lived connection. That lets several processes
(the REST server, `python -m crm seed`, a test reading the file) use one database; WAL mode lets
readers run while a write is in progress. Its methods are coroutines for the shared interface but
never yield: SQLite answers in well under a millisecond here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from crm import config
from crm.errors import ConflictError, NotFoundError
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
    id INTEGER PRIMARY KEY,
    email TEXT NOT NULL UNIQUE COLLATE NOCASE,
    name TEXT NOT NULL,
    company TEXT
);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY,
    contact_id INTEGER NOT NULL REFERENCES contacts(id),
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    author TEXT
);
CREATE INDEX IF NOT EXISTS notes_by_contact ON notes (contact_id, id);
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY,
    contact_id INTEGER NOT NULL REFERENCES contacts(id),
    title TEXT NOT NULL,
    due_date TEXT NOT NULL,
    created_at TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    author TEXT
);
CREATE INDEX IF NOT EXISTS tasks_by_contact ON tasks (contact_id, id);
"""
# Tables of a file made before a column existed get it added (their rows keep NULL there).
_ADDED_COLUMNS = (("notes", "author", "TEXT"), ("tasks", "author", "TEXT"))

DEMO_CONTACTS: tuple[tuple[str, str, str], ...] = (
    ("dana@example.com", "Dana Whitfield", "Whitfield Logistics"),
    ("priya@example.com", "Priya Raman", "Raman Analytics"),
    ("tom@example.org", "Tom Okafor", "Okafor & Sons"),
    ("lena.fischer@example.net", "Lena Fischer", "Fischer GmbH"),
)


@dataclass(frozen=True)
class Contact:
    contact_id: int
    email: str
    name: str
    company: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "contact_id": self.contact_id,
            "email": self.email,
            "name": self.name,
            "company": self.company,
        }


@dataclass(frozen=True)
class Note:
    note_id: int
    contact_id: int
    text: str
    created_at: str
    author: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "note_id": self.note_id,
            "contact_id": self.contact_id,
            "text": self.text,
            "created_at": self.created_at,
            "author": self.author,
        }


@dataclass(frozen=True)
class Task:
    """A follow-up task on a contact: what to do, and by when."""

    task_id: int
    contact_id: int
    title: str
    due_date: str
    created_at: str
    author: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "contact_id": self.contact_id,
            "title": self.title,
            "due_date": self.due_date,
            "created_at": self.created_at,
            "author": self.author,
        }


class CRMStore(Protocol):
    """What the CRM keeps, whatever the engine. `open()` before use, `close()` after."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def find_contact_by_email(self, email: str) -> Contact | None:
        """The contact with this address (case-insensitive), or None. Raises ValidationError."""
        ...

    async def get_contact(self, contact_id: int) -> Contact | None: ...

    async def list_notes(self, contact_id: int, limit: int = NOTES_LIMIT_DEFAULT) -> list[Note]:
        """The contact's notes, newest first. Raises ValidationError for a bad limit."""
        ...

    async def add_note(
        self, contact_id: int, text: str, idempotency_key: str | None = None, *, author: str | None = None
    ) -> tuple[Note, bool]:
        """Add a note to the contact's timeline, written by ``author``; returns (note, created).

        A key seen before with the same contact, text and author returns the note first stored under it and
        created=False: a retried request must never write twice. The key with another contact, text
        or author raises ConflictError. Raises ValidationError, NotFoundError or ConflictError, in which
        case nothing is written.
        """
        ...

    async def count_notes(self, contact_id: int | None = None) -> int: ...

    async def add_task(
        self,
        contact_id: int,
        title: str,
        due_date: str,
        idempotency_key: str | None = None,
        *,
        author: str | None = None,
    ) -> tuple[Task, bool]:
        """Add a follow-up task; returns (task, created), with the notes' rule for a repeated key."""
        ...

    async def list_tasks(self, contact_id: int) -> list[Task]:
        """The contact's tasks, newest first."""
        ...

    async def seed(self) -> list[Contact]:
        """Add the demo contacts that are missing; returns those added (none on a second run)."""
        ...


def open_store() -> CRMStore:
    """The store the environment names (not yet opened): PostgreSQL or the SQLite file."""
    url = config.database_url()
    if url:
        from crm.pg_store import PostgresStore

        return PostgresStore(url)
    return SQLiteStore(config.db_path())


def describe_store(store: CRMStore) -> str:
    """Where the store keeps its data, for a log line; never a password."""
    if isinstance(store, SQLiteStore):
        return f"SQLite {store.path.resolve()}"
    return str(store)


def _utc_now() -> str:
    # "+00:00" rather than "Z": datetime.fromisoformat on Python 3.10 cannot parse "Z".
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Row(Protocol):
    """A database row read by column name: sqlite3.Row here, asyncpg.Record in crm.pg_store."""

    def __getitem__(self, key: str) -> Any: ...


def contact_from_row(row: Row) -> Contact:
    return Contact(contact_id=row["id"], email=row["email"], name=row["name"], company=row["company"])


def note_from_row(row: Row) -> Note:
    return Note(
        note_id=row["id"],
        contact_id=row["contact_id"],
        text=row["text"],
        created_at=row["created_at"],
        author=row["author"],
    )


def replayed_note(row: Row, contact_id: int, text: str, author: str | None) -> Note:
    """The note stored under a key, if this request is the one that stored it; else ConflictError.

    The text is stored verbatim, so "the same request" is the same contact, exactly the same text and
    the same author.
    """
    note = note_from_row(row)
    if (note.contact_id, note.text, note.author) != (contact_id, text, author):
        raise ConflictError(
            "This idempotency key was already used for another note (another contact, text or author), "
            "so nothing was written. Use a new key for a new note."
        )
    return note


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Bring a file made by an older version up to the schema: add the columns it lacks, under the
    write lock (two processes opening one old file at once add each column once). Rows keep NULL."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, column, kind in _ADDED_COLUMNS:
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SQLiteStore:
    """Contacts and timeline notes in one SQLite file; the schema is created on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            _add_missing_columns(conn)

    async def open(self) -> None:
        """Nothing to open: every operation has its own connection."""

    async def close(self) -> None:
        """Nothing to close."""

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: no implicit transactions; writes open BEGIN IMMEDIATE themselves,
        # which takes the write lock up front so check-then-insert cannot race another writer.
        conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys=ON")
            yield conn
        finally:
            conn.close()

    def _write_once(
        self, table: str, contact_id: int, key: str | None, values: dict[str, str | None]
    ) -> tuple[sqlite3.Row, bool]:
        """Insert a row of ``table`` (notes or tasks, our own names) for the contact, unless ``key``
        was used before: (the new row, False) or (the stored row, True), under one write lock."""
        columns = ["contact_id", *values, "created_at", "idempotency_key"]
        insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                stored = None
                if key is not None:
                    stored = conn.execute(
                        f"SELECT * FROM {table} WHERE idempotency_key = ?", (key,)
                    ).fetchone()
                if stored is None:
                    if conn.execute("SELECT 1 FROM contacts WHERE id = ?", (contact_id,)).fetchone() is None:
                        raise NotFoundError(f"There is no contact with id {contact_id}.")
                    cursor = conn.execute(insert, (contact_id, *values.values(), _utc_now(), key))
                    row = conn.execute(f"SELECT * FROM {table} WHERE id = ?", (cursor.lastrowid,)).fetchone()
                conn.execute("COMMIT" if stored is None else "ROLLBACK")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return (stored, True) if stored is not None else (row, False)

    async def find_contact_by_email(self, email: str) -> Contact | None:
        address = validate_email(email)
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM contacts WHERE email = ?", (address,)).fetchone()
        return None if row is None else contact_from_row(row)

    async def get_contact(self, contact_id: int) -> Contact | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM contacts WHERE id = ?", (contact_id,)).fetchone()
        return None if row is None else contact_from_row(row)

    async def list_notes(self, contact_id: int, limit: int = NOTES_LIMIT_DEFAULT) -> list[Note]:
        count = validate_limit(limit)
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT * FROM notes WHERE contact_id = ? ORDER BY id DESC LIMIT ?", (contact_id, count)
            ).fetchall()
        return [note_from_row(row) for row in rows]

    async def add_note(
        self, contact_id: int, text: str, idempotency_key: str | None = None, *, author: str | None = None
    ) -> tuple[Note, bool]:
        body, by = validate_note_text(text), validate_author(author)
        key = validate_idempotency_key(idempotency_key)
        row, replayed = self._write_once("notes", contact_id, key, {"text": body, "author": by})
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
        row, replayed = self._write_once("tasks", contact_id, key, values)
        if replayed:
            return replayed_task(row, contact_id, body, due, by), False
        return task_from_row(row), True

    async def list_tasks(self, contact_id: int) -> list[Task]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT * FROM tasks WHERE contact_id = ? ORDER BY id DESC", (contact_id,)
            ).fetchall()
        return [task_from_row(row) for row in rows]

    async def count_notes(self, contact_id: int | None = None) -> int:
        with self._connect() as conn:
            if contact_id is None:
                row = conn.execute("SELECT COUNT(*) FROM notes").fetchone()
            else:
                row = conn.execute(
                    "SELECT COUNT(*) FROM notes WHERE contact_id = ?", (contact_id,)
                ).fetchone()
        return int(row[0])

    async def seed(self) -> list[Contact]:
        added: list[Contact] = []
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for email, name, company in DEMO_CONTACTS:
                    cursor = conn.execute(
                        "INSERT OR IGNORE INTO contacts (email, name, company) VALUES (?, ?, ?)",
                        (email, name, company),
                    )
                    if cursor.rowcount == 1:
                        added.append(Contact(int(cursor.lastrowid or 0), email, name, company))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return added


def task_from_row(row: Row) -> Task:
    return Task(
        task_id=row["id"],
        contact_id=row["contact_id"],
        title=row["title"],
        due_date=row["due_date"],
        created_at=row["created_at"],
        author=row["author"],
    )


def replayed_task(row: Row, contact_id: int, title: str, due_date: str, author: str | None) -> Task:
    """The task stored under a key, if this request is the one that stored it; else ConflictError."""
    task = task_from_row(row)
    if (task.contact_id, task.title, task.due_date, task.author) != (contact_id, title, due_date, author):
        raise ConflictError(
            "This idempotency key was already used for another task, so nothing was written. "
            "Use a new key for a new task."
        )
    return task
