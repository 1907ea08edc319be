"""`mcp-bridge init` on Rasa's own starter bot (and variants of it), run as the real command.

What must hold: it only inserts (every byte of the bot's files stays, so its comments and order
do), a second run changes nothing, a clash stops it before anything is written and names file,
place and reason, and the result is a bot Rasa accepts (`rasa data validate`; the adoption test
trains one).
"""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest
import yaml

from mcp_bridge.cli.init import fragment_text
from mcp_bridge.contract import RESPONSES
from tests.support.bots import (
    DATA_BLOCK,
    SKILL_BLOCK,
    add_reminder_skill,
    expected_unused_responses,
    guide_block,
    mcp_bridge,
    rasa_warnings,
    starter_bot,
)
from tests.support.procs import RASA, child_env

ALL_OF_FRAGMENT = yaml.safe_load(fragment_text("domain.yml"))
# What a bot without a second approver or remembered permissions gets: the fragment without their pieces.
FRAGMENT = {
    **ALL_OF_FRAGMENT,
    "responses": {
        name: value
        for name, value in ALL_OF_FRAGMENT["responses"].items()
        if name not in RESPONSES.for_approvals() | RESPONSES.for_remembering()
    },
    # ... and without the remembered permissions' slot.
    "slots": {
        name: value for name, value in ALL_OF_FRAGMENT["slots"].items() if name != "remembered_permissions"
    },
}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def only_inserted(old: bytes, new: bytes) -> bool:
    """True when ``new`` is ``old`` with lines added and none changed, removed or moved."""
    matcher = difflib.SequenceMatcher(
        None, old.decode().splitlines(), new.decode().splitlines(), autojunk=False
    )
    return all(tag in ("equal", "insert") for tag, *_ in matcher.get_opcodes())


def init(bot: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mcp_bridge("init", *args, cwd=bot)


@pytest.fixture
def bot(tmp_path: Path) -> Path:
    return starter_bot(tmp_path / "bot")


def test_init_only_inserts_what_the_plugin_needs(bot: Path) -> None:
    before = snapshot(bot)
    result = init(bot)
    assert result.returncode == 0, result.stderr
    after = snapshot(bot)

    assert set(after) - set(before) == {"data/mcp_bridge.yml", "skills/save_reminder.yml.example"}
    for name, content in before.items():
        assert only_inserted(content, after[name]), f"{name}: something of the bot's changed"
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"domain.yml", "endpoints.yml"}  # the starter has affirm/deny examples already

    domain = yaml.safe_load(after["domain.yml"])
    assert domain["intents"] == yaml.safe_load(before["domain.yml"])["intents"]  # affirm, deny: no duplicates
    assert domain["slots"]["pending_confirmation"] == FRAGMENT["slots"]["pending_confirmation"]
    assert domain["actions"] == ["action_confirm_tool", "action_deny_tool"]
    assert set(FRAGMENT["responses"]) <= set(domain["responses"])
    assert domain["responses"]["utter_greet"] == [{"text": "Hey! How are you?"}]
    assert list(domain)[:3] == ["version", "intents", "responses"]  # the bot's order first

    endpoints = yaml.safe_load(after["endpoints.yml"])
    assert endpoints["mcp_servers"] == []
    assert endpoints["action_endpoint"] == {"url": "http://localhost:5055/webhook"}
    # 5055 is rasa_sdk's default port: the file and init's output say how to use another
    hint = b"For another port, change it here and start the action server with --port"
    assert hint in after["endpoints.yml"]
    assert "for another port, change it there and start the action server with --port" in result.stdout
    assert b"#  url: http://my-server.com/models/default_core@latest" in after["endpoints.yml"]

    rules = yaml.safe_load(after["data/mcp_bridge.yml"])["rules"]
    steps = [step for rule in rules for step in rule.get("steps", []) + rule.get("condition", [])]
    assert not any("intent" in step for step in steps), "the plugin must not route on affirm/deny"
    assert after["skills/save_reminder.yml.example"].decode() == fragment_text("skill.yml")
    assert "next:" in result.stdout


def test_missing_intents_join_the_bots_list_in_its_indentation(bot: Path) -> None:
    domain = bot / "domain.yml"
    domain.write_text(domain.read_text().replace("  - affirm\n  - deny\n", ""))
    assert init(bot).returncode == 0
    text = domain.read_text()
    assert "  - bot_challenge\n  - affirm\n  - deny\n" in text
    intents = ["greet", "goodbye", "mood_great", "mood_unhappy", "bot_challenge", "affirm", "deny"]
    assert yaml.safe_load(text)["intents"] == intents


