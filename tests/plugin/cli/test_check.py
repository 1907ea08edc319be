"""`mcp-bridge check` and `mcp-bridge tools` on a real bot folder, run as the real command.

The bot is Rasa's starter bot after `mcp-bridge init`, with one skill whose tool comes from an MCP
server (tests/support/bots.py). Each kind of mistake must fail with exit status 1 and name the
file, the place and the reason; `--live` asks real MCP servers (tests/fixtures/).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from mcp_bridge.contract import RESPONSES
from mcp_bridge.mcp_sdk import MCP_1
from tests.support import procs
from tests.support.bots import add_reminder_skill, mcp_bridge, starter_bot

OFFLINE_URL = "http://127.0.0.1:9/mcp"  # never contacted offline


@pytest.fixture(scope="module")
def initialised_bot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bot = starter_bot(tmp_path_factory.mktemp("initialised") / "bot")
    assert mcp_bridge("init", cwd=bot).returncode == 0
    add_reminder_skill(bot)
    assert mcp_bridge("init", cwd=bot).returncode == 0  # adds the skill's action to the domain
    return bot


@pytest.fixture
def bot(initialised_bot: Path, tmp_path: Path) -> Path:
    """A copy of the initialised bot, for one test to change (init runs once per module)."""
    return Path(shutil.copytree(initialised_bot, tmp_path / "bot"))


@pytest.fixture(scope="module")
def reminders_mcp() -> Iterator[str]:
    port = procs.free_port()
    server = procs.ServiceProcess(
        "reminders-mcp",
        [procs.mcp_server_python(), str(procs.REPO_ROOT / "tests" / "fixtures" / "reminder_server.py")]
        + ["--port", str(port)],
        env=procs.child_env(),
        ready_url=f"http://{procs.HOST}:{port}/writes",
        url=f"http://{procs.HOST}:{port}/mcp",
    )
    with server:
        yield server.url


@pytest.fixture(scope="module")
def plain_dict_mcp() -> Iterator[str]:
    with procs.plain_dict_mcp() as server:
        yield server.url


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def check(bot: Path, *args: str, url: str | None = OFFLINE_URL, **env: str) -> tuple[int, str]:
    result = mcp_bridge("check", *args, cwd=bot, env={"REMINDERS_MCP_URL": url, **env})
    return result.returncode, result.stdout + result.stderr


def test_a_clean_bot_passes_with_a_one_line_summary(bot: Path) -> None:
    code, output = check(bot)
    assert code == 0, output
    summary = [line for line in output.splitlines() if line.startswith("mcp-bridge check:")]
    assert summary == [
        "mcp-bridge check: ok: 1 skill(s) (action_save_reminder), 1 MCP server(s), 0 local tool(s); offline"
    ]


def test_a_local_tool_registered_by_the_bots_actions_is_found(bot: Path) -> None:
    """check imports the bot's actions package, so the bot's own registrations count."""
    edit(bot / "skills" / "save_reminder.yml", "create_reminder: mcp:reminders", "create_reminder: local")
    init = bot / "actions" / "__init__.py"
    init.write_text(
        init.read_text()
        + "from mcp_bridge import local_tool\n\n\n@local_tool\n"
        + "async def create_reminder(text: str) -> dict:\n    return {'ok': True}\n"
    )
    code, output = check(bot)
    assert code == 0, output
    assert "1 local tool(s)" in output


def _unknown_tool(bot: Path) -> None:
    edit(bot / "skills" / "save_reminder.yml", "tool: create_reminder", "tool: create_remindr")


def _unknown_server(bot: Path) -> None:
    edit(bot / "skills" / "save_reminder.yml", "mcp:reminders", "mcp:calendar")


def _unregistered_local_tool(bot: Path) -> None:
    edit(bot / "skills" / "save_reminder.yml", "create_reminder: mcp:reminders", "create_reminder: local")


def _missing_skill_response(bot: Path) -> None:
    edit(bot / "domain.yml", '  utter_reminder_saved:\n    - text: "Reminder saved."\n', "")


def _missing_executor_response(bot: Path) -> None:
    edit(
        bot / "domain.yml",
        '  utter_nothing_pending:\n    - text: "There\'s nothing waiting for your confirmation right now."',
        '  utter_nothing_pending_renamed:\n    - text: "nothing pending"',
    )


def _question_with_buttons(bot: Path) -> None:
    edit(
        bot / "domain.yml",
        "\n  utter_reminder_cancelled",
        '      buttons:\n        - title: "No"\n          payload: /deny\n        - title: "Yes"\n'
        "          payload: /affirm\n  utter_reminder_cancelled",
    )


def _action_not_in_domain(bot: Path) -> None:
    edit(bot / "domain.yml", "  - action_save_reminder  # the skill in skills/save_reminder.yml\n", "")


def _plugin_action_not_in_domain(bot: Path) -> None:
    edit(bot / "domain.yml", "  - action_confirm_tool\n", "")


def _no_plugin_import(bot: Path) -> None:
    (bot / "actions" / "__init__.py").write_text("")


def _broken_actions(bot: Path) -> None:
    (bot / "actions" / "__init__.py").write_text("import mcp_bridge.rasa\nimport reminders_client\n")


def _bad_skill_yaml(bot: Path) -> None:
    edit(bot / "skills" / "save_reminder.yml", "reset_slots: [reminder_text]", "reset_slots: [reminder_text")


_APPROVAL = (
    "        utter_on_user_denial: utter_reminder_cancelled\n"
    "      requires_approval_from:\n        role: supervisor\n        expires_after: 10m\n"
)


def _second_approver_without_its_pieces(bot: Path) -> None:
    denial = "        utter_on_user_denial: utter_reminder_cancelled\n"
    edit(bot / "skills" / "save_reminder.yml", denial, _APPROVAL)


MISTAKES: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "unknown tool": (
        _unknown_tool,
        ["skills/save_reminder.yml: steps[0].execute_tool: 'create_remindr' is not one of this skill's"],
    ),
    "unknown MCP server": (
        _unknown_server,
        ["skills/save_reminder.yml: tools.create_reminder: MCP server 'calendar' is not in endpoints.yml"],
    ),
    "unregistered local tool": (
        _unregistered_local_tool,
        ["skills/save_reminder.yml: tools.create_reminder: no local tool named 'create_reminder' is"],
    ),
    "missing response of a skill": (
        _missing_skill_response,
        ["steps[0].on_success: response 'utter_reminder_saved' is not defined in the domain"],
    ),
    "missing response of the executor": (
        _missing_executor_response,
        ["domain.yml: the executor needs these responses, which are missing: utter_nothing_pending"],
    ),
    "question with buttons of its own": (
        _question_with_buttons,
        ["domain.yml: responses.utter_confirm_reminder[0]: a confirmation question carries no buttons"],
    ),
    "skill action missing from the domain": (
        _action_not_in_domain,
        ["skills/save_reminder.yml: action: 'action_save_reminder' is not in the domain's actions"],
    ),
    "plugin action missing from the domain": (
        _plugin_action_not_in_domain,
        ["domain.yml: the plugin needs action action_confirm_tool"],
    ),
    "actions package without the plugin": (
        _no_plugin_import,
        ["actions: does not import mcp_bridge.rasa", "add `import mcp_bridge.rasa` to actions/__init__.py"],
    ),
    "actions package that fails to import": (
        _broken_actions,
        ["actions: importing it failed: ModuleNotFoundError: No module named 'reminders_client'"],
    ),
    "skill file that is not YAML": (_bad_skill_yaml, ["skills/save_reminder.yml: not valid YAML"]),
    "second approver without its pieces in the domain": (
        _second_approver_without_its_pieces,
        ["domain.yml: a skill requires a second approver, and these responses are missing: utter_approval_"],
    ),
}


def test_init_gives_a_second_approver_its_pieces_and_check_wants_them(bot: Path) -> None:
    """A bot initialised before it used a second approver: init adds the intent, the action, the
    responses and the rule (in a file of its own); check then passes, and names a missing action."""
    _second_approver_without_its_pieces(bot)
    assert mcp_bridge("init", cwd=bot).returncode == 0
    domain = yaml.safe_load((bot / "domain.yml").read_text())
    assert "approval_decided" in domain["intents"] and "action_approval_decided" in domain["actions"]
    assert RESPONSES.for_approvals() <= set(domain["responses"])
    rules = yaml.safe_load((bot / "data" / "mcp_bridge_approvals.yml").read_text())["rules"]
    assert rules[0]["steps"] == [{"intent": "approval_decided"}, {"action": "action_approval_decided"}]
    code, output = check(bot)
    assert code == 0, output
    # A from_text mapping for every intent would take the decision's message as its text.
    edit(bot / "domain.yml", "        intent: save_reminder\n", "")
    code, output = check(bot)
    assert code == 1 and "slots.reminder_text.mappings[0]: a from_text mapping would take" in output
    edit(
        bot / "domain.yml",
        "      - type: from_text\n",
        "      - type: from_text\n        not_intent: approval_decided\n",
    )
    assert check(bot)[0] == 0
    edit(bot / "domain.yml", "  - action_approval_decided\n", "")
    code, output = check(bot)
    needs = "needs action action_approval_decided (for requires_approval_from in save_reminder.yml)"
    assert code == 1 and needs in output


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_mistake_fails_with_file_place_and_reason(bot: Path, mistake: str) -> None:
    make, messages = MISTAKES[mistake]
    make(bot)
    code, output = check(bot)
    assert code == 1, output
    for message in messages:
        assert message in output
    assert "Traceback" not in output


def test_offline_needs_no_server_url_or_secret_and_names_what_the_action_server_needs(bot: Path) -> None:
    """CI has no server and no secret: the offline check reads the file's shape and lists the variables."""
    edit(bot / "endpoints.yml", "    type: http\n", '    type: http\n    token: "${REMINDERS_MCP_TOKEN}"\n')
    code, output = check(bot, url=None)
    assert code == 0, output
    assert "; offline" in output
    assert (
        "the action server needs these environment variables: REMINDERS_MCP_URL (not set here), "
        "REMINDERS_MCP_TOKEN (not set here)"
    ) in output
    code, output = check(bot, REMINDERS_MCP_TOKEN="s3cret-value")
    assert code == 0, output
    assert "REMINDERS_MCP_URL (set here), REMINDERS_MCP_TOKEN (set here)" in output
    assert "s3cret-value" not in output and OFFLINE_URL not in output


