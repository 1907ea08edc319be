"""Start-up checks of the skill files: the real ones load, and each invalid file is refused with a
:class:`ConfigError` whose message is ``<file>: <place>: <reason>``.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest
from crm.tools import TOOLS

from mcp_bridge.confirmation.gate import declared
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.files import (
    ForEach,
    RequiresConfirmation,
    Skill,
    SlotArgument,
    Step,
    ToolConstraint,
    ToolSourceRef,
    domain_responses,
    load_skill,
    load_skills,
    step_arguments,
)
from tests.support.procs import EXAMPLE_BOT

BOT = EXAMPLE_BOT
SKILLS = BOT / "skills"
DOMAIN = BOT / "domain.yml"
MCP_SERVERS = frozenset({"crm"})

# A valid skill shaped like skills/log_interaction.yml; each invalid case changes one thing in it.
BASE = textwrap.dedent(
    """\
    skill: log_interaction
    tools:
      find_contact_by_email: mcp:crm
      add_timeline_note: mcp:crm
    tool_constraints:
      - add_timeline_note:
          requires_confirmation:
            enabled: true
            utter_for_confirmation: utter_confirm_note
            utter_on_user_denial: utter_note_cancelled
    steps:
      - execute_tool: find_contact_by_email
        arguments:
          email: {slot: contact_email}
        fills:
          contact_id: contact_id
        on_not_found: utter_contact_not_found
        on_error: utter_tool_failed
      - execute_tool: add_timeline_note
        arguments:
          contact_id: {slot: contact_id}
          text: {slot: note_text}
        on_success: utter_note_saved
        on_error: utter_tool_failed
    reset_slots: [contact_email, note_text]
    """
)


@pytest.fixture(scope="module")
def responses() -> set[str]:
    return domain_responses(DOMAIN)


def edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def write(directory: Path, text: str, name: str = "skill.yml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def load(path: Path, responses: set[str], **overrides: object) -> Skill:
    kwargs: dict[str, object] = {"local_tools": TOOLS, "mcp_servers": MCP_SERVERS, "responses": responses}
    kwargs.update(overrides)
    return load_skill(path, **kwargs)  # type: ignore[arg-type]


def error_of(path: Path, responses: set[str], **overrides: object) -> str:
    with pytest.raises(ConfigError) as info:
        load(path, responses, **overrides)
    return str(info.value)


def assert_message(message: str, path: Path, place: str, *reasons: str) -> None:
    prefix = f"{path}: {place}: "
    assert message.startswith(prefix), f"{message!r} does not start with {prefix!r}"
    for reason in reasons:
        assert reason in message, f"{reason!r} not in {message!r}"


# --- the real skills ----------------------------------------------------------------------------


def test_real_domain_responses(responses: set[str]) -> None:
    assert {
        "utter_confirm_note",
        "utter_note_cancelled",
        "utter_note_saved",
        "utter_tool_failed",
    } <= responses


def test_real_skills_load(responses: set[str]) -> None:
    skills = load_skills(SKILLS, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert {"log_interaction", "lookup_contact", "show_notes"} <= set(skills)
    for skill_id, skill in skills.items():
        assert skill.id == skill_id
        assert skill.path.parent == SKILLS
        assert skill.steps
        for step in skill.steps:
            assert step.execute_tool in skill.tools


def test_log_interaction_confirms_the_writes_only(responses: set[str]) -> None:
    skills = load_skills(SKILLS, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    skill = skills["log_interaction"]
    assert skill.path == SKILLS / "log_interaction.yml"
    assert dict(skill.tools) == {
        "find_contact_by_email": ToolSourceRef("mcp", "crm"),
        "add_timeline_note": ToolSourceRef("mcp", "crm"),
        "create_follow_up_task": ToolSourceRef("mcp", "crm"),
    }
    assert skill.mcp_imports() == {
        "find_contact_by_email": "crm",
        "add_timeline_note": "crm",
        "create_follow_up_task": "crm",
    }
    rule = declared(skill, "add_timeline_note")
    assert rule == RequiresConfirmation(
        enabled=True,
        utter_for_confirmation="utter_confirm_note",
        utter_on_user_denial="utter_note_cancelled",
        describe='Note on {contact_name}\'s record: "{arg_text}"',
    )
    task = declared(skill, "create_follow_up_task")
    assert task is not None and task.utter_for_confirmation == "utter_confirm_task"
    assert declared(skill, "find_contact_by_email") is None
    assert "find_contact_by_email" not in skill.constraints
    assert [step.execute_tool for step in skill.steps] == [
        "find_contact_by_email",
        "add_timeline_note",
        "create_follow_up_task",
    ]
    assert skill.steps[0].for_each == ForEach(slot="contact_emails", **{"as": "contact_email"})
    assert skill.steps[1].arguments == {
        "contact_id": SlotArgument(slot="contact_id"),
        "text": SlotArgument(slot="note_text"),
    }
    assert skill.steps[2].when == SlotArgument(slot="follow_up_date")


def test_read_only_skills_have_no_confirmation(responses: set[str]) -> None:
    skills = load_skills(SKILLS, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    for skill_id in ("lookup_contact", "show_notes"):
        skill = skills[skill_id]
        assert all(declared(skill, tool) is None for tool in skill.tools)


_SOURCE_LINE = re.compile(r"^(\s+[A-Za-z_][A-Za-z0-9_]*): mcp:crm$", re.MULTILINE)


def test_switching_sources_to_local_changes_only_the_sources(tmp_path: Path, responses: set[str]) -> None:
    for path in SKILLS.glob("*.yml"):
        text, count = _SOURCE_LINE.subn(r"\1: local", path.read_text(encoding="utf-8"))
        assert count >= 1, f"{path} has no `mcp:crm` tool-source line"
        write(tmp_path, text, path.name)
    as_mcp = load_skills(SKILLS, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    # No MCP server is needed once every tool is local.
    as_local = load_skills(tmp_path, local_tools=TOOLS, mcp_servers=(), responses=responses)
    assert set(as_local) == set(as_mcp)
    for skill_id, mcp_skill in as_mcp.items():
        local_skill = as_local[skill_id]
        assert list(local_skill.tools) == list(mcp_skill.tools)
        assert all(ref == ToolSourceRef("local") for ref in local_skill.tools.values())
        assert local_skill.mcp_imports() == {}
        assert local_skill.steps == mcp_skill.steps
        assert local_skill.constraints == mcp_skill.constraints
        assert local_skill.reset_slots == mcp_skill.reset_slots
    assert declared(as_local["log_interaction"], "add_timeline_note") is not None


def test_mixed_sources(tmp_path: Path, responses: set[str]) -> None:
    text = edit(BASE, "find_contact_by_email: mcp:crm", "find_contact_by_email: local")
    skill = load(write(tmp_path, text), responses)
    assert dict(skill.tools) == {
        "find_contact_by_email": ToolSourceRef("local"),
        "add_timeline_note": ToolSourceRef("mcp", "crm"),
    }
    assert str(ToolSourceRef("local")) == "local"
    assert str(ToolSourceRef("mcp", "crm")) == "mcp:crm"


def test_base_is_valid(tmp_path: Path, responses: set[str]) -> None:
    skill = load(write(tmp_path, BASE), responses)
    assert skill.id == "log_interaction"


def test_disabled_constraint_needs_no_responses(tmp_path: Path, responses: set[str]) -> None:
    text = edit(
        BASE,
        """\
        enabled: true
        utter_for_confirmation: utter_confirm_note
        utter_on_user_denial: utter_note_cancelled
