"""The action server as deployed: loopback by default, a shared token when configured, start-up checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support import procs

# The action server's token (32+ random characters: a weak one stops the server).
SHARED = "shared-secret-4Fh8Lq2Zr7Wm5Kp9Tc3V"

TOKEN = "mcp-test-token-of-the-crm-server-8Hs3Dq"


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def nothing_pending_call() -> dict[str, object]:
    """What Rasa posts for action_confirm_tool in a conversation where nothing was asked."""
    return {
        "next_action": "action_confirm_tool",
        "sender_id": "access-test",
        "version": "3.6.2",
        "domain": {},
        "tracker": {
            "sender_id": "access-test",
            "slots": {},
            "latest_message": {"intent": {"name": "affirm", "confidence": 1.0}, "text": "yes"},
            "events": [{"event": "user", "text": "yes"}],
            "paused": False,
            "followup_action": None,
            "active_loop": {},
            "latest_action_name": "action_listen",
        },
    }


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on `port`, from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:
            found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


@pytest.fixture
def endpoints(tmp_path: Path) -> Path:
    return procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")


def test_token_is_required_when_configured(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str
) -> None:
    server = services.start(
        procs.action_server(
            endpoints=endpoints,
            crm_url=crm_rest,
            mcp_url=crm_mcp,
            mcp_token=TOKEN,
            extra_env={"ACTION_SERVER_TOKEN": SHARED},
        )
    )
    status, body = post(server.url, nothing_pending_call())
    assert status == 401 and "token" in str(body["error"])
    assert post(server.url + "?token=wrong", nothing_pending_call())[0] == 401
    status, body = post(server.url + "?token=" + SHARED, nothing_pending_call())
    assert status == 200
    responses = body["responses"]
    assert isinstance(responses, list)
    assert [r.get("response") for r in responses] == ["utter_nothing_pending"]
    assert SHARED not in server.output()


def test_rasa_sdk_serves_exactly_the_plugin_and_bot_actions(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str
) -> None:
    """`python -m rasa_sdk --actions actions`: one import serves the plugin's actions, none unnamed."""
    server = services.start(
        procs.action_server(endpoints=endpoints, crm_url=crm_rest, mcp_url=crm_mcp, mcp_token=TOKEN)
    )
    with urllib.request.urlopen(server.url.replace("/webhook", "/actions"), timeout=10) as response:
        names = [entry["name"] for entry in json.loads(response.read())]
    assert "" not in names
    assert sorted(names) == [
        "action_approval_decided",  # the plugin's, for a skill with a second approver
        "action_confirm_tool",
        "action_deny_tool",
        "action_log_interaction",  # one per skill file, named by its `action:`
        "action_lookup_contact",
        "action_mcp_account",  # the plugin's, for servers that act as the person
        "action_mcp_disconnect",
        "action_mcp_resume",
        "action_revoke_permissions",  # the plugin's, for a skill that allows remembering
        "action_show_notes",
        "validate_log_note_form",  # the bot's own form validation
    ]


def test_binds_loopback_unless_told_otherwise(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str
) -> None:
    service = procs.action_server(endpoints=endpoints, crm_url=crm_rest, mcp_url=crm_mcp, mcp_token=TOKEN)
    del service.env["ACTION_SERVER_HOST"]
    server = services.start(service)
    port = int(server.url.split(":")[2].split("/")[0])
    assert listening_addresses(port) == {"127.0.0.1"}
    assert post(server.url, nothing_pending_call())[0] == 200
    assert TOKEN not in server.output()


