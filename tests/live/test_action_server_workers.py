"""rasa_sdk's own start, at whichever end of the supported range runs this suite.

rasa-sdk 3.21 (Sanic 25) builds the app again in worker processes, which it starts by pickling its
action registry (``ACTION_SERVER_SANIC_WORKERS``), and reloads modules with ``--auto-reload``;
rasa-sdk 3.6 serves from one process. Either way the plugin's actions are served, and its start-up
checks, token check and loopback default hold in every process that answers; a bot with a
``rasa_sdk_plugins`` package of its own keeps them; gRPC mode, which runs no plugin hook, is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

import pytest

from mcp_bridge.action_server.server import GRPC_REFUSAL
from mcp_bridge.contract import PENDING_SLOT
from tests.live.test_action_server_access import listening_addresses, nothing_pending_call, post
from tests.support import procs
from tests.support.conversation import asked_call, notes_for
from tests.support.rasa_calls import FakeTracker, call_action, said, slot_events

# The action server's token (32+ random characters: a weak one stops the server).
SHARED = "shared-secret-4Fh8Lq2Zr7Wm5Kp9Tc3V"

TOKEN = "mcp-test-token-of-the-crm-server-8Hs3Dq"
DANA = "dana@example.com"
SDK = tuple(int(part) for part in version("rasa-sdk").split(".")[:2])
WORKERS = SDK >= (3, 21)  # rasa-sdk 3.6 serves from its one process
HOOK_LINE = "mcp_bridge: listening on 127.0.0.1 (token required)"


def copy_bot(tmp_path: Path) -> Path:
    """The example bot's action-server files in a folder of their own (a bot that is not this checkout)."""
    bot = tmp_path / "bot"
    bot.mkdir()
    for name in ("actions", "skills"):
        shutil.copytree(procs.EXAMPLE_BOT / name, bot / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(procs.EXAMPLE_BOT / "domain.yml", bot / "domain.yml")
    return bot


def action_server(
    endpoints: Path, crm_rest: str, crm_mcp: str, tmp_path: Path, *, bot: Path | None = None, **env: str
) -> procs.ServiceProcess:
    service = procs.action_server(
        endpoints=endpoints,
        crm_url=crm_rest,
        mcp_url=crm_mcp,
        mcp_token=TOKEN,
        audit_log=tmp_path / "audit.jsonl",
        extra_env={"ACTION_SERVER_TOKEN": SHARED, **env},
    )
    del service.env["ACTION_SERVER_HOST"]  # the plugin's default, not the test's
    if bot is not None:
        service.cwd = bot
        service.env["SKILLS_DIR"] = str(bot / "skills")
        service.env["DOMAIN"] = str(bot / "domain.yml")
        # crm/ is the example's, not installed with the plugin: the copied actions import it.
        # The caller's PYTHONPATH stays after it (how an older venv is pointed at a working copy).
        paths = [str(procs.EXAMPLE_BOT), os.environ.get("PYTHONPATH")]
        service.env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    return service


@pytest.fixture
def endpoints(tmp_path: Path) -> Path:
    return procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")


def authorised(url: str) -> str:
    return url + "?token=" + SHARED


def hooks_ran(output: str) -> int:
    return output.count(HOOK_LINE)


def ask_and_confirm(webhook: str, crm_db: Path, note: str) -> dict[str, object]:
    """One conversation: the question, then "yes"; the pending confirmation that was asked."""
    tracker = FakeTracker(f"workers-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
    tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
    status, answer, _ = call_action(authorised(webhook), "action_log_interaction", tracker)
    assert status == 200 and said(answer) == ["utter_confirm_note"], answer
    tracker.apply("action_log_interaction", answer)
    pending = slot_events(answer)[PENDING_SLOT]
    tracker.user("yes", "affirm", 1.0)
    status, answer, _ = call_action(authorised(webhook), "action_confirm_tool", tracker)
    assert status == 200, answer
    assert said(answer) == ["utter_note_saved"], (note, answer)
    assert isinstance(pending, dict)
    return asked_call(pending)


def test_every_worker_checks_the_token_binds_loopback_and_shares_the_confirmation_key(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str, crm_db: Path, tmp_path: Path
) -> None:
    """Two workers, no CONFIRMATION_SECRET: a question asked by one is confirmed by the other, once."""
    service = action_server(endpoints, crm_rest, crm_mcp, tmp_path, ACTION_SERVER_SANIC_WORKERS="2")
    del service.env["CONFIRMATION_SECRET"]
    server = services.start(service)
    port = int(server.url.split(":")[2].split("/")[0])
    assert listening_addresses(port) == {"127.0.0.1"}
    deadline = time.monotonic() + 30
    while hooks_ran(server.output()) < (3 if WORKERS else 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    # The main process and each worker ran the plugin's hook (checks, token, address).
    assert hooks_ran(server.output()) == (3 if WORKERS else 1), server.output()
    for _ in range(12):
        assert post(server.url, nothing_pending_call())[0] == 401

    before = notes_for(crm_db, DANA)
    written: list[str] = []
    by_conversation: dict[str, set[int]] = defaultdict(set)
    audit = tmp_path / "audit.jsonl"
    for attempt in range(40):  # until one question was asked in one worker and confirmed in another
        note = f"worker note {attempt} {uuid.uuid4().hex[:8]}"
        pending = ask_and_confirm(server.url, crm_db, note)
        written.append(note)
        entries = [json.loads(line) for line in audit.read_text().splitlines()]
        pids = {
            e["decision"]: e["pid"] for e in entries if e.get("confirmation") == pending["id"] and "pid" in e
        }
        by_conversation[str(pending["id"])] = {pids["asked"], pids["confirmed"]}
        if not WORKERS or any(len(p) == 2 for p in by_conversation.values()):
            break
    assert not WORKERS or any(len(p) == 2 for p in by_conversation.values()), (
        "in 40 conversations no question was confirmed by another worker than the one that asked"
    )
    assert notes_for(crm_db, DANA) == [*before, *written]  # each confirmed note once, none lost
    assert SHARED not in server.output() and TOKEN not in server.output()


def test_a_bot_with_its_own_rasa_sdk_plugins_keeps_the_checks(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str, tmp_path: Path
) -> None:
    bot = copy_bot(tmp_path)
    plugins = bot / "rasa_sdk_plugins"
    plugins.mkdir()
    (plugins / "__init__.py").write_text(
        "import pluggy\n\n"
        "hookimpl = pluggy.HookimplMarker('rasa_sdk')\n\n\n"
        "class Own:\n"
        "    @hookimpl\n"
        "    def attach_sanic_app_extensions(self, app):\n"
        "        print('the bot s own plugin ran', flush=True)\n\n\n"
        "def init_hooks(manager):\n"
        "    manager.register(Own())\n"
    )
    service = action_server(endpoints, crm_rest, crm_mcp, tmp_path, bot=bot, ACTION_SERVER_SANIC_WORKERS="2")
    server = services.start(service)
    port = int(server.url.split(":")[2].split("/")[0])
    assert "the bot s own plugin ran" in server.output()
    assert hooks_ran(server.output()) >= 1
    assert listening_addresses(port) == {"127.0.0.1"}
    assert post(server.url, nothing_pending_call())[0] == 401
    status, body = post(authorised(server.url), nothing_pending_call())
    assert status == 200 and [r.get("response") for r in body["responses"]] == ["utter_nothing_pending"]  # type: ignore[union-attr]

    # And its start-up checks: a bad skill file stops that bot's action server.
    skill = bot / "skills" / "log_interaction.yml"
    skill.write_text(skill.read_text().replace("utter_note_cancelled", "utter_no_such_response"))
    broken = action_server(endpoints, crm_rest, crm_mcp, tmp_path, bot=bot)
    result = subprocess.run(broken.args, cwd=bot, env=broken.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "utter_no_such_response" in result.stderr and "log_interaction.yml" in result.stderr


@pytest.mark.skipif(not WORKERS, reason="rasa-sdk 3.6 reloads in its one process, as before")
def test_auto_reload_keeps_the_checks_in_the_reloaded_workers(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str, tmp_path: Path
) -> None:
    """`--auto-reload`: an edited actions module is reloaded and the token check still holds."""
    bot = copy_bot(tmp_path)
    service = action_server(endpoints, crm_rest, crm_mcp, tmp_path, bot=bot, ACTION_SERVER_SANIC_WORKERS="2")
    service.args = [*service.args, "--auto-reload"]
    server = services.start(service)
    for _ in range(6):  # each worker records its modules' modification times on its first requests
        assert post(authorised(server.url), nothing_pending_call())[0] == 200
    time.sleep(1.1)  # the reload compares modification times
    forms = bot / "actions" / "forms.py"
    forms.write_text(forms.read_text() + "\n\nRELOADED = True\n")
    # The kernel picks which worker takes each connection, so a worker that had imported the
    # module before the edit may see its next request only after several others: ask until one
    # of them reloads (bounded), checking the token on every request on the way.
    for _ in range(60):
        assert post(server.url, nothing_pending_call())[0] == 401
        status, body = post(authorised(server.url), nothing_pending_call())
        assert status == 200, body
        assert [r.get("response") for r in body["responses"]] == ["utter_nothing_pending"]  # type: ignore[union-attr]
        if "Reloaded module/package: 'actions.forms'" in server.output():
            break
    assert "Reloaded module/package: 'actions.forms'" in server.output()


def test_grpc_mode_is_refused_with_the_reason(endpoints: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rasa_sdk",
            "--actions",
            "actions",
            "--grpc",
            "--port",
            str(procs.free_port()),
        ],  # noqa: E501
        cwd=procs.EXAMPLE_BOT,
        env=procs.child_env({"ENDPOINTS": str(endpoints), "CRM_MCP_TOKEN": TOKEN}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    if SDK >= (3, 21):  # rasa-sdk 3.6 has no --grpc: its own argument parser refuses it
        assert GRPC_REFUSAL in result.stderr
        assert "gRPC Server started" not in result.stderr + result.stdout