def test_a_second_run_changes_nothing(bot: Path) -> None:
    assert init(bot).returncode == 0
    first = snapshot(bot)
    again = init(bot)
    assert again.returncode == 0, again.stderr
    assert "nothing to change" in again.stdout
    assert snapshot(bot) == first


def test_a_skill_files_action_is_added_to_the_domain(bot: Path) -> None:
    assert init(bot).returncode == 0
    (bot / "skills" / "save_reminder.yml").write_text(fragment_text("skill.yml"))
    result = init(bot)
    assert result.returncode == 0, result.stderr
    assert "actions action_save_reminder" in result.stdout
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert domain["actions"] == ["action_confirm_tool", "action_deny_tool", "action_save_reminder"]
    first = snapshot(bot)
    assert init(bot).returncode == 0
    assert snapshot(bot) == first


@pytest.mark.parametrize(
    "hostile",
    [
        'action: "action_x\\nslots:\\n  evil: {type: text}"',  # a newline: YAML of its own
        'action: "action_x: {}"',
        'skill: "save\\n- injected"',  # no action: the default, action_<skill>, carries it
    ],
)
def test_a_hostile_action_name_is_refused_and_the_domain_is_untouched(bot: Path, hostile: str) -> None:
    assert init(bot).returncode == 0
    before = snapshot(bot)
    skill = fragment_text("skill.yml")
    key = hostile.split(":", 1)[0]
    dropped = (f"{key}:",) if key == "action" else ("skill:", "action:")
    lines = [line for line in skill.splitlines() if not line.startswith(dropped)]
    (bot / "skills" / "save_reminder.yml").write_text("\n".join([hostile, *lines]) + "\n")
    result = init(bot)
    assert result.returncode == 1, result.stdout
    assert "nothing was written" in result.stderr and "is not a valid action name" in result.stderr
    after = snapshot(bot)
    del after["skills/save_reminder.yml"]
    assert after == before  # domain.yml byte-identical


