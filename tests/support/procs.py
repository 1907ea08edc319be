"""The tests' handle on real processes: devstack/services.py (shared with `make up`, `make chat` and
`make cluster-up`), plus the processes only tests start (the fixture MCP servers of tests/fixtures/)."""

from __future__ import annotations

import socket

import pytest

from devstack.services import (
    EXAMPLE_BOT,
    HOST,
    OAUTH_BLOCK,
    RASA,
    RASA_START_TIMEOUT,
    REPO_ROOT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    TEST_CHANNEL_KEY,
    TEST_CONFIRMATION_SECRET,
    ApproverLogin,
    OAuthClient,
    PersonClient,
    RasaAccess,
    ServiceProcess,
    Services,
    action_server,
    approval_page,
    authorization_server,
    base_url,
    chat_page,
    child_env,
    crm_mcp,
    crm_rest,
    current_model,
    free_port,
    mcp_server_python,
    oauth_env,
    page_origins,
    rasa_server,
    seed_db,
    trace_backend,
    write_endpoints,
)
from mcp_bridge.mcp_sdk import MCP_1

__all__ = [
    "EXAMPLE_BOT",
    "HOST",
    "OAUTH_BLOCK",
    "ERA_SERVER",
    "PLAIN_DICT_SERVER",
    "REMINDER_SERVER",
    "RASA",
    "RASA_START_TIMEOUT",
    "REPO_ROOT",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "TEST_CHANNEL_KEY",
    "TEST_CONFIRMATION_SECRET",
    "ApproverLogin",
    "OAuthClient",
    "PersonClient",
    "RasaAccess",
    "ServiceProcess",
    "Services",
    "action_server",
    "approval_page",
    "authorization_server",
    "base_url",
    "chat_page",
    "child_env",
    "crm_mcp",
    "crm_rest",
    "era_mcp",
    "everything_mcp",
    "current_model",
    "free_port",
    "mcp_server_python",
    "oauth_env",
    "page_origins",
    "plain_dict_mcp",
    "rasa_server",
    "reminders_mcp",
    "seed_db",
    "trace_backend",
    "write_endpoints",
]

PLAIN_DICT_SERVER = REPO_ROOT / "tests" / "fixtures" / "plain_dict_server.py"
REMINDER_SERVER = REPO_ROOT / "tests" / "fixtures" / "reminder_server.py"


def plain_dict_mcp(port: int | None = None) -> ServiceProcess:
    """A (not yet started) tests/fixtures/plain_dict_server.py; `.url` ends in /mcp."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    return ServiceProcess(
        "plain-dict-mcp",
        [mcp_server_python(), str(PLAIN_DICT_SERVER), "--host", HOST, "--port", str(port)],
        # It imports crm/, which is not installed (only the plugin is): run it from the example bot.
        env=child_env({"PYTHONPATH": str(EXAMPLE_BOT)}),
        ready_url=f"{base}/stats",
        url=f"{base}/mcp",
    )


def reminders_mcp(
    port: int | None = None, *, answer_delay: float = 0.0, ignore_key: bool = False
) -> ServiceProcess:
    """A (not yet started) tests/fixtures/reminder_server.py; `.url` ends in /mcp, and `GET /calls`
    at its base URL lists what each tool call carried (headers and `_meta`)."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    return ServiceProcess(
        "reminders-mcp",
        [mcp_server_python(), str(REMINDER_SERVER), "--host", HOST, "--port", str(port)]
        + (["--answer-delay", str(answer_delay)] if answer_delay else [])
        + (["--ignore-key"] if ignore_key else []),
        env=child_env(),
        ready_url=f"{base}/writes",
        url=f"{base}/mcp",
    )


ERA_SERVER = REPO_ROOT / "tests" / "fixtures" / "era_server.py"


# Why a test of a 2026-07-28-only server does not run at mcp 1.30 (Rasa Pro's environment).
MODERN_NEEDS_MCP_2 = (
    "mcp 1.30 (this environment's SDK, Rasa Pro 3.21's pin) cannot speak the 2026-07-28 revision, the only "
    "one this server speaks; that the bridge refuses such a server there, saying why and writing nothing, "
    "is tested in test_protocol_eras.py and test_check.py"
)


def era_mcp(
    era: str, port: int | None = None, *, name: str = "items", refused_here: bool = False
) -> ServiceProcess:
    """A (not yet started) tests/fixtures/era_server.py speaking ``era`` (legacy, modern or both);
    `.url` ends in /mcp, `GET /writes` counts its writes and `GET /methods` lists what it was sent.

    A ``modern`` server (2026-07-28 only) where this process's MCP SDK is mcp 1.30 skips the test
    that asks for it (:data:`MODERN_NEEDS_MCP_2`), unless ``refused_here`` says the test is about
    that refusal."""
    if era == "modern" and MCP_1 and not refused_here:
        pytest.skip(MODERN_NEEDS_MCP_2)
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    return ServiceProcess(
        f"{era}-mcp",
        [
            mcp_server_python(),
            str(ERA_SERVER),
            "--host",
            HOST,
            "--port",
            str(port),
            "--era",
            era,
            "--name",
            name,
        ],
        env=child_env(),
        ready_url=f"{base}/writes",
        url=f"{base}/mcp",
    )


EVERYTHING = REPO_ROOT / "tests" / "fixtures" / "everything"


def everything_mcp(port: int | None = None) -> ServiceProcess:
    """A (not yet started) @modelcontextprotocol/server-everything (the MCP project's TypeScript
    reference server, on the TypeScript SDK 1.x: 2025-11-25) over streamable HTTP on loopback;
    `.url` ends in /mcp. Needs `npm ci` in tests/fixtures/everything (`make setup`)."""
    package = EVERYTHING / "node_modules" / "@modelcontextprotocol" / "server-everything"
    if not package.is_dir():
        raise RuntimeError(f"{EVERYTHING}/node_modules is missing: run `make setup` (npm ci there)")
    port = port or free_port()

    def listening() -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex((HOST, port)) == 0

    return ServiceProcess(
        "server-everything",
        [
            "node",
            "--require",
            str(EVERYTHING / "loopback.cjs"),
            str(package / "dist" / "index.js"),
            "streamableHttp",
        ],
        env=child_env({"PORT": str(port)}),
        ready_check=listening,
        url=f"http://{HOST}:{port}/mcp",
    )
