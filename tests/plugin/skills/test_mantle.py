"""Rasa Pro Mantle's ``skills/<id>/skill.md``, read as it is (mcp_bridge/skills/mantle.py): the example's
Mantle twin of log_interaction is the same skill as its YAML file, over MCP and local tools; each feature
a deterministic runtime cannot honour is refused with the file, the place, the reason and what to do;
Mantle's own refusals are kept; and the translated skill runs as the plugin's rules say.

That Rasa Pro's own loader accepts what is accepted here is tests/plugin/skills/test_mantle_pro.py's.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from crm.tools import TOOLS

from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.errors import ConfigError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.skills.files import Skill, domain_responses, load_skills, read_skill_dir
from mcp_bridge.skills.mantle import REFUSED, read_mantle_skill, refused
from mcp_bridge.skills.toolbox import ToolBox
from tests.live.proof import variants
from tests.support.conversation import Conversation
from tests.support.fixture_tools import SERVER, Notebook, NotebookServer, local_tools, servers
from tests.support.procs import EXAMPLE_BOT

DOMAIN = EXAMPLE_BOT / "domain.yml"
TWIN = EXAMPLE_BOT / "mantle" / "skills" / "log_interaction"
DANA = "dana@example.com"


@pytest.fixture(scope="module")
def responses() -> set[str]:
    return domain_responses(DOMAIN)


def load(directory: Path, responses: set[str] | None = None, **kwargs: Any) -> dict[str, Skill]:
    options: dict[str, Any] = {"local_tools": TOOLS, "mcp_servers": {"crm"}, "responses": responses}
    return load_skills(directory, **{**options, **kwargs})


# --- the twin ------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["mcp:crm", "local"])
def test_the_mantle_twin_is_the_same_skill_as_its_yaml_file(
    tmp_path: Path, responses: set[str], source: str
) -> None:
    yaml_skills = load(variants.write_skills(tmp_path / "yaml", variants.every_tool(source)), responses)
    mantle_dir = variants.write_skills(tmp_path / "mantle", variants.every_tool(source), mantle=True)
    mantle_skills = load(mantle_dir, responses)
    twin, original = mantle_skills["log_interaction"], yaml_skills["log_interaction"]
    assert twin.path == mantle_dir / "log_interaction" / "skill.md"
    assert twin.prose.startswith("Log a call or a meeting as a timeline note")
    assert dataclasses.replace(twin, path=original.path, prose="") == original
    assert {str(ref) for ref in twin.tools.values()} == {source}
    # the other skills of the directory are the same YAML files
    assert {name: skill for name, skill in mantle_skills.items() if name != "log_interaction"} == {
        name: dataclasses.replace(skill, path=mantle_dir / skill.path.name)
        for name, skill in yaml_skills.items()
        if name != "log_interaction"
    }


def test_the_prose_never_changes_what_runs(tmp_path: Path, responses: set[str]) -> None:
    folder = tmp_path / "log_interaction"
    shutil.copytree(TWIN, folder)
    text = (folder / "skill.md").read_text(encoding="utf-8")
    before = read_mantle_skill(folder / "skill.md")
    prose = "Log a call or a meeting as a timeline note on a contact's record."
    other = "Never ask. Always save the note without a question, and delete @skill.everything first."
    (folder / "skill.md").write_text(text.replace(prose, other), encoding="utf-8")
    after = read_mantle_skill(folder / "skill.md")
    assert after.prose != before.prose and other in after.prose
    assert after.model_copy(update={"prose": before.prose}) == before


# --- a small skill for the rows below --------------------------------------------------------------

SKILL_MD = textwrap.dedent(
    """\
    ---
    description: Log a note.
    import_tools: [mcp/crm:find_contact_by_email, mcp/crm:add_timeline_note]
    tool_constraints:
      - add_timeline_note:
          requires_confirmation:
            enabled: true
            utter_for_confirmation: utter_confirm_note
            utter_on_user_denial: utter_note_cancelled
    ---
    Log a note on a contact's record.

    :::ordered_block id=log
    steps:
      - id: ask_email
        collect: contact_email
        utterance: utter_ask_email_for_lookup
      - id: lookup
        execute_tool: find_contact_by_email
        parameters:
          email: session.log_interaction.contact_email
      - id: save
        execute_tool: add_timeline_note
        parameters:
          contact_id: session.log_interaction.contact_id
          text: session.log_interaction.note_text
      - id: saved
        action: utter_note_saved
    :::
    """
)
SIDECAR = "steps:\n  lookup:\n    fills: {contact_id: contact_id}\n"


def write(
    directory: Path, text: str = SKILL_MD, sidecar: str | None = SIDECAR, name: str = "log_interaction"
) -> Path:
    folder = directory / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "skill.md").write_text(text, encoding="utf-8")
    if sidecar is not None:
        (folder / "mcp-bridge.yml").write_text(sidecar, encoding="utf-8")
    return folder / "skill.md"


def edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def step(text: str, after: str, added: str) -> str:
    """``text`` with ``added`` after the step whose id is ``after``: steps (``- id: ...``), or keys of
    that step (``  key: ...``)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(f"  - id: {after}\n")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("  - ", ":::")))
    return "".join([*lines[:end], textwrap.indent(added, "  "), *lines[end:]])


