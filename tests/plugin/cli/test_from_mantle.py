"""`mcp-bridge init --from-mantle`: Rasa's starter bot takes over a Rasa Pro Mantle project's skills, run
as the real command, and `mcp-bridge check` then reports per skill what loads and what does not."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support.bots import mcp_bridge, starter_bot
from tests.support.procs import EXAMPLE_BOT

TWIN = EXAMPLE_BOT / "mantle" / "skills" / "log_interaction"
INTEGRATIONS = textwrap.dedent(
    """\
    model_groups:
      - id: main_model
        models: [{provider: openai, model: gpt-5.2, api_key: "${OPENAI_API_KEY}"}]
    mcp_servers:
      - name: crm
        url: http://127.0.0.1:8200/mcp
        token: ${CRM_MCP_TOKEN}
        tool_timeout: 20
      - name: unused
        url: https://example.com/mcp
    """
)
# Mantle's responses for the twin: placeholders as Mantle writes them, a question without buttons, a
# variant on a Mantle condition, a Mantle `set:` button.
RESPONSES = textwrap.dedent(
    """\
    responses:
      utter_confirm_note:
        - text: 'Add this note to {contact_name}''s record: "{session.log_interaction.note_text}"?'
      utter_note_cancelled:
        - text: "OK, I didn't save the note."
      utter_note_saved:
        - text: "Saved to {contact_name}'s record."
          condition: session.log_interaction.contact_name != None
        - text: "Saved."
      utter_confirm_task:
        - text: 'Create a follow-up task for {contact_name}, due {arg_due_date}: "{arg_title}"?'
      utter_task_cancelled:
        - text: "OK, no follow-up task."
      utter_task_created:
        - text: "Follow-up task created."
      utter_contact_not_found:
        - text: "I couldn't find a contact with the address {arg_email}."
      utter_ask_email_for_lookup:
        - text: "Which contact? Please give me their email address."
          buttons:
            - title: "Use the last one"
              payload: "set:session.log_interaction.contact_email=last"
    """
)
REFUSED = "---\ndescription: Transfer money.\n---\nAsk how much, then transfer it.\n"


@pytest.fixture(scope="module")
def mantle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("agent")
    shutil.copytree(TWIN, project / "skills" / "log_interaction")
    (project / "skills" / "transfer").mkdir()
    (project / "skills" / "transfer" / "skill.md").write_text(REFUSED, encoding="utf-8")
    (project / "skills" / "log_interaction" / "tools.py").write_text("# Mantle's own @tool functions\n")
    (project / "integrations.yml").write_text(INTEGRATIONS, encoding="utf-8")
    (project / "responses.yml").write_text(RESPONSES, encoding="utf-8")
    return project


@pytest.fixture(scope="module")
def taken_over(mantle: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    bot = starter_bot(tmp_path_factory.mktemp("bot") / "bot")
    (bot / "actions" / "__init__.py").write_text("import mcp_bridge.rasa  # noqa: F401\n")
    result = mcp_bridge("init", "--from-mantle", str(mantle), cwd=bot)
    assert result.returncode == 1, result.stdout + result.stderr
    return bot, result.stdout, result.stderr


def test_the_skills_the_plugin_runs_are_taken_over_as_they_are(
    mantle: Path, taken_over: tuple[Path, str, str]
) -> None:
    bot, out, err = taken_over
    folder = bot / "skills" / "log_interaction"
    assert sorted(path.name for path in folder.iterdir()) == ["mcp-bridge.yml", "memory.yml", "skill.md"]
    for name in ("skill.md", "mcp-bridge.yml", "memory.yml"):
        assert (folder / name).read_bytes() == (TWIN / name).read_bytes()
    assert "added skills/log_interaction/: the Mantle skill (skill.md, mcp-bridge.yml, memory.yml)" in out
    assert not (bot / "skills" / "transfer").exists()
    assert (
        f"mcp-bridge init: not carried over: {mantle / 'skills' / 'transfer' / 'skill.md'}: body: no "
        ":::ordered_block: what the skill does is prose for Mantle's LLM"
    ) in err


def test_the_domain_gets_the_action_slots_and_responses(taken_over: tuple[Path, str, str]) -> None:
    bot, out, _ = taken_over
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert "action_log_interaction" in domain["actions"]
    for slot in (
        "contact_email",
        "contact_emails",
        "contact_id",
        "contact_name",
        "note_text",
        "follow_up_date",
    ):
        assert domain["slots"][slot] == {
            "type": "any",
            "influence_conversation": False,
            "mappings": [{"type": "custom"}],
        }
    responses = domain["responses"]
    # A question carries no buttons: the plugin adds its Yes and No itself, bound to the question
    # (and a question of the domain with buttons would be refused at start).
    assert responses["utter_confirm_note"] == [
        {"text": 'Add this note to {contact_name}\'s record: "{note_text}"?'}
    ]
    assert responses["utter_note_saved"] == [{"text": "Saved."}]
    assert responses["utter_ask_email_for_lookup"] == [
        {"text": "Which contact? Please give me their email address."}
    ]
    assert "note: responses.utter_note_saved: a variant on a Mantle condition is left out" in out
    assert "note: responses.utter_ask_email_for_lookup: buttons whose payload is no /intent are left out" in (
        out
    )


def test_endpoints_gets_the_servers_the_skills_import_with_their_type(
    taken_over: tuple[Path, str, str],
) -> None:
    bot, out, _ = taken_over
    text = (bot / "endpoints.yml").read_text()
    assert 'token: "${CRM_MCP_TOKEN}"' in text  # quoted: Rasa leaves it to the action server
    servers = yaml.safe_load(text)["mcp_servers"]
    assert servers == [
        {
            "name": "crm",
            "url": "http://127.0.0.1:8200/mcp",
            "token": "${CRM_MCP_TOKEN}",
            "tool_timeout": 20,
            "type": "http",
        }
    ]
    assert "added endpoints.yml: mcp_servers crm (from Mantle's integrations.yml)" in out


def test_a_second_run_changes_nothing(
    mantle: Path, taken_over: tuple[Path, str, str], tmp_path: Path
) -> None:
    bot = Path(shutil.copytree(taken_over[0], tmp_path / "bot"))
    before = {path: path.read_bytes() for path in bot.rglob("*") if path.is_file()}
    again = mcp_bridge("init", "--from-mantle", str(mantle), cwd=bot)
    assert again.returncode == 1 and "not carried over" in again.stderr
    assert "nothing to change" in again.stdout
    assert {path: path.read_bytes() for path in bot.rglob("*") if path.is_file()} == before


def test_check_reports_per_skill_what_loads_and_what_does_not(
    mantle: Path, taken_over: tuple[Path, str, str], tmp_path: Path
) -> None:
    bot = Path(shutil.copytree(taken_over[0], tmp_path / "bot"))
    loads = mcp_bridge("check", cwd=bot)
    assert loads.returncode == 0, loads.stdout + loads.stderr
    lines = loads.stdout.splitlines()
    assert lines[lines.index("skills:") + 1] == (
        "  loads: log_interaction (a Mantle skill), skills/log_interaction/skill.md: action_log_interaction; "
        "find_contact_by_email (mcp:crm), add_timeline_note (mcp:crm, asks first), create_follow_up_task "
        "(mcp:crm, asks first)"
    )
    shutil.copytree(mantle / "skills" / "transfer", bot / "skills" / "transfer")
    refused = mcp_bridge("check", cwd=bot)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[:3] == [
        "mcp-bridge check: 1 of 2 skill(s) load:",
        lines[lines.index("skills:") + 1],
        f"  does not load: {bot / 'skills' / 'transfer' / 'skill.md'}: body: no :::ordered_block: what the "
        "skill does is prose for Mantle's LLM, which a deterministic runtime cannot run; write its steps as "
        "one `:::ordered_block id=<name>` of execute_tool steps (the prose may stay, for Mantle)",
    ]


def test_a_skill_the_bot_has_already_stops_init_before_anything_is_written(
    mantle: Path, tmp_path: Path
) -> None:
    bot = starter_bot(tmp_path / "bot")
    (bot / "skills").mkdir(exist_ok=True)
    shutil.copy(EXAMPLE_BOT / "skills" / "log_interaction.yml", bot / "skills")
    before = {path: path.read_bytes() for path in bot.rglob("*") if path.is_file()}
    result = mcp_bridge("init", "--from-mantle", str(mantle), cwd=bot)
    assert result.returncode == 1
    assert (
        "nothing was written" in result.stderr
        and "the bot has a skill 'log_interaction' already" in result.stderr
    )
    assert {path: path.read_bytes() for path in bot.rglob("*") if path.is_file()} == before
