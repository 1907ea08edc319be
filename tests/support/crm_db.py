"""Read a CRM database directly with sqlite3, to check what really landed (not what an API says)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path


def _query_one(db: Path, sql: str, params: tuple[object, ...] = ()) -> tuple[object, ...] | None:
    # Read-only URI: a test can never write by accident, and the servers' WAL is respected.
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        row: tuple[object, ...] | None = conn.execute(sql, params).fetchone()
    return row


def count_notes(db: Path, contact_id: int | None = None) -> int:
    if contact_id is None:
        row = _query_one(db, "SELECT COUNT(*) FROM notes")
    else:
        row = _query_one(db, "SELECT COUNT(*) FROM notes WHERE contact_id = ?", (contact_id,))
    assert row is not None
    return int(str(row[0]))


def count_notes_with_key(db: Path, idempotency_key: str) -> int:
    row = _query_one(db, "SELECT COUNT(*) FROM notes WHERE idempotency_key = ?", (idempotency_key,))
    assert row is not None
    return int(str(row[0]))


def note_text(db: Path, note_id: int) -> str | None:
    row = _query_one(db, "SELECT text FROM notes WHERE id = ?", (note_id,))
    return None if row is None else str(row[0])


def note_author(db: Path, note_id: int) -> str | None:
    """Who the CRM stored the note as written by (None: nobody named)."""
    row = _query_one(db, "SELECT author FROM notes WHERE id = ?", (note_id,))
    assert row is not None, f"no note {note_id} in {db}"
    return None if row[0] is None else str(row[0])


def authors_of(db: Path, text: str) -> list[str | None]:
    """The authors of the notes with exactly this text, oldest first."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT author FROM notes WHERE text = ? ORDER BY id", (text,)).fetchall()
    return [None if r[0] is None else str(r[0]) for r in rows]


def contact_id(db: Path, email: str) -> int:
    row = _query_one(db, "SELECT id FROM contacts WHERE email = ?", (email,))
    assert row is not None, f"no contact {email} in {db}"
    return int(str(row[0]))
