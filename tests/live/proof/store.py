"""Reads the CRM's SQLite file directly (read-only), to see what was really written."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, order=True)
class StoredNote:
    contact_id: int
    text: str


@dataclass(frozen=True)
class Contact:
    contact_id: int
    email: str
    name: str


class StoreReader:
    """Notes written since a mark (the highest note id seen before), contacts by email."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        # mode=ro: the proof can never write by accident; readers do not block the CRM's writer (WAL).
        with closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5.0)) as conn:
            return [tuple(row) for row in conn.execute(sql, params).fetchall()]

    def mark(self) -> int:
        (row,) = self._rows("SELECT COALESCE(MAX(id), 0) FROM notes")
        return int(str(row[0]))

    def notes_after(self, mark: int) -> list[StoredNote]:
        rows = self._rows("SELECT contact_id, text FROM notes WHERE id > ? ORDER BY id", (mark,))
        return [StoredNote(int(str(contact_id)), str(text)) for contact_id, text in rows]

    def contact(self, email: str) -> Contact | None:
        rows = self._rows("SELECT id, email, name FROM contacts WHERE email = ?", (email,))
        if not rows:
            return None
        contact_id, stored_email, name = rows[0]
        return Contact(int(str(contact_id)), str(stored_email), str(name))


def listing(notes: list[StoredNote]) -> str:
    """`contact 1 "..."; contact 3 "..."` (or `none`)."""
    return "; ".join(f'contact {note.contact_id} "{note.text}"' for note in notes) or "none"


def describe(notes: list[StoredNote]) -> str:
    """`2 notes written: contact 1 "..."; contact 3 "..."` (or `no note written`)."""
    if not notes:
        return "no note written"
    return f"{len(notes)} note{'s' if len(notes) != 1 else ''} written: {listing(notes)}"