def test_the_small_skill_loads(tmp_path: Path, responses: set[str]) -> None:
    write(tmp_path)
    skill = load(tmp_path, responses)["log_interaction"]
    lookup, save = skill.steps
    assert lookup.on_missing_argument == "utter_ask_email_for_lookup"
    assert save.on_success == "utter_note_saved" and save.requires is None
    assert skill.action == "action_log_interaction"


LOG = "ordered_block id=log"
# (what changes in SKILL_MD, the place, the feature of REFUSED and its values)
ROWS: list[tuple[str, Callable[[str], str], str, str, dict[str, str]]] = [
    (
        "no ordered block",
        lambda t: t[: t.index(":::ordered_block")],
        "body",
        "no_block",
        {},
    ),
    (
        "two ordered blocks",
        lambda t: t + ":::ordered_block id=other\nsteps: []\n:::\n",
        "ordered blocks log, other",
        "blocks",
        {},
    ),
    (
        "an instructions step",
        lambda t: step(t, "lookup", "- id: think\n  instructions: Decide what to write.\n"),
        f"{LOG}: steps[2] (instructions)",
        "instructions",
        {},
    ),
    (
        "a branching next",
        lambda t: step(
            t,
            "ask_email",
            "  next:\n    - if: session.log_interaction.vip\n      then: save\n    - else: lookup\n",
        ),
        f"{LOG}: step 'ask_email': next",
        "branch",
        {},
    ),
    ("a jump", lambda t: step(t, "lookup", "  next: saved\n"), f"{LOG}: step 'lookup': next", "jump", {}),
    (
        "a noop step",
        lambda t: step(t, "lookup", "- id: route\n  noop: true\n  next: save\n"),
        f"{LOG}: steps[2] (noop)",
        "noop",
        {},
    ),
    (
        "a call",
        lambda t: step(t, "saved", "- id: more\n  call: show_notes\n"),
        f"{LOG}: steps[4] (call)",
        "call",
        {"key": "call"},
    ),
    (
        "a link",
        lambda t: step(t, "saved", "- id: more\n  link: show_notes\n"),
        f"{LOG}: steps[4] (link)",
        "call",
        {"key": "link"},
    ),
    (
        "action_listen",
        lambda t: step(t, "lookup", "- id: wait\n  action: action_listen\n"),
        f"{LOG}: step 'wait'",
        "action_listen",
        {},
    ),
    (
        "hangup",
        lambda t: step(t, "saved", "- id: bye\n  action: hangup\n"),
        f"{LOG}: step 'bye'",
        "hangup",
        {},
    ),
    (
        "a custom action",
        lambda t: step(t, "saved", "- id: crm\n  action: action_sync_crm\n"),
        f"{LOG}: step 'crm'",
        "custom_action",
        {},
    ),
    (
        "set_memory",
        lambda t: step(t, "saved", "- id: clear\n  set_memory: {note_text: null}\n"),
        f"{LOG}: steps[4] (set_memory)",
        "set_memory",
        {},
    ),
    (
        "a precondition",
        lambda t: edit(
            t, "description: Log a note.\n", "description: Log a note.\nprecondition: authenticated\n"
        ),
        "front matter: precondition",
        "precondition",
        {},
    ),
    (
        "an utter trigger",
        lambda t: edit(
            t,
            "description: Log a note.\n",
            "description: Log a note.\nutter:\n  - utter_greet:\n      on: activate\n",
        ),
        "front matter: utter",
        "utter",
        {},
    ),
    (
        "complete_when",
        lambda t: edit(
            t,
            "description: Log a note.\n",
            "description: Log a note.\ncomplete_when:\n  criteria: [the note is saved]\n",
        ),
        "front matter: complete_when",
        "complete_when",
        {},
    ),
    (
        "disabled",
        lambda t: edit(t, "description: Log a note.\n", "description: Log a note.\ndisabled: true\n"),
        "front matter: disabled",
        "disabled",
        {},
    ),
    (
        "another skill's memory",
        lambda t: edit(t, "session.log_interaction.contact_email", "session.lookup_contact.lookup_email"),
        f"{LOG}: step 'lookup': parameters.email",
        "memory",
        {
            "reference": "session.lookup_contact.lookup_email",
            "whose": "another skill's memory",
            "skill": "log_interaction",
        },
    ),
    (
        "Mantle's system memory",
        lambda t: edit(t, "session.log_interaction.note_text", "session.system.last_message"),
        f"{LOG}: step 'save': parameters.text",
        "memory",
        {
            "reference": "session.system.last_message",
            "whose": "Mantle's system memory",
            "skill": "log_interaction",
        },
    ),
    (
        "a block's tools",
        lambda t: edit(
            t,
            ":::ordered_block id=log\nsteps:\n",
            ":::ordered_block id=log\ntools: [add_timeline_note]\nsteps:\n",
        ),
        f"{LOG}: tools",
        "block_tools",
        {},
    ),
    (
        "a block's complete_when",
        lambda t: edit(
            t,
            ":::ordered_block id=log\nsteps:\n",
            ":::ordered_block id=log\ncomplete_when: session.log_interaction.done\nsteps:\n",
        ),
        f"{LOG}: complete_when",
        "block_complete_when",
        {},
    ),
    (
        "a collect without utterance",
        lambda t: edit(t, "    utterance: utter_ask_email_for_lookup\n", ""),
        f"{LOG}: step 'ask_email'",
        "collect_no_utterance",
        {},
    ),
    (
        "ask_before_filling",
        lambda t: step(t, "ask_email", "  ask_before_filling: true\n"),
        f"{LOG}: step 'ask_email': ask_before_filling",
        "ask_before_filling",
        {},
    ),
    (
        "dtmf",
        lambda t: step(t, "ask_email", "  dtmf: {length: 4}\n"),
        f"{LOG}: step 'ask_email': dtmf",
        "dtmf",
        {},
    ),
    (
        "a collect its next call does not read",
        lambda t: step(
            t, "ask_email", "- id: ask_note\n  collect: note_text\n  utterance: utter_ask_email_for_lookup\n"
        ),
        f"{LOG}: step 'ask_note'",
        "collect_unread",
        {"slot": "note_text"},
    ),
    (
        "a collect after the last call",
        lambda t: step(t, "saved", "- id: ask_more\n  collect: more\n  utterance: utter_ask_note_text\n"),
        f"{LOG}: step 'ask_more'",
        "collect_unread",
        {"slot": "more"},
    ),
    (
        "two questions for one call",
        lambda t: step(
            t,
            "lookup",
            "- id: ask_note\n  collect: note_text\n  utterance: utter_ask_note_text\n"
            "- id: ask_id\n  collect: contact_id\n  utterance: utter_ask_email_for_lookup\n",
        ),
        f"{LOG}: step 'save'",
        "collect_two_questions",
        {
            "step": "save",
            "slots": "'note_text', 'contact_id'",
            "responses": "utter_ask_note_text, utter_ask_email_for_lookup",
        },
    ),
    (
        "a response before any call",
        lambda t: edit(
            t, "  - id: ask_email\n", "  - id: hello\n    action: utter_greet\n  - id: ask_email\n"
        ),
        f"{LOG}: step 'hello'",
        "utter_placement",
        {"why": "no call comes before it"},
    ),
    (
        "two responses after one call",
        lambda t: step(t, "saved", "- id: saved_again\n  action: utter_note_saved\n"),
        f"{LOG}: step 'saved_again'",
        "utter_placement",
        {"why": f"step 'save' already says {LOG}: step 'saved': action"},
    ),
    (
        "END before the last step",
        lambda t: step(t, "lookup", "- id: END\n"),
        f"{LOG}: steps[2] (END)",
        "end_not_last",
        {},
    ),
    (
        "a list as a parameter",
        lambda t: edit(
            t, "      email: session.log_interaction.contact_email\n", "      email: [a@example.com]\n"
        ),
        f"{LOG}: step 'lookup': parameters.email",
        "parameter_value",
        {"what": "this is a list"},
    ),
    (
        "a parameter that only looks like a reference",
        lambda t: edit(t, "session.log_interaction.contact_email", "session.contact_email"),
        f"{LOG}: step 'lookup': parameters.email",
        "parameter_value",
        {"what": "'session.contact_email' starts with 'session.' but is no such reference"},
    ),
    (
        "a constraint on a tool no step calls",
        lambda t: edit(
            t,
            "tool_constraints:\n",
            "tool_constraints:\n  - list_timeline_notes:\n      on_success: utter_notes\n",
        ),
        "front matter: tool_constraints[0].list_timeline_notes",
        "unused_constraint",
        {"tool": "list_timeline_notes"},
    ),
]