def test_live_refuses_an_unset_variable_naming_file_server_and_variable(bot: Path) -> None:
    code, output = check(bot, "--live", url=None)
    assert code == 1
    assert (
        "endpoints.yml: mcp_servers[0] (reminders): 'url' uses ${REMINDERS_MCP_URL}, but the environment "
        "variable REMINDERS_MCP_URL is not set"
    ) in output


def test_offline_still_checks_the_shape_of_a_url_it_can_expand(bot: Path) -> None:
    code, output = check(bot, url="ftp://127.0.0.1/mcp")
    assert code == 1
    assert "mcp_servers[0] (reminders): url must be an http or https URL, got 'ftp://127.0.0.1/mcp'" in output


# Each key of a server once through the command: the keys to add, and what the command must say
# after "endpoints.yml: mcp_servers[0] (reminders): " (tests/plugin/config/test_servers.py has every case).
SERVER_KEYS: dict[str, tuple[str, str]] = {
    "unknown key": ("tool_timout: 5", "unknown key(s) 'tool_timout'; a server takes name, url, type, token"),
    "token: a number": ("token: 12345", "'token' must be a string"),
    "api_key: empty": ('api_key: ""', "'api_key' is empty"),
    "header_name without api_key": ("header_name: X-API-Key", "'header_name' only goes with 'api_key'"),
    "header_format without {key}": (
        'api_key: "k"\nheader_format: "Bearer"',
        "'header_format' must contain {key}, where the api_key goes",
    ),
    "tool_timeout: text": ('tool_timeout: "30"', "'tool_timeout' must be a positive number of seconds"),
    "meta_map: unknown key": ("meta_map: {dynamic: {}}", "meta_map: unknown key(s) 'dynamic'"),
    "meta_map.static: a number": (
        "meta_map: {static: {version: 2}}",
        "meta_map.static.version must be a string",
    ),
    "meta_map.static: empty": ('meta_map: {static: {source: ""}}', "meta_map.static.source is empty"),
    "meta_map.from_slots: no param": (
        "meta_map: {from_slots: [{slot: reminder_text}]}",
        "meta_map.from_slots[0]: missing 'param'",
    ),
    "oauth: an issuer over plain http": (
        "oauth: {client_id: a, client_secret: b, issuer: 'http://auth.example.com'}",
        "'oauth.issuer' must be https unless it is on the loopback: the client's credentials go there; "
        "got 'http://auth.example.com'",
    ),
}


