"""The approval page's sessions (mcp_bridge/approvals/sessions.py) on each store it keeps them in: a SQLite
file, a real PostgreSQL and a real Redis (Debian's servers on free ports, data in temporary folders,
stopped afterwards), each seen by two page replicas at once.

What matters: a session started on one replica is read on the other; logging out on one ends it on
both; an expired session opens nothing; the store holds no cookie value that would let its reader in.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devstack.engines import Postgres, redis_server, scratch_postgres
from mcp_bridge.approvals.sessions import Sessions, open_sessions

PASSWORD = "redis-password-for-the-sessions-test"


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with scratch_postgres("page-sessions-pg-") as server:
        yield server


@pytest.fixture(scope="module")
def redis() -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="page-sessions-redis-"))
    service = redis_server(folder, PASSWORD)
    try:
        service.start()
        yield service.url.replace("redis://", f"redis://:{PASSWORD}@").rsplit("/", 1)[0] + "/2"
    finally:
        service.close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str | None, str]:
    """APPROVAL_PAGE_SESSIONS and MCP_BRIDGE_DATABASE for a fresh store of this test's own."""
    if request.param == "sqlite":
        return None, str(tmp_path / "approvals.sqlite3")
    if request.param == "postgres":
        server: Postgres = request.getfixturevalue("postgres")
        return None, server.create_database(f"sess_{uuid.uuid4().hex[:12]}", "sessions_test", "sessions-pw")
    return request.getfixturevalue("redis"), str(tmp_path / "unused.sqlite3")


@pytest.fixture
async def replicas(where: tuple[str | None, str]) -> AsyncIterator[tuple[Sessions, Sessions, list[float]]]:
    """Two pages' sessions on one store, and the clock they both read (settable)."""
    now = [1_900_000_000.0]
    one = Sessions(open_sessions(*where), 3600, clock=lambda: now[0])
    two = Sessions(open_sessions(*where), 3600, clock=lambda: now[0])
    yield one, two, now
    await one.store.aclose()
    await two.store.aclose()


async def test_a_session_is_read_by_every_replica_and_ended_by_any(
    replicas: tuple[Sessions, Sessions, list[float]],
) -> None:
    one, two, now = replicas
    password_login = await one.start("sam", None)
    oidc_login = await one.start("alice", {"supervisor", "clerk"})
    read = await two.read(password_login)
    assert read is not None and (read.user, read.roles) == ("sam", None)  # roles: the file's, read fresh
    read = await two.read(oidc_login)
    assert read is not None and read.roles == frozenset({"supervisor", "clerk"})
    assert await two.read(password_login[:-1] + ("A" if password_login[-1] != "A" else "B")) is None
    assert await two.read("not a session") is None

    await two.end(password_login)  # logging out on one replica ...
    assert await one.read(password_login) is None  # ... ends it on the other
    assert await one.read(oidc_login) is not None  # and no other session

    now[0] += 3601  # past its expiry
    assert await two.read(oidc_login) is None


async def test_the_store_holds_no_cookie_value(
    where: tuple[str | None, str], replicas: tuple[Sessions, Sessions, list[float]]
) -> None:
    one, _, _ = replicas
    value = await one.start("sam", None)
    store = one.store
    if where[0] is None:  # the plugin's database, SQLite or PostgreSQL
        kept = repr(await store.database.fetch("SELECT * FROM approval_page_sessions"))  # type: ignore[attr-defined]
    else:
        client = store._redis  # type: ignore[attr-defined]
        keys = await client.keys("*")
        kept = repr(keys) + repr([await client.get(key) for key in keys])
    assert "sam" in kept and value not in kept