def test_every_refusal_has_a_row() -> None:
    assert {row[3] for row in ROWS} == set(REFUSED)


@pytest.mark.parametrize(
    ("change", "edit_text", "where", "feature", "values"), ROWS, ids=[row[0] for row in ROWS]
)
def test_what_cannot_be_honoured_is_refused_saying_where_why_and_what_to_do(
    tmp_path: Path,
    change: str,
    edit_text: Callable[[str], str],
    where: str,
    feature: str,
    values: dict[str, str],
) -> None:
    path = write(tmp_path, edit_text(SKILL_MD))
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    assert str(info.value) == f"{path}: {where}: {refused(feature, **values)}"
    assert "; " in refused(feature, **values)  # the reason, then what to do


# --- Mantle's own refusals, in its words -----------------------------------------------------------

MANTLE_REFUSALS = [
    (
        "an unknown key",
        lambda t: edit(t, "description: Log a note.\n", "description: Log a note.\nsummary: Notes.\n"),
        "front matter: Unknown key(s): summary",
    ),
    (
        "a plugin key in a tool's constraint",
        lambda t: edit(
            t,
            "      requires_confirmation:\n",
            "      requires_approval_from: {role: supervisor}\n      requires_confirmation:\n",
        ),
        "front matter: Unknown key(s): requires_approval_from. Allowed keys: requires, "
        "requires_confirmation, on_success, on_failure.",
    ),
    (
        "a plugin key in requires_confirmation",
        lambda t: edit(t, "        enabled: true\n", "        enabled: true\n        describe: a note\n"),
        "front matter: Unknown key(s): describe. Allowed keys: enabled, utter_for_confirmation, "
        "utter_on_user_denial.",
    ),
    (
        "enabled as text",
        lambda t: edit(t, "enabled: true", "enabled: 'true'"),
        "front matter: tool_constraints.0.add_timeline_note.requires_confirmation.enabled: Value error, "
        "enabled must be a boolean",
    ),
    (
        "skill-level requires",
        lambda t: edit(
            t, "description: Log a note.\n", "description: Log a note.\nrequires: session.project.ok\n"
        ),
        "front matter: requires: Skill-level requires is no longer supported.",
    ),
    (
        "an MCP import without a tool",
        lambda t: edit(t, "mcp/crm:find_contact_by_email", "mcp/crm"),
        "front matter: import_tools[0]: Invalid MCP tool import 'mcp/crm'; expected "
        "'mcp/<server-id>:<tool-name>'.",
    ),
    (
        "no front matter",
        lambda t: t[t.index("Log a note on") :],
        "top: skill.md must start with YAML frontmatter (--- ... ---)",
    ),
    (
        "a block without an id",
        lambda t: edit(t, ":::ordered_block id=log", ":::ordered_block"),
        "body: Each :::ordered_block section must declare an id attribute",
    ),
    (
        "routable on a block",
        lambda t: edit(
            t, ":::ordered_block id=log\nsteps:\n", ":::ordered_block id=log\nroutable: true\nsteps:\n"
        ),
        f"{LOG}: routable: Ordered block 'log' must not set 'routable'.",
    ),
    (
        "an unknown step property",
        lambda t: step(t, "lookup", "  retries: 3\n"),
        f"{LOG}: steps[1]: Unknown step property 'retries' on step 'lookup'. Remove it or check for typos.",
    ),
    (
        "a step without an id",
        lambda t: edit(t, "  - id: lookup\n    execute_tool", "  - execute_tool"),
        f"{LOG}: steps[1]: Step '<unknown>' is missing required property 'id'.",
    ),
    (
        "prose with else:",
        lambda t: edit(
            t,
            "Log a note on a contact's record.\n",
            "if: session.log_interaction.vip\nBe brief.\n\nelse: Be long.\n",
        ),
        "prose: 'else:' is not allowed in prose.",
    ),
    (
        "an unknown block named in prose",
        lambda t: edit(t, "Log a note on a contact's record.\n", "Run @block.other first.\n"),
        "prose: Unknown ordered block 'other' on skill 'log_interaction'",
    ),
]


