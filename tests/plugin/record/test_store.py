"""The action server's record (mcp_bridge/record/store.py) over its database (record/database.py), the same
tests on both engines: a SQLite file and a real PostgreSQL (Debian's server on a free port, data in a
temporary folder, stopped afterwards).

What matters: each transition happens once, whichever of two replicas (two records on one database)
makes it at the same moment; a message answers once and starts once; a withdrawn permission covers
nothing; and on SQLite a statement that meets another process's write lock waits for it off the event
loop instead of failing or blocking it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devstack.engines import Postgres, scratch_postgres
from mcp_bridge.record.database import SQLiteDatabase, open_database
from mcp_bridge.record.schema import MIGRATIONS
from mcp_bridge.record.store import Message, NotMade, Record

NOW = 1_900_000_000.0
CONVERSATION = "conversation-1"
DANA = "rest:dana"


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with scratch_postgres("record-pg-") as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of this test's own: a SQLite path or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "record.sqlite3")
    server: Postgres = request.getfixturevalue("postgres")
    return server.create_database(f"rec_{uuid.uuid4().hex[:12]}", "record_test", "record-pw")


@pytest.fixture
async def replicas(where: str) -> AsyncIterator[tuple[Record, Record]]:
    """Two records on one database, as two replicas have, on one clock."""
    one, two = (
        Record(open_database(where), clock=lambda: NOW),
        Record(open_database(where), clock=lambda: NOW),
    )
    yield one, two
    await one.database.aclose()
    await two.database.aclose()


def message(said_at: float = NOW - 1) -> Message:
    return Message(id=uuid.uuid4().hex, person=DANA, said_at=said_at)


async def ask(record: Record, started_by: Message | None = None) -> str:
    question_id = uuid.uuid4().hex
    refused = await record.asked(
        conversation_id=CONVERSATION,
        kind="question",
        question_id=question_id,
        person=DANA,
        sealed={"calls": ["add_timeline_note"]},
        asked_after=NOW - 1,
        message=started_by or message(),
        new_words=True,
    )
    assert refused is None, refused
    return question_id


async def test_a_question_ends_once_whichever_replica_gets_the_yes(replicas: tuple[Record, Record]) -> None:
    one, two = replicas
    question = await ask(one)
    yes = message(NOW - 0.5)
    outcomes = await asyncio.gather(
        one.end(question, "answered", message=yes), two.end(question, "answered", message=yes)
    )
    assert sorted(outcome is None for outcome in outcomes) == [False, True]
    (refused,) = [outcome for outcome in outcomes if outcome is not None]
    assert refused == NotMade("the question was answered already")
    stored = await two.question(question)
    assert stored is not None and stored.state == "answered"
    assert await one.open_question(CONVERSATION) is None


async def test_a_message_answers_one_question_and_starts_one_thing(replicas: tuple[Record, Record]) -> None:
    one, two = replicas
    first = await ask(one)
    yes = message(NOW - 0.5)
    assert await one.end(first, "answered", message=yes) is None
    second = await ask(two, message(NOW - 0.4))
    assert await two.end(second, "answered", message=yes) == NotMade(
        "this message answered another question already"
    )
    again = await two.question(second)
    assert again is not None and again.state == "open"  # the refused answer ended nothing
    start = message(NOW - 0.2)
    outcomes = await asyncio.gather(
        one.start(CONVERSATION, start, "run:a"), two.start(CONVERSATION, start, "run:b")
    )
    assert sorted(outcome is None for outcome in outcomes) == [False, True]
    assert await one.started(start.id) in ("run:a", "run:b")


async def test_an_older_or_stale_message_starts_nothing(replicas: tuple[Record, Record]) -> None:
    one, _ = replicas
    newer = message(NOW - 1)
    assert await one.start(CONVERSATION, newer, "run:newer") is None
    older = message(NOW - 2)
    refused = await one.start(CONVERSATION, older, "run:older")
    assert refused == NotMade("a newer message of this conversation was acted on already")
    stale = await one.start("another-conversation", message(NOW - 3600), "run:stale")
    assert stale == NotMade("the message is too old to start anything")


async def test_asking_replaces_the_open_question(replicas: tuple[Record, Record]) -> None:
    one, two = replicas
    first = await ask(one, message(NOW - 3))
    second = await ask(two, message(NOW - 2))
    replaced = await one.question(first)
    assert replaced is not None and replaced.state == "replaced"
    open_now = await one.open_question(CONVERSATION)
    assert open_now is not None and open_now.id == second
    assert await one.end(first, "answered", message=message()) == NotMade("the question was replaced already")
    assert await one.end("never-asked", "answered") == NotMade("the action server never asked it")


async def test_a_withdrawn_permission_covers_nothing_on_any_replica(replicas: tuple[Record, Record]) -> None:
    one, two = replicas
    await one.grant(
        permission_id="p1",
        conversation_id=CONVERSATION,
        person=DANA,
        sealed={"tool": "add_timeline_note"},
        granted_at=NOW - 10,
        expires_at=NOW + 3600,
    )
    assert await two.permissions(CONVERSATION, DANA) == [{"tool": "add_timeline_note"}]
    assert await two.use("p1", CONVERSATION, message(NOW - 0.5)) is None
    assert await one.withdraw(CONVERSATION, DANA) == [{"tool": "add_timeline_note"}]
    assert await two.permissions(CONVERSATION, DANA) == []
    assert await two.ended_permissions(CONVERSATION, DANA) == [({"tool": "add_timeline_note"}, "withdrawn")]
    assert await two.use("p1", CONVERSATION, message(NOW - 0.1)) == NotMade(
        "the permission was withdrawn or has expired"
    )


async def test_every_migration_is_applied_once_and_a_failed_transaction_leaves_nothing(where: str) -> None:
    first, second = open_database(where), open_database(where)  # two replicas starting together
    try:
        versions = await first.fetch("SELECT version FROM mcp_bridge_schema ORDER BY version")
        assert [row[0] for row in versions] == [migration.version for migration in MIGRATIONS]
        assert await second.fetch("SELECT count(*) FROM mcp_bridge_schema") == [(len(MIGRATIONS),)]
        with pytest.raises(RuntimeError):
            async with first.transaction() as tx:
                await tx.execute("INSERT INTO record_keys (name, value, created_at) VALUES ('half', 'x', 1)")
                raise RuntimeError("stopped half-way")
        # Rolled back, and the connection it used (returned to PostgreSQL's pool) is clean again.
        assert await first.fetch("SELECT name FROM record_keys WHERE name = 'half'") == []
        assert await second.fetch("SELECT name FROM record_keys WHERE name = 'half'") == []
        for _ in range(3):
            assert await first.execute("UPDATE record_keys SET value = 'y' WHERE name = 'none'") == 0
    finally:
        await first.aclose()
        await second.aclose()


async def test_sqlite_waits_for_another_processs_write_lock_off_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "record.sqlite3"
    record = Record(SQLiteDatabase(path), clock=lambda: NOW)
    question = await ask(record)
    held, release = threading.Event(), threading.Event()

    def other_process() -> None:  # a connection of its own, as another action server's
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(10)
        connection.execute("COMMIT")
        connection.close()

    holder = threading.Thread(target=other_process)
    holder.start()
    try:
        assert held.wait(10)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        running = asyncio.create_task(ticker())
        ending = asyncio.create_task(record.end(question, "answered", message=message()))
        await asyncio.sleep(0.3)
        assert not ending.done()  # waiting for the lock, not failed
        assert ticks >= 10  # and the event loop went on meanwhile
        release.set()
        assert await asyncio.wait_for(ending, 10) is None
        running.cancel()
    finally:
        release.set()
        holder.join()
    stored = await record.question(question)
    assert stored is not None and stored.state == "answered"
    await record.database.aclose()