def add_server_keys(bot: Path, keys: str) -> None:
    lines = "".join(f"    {line}\n" for line in keys.splitlines())
    edit(bot / "endpoints.yml", "    type: http\n", "    type: http\n" + lines)


@pytest.mark.parametrize("case", list(SERVER_KEYS))
def test_each_server_key_is_checked_naming_file_place_and_key(bot: Path, case: str) -> None:
    keys, message = SERVER_KEYS[case]
    add_server_keys(bot, keys)
    code, output = check(bot)
    assert code == 1, output
    assert f"endpoints.yml: mcp_servers[0] (reminders): {message}" in output
    assert "Traceback" not in output


def test_every_rasa_pro_key_with_good_values_passes(bot: Path) -> None:
    add_server_keys(
        bot,
        'api_key: "${REMINDERS_MCP_KEY}"\n'
        "header_name: X-API-Key\n"
        'header_format: "Key {key}"\n'
        "tool_timeout: 30\n"
        "meta_map:\n"
        "  static: {source: rasa, api_version: '2'}\n"
        "  from_slots: [{slot: reminder_text, param: reminder}]",
    )
    code, output = check(bot)
    assert code == 0, output
    assert "REMINDERS_MCP_URL (set here), REMINDERS_MCP_KEY (not set here)" in output