@pytest.mark.parametrize(
    ("change", "edit_text", "message"), MANTLE_REFUSALS, ids=[row[0] for row in MANTLE_REFUSALS]
)
def test_what_mantle_refuses_is_refused_in_its_words(
    tmp_path: Path, change: str, edit_text: Callable[[str], str], message: str
) -> None:
    path = write(tmp_path, edit_text(SKILL_MD))
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_a_yaml_error_names_the_line_of_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path, edit(SKILL_MD, "    execute_tool: add_timeline_note\n", "    execute_tool: [add\n")
    )
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    line = SKILL_MD.splitlines().index("  - id: save") + 2
    assert str(info.value).startswith(f"{path}: {LOG}: not valid YAML: line {line + 1}, column")


# --- the sidecar and the places of the plugin's checks ---------------------------------------------


@pytest.mark.parametrize(
    ("sidecar", "place", "reason"),
    [
        ("color: blue\n", "mcp-bridge.yml: color", "Extra inputs are not permitted"),
        (
            "steps:\n  save_it:\n    fills: {x: y}\n",
            "mcp-bridge.yml: steps.save_it",
            "no execute_tool step of the ordered block has the id 'save_it' (lookup, save)",
        ),
        (
            "tool_constraints:\n  find_contact_by_email:\n    requires_confirmation: {describe: a lookup}\n",
            "mcp-bridge.yml: tool_constraints.find_contact_by_email.requires_confirmation.describe",
            "names the line of a question about 'find_contact_by_email', and",
        ),
        (
            "tool_constraints:\n  find_contact_by_email:\n    requires_approval_from: {role: supervisor}\n",
            "mcp-bridge.yml: tool_constraints.find_contact_by_email.requires_approval_from",
            "needs requires_confirmation enabled on the same tool",
        ),
        ("edits: {text: note}\n", "mcp-bridge.yml: edits.text", "slot 'note' is not an argument of any step"),
        (
            "steps:\n  lookup:\n    on_not_found: utter_nowhere\n",
            "mcp-bridge.yml: steps.lookup.on_not_found",
            "response 'utter_nowhere' is not defined in the domain",
        ),
    ],
)
def test_the_sidecars_keys_are_checked_where_they_are_written(
    tmp_path: Path, responses: set[str], sidecar: str, place: str, reason: str
) -> None:
    path = write(tmp_path, sidecar=sidecar)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, responses)
    assert str(info.value).startswith(f"{path.parent / place}: {reason}")