""",
        "        enabled: false\n",
    )
    skill = load(write(tmp_path, text), responses)
    assert declared(skill, "add_timeline_note") is None
    assert skill.constraints["add_timeline_note"] == ToolConstraint(
        requires_confirmation=RequiresConfirmation(enabled=False)
    )


def test_responses_none_skips_the_domain_check(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "utter_confirm_note", "utter_nope"))
    skill = load_skill(path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=None)
    assert skill.id == "log_interaction"
    with pytest.raises(ConfigError):
        load_skill(path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)


# --- invalid skill files ------------------------------------------------------------------------


def test_step_uses_unlisted_tool(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "- execute_tool: add_timeline_note", "- execute_tool: delete_contact"))
    assert_message(
        error_of(path, responses),
        path,
        "steps[1].execute_tool",
        "'delete_contact'",
        "is not one of this skill's tools",
    )


def test_constraint_on_tool_the_skill_does_not_have(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "  - add_timeline_note:\n", "  - delete_contact:\n"))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].delete_contact",
        "constraint on 'delete_contact'",
        "not one of this skill's tools",
    )


def test_constraint_on_a_real_tool_the_skill_does_not_list(tmp_path: Path, responses: set[str]) -> None:
    # list_timeline_notes is registered and served, but this skill does not list it.
    path = write(tmp_path, edit(BASE, "  - add_timeline_note:\n", "  - list_timeline_notes:\n"))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].list_timeline_notes",
        "not one of this skill's tools",
    )


@pytest.mark.parametrize(
    ("old", "place"),
    [
        (
            "utter_for_confirmation: utter_confirm_note",
            "tool_constraints[0].add_timeline_note.requires_confirmation.utter_for_confirmation",
        ),
        (
            "utter_on_user_denial: utter_note_cancelled",
            "tool_constraints[0].add_timeline_note.requires_confirmation.utter_on_user_denial",
        ),
        ("on_success: utter_note_saved", "steps[1].on_success"),
        ("on_not_found: utter_contact_not_found", "steps[0].on_not_found"),
    ],
)
def test_response_the_domain_lacks(tmp_path: Path, responses: set[str], old: str, place: str) -> None:
    key = old.split(":")[0]
    path = write(tmp_path, edit(BASE, old, f"{key}: utter_nope"))
    assert_message(
        error_of(path, responses), path, place, "response 'utter_nope'", "is not defined in the domain"
    )


def test_enabled_not_a_bool(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "enabled: true", 'enabled: "yes please"'))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].add_timeline_note.requires_confirmation.enabled",
        "valid boolean",
    )


def test_constraint_unknown_key(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "requires_confirmation:", "require_confirmation:"))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].add_timeline_note.require_confirmation",
        "Extra inputs are not permitted",
    )


def test_confirmation_rule_unknown_key(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "utter_on_user_denial:", "utter_on_denial:"))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].add_timeline_note.requires_confirmation.utter_on_denial",
        "Extra inputs are not permitted",
    )


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("        utter_for_confirmation: utter_confirm_note\n", "utter_for_confirmation"),
        ("        utter_on_user_denial: utter_note_cancelled\n", "utter_on_user_denial"),
    ],
)
def test_enabled_without_responses(tmp_path: Path, responses: set[str], line: str, key: str) -> None:
    path = write(tmp_path, edit(BASE, line, ""))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].add_timeline_note.requires_confirmation",
        f"'{key}' is required when enabled",
    )


def test_two_tools_in_one_constraint_entry(tmp_path: Path, responses: set[str]) -> None:
    text = edit(BASE, "  - add_timeline_note:\n", "  - find_contact_by_email: {}\n    add_timeline_note:\n")
    path = write(tmp_path, text)
    assert_message(
        error_of(path, responses), path, "tool_constraints", "each constraint entry names exactly one tool"
    )


def test_second_constraint_for_same_tool(tmp_path: Path, responses: set[str]) -> None:
    text = edit(
        BASE,
        "  - add_timeline_note:\n",
        "  - add_timeline_note:\n      requires_confirmation: {enabled: false}\n  - add_timeline_note:\n",
    )
    path = write(tmp_path, text)
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[1].add_timeline_note",
        "a second constraint entry for 'add_timeline_note'",
    )


def test_local_tool_not_registered(tmp_path: Path, responses: set[str]) -> None:
    text = edit(BASE, "add_timeline_note: mcp:crm", "add_timeline_note: local")
    path = write(tmp_path, text)
    message = error_of(path, responses, local_tools={"find_contact_by_email"})
    assert_message(
        message,
        path,
        "tools.add_timeline_note",
        "no local tool named 'add_timeline_note' is registered",
        "(local tools: find_contact_by_email)",
    )


def test_local_tool_unknown_to_the_real_registry(tmp_path: Path, responses: set[str]) -> None:
    text = edit(
        BASE, "  add_timeline_note: mcp:crm\n", "  add_timeline_note: mcp:crm\n  delete_contact: local\n"
    )
    path = write(tmp_path, text)
    assert_message(
        error_of(path, responses),
        path,
        "tools.delete_contact",
        "no local tool named 'delete_contact' is registered",
        "add_timeline_note, create_follow_up_task, find_contact_by_email, list_timeline_notes",
    )


def test_local_tool_with_no_registry(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "add_timeline_note: mcp:crm", "add_timeline_note: local"))
    assert_message(
        error_of(path, responses, local_tools=()), path, "tools.add_timeline_note", "(local tools: none)"
    )


def test_mcp_server_not_in_endpoints(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "add_timeline_note: mcp:crm", "add_timeline_note: mcp:billing"))
    assert_message(
        error_of(path, responses),
        path,
        "tools.add_timeline_note",
        "MCP server 'billing' is not in endpoints.yml",
        "(servers: crm)",
    )


def test_mcp_source_with_no_servers_configured(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, BASE)
    assert_message(
        error_of(path, responses, mcp_servers=()),
        path,
        "tools.find_contact_by_email",
        "MCP server 'crm' is not in endpoints.yml (servers: none)",
    )


@pytest.mark.parametrize("source", ["remote", "mcp", "mcp:", "MCP:crm", "mcp:crm/extra", "Local"])
def test_bad_tool_source(tmp_path: Path, responses: set[str], source: str) -> None:
    path = write(tmp_path, edit(BASE, "add_timeline_note: mcp:crm", f'add_timeline_note: "{source}"'))
    assert_message(
        error_of(path, responses), path, "tools.add_timeline_note", "should match pattern", "local", "mcp:"
    )


def test_missing_steps(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, BASE.split("steps:")[0])
    assert_message(error_of(path, responses), path, "steps", "Field required")


def test_empty_steps(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, BASE.split("steps:")[0] + "steps: []\n")
    assert_message(error_of(path, responses), path, "steps", "at least 1")


def test_unknown_step_key(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "on_success: utter_note_saved", "on_sucess: utter_note_saved"))
    assert_message(error_of(path, responses), path, "steps[1].on_sucess", "Extra inputs are not permitted")


def test_slot_argument_typo(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "text: {slot: note_text}", "text: {slott: note_text}"))
    assert_message(error_of(path, responses), path, "steps[1].arguments.text.slot", "Field required")


@pytest.mark.parametrize("text", ["", "- a list\n", "just a string\n"], ids=["empty", "list", "scalar"])
def test_not_a_mapping(tmp_path: Path, responses: set[str], text: str) -> None:
    path = write(tmp_path, text)
    assert_message(error_of(path, responses), path, "top level", "valid dictionary")


def test_invalid_yaml(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, "skill: [unclosed\ntools: {}\n")
    message = error_of(path, responses)
    assert message.startswith(f"{path}: not valid YAML: ")


# --- load_skills over a directory ---------------------------------------------------------------


def test_duplicate_skill_ids_across_files(tmp_path: Path, responses: set[str]) -> None:
    first = write(tmp_path, BASE, "a_first.yml")
    second = write(tmp_path, BASE, "b_second.yml")
    with pytest.raises(ConfigError) as info:
        load_skills(tmp_path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert str(info.value) == f"{second}: skill 'log_interaction' is already defined in {first}"


def test_yaml_extension_is_loaded_too(tmp_path: Path, responses: set[str]) -> None:
    write(tmp_path, BASE, "log.yaml")
    skills = load_skills(tmp_path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert list(skills) == ["log_interaction"]


def test_one_bad_file_rejects_the_directory(tmp_path: Path, responses: set[str]) -> None:
    for path in SKILLS.glob("*.yml"):
        shutil.copy(path, tmp_path / path.name)
    bad = write(tmp_path, "skill: [unclosed\n", "zz_broken.yml")
    with pytest.raises(ConfigError) as info:
        load_skills(tmp_path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert str(info.value).startswith(f"{bad}: not valid YAML: ")


def test_invalid_yaml_in_directory(tmp_path: Path, responses: set[str]) -> None:
    bad = write(tmp_path, "steps:\n  - execute_tool: x\n   bad_indent: y\n")
    with pytest.raises(ConfigError) as info:
        load_skills(tmp_path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert str(info.value).startswith(f"{bad}: not valid YAML: ")


def test_empty_directory(tmp_path: Path, responses: set[str]) -> None:
    (tmp_path / "README.md").write_text("not a skill\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_skills(tmp_path, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert str(info.value) == f"{tmp_path}: no skill files (*.yml, or <skill>/skill.md) found"


def test_missing_directory(tmp_path: Path, responses: set[str]) -> None:
    missing = tmp_path / "no_such_dir"
    with pytest.raises(ConfigError) as info:
        load_skills(missing, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    assert str(info.value).startswith(f"{missing}: ")


# --- domain_responses ---------------------------------------------------------------------------


def test_domain_missing(tmp_path: Path) -> None:
    path = tmp_path / "domain.yml"
    with pytest.raises(ConfigError) as info:
        domain_responses(path)
    assert str(info.value).startswith(f"{path}: cannot read the domain: ")


def test_domain_responses_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "responses:\n  - utter_greet\n", "domain.yml")
    with pytest.raises(ConfigError) as info:
        domain_responses(path)
    assert str(info.value) == f"{path}: 'responses' must be a mapping"


def test_domain_without_responses(tmp_path: Path) -> None:
    assert domain_responses(write(tmp_path, "version: '3.1'\n", "domain.yml")) == set()


# --- step_arguments --------------------------------------------------------------------------


def _step(**arguments: object) -> Step:
    return Step.model_validate({"execute_tool": "t", "arguments": arguments})


def test_step_arguments_from_slots_and_literals() -> None:
    step = _step(contact_id={"slot": "contact_id"}, limit=5, flag=True, label="x", nothing=None)
    resolved, missing = step_arguments(step, {"contact_id": 7, "other": "ignored"})
    assert resolved == {"contact_id": 7, "limit": 5, "flag": True, "label": "x", "nothing": None}
    assert missing == []
    assert type(resolved["flag"]) is bool
    assert type(resolved["limit"]) is int


@pytest.mark.parametrize("value", [None, "", "   ", "\n\t"])
def test_step_arguments_missing_slot(value: object) -> None:
    step = _step(email={"slot": "contact_email"}, text={"slot": "note_text"}, limit=5)
    resolved, missing = step_arguments(step, {"contact_email": value, "note_text": "hello"})
    assert missing == ["contact_email"]
    assert resolved["text"] == "hello"
    assert resolved["limit"] == 5


def test_step_arguments_absent_slots_all_reported_in_order() -> None:
    step = _step(email={"slot": "contact_email"}, text={"slot": "note_text"})
    _, missing = step_arguments(step, {})
    assert missing == ["contact_email", "note_text"]


@pytest.mark.parametrize("value", [0, False, [], "x"])
def test_step_arguments_falsy_values_are_not_missing(value: object) -> None:
    resolved, missing = step_arguments(_step(v={"slot": "s"}), {"s": value})
    assert missing == []
    assert resolved == {"v": value}


def test_step_arguments_real_step(responses: set[str]) -> None:
    skills = load_skills(SKILLS, local_tools=TOOLS, mcp_servers=MCP_SERVERS, responses=responses)
    save = skills["log_interaction"].steps[1]
    resolved, missing = step_arguments(save, {"contact_id": 3, "note_text": "  "})
    assert resolved == {"contact_id": 3, "text": "  "}
    assert missing == ["note_text"]


# --- known bugs (expected good behaviour, failing today) ------------------------------------------


def test_place_keeps_capitalised_tool_name(tmp_path: Path, responses: set[str]) -> None:
    text = edit(BASE, "  add_timeline_note: mcp:crm\n", "  Add_Note: mcp:crm\n")
    text = edit(text, "  - add_timeline_note:\n", "  - Add_Note:\n")
    text = edit(text, "- execute_tool: add_timeline_note", "- execute_tool: Add_Note")
    path = write(tmp_path, edit(text, "enabled: true", 'enabled: "yes please"'))
    assert_message(
        error_of(path, responses),
        path,
        "tool_constraints[0].Add_Note.requires_confirmation.enabled",
        "valid boolean",
    )


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="BUG (confusing message): YAML 1.1 reads a key `on:` as True; the error says "
    "'steps[1][1]: Keys should be strings', as if it were a list index, and never names the key",
)
def test_yaml_boolean_key_is_named(tmp_path: Path, responses: set[str]) -> None:
    path = write(tmp_path, edit(BASE, "on_success: utter_note_saved", "on: utter_note_saved"))
    message = error_of(path, responses)
    assert "[1][1]" not in message
    assert "True" in message


def test_non_utf8_skill_file(tmp_path: Path, responses: set[str]) -> None:
    path = tmp_path / "skill.yml"
    path.write_bytes(("# café\n" + BASE).encode("latin-1"))
    assert error_of(path, responses).startswith(f"{path}: ")


def test_a_for_each_step_and_a_when_step_load(tmp_path: Path, responses: set[str]) -> None:
    text = edit(
        BASE,
        "  - execute_tool: find_contact_by_email\n",
        "  - execute_tool: find_contact_by_email\n    for_each: {slot: contact_emails, as: contact_email}\n"
        "    when: {slot: contact_emails}\n",
    )
    skill = load(write(tmp_path, text), responses)
    assert skill.steps[0].for_each == ForEach(slot="contact_emails", **{"as": "contact_email"})
    assert skill.steps[0].when == SlotArgument(slot="contact_emails")


def test_a_for_each_that_binds_its_own_list_is_refused(tmp_path: Path, responses: set[str]) -> None:
    text = edit(
        BASE,
        "  - execute_tool: find_contact_by_email\n",
        "  - execute_tool: find_contact_by_email\n    for_each: {slot: contact_email, as: contact_email}\n",
    )
    path = write(tmp_path, text)
    assert_message(error_of(path, responses), path, "steps[0].for_each", "'as' must name another slot")


def test_a_describe_format_that_cannot_be_filled_is_refused(tmp_path: Path, responses: set[str]) -> None:
    text = edit(
        BASE,
        "        utter_on_user_denial: utter_note_cancelled\n",
        "        utter_on_user_denial: utter_note_cancelled\n        describe: 'Note {arg_text'\n",
    )
    path = write(tmp_path, text)
    assert_message(
        error_of(path, responses), path, "tool_constraints.add_timeline_note.requires_confirmation.describe"
    )