def test_a_slot_the_domain_does_not_have_is_refused(bot: Path) -> None:
    add_server_keys(bot, "meta_map: {from_slots: [{slot: user_id, param: user}]}")
    code, output = check(bot)
    assert code == 1
    assert (
        "endpoints.yml: mcp_servers[0] (reminders): meta_map.from_slots[0].slot: 'user_id' is not a slot of "
        "the domain"
    ) in output
    assert "add the slot or fix its name" in output


def test_a_bad_word_file_fails(bot: Path) -> None:
    words = bot / "words.yml"
    words.write_text('"yes": ["jawohl"]\n"no": ["jawohl"]\n')
    code, output = check(bot, CONFIRMATION_WORDS=str(words))
    assert code == 1
    assert "words.yml" in output and "listed both as a yes (or polite) and as a no" in output


def test_files_named_in_the_environment_win_over_the_bots(bot: Path, tmp_path: Path) -> None:
    """ENDPOINTS, SKILLS_DIR and DOMAIN point elsewhere, as for the action server."""
    other = tmp_path / "other-skills"
    other.mkdir()
    (other / "s.yml").write_text((bot / "skills" / "save_reminder.yml").read_text().replace("mcp:", "mcp:x"))
    code, output = check(bot, SKILLS_DIR=str(other))
    assert code == 1
    assert f"{other}/s.yml: tools.create_reminder: MCP server 'xreminders' is not in endpoints.yml" in output


def test_live_passes_against_a_server_with_output_schemas(bot: Path, reminders_mcp: str) -> None:
    code, output = check(bot, "--live", url=reminders_mcp)
    assert code == 0, output
    assert "live: 1 MCP tool(s) checked at their servers" in output


