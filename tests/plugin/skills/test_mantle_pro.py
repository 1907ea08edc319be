"""A ``skill.md`` the plugin accepts is one Rasa Pro 3.21's own skill loader accepts, and the front matter's
keys are refused exactly as Mantle refuses them, in its words: checked against ``rasa.mantle`` itself.

Importing Mantle's loader needs no licence, but it needs rasa-pro, which only Rasa Pro's environment has:
``make pytest-pro`` runs these in ``.venv-pro``; elsewhere they are skipped, saying so.
"""

from __future__ import annotations

import os
import string
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.mantle import read_mantle_skill
from mcp_bridge.skills.mantle_format import FrontMatterRefused, parse_step, read_front_matter
from tests.live.proof import variants
from tests.plugin.skills.test_mantle import MANTLE_REFUSALS, NOTEBOOK_SKILL, SIDECAR, SKILL_MD, TWIN
from tests.support.procs import EXAMPLE_BOT

compiler = pytest.importorskip(
    "rasa.mantle.skills.markdown_skill_compiler",
    reason="needs rasa-pro 3.21's own skill loader, which only Rasa Pro's environment has (make pytest-pro)",
)
# Mantle's validation module imports litellm, which would fetch a price list from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from rasa.mantle.skills import steps as mantle_steps  # noqa: E402
from rasa.mantle.skills.catalog import load_skill_catalog_result  # noqa: E402
from rasa.mantle.skills.frontmatter import parse_skill_frontmatter  # noqa: E402


def mantle_loads(path: Path) -> None:
    """Rasa Pro's loader reads the skill of ``path`` (a skill.md) without a problem, or raises."""
    snapshot = path.parent.parent.parent
    assert path.parent.parent.name == "skills", "Mantle reads <snapshot>/skills/<id>/skill.md"
    result = load_skill_catalog_result(snapshot)
    errors = [error for folder, error in result.load_errors if folder == path.parent.name]
    if errors:
        raise AssertionError(f"Rasa Pro's loader refuses {path}: {errors[0]}")
    assert path.parent.name in result.catalog.skills


def test_rasa_pros_loader_and_checks_accept_the_example_twin() -> None:
    from rasa.mantle.memory.schema import ProjectMemorySchema
    from rasa.mantle.skills import validation

    read_mantle_skill(TWIN / "skill.md")
    result = load_skill_catalog_result(TWIN.parent.parent)
    assert result.load_errors == []
    catalog = result.catalog
    skill = catalog.skills["log_interaction"]
    assert {tool.name for tool in skill.tools} == {
        "find_contact_by_email",
        "add_timeline_note",
        "create_follow_up_task",
    }
    # The train-time checks that need nothing but the skill (and its memory.yml) pass too.
    assert validation.validate_flow_transitions(catalog) == []
    assert validation.validate_ordered_block_structure(catalog) == []
    assert validation.validate_execute_step_parameters(catalog, ProjectMemorySchema()) == []
    assert validation.validate_skill_descriptions(catalog) == []


@pytest.mark.parametrize("source", ["mcp:crm", "local"])
def test_rasa_pros_loader_accepts_the_twin_over_either_source(tmp_path: Path, source: str) -> None:
    folder = variants.write_mantle_twin(tmp_path / "skills", variants.every_tool(source))
    read_mantle_skill(folder / "log_interaction" / "skill.md")
    mantle_loads(folder / "log_interaction" / "skill.md")


def test_rasa_pros_loader_accepts_the_skills_the_plugins_tests_accept(tmp_path: Path) -> None:
    texts = {
        "log_interaction": SKILL_MD,
        "notebook": NOTEBOOK_SKILL.format(imports="mcp/notebook:find_contact_by_email", enabled="false"),
    }
    for name, text in texts.items():
        folder = tmp_path / "skills" / name
        folder.mkdir(parents=True)
        (folder / "skill.md").write_text(text.replace("log_interaction", name), encoding="utf-8")
        (folder / "mcp-bridge.yml").write_text(SIDECAR if name == "log_interaction" else "", encoding="utf-8")
        try:
            read_mantle_skill(folder / "skill.md")
        except ConfigError as exc:
            if name == "log_interaction":
                raise
            assert "parameters" in str(exc) or "import" in str(exc)
        mantle_loads(folder / "skill.md")


