"""Two action servers on one PostgreSQL record, given the same yes at the same moment: one write.

Replicas share the plugin's database (``MCP_BRIDGE_DATABASE``, a real PostgreSQL: Debian's server on a
free port, data in a temporary folder). Rasa may send the person's yes to either, and a retry, a proxy
or a replayed tracker may send it to both at once: the record's ``open -> answered`` transition happens
once, so exactly one of them runs the call and the other runs nothing (and says so). Checked over several
rounds, each a fresh question answered by two concurrent ``/webhook`` posts of the same signed yes.
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.engines import Postgres, scratch_postgres
from tests.support import procs
from tests.support.conversation import notes_for
from tests.support.rasa_calls import FakeTracker, call_action, said

pytestmark = pytest.mark.timeout(600)
DANA = "dana@example.com"
ROUNDS = 6
MCP_TOKEN = "record-replicas-mcp-token-6Jd9Qw2Lr8Xk"


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    if not shutil.which("pg_ctlcluster") and not Path("/usr/lib/postgresql").exists():
        pytest.fail("PostgreSQL is not installed: `make services` installs it")
    with scratch_postgres("record-pg-") as server:
        yield server


def test_the_same_yes_at_two_replicas_at_once_runs_the_call_once(
    postgres: Postgres, services: procs.Services, fresh_crm_db: Path, tmp_path: Path
) -> None:
    url = postgres.create_database(f"record_{uuid.uuid4().hex[:10]}", "record_test", "record-pw")
    rest = services.start(procs.crm_rest(fresh_crm_db))
    mcp = services.start(procs.crm_mcp(rest.url, token=MCP_TOKEN))
    endpoints = procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")
    replicas = [
        services.start(
            procs.action_server(
                endpoints=endpoints,
                crm_url=rest.url,
                mcp_url=mcp.url,
                mcp_token=MCP_TOKEN,
                audit_log=tmp_path / f"audit-{n}.jsonl",
                database=url,
            )
        )
        for n in (1, 2)
    ]
    before = notes_for(fresh_crm_db, DANA)
    written: list[str] = []
    for round_ in range(ROUNDS):
        note = f"Round {round_} of the race ({uuid.uuid4().hex[:8]})."
        tracker = FakeTracker(f"race-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
        tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
        status, asked, _ = call_action(replicas[round_ % 2].url, "action_log_interaction", tracker)
        assert status == 200 and said(asked) == ["utter_confirm_note"], asked
        tracker.apply("action_log_interaction", asked)
        tracker.user("yes", "affirm", 1.0)  # one signed yes, delivered to both at once

        answers: list[list[str]] = [[], []]
        go = threading.Barrier(2)

        def answer(place: int, go: threading.Barrier, tracker: FakeTracker, answers: list[list[str]]) -> None:
            go.wait()
            status, body, _ = call_action(replicas[place].url, "action_confirm_tool", tracker)
            assert status == 200, body
            answers[place] = said(body)

        threads = [threading.Thread(target=answer, args=(place, go, tracker, answers)) for place in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        saved = [a for a in answers if a == ["utter_note_saved"]]
        others = [a for a in answers if a != ["utter_note_saved"]]
        assert len(saved) == 1 and len(others) == 1, answers
        assert others[0] in (["utter_confirmation_invalid"], ["utter_nothing_pending"]), answers
        written.append(note)
        assert notes_for(fresh_crm_db, DANA) == [*before, *written]
    executed: list[dict[str, Any]] = [
        json.loads(line)
        for n in (1, 2)
        if (tmp_path / f"audit-{n}.jsonl").exists()
        for line in (tmp_path / f"audit-{n}.jsonl").read_text().splitlines()
    ]
    runs = [e for e in executed if e.get("decision") == "executed"]
    assert len(runs) == ROUNDS  # one run per yes, whichever replica won