def test_live_catches_a_tool_without_an_output_schema(bot: Path, plain_dict_mcp: str) -> None:
    skill = bot / "skills" / "save_reminder.yml"
    skill.write_text(skill.read_text().replace("create_reminder", "echo_note"))
    code, output = check(bot)
    assert code == 0, output  # offline nothing can tell
    code, output = check(bot, "--live", url=plain_dict_mcp)
    assert code == 1
    assert "skills/save_reminder.yml: tools.echo_note: MCP tool 'echo_note' on server 'reminders'" in output
    assert "publishes no output schema" in output
    assert "return a pydantic model" in output and "not `-> dict`" in output


def test_live_catches_a_tool_the_server_does_not_have(bot: Path, reminders_mcp: str) -> None:
    skill = bot / "skills" / "save_reminder.yml"
    skill.write_text(skill.read_text().replace("create_reminder", "create_reminders"))
    code, output = check(bot, "--live", url=reminders_mcp)
    assert code == 1
    assert (
        "tools.create_reminders: MCP server 'reminders' has no tool named 'create_reminders' "
        "(create_reminder, list_reminders)"
    ) in output


def test_live_catches_arguments_the_input_schema_refuses(bot: Path, reminders_mcp: str) -> None:
    skill = bot / "skills" / "save_reminder.yml"
    edit(skill, "      text: {slot: reminder_text}\n", '      note: {slot: reminder_text}\n      text: ""\n')
    code, output = check(bot, "--live", url=reminders_mcp)
    assert code == 1
    assert "steps[0].arguments.text: '' does not fit 'create_reminder'" in output
    edit(skill, '      text: ""\n', "")
    code, output = check(bot, "--live", url=reminders_mcp)
    assert code == 1
    assert "steps[0].arguments: 'create_reminder' requires text, which the step does not give" in output


def test_live_names_a_server_it_cannot_reach(bot: Path) -> None:
    code, output = check(bot, "--live", url=f"http://127.0.0.1:{procs.free_port()}/mcp")
    assert code == 1
    assert "save_reminder.yml: tools.create_reminder: MCP server 'reminders' is not reachable" in output


def test_tools_lists_a_servers_tools_with_hints(bot: Path, reminders_mcp: str, plain_dict_mcp: str) -> None:
    result = mcp_bridge("tools", "reminders", cwd=bot, env={"REMINDERS_MCP_URL": reminders_mcp})
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n", 1)[1]  # below the server's description
    rows = [line.split() for line in table.splitlines()]
    assert rows[0][:4] == ["name", "read-only", "destructive", "idempotent"]
    assert rows[2][:6] == ["create_reminder", "no", "no", "-", "yes", "Save"]
    assert rows[3][:5] == ["list_reminders", "yes", "-", "-", "yes"]
    plain = mcp_bridge("tools", plain_dict_mcp, cwd=bot)
    assert plain.returncode == 0, plain.stderr
    assert any(line.split()[:5] == ["echo_note", "-", "-", "-", "NO"] for line in plain.stdout.splitlines())
    assert "return a pydantic model" in plain.stdout
    unknown = mcp_bridge("tools", "calendar", cwd=bot, env={"REMINDERS_MCP_URL": reminders_mcp})
    assert unknown.returncode == 1
    assert "mcp_servers: no server named 'calendar' (servers: reminders)" in unknown.stderr


def test_tools_says_which_variable_to_set(bot: Path) -> None:
    result = mcp_bridge("tools", "reminders", cwd=bot, env={"REMINDERS_MCP_URL": None})
    assert result.returncode == 1
    assert (
        "endpoints.yml: mcp_servers[0] (reminders): 'url' uses ${REMINDERS_MCP_URL}, but the environment "
        "variable REMINDERS_MCP_URL is not set; this command connects to the server, so set "
        "REMINDERS_MCP_URL first (e.g. `REMINDERS_MCP_URL=... mcp-bridge tools reminders`), or give the "
        "server's URL instead of its name"
    ) in result.stderr


def test_tools_needs_only_the_variables_of_the_server_it_lists(bot: Path, reminders_mcp: str) -> None:
    """Another server's unset token is no reason to refuse listing this one's tools."""
    endpoints = bot / "endpoints.yml"
    endpoints.write_text(
        endpoints.read_text()
        + '  - name: billing\n    url: "https://billing.example.com/mcp"\n    type: https\n'
        + '    token: "${BILLING_TOKEN}"\n'
    )
    result = mcp_bridge(
        "tools", "reminders", cwd=bot, env={"REMINDERS_MCP_URL": reminders_mcp, "BILLING_TOKEN": None}
    )
    assert result.returncode == 0, result.stderr
    assert "create_reminder" in result.stdout