def test_invalid_skill_file_stops_start_up_with_file_and_reason(tmp_path: Path, endpoints: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    text = (procs.EXAMPLE_BOT / "skills" / "log_interaction.yml").read_text()
    (skills / "log_interaction.yml").write_text(
        text.replace("utter_note_cancelled", "utter_no_such_response")
    )
    result = subprocess.run(
        [sys.executable, "-m", "rasa_sdk", "--actions", "actions", "--port", str(procs.free_port())],
        cwd=procs.EXAMPLE_BOT,
        env=procs.child_env(
            {
                "ENDPOINTS": str(endpoints),
                "SKILLS_DIR": str(skills),
                "CRM_MCP_TOKEN": TOKEN,
                "ACTION_SERVER_PORT": str(procs.free_port()),
            }
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "log_interaction.yml" in result.stderr
    assert "tool_constraints[0].add_timeline_note.requires_confirmation.utter_on_user_denial" in result.stderr
    assert "utter_no_such_response" in result.stderr and "not defined in the domain" in result.stderr


def start_up(endpoints: Path, timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m rasa_sdk --actions actions` with ``env``; returns once it exits, or after ``timeout``
    seconds with returncode -1 (it started). In a session of its own, so its Sanic workers end with it."""
    variables = {
        "ENDPOINTS": str(endpoints),
        "CRM_MCP_TOKEN": TOKEN,
        "ACTION_SERVER_PORT": str(procs.free_port()),
        "MCP_BRIDGE_CHANNEL_KEY": procs.TEST_CHANNEL_KEY,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "rasa_sdk", "--actions", "actions", "--port", variables["ACTION_SERVER_PORT"]],
        cwd=procs.EXAMPLE_BOT,
        env=procs.child_env({**variables, **env}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)
    except subprocess.TimeoutExpired:  # it started: that is the answer
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return subprocess.CompletedProcess(process.args, -1, out, err)


def test_an_unknown_server_key_stops_start_up_naming_file_place_and_key(
    tmp_path: Path, endpoints: Path
) -> None:
    document = yaml.safe_load(endpoints.read_text())
    document["mcp_servers"][0]["tool_timout"] = 5
    endpoints.write_text(yaml.safe_dump(document, default_style='"', sort_keys=False))
    result = start_up(endpoints)
    assert result.returncode == 2
    assert f"{endpoints}: mcp_servers[0] (crm): unknown key(s) 'tool_timout'" in result.stderr
    assert TOKEN not in result.stderr


def test_unset_token_variable_stops_start_up(tmp_path: Path, endpoints: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rasa_sdk", "--actions", "actions", "--port", str(procs.free_port())],
        cwd=procs.EXAMPLE_BOT,
        env=procs.child_env({"ENDPOINTS": str(endpoints), "ACTION_SERVER_PORT": str(procs.free_port())}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "endpoints.yml" in result.stderr and "(crm)" in result.stderr and "CRM_MCP_TOKEN" in result.stderr


# -- fail closed: start-up refusals -------------------------------------------------------------


def test_a_public_address_without_a_token_is_refused(endpoints: Path) -> None:
    result = start_up(endpoints, ACTION_SERVER_HOST="0.0.0.0")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "ACTION_SERVER_HOST=0.0.0.0" in result.stderr and "ACTION_SERVER_TOKEN is not set" in result.stderr


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("change-me", "is 9 bytes long"),
        ("x" * 31, "is 31 bytes long"),
        ("change-me-change-me-change-me-change-me", "looks like a placeholder"),
        ("a" * 64, "looks like a placeholder"),
    ],
)
def test_a_weak_confirmation_secret_is_refused(endpoints: Path, secret: str, reason: str) -> None:
    result = start_up(endpoints, CONFIRMATION_SECRET=secret)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"CONFIRMATION_SECRET {reason}" in result.stderr
    assert secret not in result.stderr  # the value itself is never printed


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "MCP_TOKEN_KEY is not set"),
        ("short-key", "MCP_TOKEN_KEY is 9 bytes long"),
        ("change-me-change-me-change-me-change-me", "MCP_TOKEN_KEY looks like a placeholder"),
    ],
)
def test_a_missing_or_weak_token_key_is_refused_when_a_server_acts_as_the_person(
    tmp_path: Path, key: str | None, reason: str
) -> None:
    person = procs.write_endpoints(tmp_path / "person.yml", "http://127.0.0.1:1/webhook", mcp_person=True)
    env = {
        "CRM_PERSON_CLIENT_ID": "crm-bridge-person",
        "CRM_PERSON_CLIENT_SECRET": "person-client-secret",
        "ACTION_SERVER_PUBLIC_URL": "http://127.0.0.1:5055",
        "MCP_TOKEN_STORE": str(tmp_path / "tokens.sqlite3"),
        **({"MCP_TOKEN_KEY": key} if key else {}),
    }
    result = start_up(person, **env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert reason in result.stderr
    assert key is None or key not in result.stderr  # the value itself is never printed


def test_the_development_flag_accepts_a_weak_secret_loudly(endpoints: Path) -> None:
    result = start_up(
        endpoints,
        20.0,
        CONFIRMATION_SECRET="change-me",
        MCP_BRIDGE_DEVELOPMENT="1",
        MCP_BRIDGE_CHANNEL_KEY="",
    )
    assert result.returncode == -1, result.stderr[-2000:]  # still running when stopped
    output = result.stdout + result.stderr
    assert "accepted only because MCP_BRIDGE_DEVELOPMENT=1" in output


def test_without_the_channel_key_the_action_server_does_not_start(endpoints: Path) -> None:
    result = start_up(endpoints, MCP_BRIDGE_CHANNEL_KEY="")
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        "MCP_BRIDGE_CHANNEL_KEY is not set" in result.stderr and "MCP_BRIDGE_DEVELOPMENT=1" in result.stderr
    )
    short = start_up(endpoints, MCP_BRIDGE_CHANNEL_KEY="short-channel-key")
    assert short.returncode == 2 and "shorter than 32" in short.stderr
    assert "short-channel-key" not in short.stderr  # the value itself is never printed


def test_the_development_flag_takes_unsigned_messages_loudly(endpoints: Path) -> None:
    """`make chat` (rasa shell, which signs nothing): the action server starts without the key and
    says at start that unsigned messages are taken as from nobody."""
    result = start_up(endpoints, 20.0, MCP_BRIDGE_CHANNEL_KEY="", MCP_BRIDGE_DEVELOPMENT="1")
    assert result.returncode == -1, result.stderr[-2000:]  # still running when stopped
    assert "DEVELOPMENT MODE (MCP_BRIDGE_DEVELOPMENT=1): messages that no channel signed" in (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({}, "MCP_BRIDGE_DEVELOPMENT=1 and MCP_BRIDGE_CHANNEL_KEY are both set"),
        (
            {
                "MCP_BRIDGE_CHANNEL_KEY": "",
                "ACTION_SERVER_TOKEN": "a-long-random-action-server-token-7Qe2Lw9",
            },
            "is set beside ACTION_SERVER_TOKEN",
        ),
        (
            {
                "MCP_BRIDGE_CHANNEL_KEY": "",
                "ACTION_SERVER_HOST": "0.0.0.0",
                "ACTION_SERVER_TOKEN": "a-long-random-action-server-token-7Qe2Lw9",
            },
            "ACTION_SERVER_HOST=0.0.0.0, not a loopback address",
        ),
    ],
    ids=["beside a channel key", "beside a token", "beside a public address"],
)
def test_the_development_flag_never_starts_in_a_deployment(
    endpoints: Path, env: dict[str, str], reason: str
) -> None:
    """Development mode takes unsigned messages as from nobody: beside a channel key, a token or an
    address other than loopback (what only a deployment has) the action server does not start."""
    result = start_up(endpoints, MCP_BRIDGE_DEVELOPMENT="1", **env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert reason in result.stderr


@pytest.mark.parametrize("name", ["ACTION_SERVER_TOKEN", "RASA_AUTH_TOKEN"])
@pytest.mark.parametrize("value", ["replace-me", "replace-me-with-a-long-random-value-please"])
def test_a_short_or_placeholder_token_is_refused(endpoints: Path, name: str, value: str) -> None:
    """deploy/example.env says short tokens are refused: so are placeholders, whatever their length."""
    result = start_up(endpoints, **{name: value})
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"environment variable {name}" in result.stderr and value not in result.stderr


def test_on_loopback_a_request_naming_another_host_is_refused(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str
) -> None:
    """DNS rebinding: a web page on evil.example whose name now points at 127.0.0.1 reaches the port,
    but its requests name evil.example in the Host header."""
    server = services.start(
        procs.action_server(
            endpoints=endpoints,
            crm_url=crm_rest,
            mcp_url=crm_mcp,
            mcp_token=TOKEN,
            extra_env={"ACTION_SERVER_ALLOWED_HOSTS": "actions.internal"},
        )
    )
    port = server.url.split(":")[2].split("/")[0]

    def status(host: str) -> int:
        request = urllib.request.Request(
            server.url,
            data=json.dumps(nothing_pending_call()).encode(),
            headers={"Content-Type": "application/json", "Host": host},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    assert status(f"evil.example:{port}") == 421
    assert status("evil.example") == 421
    assert status(f"127.0.0.1.evil.example:{port}") == 421
    for allowed in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"actions.internal:{port}"):
        assert status(allowed) == 200, allowed


def test_generated_secret_files_are_private_and_long_enough(tmp_path: Path) -> None:
    from devstack.services import secret

    value = secret(tmp_path, "", "confirmation_secret")
    path = tmp_path / "confirmation_secret"
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(value.encode()) >= 32 and secret(tmp_path, "", "confirmation_secret") == value
