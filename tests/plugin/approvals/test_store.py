"""The approval store (mcp_bridge/approvals/store.py, a table of the plugin's one database), the same tests
on both engines: a SQLite file and a real PostgreSQL (Debian's server on a free port, data in a temporary
folder, stopped afterwards).

What matters is that the database decides: two stores (two replicas' worth of connections) deciding,
expiring or taking one request at the same moment change it once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devstack.engines import Postgres, scratch_postgres
from mcp_bridge.approvals.second_approver import ApprovalRequest, ApprovalStore
from mcp_bridge.approvals.store import open_store
from mcp_bridge.record.database import PostgresDatabase, SQLiteDatabase

NOW = 1_000_000.0
LEASE = 30.0


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with scratch_postgres("approvals-pg-") as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
async def where(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh database of this test's own: a SQLite path or a PostgreSQL URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "approvals.sqlite3")
    else:
        server: Postgres = request.getfixturevalue("postgres")
        yield server.create_database(f"appr_{uuid.uuid4().hex[:12]}", "approvals_test", "approvals-pw")


@pytest.fixture
async def stores(where: str) -> AsyncIterator[tuple[ApprovalStore, ApprovalStore]]:
    """Two stores on one database, as two replicas have."""
    one, two = open_store(where), open_store(where)
    yield one, two
    await one.aclose()
    await two.aclose()


def request(**changes: object) -> ApprovalRequest:
    fields: dict[str, object] = {
        "id": uuid.uuid4().hex,
        "conversation_id": "c1",
        "requester": "rest:alice",
        "role": "supervisor",
        "skill": "log_interaction",
        "tool": "add_timeline_note",
        "arguments": {"contact_id": 1, "text": "Refund: 40 €, «ok»"},
        "key": "k1",
        "question": {"id": "k1", "arguments": {"contact_id": 1}},
        "slots": {"contact_name": "Dana"},
        "created_at": NOW,
        "expires_at": NOW + 60,
    }
    fields.update(changes)
    return ApprovalRequest(**fields)  # type: ignore[arg-type]


def test_open_store_picks_the_engine(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path / "a.sqlite3")).database, SQLiteDatabase)
    assert isinstance(open_store("postgresql://u:p@127.0.0.1:1/db").database, PostgresDatabase)


async def test_a_request_round_trips(stores: tuple[ApprovalStore, ApprovalStore]) -> None:
    one, two = stores
    made = request()
    await one.add(made)
    assert await two.get(made.id) == made
    assert await two.get("nope") is None
    assert [r.id for r in await two.pending({"supervisor", "clerk"}, NOW)] == [made.id]
    assert await two.pending({"clerk"}, NOW) == []
    assert await two.pending(set(), NOW) == []
    assert await two.pending({"supervisor"}, NOW + 60) == []  # expired: not shown


async def test_decided_once_across_replicas(stores: tuple[ApprovalStore, ApprovalStore]) -> None:
    one, two = stores
    made = request()
    await one.add(made)
    results = await asyncio.gather(
        *(
            store.decide(made.id, status, f"rest:approver{i}", NOW)
            for i, (store, status) in enumerate([(one, "approved"), (two, "refused")] * 4)
        )
    )
    assert results.count(True) == 1
    decided = await one.get(made.id)
    assert decided is not None and decided.status in ("approved", "refused") and decided.decided_at == NOW


async def test_the_requester_and_the_late_cannot_decide(stores: tuple[ApprovalStore, ApprovalStore]) -> None:
    one, _ = stores
    made = request()
    await one.add(made)
    assert not await one.decide(made.id, "approved", "socketio:Alice", NOW)  # the requester, by name
    assert not await one.decide(made.id, "approved", "sam", NOW + 60)  # at the expiry: too late
    with pytest.raises(ValueError):
        await one.decide(made.id, "done", "sam", NOW)
    assert await one.decide(made.id, "approved", "sam", NOW + 59)


async def test_expired_once_and_told(stores: tuple[ApprovalStore, ApprovalStore]) -> None:
    one, two = stores
    late, fresh = request(), request(expires_at=NOW + 600)
    await one.add(late)
    await one.add(fresh)
    first, second = await asyncio.gather(one.expire_due(NOW + 60), two.expire_due(NOW + 60))
    assert [r.id for r in first + second] == [late.id]
    # The page's notifier finds it untold, and tries again only after retry_after.
    assert [r.id for r in await one.untold(NOW + 61, 30)] == [late.id]
    assert await one.untold(NOW + 62, 30) == []
    assert [r.id for r in await one.untold(NOW + 92, 30)] == [late.id]
    # Told once, in its own conversation only.
    assert await two.take(late.id, "c2", NOW + 61, LEASE) is None
    told = await two.take(late.id, "c1", NOW + 61, LEASE)
    assert told is not None and told.status == "expired" and told.told
    assert await one.take(late.id, "c1", NOW + 61, LEASE) is None
    assert await one.untold(NOW + 200, 30) == []


async def test_an_approved_request_is_taken_to_run_once(stores: tuple[ApprovalStore, ApprovalStore]) -> None:
    one, two = stores
    made = request()
    await one.add(made)
    assert await one.take(made.id, "c1", NOW, LEASE) is None  # pending: nothing to do yet
    assert await one.decide(made.id, "approved", "sam", NOW)
    taken = await asyncio.gather(*(s.take(made.id, "c1", NOW + 1, LEASE) for s in (one, two) * 4))
    running = [t for t in taken if t is not None]
    assert len(running) == 1 and running[0].status == "running"
    await two.finish(made.id, "done")
    finished = await one.get(made.id)
    assert finished is not None and finished.status == "done" and finished.result == "done"


async def test_approved_but_taken_after_the_expiry_never_runs(
    stores: tuple[ApprovalStore, ApprovalStore],
) -> None:
    one, _ = stores
    made = request()
    await one.add(made)
    assert await one.decide(made.id, "approved", "sam", NOW)
    taken = await one.take(made.id, "c1", NOW + 60, LEASE)
    assert taken is not None and taken.status == "expired"
    assert await one.take(made.id, "c1", NOW + 1, LEASE) is None


async def test_a_run_past_its_lease_is_taken_again_by_one_store_only(
    stores: tuple[ApprovalStore, ApprovalStore],
) -> None:
    one, two = stores
    made = request()
    await one.add(made)
    assert await one.decide(made.id, "approved", "sam", NOW)
    first = await one.take(made.id, "c1", NOW + 1, LEASE)
    assert first is not None and first.status == "running" and first.attempts == 1
    # Its action server died. Within the lease: nobody takes it, the sweep does not tell it again.
    assert await two.take(made.id, "c1", NOW + LEASE, LEASE) is None
    assert await one.untold(NOW + LEASE, 0) == []
    # Past it: the sweep tells it again, and of eight takers at once one resumes it, with a new lease.
    assert [r.id for r in await one.untold(NOW + LEASE + 2, 0)] == [made.id]
    taken = await asyncio.gather(*(s.take(made.id, "c1", NOW + LEASE + 2, LEASE) for s in (one, two) * 4))
    resumed = [t for t in taken if t is not None]
    assert len(resumed) == 1 and resumed[0].status == "running" and resumed[0].attempts == 2
    assert await one.take(made.id, "c2", NOW + 10 * LEASE, LEASE) is None  # another conversation: never
    await two.finish(made.id, "ok")
    assert await one.take(made.id, "c1", NOW + 10 * LEASE, LEASE) is None
    assert await one.untold(NOW + 10 * LEASE, 0) == []


_OLD_SCHEMA = """
CREATE TABLE approval_requests (
    id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, requester TEXT NOT NULL,
    requester_name TEXT NOT NULL, role TEXT NOT NULL, skill TEXT NOT NULL, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, idempotency_key TEXT NOT NULL, question TEXT NOT NULL, slots TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL, status TEXT NOT NULL,
    decided_by TEXT, decided_at DOUBLE PRECISION, told INTEGER NOT NULL DEFAULT 0,
    notified_at DOUBLE PRECISION, result TEXT
)
"""


async def test_a_table_made_before_leases_gets_their_columns(where: str) -> None:
    """A database made by the first release (no running_until, no attempts) is upgraded on open."""
    if where.startswith("postgresql"):
        import asyncpg

        conn = await asyncpg.connect(where)
        try:
            await conn.execute(_OLD_SCHEMA)
        finally:
            await conn.close()
    else:
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(where)) as conn:
            conn.execute(_OLD_SCHEMA)
            conn.commit()
    one, two = open_store(where), open_store(where)  # two replicas starting at once
    try:
        made = request()
        await one.add(made)
        assert await two.decide(made.id, "approved", "sam", NOW)
        taken = await two.take(made.id, "c1", NOW + 1, LEASE)
        assert taken is not None and taken.attempts == 1
    finally:
        await one.aclose()
        await two.aclose()