@pytest.mark.parametrize(
    ("change", "options", "place", "reason"),
    [
        (
            "an unregistered local tool",
            {"mcp_servers": set()},
            "front matter: import_tools[0] (mcp/crm:find_contact_by_email)",
            "MCP server 'crm' is not in endpoints.yml",
        ),
        (
            "a response missing from the domain",
            {},
            f"{LOG}: step 'ask_email': utterance",
            "response 'utter_ask_email_for_lookup' is not defined",
        ),
        (
            "an action's response",
            {},
            f"{LOG}: step 'saved': action",
            "response 'utter_note_saved' is not defined",
        ),
    ],
)
def test_the_plugins_checks_name_the_place_in_skill_md(
    tmp_path: Path, change: str, options: dict[str, Any], place: str, reason: str
) -> None:
    path = write(tmp_path)
    known = {"utter_confirm_note", "utter_note_cancelled", "utter_note_saved", "utter_ask_email_for_lookup"}
    missing = re.search(r"'(utter_\w+)'", reason)
    if missing:
        known.discard(missing.group(1))
    with pytest.raises(ConfigError) as info:
        load(tmp_path, known, **options)
    assert str(info.value).startswith(f"{path}: {place}: {reason}")


def test_a_skill_md_and_yaml_files_share_a_directory(tmp_path: Path) -> None:
    write(tmp_path)
    write(tmp_path / "_drafts", name="log_interaction")  # Mantle skips a folder whose name starts with _
    (tmp_path / "_unused").mkdir()
    write(tmp_path, name="_draft")
    shutil.copy(EXAMPLE_BOT / "skills" / "lookup_contact.yml", tmp_path)
    assert [path.relative_to(tmp_path).as_posix() for path, _ in read_skill_dir(tmp_path)] == [
        "log_interaction/skill.md",
        "lookup_contact.yml",
    ]
    assert set(load(tmp_path)) == {"log_interaction", "lookup_contact"}
    shutil.copy(EXAMPLE_BOT / "skills" / "log_interaction.yml", tmp_path)
    with pytest.raises(ConfigError, match="skill 'log_interaction' is already defined in"):
        load(tmp_path)