@pytest.mark.parametrize(
    ("change", "edit_text", "message"), MANTLE_REFUSALS, ids=[row[0] for row in MANTLE_REFUSALS]
)
def test_what_the_plugin_refuses_in_mantles_words_mantle_refuses(
    tmp_path: Path, change: str, edit_text: Any, message: str
) -> None:
    folder = tmp_path / "skills" / "log_interaction"
    folder.mkdir(parents=True)
    (folder / "skill.md").write_text(edit_text(SKILL_MD), encoding="utf-8")
    with pytest.raises(AssertionError, match="Rasa Pro's loader refuses"):
        mantle_loads(folder / "skill.md")


# --- the front matter's keys, side by side ---------------------------------------------------------

KEYS = [
    "name",
    "description",
    "precondition",
    "hidden",
    "disabled",
    "always_include_in_prompt",
    "complete_when",
    "import_tools",
    "tool_constraints",
    "utter",
    "knowledge_answering",
    "routing",
    "summary",  # no key of Mantle's
    "steps",
]
NAMES = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=8)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "x", "yes", "activate"])
)


def options(keys: list[str], values: st.SearchStrategy[Any] = SCALARS) -> st.SearchStrategy[Any]:
    """A value, or a mapping of some of ``keys`` (Mantle's, and some it does not have) to values."""
    return st.one_of(SCALARS, st.dictionaries(st.sampled_from(keys), values, max_size=3))


CONFIRMATION = options(["enabled", "utter_for_confirmation", "utter_on_user_denial", "describe"])
CONSTRAINT = st.one_of(
    options(["requires", "on_success", "on_failure", "requires_approval_from"]),
    st.fixed_dictionaries({"requires_confirmation": CONFIRMATION}),
)
IMPORTS = st.sampled_from(["mcp/crm:a", "mcp/crm", "mcp/c:a.b", "tool", "mcp/-x:a"])
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "tool_constraints": st.one_of(
        SCALARS, st.lists(st.one_of(SCALARS, st.dictionaries(NAMES, CONSTRAINT, max_size=2)), max_size=2)
    ),
    "import_tools": st.one_of(SCALARS, st.lists(st.one_of(st.integers(), IMPORTS), max_size=2)),
    "utter": st.one_of(
        SCALARS, st.lists(st.one_of(SCALARS, st.dictionaries(NAMES, options(["on", "when"]), max_size=1)))
    ),
    "complete_when": options(["condition", "criteria", "other"]),
    "knowledge_answering": options(["instructions", "other"]),
    "routing": options(["is_default", "engine_managed", "other"]),
}
FRONT_MATTER = st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=4).flatmap(
    lambda drawn: st.fixed_dictionaries(
        {key: VALUES.get(key, st.just(value)) for key, value in drawn.items()}
    )
)


def mantle_front_matter(raw: dict[str, Any]) -> str | None:
    """Mantle's refusal of the front matter ``raw``, or None when it reads it (its compiler's front matter
    stage: the model, then tool_constraints, import_tools and utter compiled)."""
    try:
        parse_skill_frontmatter(raw)
        compiler.compile_skill_logic(raw)
    except Exception as exc:  # the catalog loader counts any exception as a refusal
        return str(exc)
    return None


def plugins_front_matter(raw: dict[str, Any]) -> str | None:
    """The plugin's refusal of the front matter ``raw`` (as Mantle's, the front matter alone), or None."""
    try:
        read_front_matter(raw)
    except FrontMatterRefused as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FRONT_MATTER)
def test_the_front_matter_is_read_and_refused_exactly_as_mantle_does(raw: dict[str, Any]) -> None:
    ours, theirs = plugins_front_matter(raw), mantle_front_matter(raw)
    assert (ours is None) == (theirs is None), f"plugin: {ours!r}; Mantle: {theirs!r}"
    if ours is not None and ours.startswith(("Unknown key", "Skill-level requires", "Invalid MCP")):
        assert ours == theirs


STEP_KEYS = [
    "id",
    "collect",
    "utterance",
    "description",
    "ask_before_filling",
    "next",
    "action",
    "utter",
    "execute_tool",
    "parameters",
    "retries",
    "dtmf",
]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(STEP_KEYS),
        st.one_of(SCALARS, st.dictionaries(NAMES, SCALARS, max_size=2), st.lists(SCALARS, max_size=1)),
        max_size=5,
    )
)
def test_a_step_the_plugin_reads_is_one_mantle_reads(raw: dict[str, Any]) -> None:
    try:
        ours: Any = parse_step(raw)
    except ValueError:
        ours = None
    try:
        mantle_steps.parse_step(raw)
        theirs = True
    except Exception:  # the catalog loader counts any exception as a refusal
        theirs = False
    if ours is not None:
        assert theirs, f"the plugin reads {raw!r} as {ours!r}; Mantle refuses it"