def test_init_writes_each_file_whole_or_not_at_all(bot: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure at the rename (a crash midway) leaves the bot's files as they were, and no debris."""
    import os

    from mcp_bridge.cli import init as init_module

    before = snapshot(bot)
    planned = init_module.plan(bot)
    assert planned.files

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        planned.write()
    assert snapshot(bot) == before


CLASHES = {
    "slot of another type": (
        "slots:\n  pending_confirmation:\n    type: text\n    influence_conversation: false\n"
        "    mappings:\n      - type: custom\n",
        ["domain.yml: slots.pending_confirmation.type: is 'text', but the plugin keeps its signed question"],
    ),
    "slot with other mappings": (
        "slots:\n  pending_confirmation:\n    type: any\n    influence_conversation: false\n"
        "    mappings:\n      - type: from_text\n",
        ["domain.yml: slots.pending_confirmation.mappings: is [{'type': 'from_text'}]"],
    ),
    "affirm as an entity": (
        "entities:\n  - affirm\n",
        ["domain.yml: entities: 'affirm' is an entity, but the plugin needs it as an intent"],
    ),
    "deny as a slot": (
        "slots:\n  deny:\n    type: bool\n    mappings:\n      - type: custom\n",
        ["domain.yml: slots.deny: the plugin needs 'deny' as an intent, not a slot"],
    ),
    "question with buttons of its own, and a form named like the plugin's action": (
        "forms:\n  action_deny_tool:\n    required_slots: []\n",
        [
            "domain.yml: responses.utter_confirm_tool_call[0]: a confirmation question carries no buttons of "
            "its own",
            "asks for a typed answer where it does not (rasa shell)",
            "domain.yml: forms.action_deny_tool: the plugin serves 'action_deny_tool' as a custom action",
        ],
    ),
}


@pytest.mark.parametrize("clash", list(CLASHES))
def test_a_clash_stops_init_before_anything_is_written(bot: Path, clash: str) -> None:
    addition, messages = CLASHES[clash]
    domain = bot / "domain.yml"
    text = domain.read_text() + "\n" + addition
    if "question with buttons" in clash:
        text = text.replace(
            "responses:\n",
            'responses:\n  utter_confirm_tool_call:\n  - text: "Run it?"\n    buttons:\n'
            '    - {title: "Yes", payload: /affirm}\n\n',
            1,
        )
    domain.write_text(text)
    before = snapshot(bot)
    result = init(bot)
    assert result.returncode == 1
    assert "nothing was written" in result.stderr
    for message in messages:
        assert message in result.stderr
    assert snapshot(bot) == before


def test_the_bots_own_wording_of_a_response_is_kept(bot: Path) -> None:
    domain = bot / "domain.yml"
    own = '  utter_tool_failed:\n  - text: "Sorry, that did not work ({error}). Nothing was saved."\n\n'
    domain.write_text(domain.read_text().replace("responses:\n", "responses:\n" + own, 1))
    assert init(bot).returncode == 0
    text = domain.read_text()
    assert text.count("utter_tool_failed:") == 1
    assert yaml.safe_load(text)["responses"]["utter_tool_failed"] == [
        {"text": "Sorry, that did not work ({error}). Nothing was saved."}
    ]


def test_nlu_examples_are_added_only_for_an_intent_without_any(bot: Path) -> None:
    nlu = bot / "data" / "nlu.yml"
    text = nlu.read_text()
    start = text.index("- intent: affirm")
    nlu.write_text(text[:start] + text[text.index("- intent: deny") :])
    assert init(bot).returncode == 0
    added = yaml.safe_load((bot / "data" / "mcp_bridge_nlu.yml").read_text())
    assert [item["intent"] for item in added["nlu"]] == ["affirm"]
    assert "- yes\n" in added["nlu"][0]["examples"]


def test_a_bot_that_has_the_loop_rule_gets_no_second_one(bot: Path) -> None:
    rules = bot / "data" / "rules.yml"
    rule = yaml.safe_load(fragment_text("rules.yml"))["rules"][0]
    rules.write_text(
        rules.read_text() + "\n" + yaml.safe_dump([{**rule, "rule": "our own"}]).replace("\n", "\n")
    )
    assert init(bot).returncode == 0
    assert not (bot / "data" / "mcp_bridge.yml").exists()


def test_flow_lists_and_empty_sections_are_extended_in_place(tmp_path: Path) -> None:
    bot = tmp_path / "bot"
    (bot / "data").mkdir(parents=True)
    (bot / "domain.yml").write_text(
        'version: "3.1"\nintents: [greet, affirm]  # ours\nactions:\nresponses:\n  utter_greet:\n'
        '  - text: "hi"\n'
    )
    (bot / "endpoints.yml").write_text("action_endpoint:\n  url: http://localhost:5055/webhook\n")
    result = init(bot)
    assert result.returncode == 0, result.stderr
    text = (bot / "domain.yml").read_text()
    assert "intents: [greet, affirm, deny]  # ours\n" in text
    domain = yaml.safe_load(text)
    assert domain["actions"] == ["action_confirm_tool", "action_deny_tool"]
    assert domain["responses"]["utter_greet"] == [{"text": "hi"}]
    assert [
        item["intent"] for item in yaml.safe_load((bot / "data" / "mcp_bridge_nlu.yml").read_text())["nlu"]
    ] == [
        "affirm",
        "deny",
    ]
    assert (
        (bot / "endpoints.yml")
        .read_text()
        .startswith("action_endpoint:\n  url: http://localhost:5055/webhook\n")
    )


def test_not_a_bot_and_an_ambiguous_domain_are_refused(tmp_path: Path, bot: Path) -> None:
    result = init(tmp_path)
    assert result.returncode == 1
    assert "no domain.yml and no domain/ directory" in result.stderr
    (bot / "domain").mkdir()
    result = init(bot)
    assert result.returncode == 1
    assert "has both domain.yml and domain/; say which one with --domain" in result.stderr


def _split_domain(bot: Path) -> None:
    """The starter's domain as a domain directory, one file per kind of entry."""
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    folder = bot / "domain"
    folder.mkdir()
    (folder / "intents.yml").write_text(
        '# What people say\nversion: "3.1"\n' + yaml.safe_dump({"intents": domain["intents"]})
    )
    (folder / "responses.yml").write_text(
        'version: "3.1"\n' + yaml.safe_dump({"responses": domain["responses"]})
    )
    (folder / "session.yml").write_text(
        'version: "3.1"\n' + yaml.safe_dump({"session_config": domain["session_config"]})
    )
    (bot / "domain.yml").unlink()


def test_domain_directory_gets_a_file_of_its_own(bot: Path) -> None:
    _split_domain(bot)
    before = snapshot(bot / "domain")
    result = init(bot)
    assert result.returncode == 0, result.stderr
    assert snapshot(bot / "domain") == {
        **before,
        "mcp_bridge.yml": (bot / "domain" / "mcp_bridge.yml").read_bytes(),
    }
    ours = yaml.safe_load((bot / "domain" / "mcp_bridge.yml").read_text())
    assert "intents" not in ours  # affirm and deny are already in domain/intents.yml
    assert ours["slots"] == FRAGMENT["slots"] and ours["responses"] == FRAGMENT["responses"]
    assert ours["version"] == "3.1"

    (bot / "skills" / "save_reminder.yml").write_text(fragment_text("skill.yml"))
    assert init(bot).returncode == 0
    extended = (bot / "domain" / "mcp_bridge.yml").read_bytes()
    assert yaml.safe_load(extended)["actions"][-1] == "action_save_reminder"
    first = snapshot(bot)
    assert init(bot).returncode == 0
    assert snapshot(bot) == first

    validate = subprocess.run(
        [str(RASA), "data", "validate", "--domain", "domain", "--data", "data"],
        cwd=bot,
        env=child_env({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr


def test_the_sample_skill_is_the_guides_and_init_names_no_system() -> None:
    """The example init writes is the skill of docs/ADOPTING.md's step 3, byte for byte, and the
    responses it adds speak of no particular system (a reminders bot has no CRM)."""
    assert guide_block(SKILL_BLOCK) == fragment_text("skill.yml")
    for name in ("domain.yml", "skill.yml", "nlu.yml", "rules.yml", "endpoints.yml"):
        assert "crm" not in fragment_text(name).lower(), f"mcp_bridge/bot/{name} talks about a CRM"


def test_every_training_data_file_has_rasas_version_line(bot: Path) -> None:
    """Rasa warns (three times) about a data file without `version:`; neither init's files nor the
    guide's data/reminders.yml may lack it."""
    nlu = bot / "data" / "nlu.yml"
    text = nlu.read_text()
    start = text.index("- intent: affirm")
    nlu.write_text(text[:start] + text[text.index("- intent: mood_great") :])  # no affirm/deny examples
    assert init(bot).returncode == 0
    for written in ("data/mcp_bridge.yml", "data/mcp_bridge_nlu.yml"):
        assert yaml.safe_load((bot / written).read_text())["version"] == "3.1", written
    assert yaml.safe_load(guide_block(DATA_BLOCK))["version"] == "3.1"


def test_rasa_warns_only_about_the_responses_the_plugins_actions_say(bot: Path) -> None:
    """After the guide's steps 2 to 6, `rasa data validate --fail-on-warnings` passes, and its only
    warnings are "not used in any story or rule" for the responses the plugin's actions say (the
    guide's step 8 lists them); init's intents and slots join the bot's keys, not second ones."""
    assert init(bot).returncode == 0
    add_reminder_skill(bot)
    assert init(bot).returncode == 0
    domain = (bot / "domain.yml").read_text()
    assert [line for line in domain.splitlines() if line in ("intents:", "slots:")] == ["intents:", "slots:"]
    assert yaml.safe_load(domain)["slots"].keys() == {
        "pending_confirmation",
        "pending_elicitation",
        "reminder_text",
    }
    env = child_env({"TF_CPP_MIN_LOG_LEVEL": "3"})
    env.pop("PYTHONWARNINGS", None)
    validate = subprocess.run(
        [str(RASA), "data", "validate", "--fail-on-warnings"],
        cwd=bot,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = validate.stdout + validate.stderr
    assert validate.returncode == 0, output
    unused, other = rasa_warnings(output)
    assert unused == expected_unused_responses()
    assert len(unused) == 31  # what the guide's step 8 says
    assert other == [], other


def test_a_bot_whose_skill_allows_remembering_gets_its_pieces_at_the_first_init(bot: Path) -> None:
    skills = bot / "skills"
    skills.mkdir(exist_ok=True)
    skill = fragment_text("skill.yml").replace(
        "        utter_on_user_denial: utter_reminder_cancelled\n",
        "        utter_on_user_denial: utter_reminder_cancelled\n"
        "      allows_remembering: {any_arguments: true, expires_after: 8h}\n",
    )
    assert "allows_remembering" in skill
    (skills / "save_reminder.yml").write_text(skill)
    result = init(bot)
    assert result.returncode == 0, result.stderr
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert "revoke_permissions" in domain["intents"] and "action_revoke_permissions" in domain["actions"]
    assert "remembered_permissions" not in domain["slots"]  # kept in the action server's record
    assert "approval_decided" not in domain["intents"]
    assert RESPONSES.for_remembering() <= set(domain["responses"])
    rules = yaml.safe_load((bot / "data" / "mcp_bridge.yml").read_text())["rules"]
    assert [step for rule in rules for step in rule["steps"] if "intent" in step] == [
        {"intent": "revoke_permissions"}
    ]
    nlu = yaml.safe_load((bot / "data" / "mcp_bridge_nlu.yml").read_text())["nlu"]
    assert (
        "stop saving without asking"
        in next(i for i in nlu if i["intent"] == "revoke_permissions")["examples"]
    )
    assert "nothing to change" in init(bot).stdout


def test_a_bot_whose_skill_has_a_second_approver_gets_its_pieces_at_the_first_init(bot: Path) -> None:
    skills = bot / "skills"
    skills.mkdir(exist_ok=True)
    skill = fragment_text("skill.yml").replace(
        "        utter_on_user_denial: utter_reminder_cancelled\n",
        "        utter_on_user_denial: utter_reminder_cancelled\n"
        "      requires_approval_from: {role: supervisor, expires_after: 1h}\n",
    )
    assert "requires_approval_from" in skill
    (skills / "save_reminder.yml").write_text(skill)
    result = init(bot)
    assert result.returncode == 0, result.stderr
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert "approval_decided" in domain["intents"] and "action_approval_decided" in domain["actions"]
    assert RESPONSES.for_approvals() <= set(domain["responses"])
    rules = yaml.safe_load((bot / "data" / "mcp_bridge.yml").read_text())["rules"]
    assert [step for rule in rules for step in rule["steps"] if "intent" in step] == [
        {"intent": "approval_decided"}
    ]
    assert not (bot / "data" / "mcp_bridge_approvals.yml").exists()
    assert "nothing to change" in init(bot).stdout


PERSON_SERVER = """
mcp_servers:
  - name: crm
    url: "${CRM_MCP_URL}"
    type: http
    oauth:
      grant: authorization_code
      client_id: "${CRM_PERSON_CLIENT_ID}"
      scope: crm.notes
      redirect_uri: "${ACTION_SERVER_PUBLIC_URL}/mcp-bridge/oauth/callback"
"""


def test_a_server_that_acts_as_the_person_brings_the_sign_in_pieces(bot: Path) -> None:
    """Only then: the resume intent, the three actions, the responses, and the rule that goes on after
    the sign-in (with examples, so Rasa accepts the intent); a second run changes nothing."""
    with (bot / "endpoints.yml").open("a") as endpoints:
        endpoints.write(PERSON_SERVER)
    result = init(bot)
    assert result.returncode == 0, result.stderr
    person = yaml.safe_load(fragment_text("person_domain.yml"))
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert "mcp_signed_in" in domain["intents"]
    assert domain["actions"] == [
        "action_confirm_tool",
        "action_deny_tool",
        "action_mcp_resume",
        "action_mcp_account",
        "action_mcp_disconnect",
    ]
    assert set(person["responses"]) <= set(domain["responses"])
    # Every response the plugin says for such a server (the sign-in's code, the account in use too).
    assert RESPONSES.for_acting_as_the_person() <= set(domain["responses"])
    assert (bot / "data" / "mcp_bridge_person.yml").read_text() == fragment_text("person_rules.yml")
    first = snapshot(bot)
    again = init(bot)
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout + again.stderr
    assert snapshot(bot) == first
    env = child_env({"TF_CPP_MIN_LOG_LEVEL": "3"})
    env.pop("PYTHONWARNINGS", None)
    validate = subprocess.run(
        [str(RASA), "data", "validate", "--fail-on-warnings"],
        cwd=bot,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = validate.stdout + validate.stderr
    assert validate.returncode == 0, output
    assert rasa_warnings(output)[1] == [], output


def test_without_such_a_server_init_adds_nothing_of_the_sign_in(bot: Path) -> None:
    assert init(bot).returncode == 0
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert "mcp_signed_in" not in domain["intents"] and "action_mcp_resume" not in domain["actions"]
    assert not (bot / "data" / "mcp_bridge_person.yml").exists()


def test_mcp_bridge_imports_only_the_command_it_runs() -> None:
    """`mcp-bridge init` (run by every adoption and many tests) loads no MCP SDK, no rasa_sdk, no HTTP
    client; the full parser (what --help and the reference page read) has every command."""
    import subprocess
    import sys

    from mcp_bridge.cli import SUBCOMMANDS, parser

    code = (
        "import sys\n"
        "from mcp_bridge.cli import parser\n"
        "parser(only='init').parse_args(['init'])\n"
        "print(sorted(m for m in ('mcp', 'mcp_types', 'rasa_sdk', 'aiohttp') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
    commands = next(action for action in parser()._actions if action.dest == "command")
    assert set(commands.choices) == {subcommand.name for subcommand in SUBCOMMANDS}
    for name in ("init", "check", "tools", "grpc", "approval-page"):
        assert "handler" in commands.choices[name]._defaults, name
