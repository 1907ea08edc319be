"""The plugin's Rasa channels (mcp_bridge/channels/) where they run: in Rasa's own environment.

That environment (.venv-rasa: Rasa 3.6, pydantic 1) has none of the plugin's dependencies, so the
channels must import without them, and without the rest of the plugin (and Rasa Pro 3.21's
environment imports them too); and a channel whose settings cannot be used must stop Rasa at start,
naming the channel, the key and the reason, never the secret. Their behaviour against a running Rasa
server is tested with the chat page's stack (tests/live/browser/test_channel_identity.py) and, for
the platforms' connectors, against stand-ins of the platforms' APIs (tests/live/platforms/).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mcp_bridge
from tests.live.browser import conftest as browser
from tests.support import procs

RASA_PYTHON = procs.REPO_ROOT / ".venv-rasa" / "bin" / "python"
PRO_PYTHON = procs.REPO_ROOT / ".venv-pro" / "bin" / "python"
REST = "mcp_bridge.channels.rest.BearerRestInput"
SOCKET = "mcp_bridge.channels.socketio.SignedSocketIOInput"
SLACK = "mcp_bridge.channels.slack.SignedSlackInput"
TEAMS = "mcp_bridge.channels.botframework.SignedBotFrameworkInput"
TWILIO = "mcp_bridge.channels.twilio.SignedTwilioInput"
TELEGRAM = "mcp_bridge.channels.telegram.SignedTelegramInput"
MESSENGER = "mcp_bridge.channels.facebook.SignedMessengerInput"
KEY = "t3st-only-channel-key-of-test-channels-0a9f7c"
CHANNELS = Path(mcp_bridge.__file__).parent / "channels"
# What the channels may import besides the standard library: what Rasa 3.6 and Rasa Pro 3.21 bring.
RASAS_PACKAGES = {"rasa", "sanic", "socketio", "jwt", "aiohttp", "mcp_bridge"}
PLATFORMS = ["slack", "botframework", "twilio", "telegram", "facebook"]


def in_rasas_environment(code: str, env: dict[str, str] | None = None, python: Path = RASA_PYTHON) -> Any:
    """Run `code` with Rasa's Python from the checkout (as `rasa run` finds the plugin); its JSON."""
    if not python.exists():
        pytest.fail(f"{python} is missing: run `make setup`")
    done = subprocess.run(
        [str(python), "-c", code],
        cwd=procs.REPO_ROOT,
        env=procs.child_env({"PYTHONWARNINGS": "ignore", **(env or {})}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


IMPORT_ALL = (
    "import json, sys\n"
    "import mcp_bridge.channels.rest, mcp_bridge.channels.socketio as s\n"
    + "".join(f"import mcp_bridge.channels.{name}\n" for name in PLATFORMS)
    + "print(json.dumps({'plugin': sorted(m for m in sys.modules if m.split('.')[0] == 'mcp_bridge'),\n"
    "  'deps': sorted(m for m in ('mcp', 'mcp_types', 'pydantic_core') if m in sys.modules),\n"
    "  'socket': [s.CLOCK_SKEW_SECONDS, s.DEFAULT_AUDIENCE, s.RENEW_EVENT]}))"
)


def test_the_channels_import_in_rasas_environment_without_the_plugins_dependencies() -> None:
    loaded = in_rasas_environment(IMPORT_ALL)
    assert loaded["deps"] == []
    # The browser tests' copies of the socket.io channel's constants (they cannot import it).
    assert loaded["socket"] == [browser.CLOCK_SKEW_SECONDS, browser.DEFAULT_AUDIENCE, browser.RENEW_EVENT]
    assert loaded["plugin"] == [
        "mcp_bridge",
        "mcp_bridge.channels",
        "mcp_bridge.channels._settings",
        "mcp_bridge.channels.botframework",  # Microsoft Teams
        "mcp_bridge.channels.facebook",  # Messenger
        "mcp_bridge.channels.platform",  # what every platform's connector shares (and yours can)
        "mcp_bridge.channels.proof",  # the signature of who sent a message (standard library only)
        "mcp_bridge.channels.rest",
        "mcp_bridge.channels.slack",
        "mcp_bridge.channels.socketio",
        "mcp_bridge.channels.telegram",
        "mcp_bridge.channels.twilio",  # SMS and WhatsApp
        "mcp_bridge.config",  # its __init__ is a docstring
        "mcp_bridge.config.envsubst",  # the ${VAR} rule endpoints.yml uses too (standard library only)
        "mcp_bridge.config.random_values",  # a key that is a placeholder (standard library only)
    ]


def test_the_channels_import_in_rasa_pros_environment_too() -> None:
    loaded = in_rasas_environment(IMPORT_ALL, python=PRO_PYTHON)
    assert "mcp_bridge.channels.slack" in loaded["plugin"]
    assert not {"mcp_bridge.rasa", "mcp_bridge.action_server"} & set(loaded["plugin"])
    assert [m for m in loaded["deps"] if m != "pydantic_core"] == []  # Rasa Pro itself brings pydantic 2


@pytest.mark.parametrize("path", sorted(CHANNELS.glob("*.py")), ids=lambda p: p.name)
def test_a_channel_imports_only_the_standard_library_and_what_rasa_brings(path: Path) -> None:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    assert found - sys.stdlib_module_names - RASAS_PACKAGES == set()


def test_the_package_imports_its_names_on_first_use_and_still_exports_every_one() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, mcp_bridge; print(sorted(m for m in sys.modules if m.startswith('mcp_bridge')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "['mcp_bridge']"
    assert set(mcp_bridge.__all__) == set(mcp_bridge._EXPORTS)
    for name in mcp_bridge.__all__:
        assert getattr(mcp_bridge, name).__module__ == f"mcp_bridge.{mcp_bridge._EXPORTS[name]}"
    with pytest.raises(AttributeError):
        _ = mcp_bridge.NoSuchName  # type: ignore[attr-defined]


SETTINGS = """
import json, sys
from rasa.shared.utils.io import read_config_file
from rasa.core.run import _create_single_channel
results = {}
# Rasa reads the example bot's credentials.yml without the secrets: they are quoted, so it leaves them.
credentials = read_config_file("examples/crm_bot/credentials.yml")
results["file"] = {name: sorted(value) for name, value in credentials.items()}
def attempt(label, channel, settings):
    try:
        made = _create_single_channel(channel, settings)
        results[label] = "ok " + type(made).__name__
    except Exception as exc:
        results[label] = f"{type(exc).__name__}: {exc}"
for name, settings in credentials.items():
    attempt("repo " + name, name, settings)
cases = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.loads(CASES)
for label, (channel, settings) in cases.items():
    attempt(label, channel, settings)
print(json.dumps(results))
"""


def test_a_channel_that_cannot_be_used_stops_rasa_naming_channel_key_and_reason() -> None:
    origins = ["http://127.0.0.1:8080"]
    slack = {"slack_token": KEY, "slack_signing_secret": KEY, "team_ids": "T1, T2"}
    twilio = {
        "account_sid": "AC1",
        "auth_token": KEY,
        "twilio_number": ["+15550001111", "whatsapp:+15550001111"],
        "webhook_url": "https://rasa.example.com/webhooks/twilio/webhook",
    }
    cases = {
        "rest, token unset": (REST, {"token": "${NOT_SET_ANYWHERE}"}),
        "rest, short token": (REST, {"token": "${SHORT_TOKEN}"}),
        "rest, no token": (REST, {}),
        "rest, unknown key": (REST, {"token": KEY, "tokne": KEY}),
        "rest, ok": (REST, {"token": KEY}),
        "rest, short channel key": (REST, {"token": KEY, "channel_key": "${SHORT_TOKEN}"}),
        "rest, channel key unset": (REST, {"token": KEY, "channel_key": "${NOT_SET_ANYWHERE}"}),
        "socket, no key": (SOCKET, {"allowed_origins": origins}),
        "socket, no origins": (SOCKET, {"jwt_key": KEY}),
        "socket, any origin": (SOCKET, {"jwt_key": KEY, "allowed_origins": "*"}),
        "socket, unsigned": (SOCKET, {"jwt_key": KEY, "jwt_method": "none", "allowed_origins": origins}),
        "socket, ok": (SOCKET, {"jwt_key": "${GOOD_KEY}", "allowed_origins": "${ORIGINS}"}),
        "slack, no team": (SLACK, {"slack_token": KEY, "slack_signing_secret": KEY}),
        "slack, granularity": (SLACK, {**slack, "conversation_granularity": "sender"}),
        "slack, short secret": (SLACK, {**slack, "slack_signing_secret": "${SHORT_TOKEN}"}),
        "slack, ok": (SLACK, slack),
        "teams, no tenant": (TEAMS, {"app_id": "a-b-c", "app_password": KEY}),
        "teams, ok": (TEAMS, {"app_id": "a-b-c", "app_password": KEY, "tenant_ids": ["t-1"]}),
        "twilio, no url": (TWILIO, {**twilio, "webhook_url": "/webhooks/twilio/webhook"}),
        "twilio, ok": (TWILIO, twilio),
        "telegram, secret": (TELEGRAM, {"access_token": KEY, "secret_token": "!secret!" * 5}),
        "telegram, ok": (TELEGRAM, {"access_token": KEY, "secret_token": KEY}),
        "messenger, no page": (MESSENGER, {"verify": KEY, "secret": KEY, "page-access-token": KEY}),
        "messenger, ok": (
            MESSENGER,
            {"verify": KEY, "secret": KEY, "page-access-token": KEY, "page_id": "1"},
        ),
    }
    code = SETTINGS.replace("json.loads(CASES)", repr(json.dumps(cases)).join(["json.loads(", ")"]))
    env = {
        "SHORT_TOKEN": "too-short",
        "GOOD_KEY": KEY,
        "ORIGINS": "http://a.example, http://b.example",
        "MCP_BRIDGE_CHANNEL_KEY": KEY,
    }
    results = in_rasas_environment(code, env)

    assert results["file"] == {REST: ["token"], SOCKET: sorted(results["file"][SOCKET])}
    assert results[f"repo {REST}"] == (
        f"ChannelConfigError: credentials.yml, channel {REST}, token: "
        "the environment variable REST_CHANNEL_TOKEN is not set"
    )
    assert "CHAT_JWT_KEY is not set" in results[f"repo {SOCKET}"]
    assert "the environment variable NOT_SET_ANYWHERE is not set" in results["rest, token unset"]
    assert "token: shorter than 32 characters" in results["rest, short token"]
    assert "too-short" not in results["rest, short token"]  # a secret is never echoed
    assert "token: required" in results["rest, no token"]
    assert "tokne: unknown setting" in results["rest, unknown key"]
    assert results["rest, ok"] == "ok BearerRestInput"
    assert "channel_key: key 1 is 9 characters long" in results["rest, short channel key"]
    assert "MCP_BRIDGE_CHANNEL_KEY" in results["rest, short channel key"]  # the action servers' value
    assert "too-short" not in results["rest, short channel key"]
    assert "NOT_SET_ANYWHERE is not set" in results["rest, channel key unset"]
    assert "jwt_key: required" in results["socket, no key"]
    assert "allowed_origins: required" in results["socket, no origins"]
    assert "would let every web page in" in results["socket, any origin"]
    assert "jwt_method: 'none' is not one of" in results["socket, unsigned"]
    assert results["socket, ok"] == "ok SignedSocketIOInput"
    assert f"channel {SLACK}, team_ids: required" in results["slack, no team"]
    assert "conversation_granularity: 'sender' is not one of" in results["slack, granularity"]
    assert "slack_signing_secret: shorter than 32" in results["slack, short secret"]
    assert results["slack, ok"] == "ok SignedSlackInput"
    assert f"channel {TEAMS}, tenant_ids: required" in results["teams, no tenant"]
    assert results["teams, ok"] == "ok SignedBotFrameworkInput"
    assert "webhook_url: the URL configured at Twilio" in results["twilio, no url"]
    assert results["twilio, ok"] == "ok SignedTwilioInput"
    assert "secret_token: Telegram allows only" in results["telegram, secret"]
    assert "!secret!" not in results["telegram, secret"]
    assert results["telegram, ok"] == "ok SignedTelegramInput"
    assert f"channel {MESSENGER}, page_id: a non-empty string is required" in results["messenger, no page"]
    assert results["messenger, ok"] == "ok SignedMessengerInput"