BODY = textwrap.dedent(
    """\
    Log a note.

    :::ordered_block id=log
    steps:
    {steps}
    :::
    """
)
# Runs of steps the plugin can translate ({n}: a number that keeps the ids apart), and steps it refuses.
UNITS = [
    "- id: ask{n}\n  collect: note_text\n  utterance: utter_ask_note_text\n"
    "- id: save{n}\n  execute_tool: add_timeline_note\n  parameters: {{text: session.skill.note_text}}\n",
    "- id: save{n}\n  execute_tool: add_timeline_note\n  parameters: {{id: session.project.contact_id}}\n",
    "- id: save{n}\n  execute_tool: add_timeline_note\n  parameters: {{text: hello, n: 3, x: null}}\n"
    "- id: said{n}\n  action: utter_note_saved\n",
    "- id: save{n}\n  execute_tool: other_tool\n- id: said{n}\n  utter: utter_note_saved\n",
]
ODD = [
    "- id: ask_no_utterance\n  collect: note_text\n",
    "- id: END\n",
    "- id: think\n  instructions: Decide.\n",
    "- id: odd\n  execute_tool: add_timeline_note\n  retries: 2\n",
    "- id: ended\n  execute_tool: add_timeline_note\n  next: END\n",
]
STEPS = st.tuples(
    st.lists(st.sampled_from(UNITS), min_size=1, max_size=3),
    st.one_of(st.none(), st.sampled_from(ODD)),
    st.integers(0, 3),
).map(
    lambda drawn: (
        [unit.format(n=n) for n, unit in enumerate(drawn[0])][: drawn[2]]
        + ([drawn[1]] if drawn[1] else [])
        + [unit.format(n=n) for n, unit in enumerate(drawn[0])][drawn[2] :]
    )
)
TEXTS = st.one_of(st.none(), st.sampled_from(["utter_confirm_note", "utter_note_saved", ""]))
PLAUSIBLE_FRONT = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["Log a note", ""]),
        "description": st.sampled_from(["Log a note.", ""]),
        "hidden": st.booleans(),
        "always_include_in_prompt": st.booleans(),
        "routing": st.fixed_dictionaries(
            {}, optional={"is_default": st.booleans(), "engine_managed": SCALARS}
        ),
        "knowledge_answering": st.fixed_dictionaries({}, optional={"instructions": TEXTS}),
        "import_tools": st.lists(
            st.sampled_from(["mcp/crm:add_timeline_note", "add_timeline_note", "mcp/x:y"]), max_size=2
        ),
        "tool_constraints": st.lists(
            st.dictionaries(
                st.sampled_from(["add_timeline_note", "other_tool"]),
                st.fixed_dictionaries(
                    {},
                    optional={
                        "requires_confirmation": st.fixed_dictionaries(
                            {"enabled": st.one_of(st.booleans(), st.just("true"))},
                            optional={"utter_for_confirmation": TEXTS, "utter_on_user_denial": TEXTS},
                        ),
                        "requires": st.sampled_from(
                            ["session.skill.note_text", "session.project.ok == 1", "not ok", "session.x"]
                        ),
                        "on_success": TEXTS,
                        "on_failure": st.one_of(TEXTS, st.just(3)),
                    },
                ),
                min_size=1,
                max_size=1,
            ),
            max_size=2,
        ),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(front=PLAUSIBLE_FRONT, steps=STEPS)
def test_a_skill_md_the_plugin_accepts_is_one_mantle_accepts(
    tmp_path_factory: pytest.TempPathFactory, front: dict[str, Any], steps: list[str]
) -> None:
    snapshot = tmp_path_factory.mktemp("snapshot")
    folder = snapshot / "skills" / "skill"
    folder.mkdir(parents=True)
    body = BODY.format(steps=textwrap.indent("".join(steps), "  ").strip("\n"))
    (folder / "skill.md").write_text(
        f"---\n{yaml.safe_dump(front, sort_keys=False)}---\n{body}", encoding="utf-8"
    )
    try:
        read_mantle_skill(folder / "skill.md")
    except ConfigError:
        return
    mantle_loads(folder / "skill.md")


def test_the_example_bot_keeps_its_yaml_skill() -> None:
    # The twin lives beside the bot, not in its skills/, so the bot serves one log_interaction.
    assert (EXAMPLE_BOT / "skills" / "log_interaction.yml").is_file()
    assert not (EXAMPLE_BOT / "skills" / "log_interaction").exists()
