"""The plugin's settings, read once from the environment (mcp_bridge/config/settings.py)."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_bridge.approvals import second_approver
from mcp_bridge.config.settings import Settings, variables
from mcp_bridge.errors import ConfigError
from mcp_bridge.reading import reader
from mcp_bridge.server_questions import waiting_calls


def test_every_field_is_one_documented_variable() -> None:
    declared = [spec for spec in dataclasses.fields(Settings) if "variable" in spec.metadata]
    assert len(declared) == len(dataclasses.fields(Settings)) - 1  # all but `environ`, the whole mapping
    names = [name for name, _, _, _ in variables()]
    assert len(names) == len(set(names)), "a variable is declared twice"
    for name, _, meaning, _ in variables():
        assert name.isupper() and len(meaning.split()) >= 5, f"{name}: say what it does"


def test_unset_everything_is_its_default() -> None:
    read = Settings.from_env({})
    assert read == Settings()
    assert (read.endpoints, read.database, read.audit_log, read.typed_answer_channels) == (
        "endpoints.yml",
        "var/mcp_bridge.sqlite3",
        "var/audit.jsonl",
        ("cmdline",),
    )
    # The defaults are the ones the modules that use them fall back to without settings.
    assert read.message_max_chars == reader.DEFAULT_MAX_CHARS
    assert read.approval_run_lease_seconds == second_approver.RUN_LEASE_SECONDS
    assert read.elicitation_wait_seconds == waiting_calls.WAIT_SECONDS
    assert read.elicitation_max_waiting == waiting_calls.MAX_WAITING


def test_values_are_read_as_their_kind() -> None:
    read = Settings.from_env(
        {
            "CONFIRMATION_TTL_SECONDS": "90.5",
            "MESSAGE_MAX_CHARS": "400",
            "CONFIRMATION_EXTRA_SECRETS": " one , two ,",
            "ACTION_SERVER_ALLOWED_HOSTS": "a.example, b.example c.example",
            "MCP_BRIDGE_TYPED_ANSWER_CHANNELS": "",
            "AUDIT_LOG": "",
            "AUDIT_TO_LOG": "1",
            "MCP_BRIDGE_DEVELOPMENT": "yes",
            "ACTION_SERVER_TOKEN": "",
        }
    )
    assert read.confirmation_ttl_seconds == 90.5 and read.message_max_chars == 400
    assert read.confirmation_extra_secrets == ("one", "two")
    assert read.action_server_allowed_hosts == ("a.example", "b.example", "c.example")
    assert read.typed_answer_channels == () and read.audit_log == ""  # empty means none, not the default
    assert read.audit_to_log is True and read.development is False  # only "1" turns a flag on
    assert read.action_server_token is None  # empty is unset


def test_a_former_name_is_read_when_its_variable_is_unset() -> None:
    assert Settings.from_env({"ELICITATION_MAX_HELD": "3"}).elicitation_max_waiting == 3
    both = {"ELICITATION_MAX_HELD": "3", "ELICITATION_MAX_WAITING": "5"}
    assert Settings.from_env(both).elicitation_max_waiting == 5
    assert Settings.from_env({"SANIC_HOST": "0.0.0.0"}).action_server_host == "0.0.0.0"
    assert Settings.from_env({"SANIC_HOST": "::1", "ACTION_SERVER_HOST": "127.0.0.1"}).action_server_host == (
        "127.0.0.1"
    )
    assert Settings.from_env({"APPROVALS_DATABASE": "a.db"}).database == "a.db"
    assert Settings.from_env({"APPROVALS_DATABASE": "a.db", "MCP_TOKEN_STORE": "a.db"}).database == "a.db"
    assert (
        Settings.from_env({"MCP_BRIDGE_DATABASE": "new.db", "MCP_TOKEN_STORE": "a.db"}).database == "new.db"
    )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"CONFIRMATION_TTL_SECONDS": "soon"},
            "environment variable CONFIRMATION_TTL_SECONDS: 'soon' is not a number",
        ),
        (
            {"CONFIRMATION_TTL_SECONDS": "-1"},
            "environment variable CONFIRMATION_TTL_SECONDS: must be a positive number",
        ),
        (
            {"ELICITATION_WAIT_SECONDS": "inf"},
            "environment variable ELICITATION_WAIT_SECONDS: must be a positive number",
        ),
        (
            {"APPROVAL_RUN_LEASE_SECONDS": ""},
            "environment variable APPROVAL_RUN_LEASE_SECONDS: '' is not a number",
        ),
        ({"MESSAGE_MAX_CHARS": "1.5"}, "environment variable MESSAGE_MAX_CHARS: '1.5' is not a whole number"),
        (
            {"MESSAGE_MAX_CHARS": "0"},
            "environment variable MESSAGE_MAX_CHARS: must be a positive whole number",
        ),
        (
            {"ELICITATION_MAX_HELD": "many"},
            "environment variable ELICITATION_MAX_HELD: 'many' is not a whole number",
        ),
        (
            {"ACTION_SERVER_PORT": "http"},
            "environment variable ACTION_SERVER_PORT: 'http' is not a whole number",
        ),
        (
            {"APPROVALS_DATABASE": "a.db", "MCP_TOKEN_STORE": "b.db"},
            "environment variables APPROVALS_DATABASE and MCP_TOKEN_STORE name different databases; since "
            "0.4.0 the approvals, the people's tokens and the action server's record share one: set "
            "MCP_BRIDGE_DATABASE",
        ),
    ],
)
def test_a_value_that_cannot_be_used_is_a_config_error_naming_the_variable(
    env: dict[str, str], said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env)
    assert str(refused.value) == said


def test_the_environment_is_read_once_when_the_settings_are_made() -> None:
    env = {"SKILLS_DIR": "first"}
    read = Settings.from_env(env)
    env["SKILLS_DIR"] = "second"
    assert read.skills_dir == "first" and read.environ["SKILLS_DIR"] == "first"
