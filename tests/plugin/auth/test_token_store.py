"""The people's tokens at rest (mcp_bridge/auth/token_store.py): encrypted, each bound to its row.

A database writer who has no MCP_TOKEN_KEY can still move rows: a token ciphertext copied into another
person's row (or another server's) must then decrypt to nothing, so nobody is called as someone else.
A row release 0.3.0 wrote is tests/plugin/test_release_0_3.py's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mcp_bridge.auth.token_store import Keys, TokenStore

KEY = b"a token key of at least 32 random bytes for the tests"


async def test_a_token_moved_to_another_persons_row_decrypts_to_nothing(tmp_path: Path) -> None:
    store = TokenStore.open(str(tmp_path / "mcp_bridge.sqlite3"), Keys.from_secret(KEY))
    try:
        await store.put("socketio:dana", "crm", {"access_token": "dana's"})
        await store.put("socketio:mallory", "crm", {"access_token": "mallory's"})
        assert await store.get("socketio:dana", "crm") == {"access_token": "dana's"}
        rows = dict(await store._db.fetch("SELECT person, sealed FROM mcp_tokens"))
        dana, mallory = (store._name(p) for p in ("socketio:dana", "socketio:mallory"))
        # Dana's ciphertext in Mallory's row: Mallory's turn would be called as Dana.
        await store._db.execute("UPDATE mcp_tokens SET sealed = ? WHERE person = ?", rows[dana], mallory)
        assert await store.get("socketio:mallory", "crm") is None
        # ... and to another server of the same person.
        await store._db.execute(
            "INSERT INTO mcp_tokens (person, server, sealed, updated_at) VALUES (?, 'billing', ?, 0)",
            dana,
            rows[dana],
        )
        assert await store.get("socketio:dana", "billing") is None
        assert await store.get("socketio:dana", "crm") == {"access_token": "dana's"}
    finally:
        await store.close()


async def test_the_database_file_is_the_owners_alone_from_the_start(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        store = TokenStore.open(str(tmp_path / "db" / "mcp_bridge.sqlite3"), Keys.from_secret(KEY))
    finally:
        os.umask(previous)
    try:
        assert stat.S_IMODE((tmp_path / "db" / "mcp_bridge.sqlite3").stat().st_mode) == 0o600
    finally:
        await store.close()