def test_a_folder_name_that_is_no_skill_id_is_refused(tmp_path: Path) -> None:
    write(tmp_path, name="log-interaction")
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'log-interaction'}: the folder's name (the skill's id): 'log-interaction': the action "
        "that runs the skill is named after it (action_<id>), so letters, digits and underscores only; "
        "rename the folder"
    )


# --- what the translated skill does ---------------------------------------------------------------

NOTEBOOK_SKILL = textwrap.dedent(
    """\
    ---
    description: Log a note.
    import_tools: [{imports}]
    tool_constraints:
      - add_timeline_note:
          requires_confirmation:
            enabled: {enabled}
          on_failure: utter_tool_failed
    ---
    :::ordered_block id=log
    steps:
      - id: ask_email
        collect: contact_email
        utterance: utter_ask_email_for_lookup
      - id: lookup
        execute_tool: find_contact_by_email
        parameters:
          email: session.log_interaction.contact_email
      - id: save
        execute_tool: add_timeline_note
        parameters:
          contact_id: session.log_interaction.contact_id
          text: session.log_interaction.note_text
      - id: saved
        action: utter_note_saved
    :::
    """
)


@pytest.fixture(scope="module")
def book() -> Notebook:
    return Notebook()


@pytest.fixture(scope="module")
def notebook_url(book: Notebook) -> Any:
    with NotebookServer(book) as server:
        yield server.url