# --- protocol revision, auth and capabilities, per server ---------------------------------------

ERA_LINES = {
    "modern": (
        "protocol: 2026-07-28 (stateless: server/discover, no session)",
        "capabilities: prompts (listChanged), resources (subscribe, listChanged), tools (listChanged)",
    ),
    "legacy": (
        "protocol: 2025-11-25 (initialize handshake, one session)",
        "capabilities: prompts, resources, tools",
    ),
}


@pytest.fixture(scope="module", params=list(ERA_LINES))
def era_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    with procs.era_mcp(request.param, name="era-items") as server:
        yield request.param, server.url


def test_tools_says_which_revision_auth_and_capabilities_a_server_has(
    bot: Path, era_server: tuple[str, str]
) -> None:
    era, url = era_server
    by_url = mcp_bridge("tools", url, cwd=bot)
    assert by_url.returncode == 0, by_url.stderr
    head = by_url.stdout.split("\n\n", 1)[0].splitlines()
    assert head == [
        f"server: {url}, serverInfo era-items",
        *ERA_LINES[era][:1],
        "auth: none",
        ERA_LINES[era][1],
    ]
    assert "add_item" in by_url.stdout
    # By name, with a token from the environment: the kind of auth is named, never the token.
    add_server_keys(bot, 'token: "${REMINDERS_TOKEN}"')
    secret = "t0ken-never-printed"
    named = mcp_bridge(
        "tools", "reminders", cwd=bot, env={"REMINDERS_MCP_URL": url, "REMINDERS_TOKEN": secret}
    )
    assert named.returncode == 0, named.stderr
    assert "auth: token (Authorization: Bearer)" in named.stdout.splitlines()
    assert ERA_LINES[era][0] in named.stdout.splitlines()
    assert secret not in named.stdout + named.stderr


@pytest.mark.skipif(not MCP_1, reason="mcp 2.3 speaks 2026-07-28 (the tests above and below)")
def test_at_mcp_1_30_a_2026_07_28_only_server_is_refused_by_tools_and_check_saying_why(bot: Path) -> None:
    """Rasa Pro's environment (mcp 1.30) cannot speak 2026-07-28: both commands say so and what to do."""
    with procs.era_mcp("modern", name="era-items", refused_here=True) as server:
        listed = mcp_bridge("tools", server.url, cwd=bot)
        skill = bot / "skills" / "save_reminder.yml"
        skill.write_text(skill.read_text().replace("create_reminder", "add_item"))
        code, output = check(bot, "--live", url=server.url)
    for status, said in ((listed.returncode, listed.stderr), (code, output)):
        assert status != 0, said
        assert "speaks only the 2026-07-28 revision" in said, said
        assert "mcp 1.30" in said and "Install mcp 2.3 where the plugin runs, or serve 2025-11-25 too" in said


def test_live_check_says_which_revision_auth_and_capabilities_each_server_has(
    bot: Path, era_server: tuple[str, str]
) -> None:
    era, url = era_server
    skill = bot / "skills" / "save_reminder.yml"
    skill.write_text(skill.read_text().replace("create_reminder", "add_item"))
    add_server_keys(bot, 'api_key: "${REMINDERS_KEY}"\nheader_name: X-API-Key')
    secret = "k3y-never-printed"
    code, output = check(bot, "--live", url=url, REMINDERS_KEY=secret)
    assert code == 0, output
    lines = output.splitlines()
    assert "live: 1 MCP tool(s) checked at their servers" in lines[0]
    assert f"server: reminders ({url}), serverInfo era-items" in lines
    assert ERA_LINES[era][0] in lines and ERA_LINES[era][1] in lines
    assert "auth: api_key (header X-API-Key)" in lines
    assert secret not in output
