"""The CRM store, the same tests on both engines: the embedded SQLite file and a real PostgreSQL
(Debian's server, started on a free port with its data in a temporary folder, stopped afterwards).

The idempotency key is the guarantee that matters most: a repeated write must never become a
second note, whichever process repeats it. So besides the store's own answers, the tests check
that the database itself refuses a second row with one key (a UNIQUE constraint, not a check in
our code), and that two stores (two processes' worth of connections) racing with one key leave
one note.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import asyncpg
import pytest
from crm.errors import ConflictError, NotFoundError, ValidationError
from crm.pg_store import PostgresStore
from crm.store import DEMO_CONTACTS, CRMStore, SQLiteStore

from devstack.engines import Postgres, scratch_postgres
from tests.support import procs
from tests.support.crm_api import crm_json

DANA = "dana@example.com"


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server of this module's own; its data folder is removed afterwards."""
    with scratch_postgres("crm-pg-") as server:
        yield server


def _new_pg_database(postgres: Postgres) -> str:
    name = f"crm_{uuid.uuid4().hex[:12]}"
    return postgres.create_database(name, "crm_test", "crm-test-password")


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """(engine, where): a fresh, empty database of this test's own on one engine."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "crm.sqlite3")
    else:
        postgres: Postgres = request.getfixturevalue("postgres")
        yield "postgres", _new_pg_database(postgres)


def _make(engine: tuple[str, str]) -> CRMStore:
    kind, where = engine
    return SQLiteStore(where) if kind == "sqlite" else PostgresStore(where)


@pytest.fixture
async def store(engine: tuple[str, str]) -> AsyncIterator[CRMStore]:
    opened = _make(engine)
    await opened.open()
    await opened.seed()
    try:
        yield opened
    finally:
        await opened.close()


async def _dana(store: CRMStore) -> int:
    contact = await store.find_contact_by_email(DANA)
    assert contact is not None
    return contact.contact_id


async def test_seed_adds_the_demo_contacts_once(engine: tuple[str, str]) -> None:
    store = _make(engine)
    await store.open()
    try:
        first = await store.seed()
        assert [c.email for c in first] == [email for email, _, _ in DEMO_CONTACTS]
        assert await store.seed() == []
        for contact in first:
            assert await store.get_contact(contact.contact_id) == contact
    finally:
        await store.close()


@pytest.mark.parametrize("address", ["DANA@EXAMPLE.COM", "Dana@Example.com", "  dana@example.com "])
async def test_contact_found_whatever_the_case(store: CRMStore, address: str) -> None:
    contact = await store.find_contact_by_email(address)
    assert contact is not None and contact.email == DANA and contact.name == "Dana Whitfield"


async def test_absent_contact_is_none_and_bad_address_is_refused(store: CRMStore) -> None:
    assert await store.find_contact_by_email("nobody@example.com") is None
    assert await store.get_contact(999_999) is None
    with pytest.raises(ValidationError):
        await store.find_contact_by_email("not an address")


async def test_notes_are_stored_verbatim_and_listed_newest_first(store: CRMStore) -> None:
    dana = await _dana(store)
    texts = ["Dana called about the VAT rate 😀", "'); DROP TABLE notes; --", "é" * 4000, "a\x01b\n\tc"]
    for text in texts:
        note, created = await store.add_note(dana, text)
        assert created and note.text == text and note.contact_id == dana
    listed = await store.list_notes(dana, limit=10)
    assert [n.text for n in listed] == list(reversed(texts))
    assert [n.text for n in await store.list_notes(dana, limit=2)] == list(reversed(texts))[:2]
    assert await store.count_notes(dana) == len(texts) == await store.count_notes()


@pytest.mark.parametrize(
    "text", ["", "   ", "x" * 4001, "a\x00b"], ids=["empty", "spaces", "too long", "NUL character"]
)
async def test_bad_note_is_refused_and_nothing_is_written(store: CRMStore, text: str) -> None:
    with pytest.raises(ValidationError):
        await store.add_note(await _dana(store), text)
    assert await store.count_notes() == 0


async def test_note_on_an_unknown_contact_is_refused(store: CRMStore) -> None:
    with pytest.raises(NotFoundError):
        await store.add_note(999_999, "to nobody", idempotency_key="k-unknown")
    assert await store.count_notes() == 0


async def test_bad_limit_is_refused(store: CRMStore) -> None:
    for limit in (0, 101, True):
        with pytest.raises(ValidationError):
            await store.list_notes(await _dana(store), limit=limit)


async def test_a_repeated_request_returns_its_note_and_writes_nothing(store: CRMStore) -> None:
    dana = await _dana(store)
    first, created = await store.add_note(dana, "the first", idempotency_key="conf-1")
    assert created
    again, created_again = await store.add_note(dana, "the first", idempotency_key="conf-1")
    assert (again, created_again) == (first, False)
    assert await store.count_notes() == 1
    other, created_other = await store.add_note(dana, "another key", idempotency_key="conf-2")
    assert created_other and other.note_id != first.note_id
    assert await store.count_notes() == 2


@pytest.mark.parametrize(
    ("contact", "text"),
    [
        pytest.param("priya@example.com", "Dana called", id="another contact"),
        pytest.param(DANA, "Dana called back", id="another text"),
        pytest.param(DANA, "Dana called ", id="one more space"),
        pytest.param("priya@example.com", "Priya called", id="both"),
    ],
)
async def test_a_key_reused_for_another_request_is_refused_and_writes_nothing(
    store: CRMStore, contact: str, text: str
) -> None:
    # Not another note, and not the old note with success: that would tell the caller its own note,
    # on its own contact, was saved.
    dana = await _dana(store)
    first, _ = await store.add_note(dana, "Dana called", idempotency_key="conf-1")
    other = await store.find_contact_by_email(contact)
    assert other is not None
    with pytest.raises(ConflictError, match="idempotency key was already used"):
        await store.add_note(other.contact_id, text, idempotency_key="conf-1")
    assert await store.count_notes() == 1
    assert await store.list_notes(dana) == [first]
    # The key still answers the request it belongs to.
    assert await store.add_note(dana, "Dana called", idempotency_key="conf-1") == (first, False)


async def test_notes_and_tasks_keep_their_author_and_a_key_is_its_authors(store: CRMStore) -> None:
    dana = await _dana(store)
    note, _ = await store.add_note(dana, "Dana called", idempotency_key="conf-1", author="dana-agent")
    anonymous, _ = await store.add_note(dana, "written by nobody named")
    task, _ = await store.add_task(dana, "Call back", "2026-12-01", "task-1", author=" crm-bridge ")
    assert (note.author, anonymous.author, task.author) == ("dana-agent", None, "crm-bridge")
    assert [n.author for n in await store.list_notes(dana)] == [None, "dana-agent"]
    assert (await store.list_tasks(dana))[0].as_dict()["author"] == "crm-bridge"
    # The same key, contact and text from someone else is another request: refused, nothing written.
    for author in ("lee-agent", None):
        with pytest.raises(ConflictError, match="another contact, text or author"):
            await store.add_note(dana, "Dana called", idempotency_key="conf-1", author=author)
    with pytest.raises(ConflictError):
        await store.add_task(dana, "Call back", "2026-12-01", "task-1", author="lee-agent")
    assert await store.add_note(dana, "Dana called", "conf-1", author="dana-agent") == (note, False)
    for bad in ("x" * 201, "dana\nagent", 7):
        with pytest.raises(ValidationError, match="author"):
            await store.add_note(dana, "never", author=bad)  # type: ignore[arg-type]
    assert await store.count_notes() == 2


_OLD_NOTES = (
    "CREATE TABLE notes (id {id} PRIMARY KEY, contact_id {ref} NOT NULL REFERENCES contacts(id),"
    " text TEXT NOT NULL, created_at TEXT NOT NULL, idempotency_key TEXT UNIQUE)"
)
_OLD_TASKS = (
    "CREATE TABLE tasks (id {id} PRIMARY KEY, contact_id {ref} NOT NULL REFERENCES contacts(id),"
    " title TEXT NOT NULL, due_date TEXT NOT NULL, created_at TEXT NOT NULL, idempotency_key TEXT UNIQUE)"
)


async def test_a_database_from_before_authors_is_migrated_and_keeps_its_notes(
    engine: tuple[str, str],
) -> None:
    """A file (or database) made before notes had an author: opening it adds the column, the old
    notes stay as they were (no author), and new ones carry theirs."""
    kind, where = engine
    old = [("an old note", "2026-01-02T03:04:05.000+00:00", "old-key")]
    if kind == "sqlite":
        with closing(sqlite3.connect(where)) as conn, conn:
            conn.execute(
                "CREATE TABLE contacts (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE COLLATE NOCASE,"
                " name TEXT NOT NULL, company TEXT)"
            )
            conn.execute(_OLD_NOTES.format(id="INTEGER", ref="INTEGER"))
            conn.execute(_OLD_TASKS.format(id="INTEGER", ref="INTEGER"))
            conn.execute("INSERT INTO contacts (email, name) VALUES (?, 'Dana')", (DANA,))
            conn.executemany(
                "INSERT INTO notes (contact_id, text, created_at, idempotency_key) VALUES (1, ?, ?, ?)", old
            )
    else:
        conn = await asyncpg.connect(where)
        try:
            await conn.execute(
                "CREATE TABLE contacts (id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL, name TEXT NOT NULL,"
                " company TEXT)"
            )
            await conn.execute(_OLD_NOTES.format(id="BIGSERIAL", ref="BIGINT"))
            await conn.execute(_OLD_TASKS.format(id="BIGSERIAL", ref="BIGINT"))
            await conn.execute("INSERT INTO contacts (email, name) VALUES ($1, 'Dana')", DANA)
            await conn.executemany(
                "INSERT INTO notes (contact_id, text, created_at, idempotency_key) VALUES (1, $1, $2, $3)",
                old,
            )
        finally:
            await conn.close()
    for _ in range(2):  # opening it again finds the column there and changes nothing
        store = _make(engine)
        await store.open()
        try:
            [kept] = await store.list_notes(1)
            assert (kept.text, kept.created_at, kept.author) == ("an old note", old[0][1], None)
            assert await store.add_note(1, "an old note", "old-key") == (kept, False)  # its key still holds
        finally:
            await store.close()
    store = _make(engine)
    await store.open()
    try:
        note, created = await store.add_note(1, "a new note", author="dana-agent")
        task, _ = await store.add_task(1, "Call back", "2026-12-01", author="dana-agent")
        assert created and note.author == task.author == "dana-agent"
        assert [n.author for n in await store.list_notes(1)] == ["dana-agent", None]
    finally:
        await store.close()


async def test_two_stores_racing_with_one_key_leave_one_note(engine: tuple[str, str]) -> None:
    # Two stores are two processes' worth of connections (two pools on PostgreSQL).
    stores = [_make(engine), _make(engine)]
    for opened in stores:
        await opened.open()
    try:
        await stores[0].seed()
        dana = await _dana(stores[0])
        results = await asyncio.gather(
            *(stores[i % 2].add_note(dana, "the retried note", idempotency_key="race-key") for i in range(20))
        )
        assert sum(created for _, created in results) == 1
        assert len({note.note_id for note, _ in results}) == 1
        assert await stores[1].count_notes() == 1
    finally:
        for opened in stores:
            await opened.close()


async def test_racers_sharing_a_key_but_not_a_text_write_one_note(
    engine: tuple[str, str],
) -> None:
    # Whichever request wins the key, the others get its note only if they are the same request;
    # the rest are refused, also when they lose the race inside the database (PostgreSQL's
    # ON CONFLICT path, which answers after the winner commits).
    stores = [_make(engine), _make(engine)]
    for opened in stores:
        await opened.open()
    try:
        await stores[0].seed()
        dana = await _dana(stores[0])
        texts = [f"attempt {i % 3}" for i in range(21)]
        results = await asyncio.gather(
            *(stores[i % 2].add_note(dana, text, idempotency_key="race-key") for i, text in enumerate(texts)),
            return_exceptions=True,
        )
        written = [result for result in results if isinstance(result, tuple) and result[1]]
        assert len(written) == 1
        winner = written[0][0]
        for text, result in zip(texts, results, strict=True):
            if text == winner.text:
                assert isinstance(result, tuple) and result[0] == winner, result
            else:
                assert isinstance(result, ConflictError), result
        assert await stores[1].count_notes() == 1
    finally:
        for opened in stores:
            await opened.close()


async def test_the_database_itself_refuses_a_second_row_with_one_key(
    store: CRMStore, engine: tuple[str, str]
) -> None:
    dana = await _dana(store)
    await store.add_note(dana, "first", idempotency_key="db-key")
    kind, where = engine
    insert = (
        "INSERT INTO notes (contact_id, text, created_at, idempotency_key) VALUES ({}, 'x', 'now', 'db-key')"
    )
    if kind == "sqlite":
        with closing(sqlite3.connect(where)) as conn, pytest.raises(sqlite3.IntegrityError):
            conn.execute(insert.format(dana))
    else:
        conn = await asyncpg.connect(where)
        try:
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(insert.format(dana))
        finally:
            await conn.close()
    assert await store.count_notes() == 1


async def test_the_database_itself_refuses_a_second_contact_with_one_address(
    store: CRMStore, engine: tuple[str, str]
) -> None:
    kind, where = engine
    insert = "INSERT INTO contacts (email, name) VALUES ('DANA@example.com', 'Another Dana')"
    if kind == "sqlite":
        with closing(sqlite3.connect(where)) as conn, pytest.raises(sqlite3.IntegrityError):
            conn.execute(insert)
    else:
        conn = await asyncpg.connect(where)
        try:
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(insert)
        finally:
            await conn.close()


def test_rest_api_on_postgres_keeps_one_note_per_key(postgres: Postgres, services: procs.Services) -> None:
    """`python -m crm seed` and `python -m crm rest` with CRM_DATABASE_URL: the configured path."""
    url = _new_pg_database(postgres)
    procs.seed_db(database_url=url)
    rest = services.start(procs.crm_rest(database_url=url))
    status, contact = crm_json("GET", f"{rest.url}/contacts?email=DANA@example.com")
    assert status == 200 and contact["email"] == DANA
    body = {"text": "over REST on PostgreSQL", "idempotency_key": "rest-key"}
    first = crm_json("POST", f"{rest.url}/contacts/{contact['contact_id']}/notes", body)
    second = crm_json("POST", f"{rest.url}/contacts/{contact['contact_id']}/notes", body)
    assert first[0] == 201 and second[0] == 200 and first[1] == second[1]
    reused = {"text": "another note under the same key", "idempotency_key": "rest-key"}
    status, refused = crm_json("POST", f"{rest.url}/contacts/{contact['contact_id']}/notes", reused)
    assert status == 409 and "idempotency key" in refused["error"]
    status, listed = crm_json("GET", f"{rest.url}/contacts/{contact['contact_id']}/notes")
    assert [note["text"] for note in listed["notes"]] == ["over REST on PostgreSQL"]
    assert "postgres" in rest.output().lower() and "crm-test-password" not in rest.output()
