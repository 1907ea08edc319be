"""Start-up: one YAML loader, one reading of the skill directory, one Rasa contract."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from mcp_bridge.cli.init import fragment_text
from mcp_bridge.config.yamlfile import load_yaml
from mcp_bridge.contract import (
    APPROVAL_ACTION,
    APPROVAL_INTENT,
    BUTTON_PAYLOADS,
    ELICITATION_SLOT,
    PENDING_SLOT,
    PLUGIN_ACTIONS,
    PLUGIN_INTENTS,
    RESPONSES,
    REVOKE_ACTION,
    REVOKE_INTENT,
    YES_NO_BUTTONS,
)
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.files import check_skills

SKILLS = Path(__file__).resolve().parents[2] / "examples" / "crm_bot" / "skills"


def test_a_yaml_syntax_error_names_the_file_line_and_column_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "skill.yml"
    path.write_text("skill: [unclosed\ntools: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    message = str(caught.value)
    assert message == (
        f"{path}: not valid YAML: line 2, column 6: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence that starts at line 1, column 8)"
    )


def test_a_missing_or_undecodable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing.yml: file not found$"):
        load_yaml(tmp_path / "missing.yml")
    latin = tmp_path / "latin.yml"
    latin.write_bytes(b"text: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin\.yml: cannot read the file: .*utf-8"):
        load_yaml(latin)


def test_the_skill_directory_is_read_once_and_the_actions_served_are_the_skills_checked(
    tmp_path: Path,
) -> None:
    from mcp_bridge.action_server import actions
    from mcp_bridge.action_server.build import skill_files

    skills_dir = tmp_path / "skills"
    skills_dir.mkdir()
    source = (SKILLS / "log_interaction.yml").read_text()
    (skills_dir / "a.yml").write_text(source.replace("log_interaction", "startup_once"))
    (skills_dir / "b.yml").write_text("skill: [unclosed\n")  # served nothing; refused at start-up

    first = skill_files(skills_dir)
    (skills_dir / "a.yml").write_text("skill: changed_after_the_import\n")
    assert skill_files(str(skills_dir)) is first  # the start-up checks see what the import saw

    served = actions.serve_skills(skills_dir)
    assert "action_startup_once" in served and not any("changed" in name for name in served)
    cls = served["action_startup_once"]
    assert getattr(actions, cls.__name__) is cls  # how a worker process finds it (pickle)
    with pytest.raises(ConfigError, match=r"b\.yml: not valid YAML: line 2, column 1"):
        check_skills(first, local_tools=set(), mcp_servers={"crm"}, responses=None)


def test_init_writes_the_contract_that_the_runtime_reads() -> None:
    domain = yaml.safe_load(fragment_text("domain.yml"))
    assert tuple(domain["intents"]) == (*PLUGIN_INTENTS, APPROVAL_INTENT, REVOKE_INTENT)
    assert tuple(domain["actions"]) == (*PLUGIN_ACTIONS, APPROVAL_ACTION, REVOKE_ACTION)
    # A second approver's responses, which the executor says (added only for a skill that uses one).
    assert RESPONSES.for_approvals() <= set(domain["responses"])
    # The executor's remembered-permission responses (added only for a skill that allows one).
    assert RESPONSES.for_remembering() <= set(domain["responses"])
    assert list(domain["slots"]) == [PENDING_SLOT, ELICITATION_SLOT]
    # A question carries no buttons of its own: the action server adds its answers (YES_NO_BUTTONS).
    question = domain["responses"]["utter_confirm_tool_call"][0]
    assert "buttons" not in question
    assert {button["payload"] for button in YES_NO_BUTTONS} == BUTTON_PAYLOADS


def test_check_runs_from_any_folder(tmp_path: Path) -> None:
    """No chdir: the bot's files are found from its folder wherever the command is run."""
    from tests.support.bots import add_reminder_skill, mcp_bridge, starter_bot

    bot = starter_bot(tmp_path / "bot")
    assert mcp_bridge("init", cwd=bot).returncode == 0
    add_reminder_skill(bot)
    assert mcp_bridge("init", cwd=bot).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "skills").mkdir(parents=True)  # not the bot's: the check must not read it
    shutil.copy(SKILLS / "log_interaction.yml", elsewhere / "skills" / "other.yml")
    env = {"REMINDERS_MCP_URL": "http://127.0.0.1:9/mcp"}
    result = mcp_bridge("check", str(bot), cwd=elsewhere, env=env)
    assert result.returncode == 0, result.stderr
    assert "1 skill(s) (action_save_reminder)" in result.stdout
