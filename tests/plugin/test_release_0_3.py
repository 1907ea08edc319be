"""What release 0.3.0 wrote that this release still reads (mcp_bridge/release_0_3.py), read from what 0.3.0
itself wrote (tests/fixtures/release_0_3/records.json) or with its own key; and the module gone by the
release that drops it.

That none of 0.3.0's questions, permissions, held calls or server questions is answered is
tests/plugin/confirmation/test_rolling_upgrade.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mcp_bridge
from mcp_bridge.auth.token_store import Keys, TokenStore
from mcp_bridge.question import Forged, claimed, open_question
from mcp_bridge.release_0_3 import DROPPED_IN, RELEASE
from mcp_bridge.sealing import Seal

RECORDS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "release_0_3" / "records.json").read_text()
)
KEY = b"a token key of at least 32 random bytes for the tests"


def release(number: str) -> tuple[int, ...]:
    return tuple(int(part) for part in number.split("."))


def test_the_release_that_drops_these_readers_is_still_ahead() -> None:
    """Red on the release that drops them: delete mcp_bridge/release_0_3.py and what calls it then."""
    assert release(RELEASE) < release(mcp_bridge.__version__) < release(DROPPED_IN)


@pytest.mark.parametrize(
    ("record", "slot"),
    [
        ("one_call", lambda r: r["slots"]["pending_confirmation"]),
        ("list", lambda r: r["slots"]["pending_confirmation"]),
        ("held", lambda r: r["row"]["question"]),
    ],
)
def test_what_a_question_0_3_sealed_claims_is_read_and_it_never_opens(record: str, slot: Any) -> None:
    sealed = slot(RECORDS[record])
    question = claimed(sealed)
    assert question is not None, "0.3.0's question is not read: its audit entry would name no call"
    assert question.id == "" and question.skill == "notes"
    assert [call.tool for call in question.calls] == ["record_note"] * len(sealed["calls"])
    assert [call.arguments for call in question.calls] == [call["arguments"] for call in sealed["calls"]]
    assert all(call.meta == {} for call in question.calls)
    # Sealed with the very secret 0.3.0 had, it still does not open: this release never answers it.
    opened = open_question(sealed, Seal(RECORDS["secret"].encode()), record)
    assert isinstance(opened, Forged)


async def test_a_token_row_0_3_wrote_is_read_and_written_again_this_releases_way(tmp_path: Path) -> None:
    keys = Keys.from_secret(KEY)
    store = TokenStore.open(str(tmp_path / "mcp_bridge.sqlite3"), keys)
    try:
        old = keys.rows_0_3.key.encrypt(json.dumps({"access_token": "from 0.3"}).encode()).decode()
        await store._db.execute(
            "INSERT INTO mcp_tokens (person, server, sealed, updated_at) VALUES (?, 'crm', ?, 0)",
            store._name("socketio:dana"),
            old,
        )
        assert await store.get("socketio:dana", "crm") == {"access_token": "from 0.3"}
        await store.put("socketio:dana", "crm", {"access_token": "renewed"})
        ((sealed,),) = await store._db.fetch("SELECT sealed FROM mcp_tokens")
        assert str(sealed).startswith("v2.")
        assert await store.get("socketio:dana", "crm") == {"access_token": "renewed"}
        # Another key's 0.3.0 row is as good as none (the person signs in again).
        other = Keys.from_secret(b"another token key of at least 32 random bytes").rows_0_3
        await store._db.execute("UPDATE mcp_tokens SET sealed = ?", other.key.encrypt(b"{}").decode())
        assert await store.get("socketio:dana", "crm") is None
    finally:
        await store.close()
