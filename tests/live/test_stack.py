"""`make up` / `make down` (scripts/example_bot.py): everything it starts answers, and down stops
exactly that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from mcp_bridge.auth.person import CALLBACK_PATH
from tests.live.test_person_oauth import sign_in_in_browser
from tests.support import procs
from tests.support.crm_db import authors_of
from tests.support.rasa_calls import FakeTracker, call_action, said

DANA = "dana@example.com"


def stack(command: str, var: Path, ports: dict[str, int | str]) -> subprocess.CompletedProcess[str]:
    env = procs.child_env({"STACK_VAR": str(var), **{name: str(value) for name, value in ports.items()}})
    return subprocess.run(
        [sys.executable, "scripts/example_bot.py", command, "--without-rasa"],
        cwd=procs.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def command_lines() -> list[str]:
    """Every running process's arguments, as `ps` shows them to any user."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            continue
    return lines


def test_up_starts_what_answers_and_down_stops_exactly_that(tmp_path: Path) -> None:
    names = (
        "CRM_PORT",
        "MCP_PORT",
        "ACTION_SERVER_PORT",
        "CHAT_PAGE_PORT",
        "RASA_PORT",
        "AUTH_PORT",
        "APPROVAL_PAGE_PORT",
    )
    ports = {name: procs.free_port() for name in names}
    started = stack("up", tmp_path, ports)
    state = tmp_path / "run" / "stack.json"
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        recorded = json.loads(state.read_text())
        services = {name: info for name, info in recorded.items() if isinstance(info, dict)}
        assert set(services) == {
            "crm_rest",
            "authorization_server",
            "crm_mcp",
            "action_server",
            "chat_page",
            "approval_page",
        }
        # The tokens a client of the stack needs, in a file that was never readable by others.
        assert state.stat().st_mode & 0o777 == 0o600
        assert recorded["rest_token"] == (tmp_path / "rest_channel_token").read_text().strip()
        assert recorded["rasa_token"] == (tmp_path / "rasa_auth_token").read_text().strip()
        secrets = ("rest_channel_token", "rasa_auth_token", "chat_jwt_key", "crm_oauth_client_secret")
        for secret in (*secrets, "approval_page_key", "approver_sam_password"):
            assert (tmp_path / secret).stat().st_mode & 0o777 == 0o600
            assert (tmp_path / secret).read_text().strip() not in started.stdout + started.stderr
        # Nor in any process's arguments, which every local user can read (/proc/*/cmdline, ps).
        values = {
            name: (tmp_path / name).read_text().strip()
            for name in (*secrets, "approval_page_key", "approver_sam_password", "action_server_token")
        }
        for name, value in values.items():
            assert value and not [args for args in command_lines() if value in args], (
                f"{name} in a command line"
            )
        expected_ports = {
            "crm_rest": "CRM_PORT",
            "crm_mcp": "MCP_PORT",
            "authorization_server": "AUTH_PORT",
            "action_server": "ACTION_SERVER_PORT",
            "chat_page": "CHAT_PAGE_PORT",
            "approval_page": "APPROVAL_PAGE_PORT",
        }
        for name, variable in expected_ports.items():
            assert f"127.0.0.1:{ports[variable]}" in services[name]["url"]
            assert services[name]["url"] in started.stdout  # printed for the person
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['ACTION_SERVER_PORT']}/health") as response:
            assert response.status == 200
        # The chat page is served, and points the browser at the Rasa port of this stack.
        with urllib.request.urlopen(services["chat_page"]["url"]) as response:
            assert b'id="composer"' in response.read()
        with urllib.request.urlopen(services["chat_page"]["url"] + "config.json") as response:
            assert json.loads(response.read())["socketUrl"] == f"http://127.0.0.1:{ports['RASA_PORT']}"
        # The approval page is served; its API wants a login.
        with urllib.request.urlopen(services["approval_page"]["url"]) as response:
            assert b'id="login"' in response.read()
        # The generated endpoints carry the action server token, so Rasa would be let in: in a header,
        # never in the URL (where it would end up in logs), and in a file only its owner can read.
        generated = tmp_path / "run" / "endpoints.yml"
        action = yaml.safe_load(generated.read_text())["action_endpoint"]
        token = (tmp_path / "action_server_token").read_text().strip()
        assert action["headers"]["Authorization"] == f"Bearer {token}"
        assert "token" not in action and token not in action["url"]
        assert generated.stat().st_mode & 0o777 == 0o600
        # The bridge reaches the CRM's MCP server with OAuth client credentials from the stack's own
        # authorization server; the file names the variables, never the secret.
        (crm,) = yaml.safe_load(generated.read_text())["mcp_servers"]
        assert crm["oauth"]["client_secret"] == "${CRM_OAUTH_CLIENT_SECRET}" and "api_key" not in crm
        client_secret = (tmp_path / "crm_oauth_client_secret").read_text().strip()
        assert client_secret not in generated.read_text()
        listed = subprocess.run(
            [sys.executable, "-m", "mcp_bridge.cli", "tools", "crm"],
            cwd=procs.REPO_ROOT,
            env=procs.child_env(
                {
                    "ENDPOINTS": str(generated),
                    "CRM_MCP_URL": services["crm_mcp"]["url"],
                    **procs.oauth_env(
                        procs.OAuthClient("crm-bridge", client_secret),
                        services["authorization_server"]["url"],
                    ),
                }
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert "add_timeline_note" in listed.stdout
        assert "token_issued" in (tmp_path / "log" / "authorization-server.log").read_text()
        assert stack("up", tmp_path, ports).returncode == 1  # already running: refuses, starts nothing
    finally:
        stopped = stack("down", tmp_path, ports)
    assert stopped.returncode == 0
    assert not state.exists()
    assert not any(alive(int(info["pid"])) for info in services.values())


async def test_up_with_mcp_auth_person_acts_as_the_person_with_its_token_store(tmp_path: Path) -> None:
    """MCP_AUTH=person: the action server asks the person to sign in at the stack's authorization
    server; after the callback (on the action server) their token is in the plugin's database,
    var/mcp_bridge.sqlite3, encrypted under var/mcp_token_key, and a yes writes the note as them."""
    names = ("CRM_PORT", "MCP_PORT", "ACTION_SERVER_PORT", "CHAT_PAGE_PORT", "RASA_PORT", "AUTH_PORT")
    ports = {name: procs.free_port() for name in (*names, "APPROVAL_PAGE_PORT")}
    started = stack("up", tmp_path, {**ports, "MCP_AUTH": "person"})
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "the bridge acts as the person" in started.stdout
        (crm,) = yaml.safe_load((tmp_path / "run" / "endpoints.yml").read_text())["mcp_servers"]
        assert crm["oauth"]["grant"] == "authorization_code"
        webhook = f"http://127.0.0.1:{ports['ACTION_SERVER_PORT']}/webhook"
        headers = {"Authorization": f"Bearer {(tmp_path / 'action_server_token').read_text().strip()}"}
        note = f"Written as Dana through make up {time.time()}"
        channel_key = (tmp_path / "channel_key").read_text().strip()  # make up's, signed as its channels do
        tracker = FakeTracker(
            f"make-up-{time.time()}", channel_key=channel_key, contact_email=DANA, note_text=note
        )
        tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
        status, asked, _ = call_action(webhook, "action_log_interaction", tracker, headers=headers)
        assert status == 200 and said(asked) == ["utter_mcp_sign_in", "utter_mcp_sign_in_code"], asked
        link, code = asked["responses"][0]["link"], asked["responses"][1]["code"]
        callback = f"http://127.0.0.1:{ports['ACTION_SERVER_PORT']}{CALLBACK_PATH}"
        assert link.startswith(f"{callback}?start=")  # bound to the browser that opens it
        shown, page, _ = await sign_in_in_browser(link, "dana-agent", callback, code=code)
        assert "dana-agent" in shown.text, shown.text  # the account, shown before it is used
        assert page.status_code == 200 and "Signed in" in page.text, page.text
        store = tmp_path / "mcp_bridge.sqlite3"
        assert store.exists() and (tmp_path / "mcp_token_key").stat().st_mode & 0o777 == 0o600
        status, asked, _ = call_action(webhook, "action_log_interaction", tracker, headers=headers)
        assert status == 200 and said(asked) == ["utter_confirm_note"], asked
        tracker.apply("action_log_interaction", asked)
        tracker.user("yes", "affirm", 1.0)
        status, answered, _ = call_action(webhook, "action_confirm_tool", tracker, headers=headers)
        assert status == 200 and said(answered) == ["utter_note_saved"], answered
        assert authors_of(tmp_path / "crm.sqlite3", note) == ["dana-agent"]
    finally:
        stopped = stack("down", tmp_path, ports)
    assert stopped.returncode == 0