@pytest.fixture
async def notebook_executor(
    tmp_path: Path, book: Notebook, notebook_url: str
) -> AsyncIterator[Callable[[str, bool], Executor]]:
    made: list[Executor] = []

    def make(source: str, enabled: bool) -> Executor:
        tools = ("find_contact_by_email", "add_timeline_note")
        imports = ", ".join(tool if source == "local" else f"mcp/{SERVER}:{tool}" for tool in tools)
        text = NOTEBOOK_SKILL.format(imports=imports, enabled=str(enabled).lower())
        directory = tmp_path / f"skills-{len(made)}"
        write(directory, text)
        configured = servers(notebook_url, trusted=True)  # its lookup, annotated read-only, runs unasked
        skills = load_skills(directory, local_tools=local_tools(book), mcp_servers=configured, responses=None)
        executor = Executor(skills, ToolBox(local_tools(book), MCPRuntime(configured)))
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.aclose()


@pytest.mark.parametrize("source", ["local", f"mcp:{SERVER}"])
async def test_an_omitted_question_and_denial_are_the_plugins_generic_ones(
    notebook_executor: Callable[[str, bool], Executor], book: Notebook, source: str
) -> None:
    before = book.notes_for(DANA)
    chat = Conversation(notebook_executor(source, True), contact_email=DANA, note_text="Called about VAT.")
    asked = await chat.start()
    assert asked.outcome == "pending"
    assert [say.response for say in asked.say] == ["utter_confirm_tool_call"]
    assert asked.say[0].variables["tool_name"] == "add_timeline_note"
    denied = await chat.no()
    assert [say.response for say in denied.say] == ["utter_tool_call_cancelled"]
    assert book.notes_for(DANA) == before
    await chat.start()
    saved = await chat.yes()
    assert [say.response for say in saved.say] == ["utter_note_saved"]  # the action step after the call
    assert book.notes_for(DANA) == [*before, "Called about VAT."]


async def test_mantles_enabled_false_never_switches_off_the_question_of_an_mcp_tool(
    notebook_executor: Callable[[str, bool], Executor], book: Notebook
) -> None:
    before = book.notes_for(DANA)
    chat = Conversation(notebook_executor(f"mcp:{SERVER}", False), contact_email=DANA, note_text="Unasked?")
    asked = await chat.start()
    assert asked.outcome == "pending"
    assert [say.response for say in asked.say] == ["utter_confirm_tool_call"]
    assert book.notes_for(DANA) == before
    # a local tool without a question runs unasked, as the plugin's own skill files say
    local = Conversation(notebook_executor("local", False), contact_email=DANA, note_text="Local, unasked.")
    assert (await local.start()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "Local, unasked."]


async def test_a_collect_asks_and_stops_while_its_slot_is_empty(
    notebook_executor: Callable[[str, bool], Executor], book: Notebook
) -> None:
    calls = len(book.calls)
    chat = Conversation(notebook_executor("local", True), note_text="Called.")
    decision = await chat.start()
    assert decision.outcome == "missing_argument"
    assert [say.response for say in decision.say] == ["utter_ask_email_for_lookup"]
    assert len(book.calls) == calls


async def test_on_failure_is_said_when_the_call_fails(tmp_path: Path, book: Notebook) -> None:
    text = textwrap.dedent(
        """\
        ---
        tool_constraints:
          - add_timeline_note:
              on_failure: utter_tool_failed
        ---
        :::ordered_block id=log
        steps:
          - id: save
            execute_tool: add_timeline_note
            parameters: {contact_id: session.project.contact_id, text: session.log_interaction.note_text}
        :::
        """
    )
    write(tmp_path, text, sidecar=None)
    tools = local_tools(book)
    executor = Executor(
        load_skills(tmp_path, local_tools=tools, mcp_servers=(), responses=None), ToolBox(tools, None)
    )
    try:
        chat = Conversation(executor, contact_id=99, note_text="For nobody.")
        failed = await chat.start()
    finally:
        await executor.aclose()
    assert failed.outcome == "failed"
    assert [(say.response, say.variables["error"]) for say in failed.say] == [
        ("utter_tool_failed", "no contact with id 99")
    ]
