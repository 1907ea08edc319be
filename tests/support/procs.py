"""The tests' handle on real processes: scripts/services.py (shared with `make up` and
`make cluster-up`), plus the processes only tests start."""

from __future__ import annotations

import sys

from scripts.services import (
    EXAMPLE_BOT,
    HOST,
    OAUTH_BLOCK,
    RASA,
    RASA_START_TIMEOUT,
    REPO_ROOT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    OAuthClient,
    PersonClient,
    RasaAccess,
    ServiceProcess,
    Services,
    action_server,
    authorization_server,
    base_url,
    chat_page,
    child_env,
    crm_mcp,
    crm_rest,
    current_model,
    free_port,
    oauth_env,
    page_origins,
    rasa_server,
    seed_db,
    write_endpoints,
)

__all__ = [
    "EXAMPLE_BOT",
    "HOST",
    "OAUTH_BLOCK",
    "PLAIN_DICT_SERVER",
    "REMINDER_SERVER",
    "RASA",
    "RASA_START_TIMEOUT",
    "REPO_ROOT",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "OAuthClient",
    "PersonClient",
    "RasaAccess",
    "ServiceProcess",
    "Services",
    "action_server",
    "authorization_server",
    "base_url",
    "chat_page",
    "child_env",
    "crm_mcp",
    "crm_rest",
    "current_model",
    "free_port",
    "oauth_env",
    "page_origins",
    "plain_dict_mcp",
    "rasa_server",
    "reminders_mcp",
    "seed_db",
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
        [sys.executable, str(PLAIN_DICT_SERVER), "--host", HOST, "--port", str(port)],
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
        [sys.executable, str(REMINDER_SERVER), "--host", HOST, "--port", str(port)]
        + (["--answer-delay", str(answer_delay)] if answer_delay else [])
        + (["--ignore-key"] if ignore_key else []),
        env=child_env(),
        ready_url=f"{base}/writes",
        url=f"{base}/mcp",
    )
