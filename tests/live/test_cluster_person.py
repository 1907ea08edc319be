"""The cluster acting as the person (`MCP_AUTH=person make cluster-up`), its pieces as devstack/cluster.py
starts them: PostgreSQL (the people's tokens in their own database `mcp_tokens`, their own role), the
authorization server with the person client, both CRM MCP servers and both action servers behind
nginx. Rasa is left out (the test talks to the action servers itself, so it knows which replica
answers; the resume through Rasa is tests/live/test_person_oauth_chat.py's).

The person signs in through the link one replica showed; the browser comes back through nginx to
whichever replica nginx picks (its `X-Upstream` says which); the other replica, which never saw the
sign-in, takes the yes and writes the note as that person (the CRM stores the author); "disconnect my
CRM" on that replica signs the person out on the first one too.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster import SECRETS, Cluster
from tests.live.test_person_oauth import DANA_EMAIL, sign_in_in_browser, vouch
from tests.support.rasa_calls import FakeTracker, call_action, said

PERSON = "rest:operator"  # as the REST channel names the person


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("only root runs PostgreSQL as another user here")
    for variable in ("MCP_TOKEN_KEY", "MCP_TOKEN_STORE", "CRM_PERSON_CLIENT_SECRET"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MCP_AUTH", "person")
    running = Cluster(tmp_path / "cluster", durable=False, rasa_replicas=0)
    try:
        running.start()
        yield running
    finally:
        running.stop()
        running.postgres.remove()


def test_a_sign_in_at_one_replica_is_used_by_the_other_and_a_disconnect_signs_out_on_both(
    cluster: Cluster,
) -> None:
    person = cluster.person
    assert person is not None
    # The secrets are made once, the owner's alone; the tokens have their own database and role.
    for name in ("token_key", "person_client_secret", "bridge_db_password"):
        mode = stat.S_IMODE((cluster.var / SECRETS[name][1]).stat().st_mode)
        assert mode == 0o600, f"{name}: mode {mode:o}"
    assert cluster.bridge_database_url.startswith("postgresql://mcp_bridge:")
    assert cluster.bridge_database_url.endswith("/mcp_bridge")
    # The sign-in comes back through nginx's action-server front, not to one replica.
    assert person.redirect_uri == f"{cluster.actions_url}/mcp-bridge/oauth/callback"

    replicas = {port: f"http://127.0.0.1:{port}/webhook" for port in cluster.action_ports}
    note = f"signed in on one replica, written by the other {time.time()}"
    tracker = FakeTracker(f"cluster-person-{time.time()}", contact_email=DANA_EMAIL, note_text=note)

    def ask(port: int, action: str, text: str, intent: str) -> dict[str, Any]:
        tracker.user(text, intent, 1.0)
        vouch(tracker, PERSON, cluster.secrets["channel_key"])
        status, answer, _ = call_action(replicas[port], action, tracker, headers=cluster_headers(cluster))
        assert status == 200, answer
        return dict(answer)

    first, second = cluster.action_ports
    log_a_call = ("action_log_interaction", f"log a call with {DANA_EMAIL}: {note}", "log_interaction")
    shown = ask(second, *log_a_call)
    assert said(shown) == ["utter_mcp_sign_in", "utter_mcp_sign_in_code"], shown
    link, code = shown["responses"][0]["link"], shown["responses"][1]["code"]
    # The chat's link is the start route through nginx; the browser's cookie binds the sign-in to it
    # whichever replica takes each step (start, callback, "Use this account").
    assert link.startswith(f"{person.redirect_uri}?start="), link

    _, page, _ = asyncio.run(sign_in_in_browser(link, "dana-agent", person.redirect_uri, code=code))
    assert page.status_code == 200 and "Signed in" in page.text, page.text
    took = int(page.headers["X-Upstream"].rsplit(":", 1)[1])  # the replica that stored the token
    other = second if took == first else first
    assert {took, other} == {first, second}

    asked = ask(took, *log_a_call)
    assert said(asked) == ["utter_confirm_note"], asked
    tracker.apply("action_log_interaction", asked)
    saved = ask(other, "action_confirm_tool", "yes", "affirm")  # a replica that never saw the sign-in
    assert said(saved) == ["utter_note_saved"], saved
    assert authors_of(cluster, note) == ["dana-agent"]  # as the person, not the bridge's client
    assert "(subject 'dana-agent')" in "".join((cluster.logs / f"mcp-{n}.log").read_text() for n in (1, 2))

    gone = ask(other, "action_mcp_disconnect", "disconnect my CRM", "disconnect_crm")
    assert said(gone) == ["utter_mcp_disconnected"], gone
    again = ask(took, *log_a_call)  # the replica that took the sign-in has lost it too
    assert said(again) == ["utter_mcp_sign_in", "utter_mcp_sign_in_code"], again
    assert authors_of(cluster, note) == ["dana-agent"]


def cluster_headers(cluster: Cluster) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.secrets['action_token']}"}


def authors_of(cluster: Cluster, text: str) -> list[str]:
    """The authors of the CRM's notes with exactly this text, oldest first (PostgreSQL `crm`)."""
    quoted = text.replace("'", "''")
    rows = cluster.postgres.sql(
        [f"SELECT author FROM notes WHERE text = '{quoted}' ORDER BY id"], database="crm"
    )
    return rows.splitlines()
