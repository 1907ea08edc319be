"""Skill files: which tools a skill uses and from where, their constraints, and the ordered steps.

```yaml
skill: log_interaction
tools:                                  # the tool-source lines: local, or mcp:<server>
  find_contact_by_email: mcp:crm
  add_timeline_note: mcp:crm
tool_constraints:
  - add_timeline_note:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_note
        utter_on_user_denial: utter_note_cancelled
      # Optional: after the requester's yes, a person with this role approves
      # (mcp_bridge/approvals/second_approver.py).
      requires_approval_from:
        role: supervisor
        when: {argument: text, contains_any: [refund, write-off]}   # absent: every call; matched
        # on the text's skeleton, however it is spelt: "ｒеfu\u00adnds", "written off" (textmatch.py)
        expires_after: 30m                                          # s, m, h or d; at most 7d
      # Optional: the person may answer "yes, and don't ask again today"
      # (mcp_bridge/confirmation/permissions.py).
      allows_remembering:
        same_arguments: [contact_id]   # unasked only for the same contact (or any_arguments: true)
        expires_after: 8h              # the longest a permission lasts; at most 1d
        describe: "notes to {contact_name}"                          # how the permission is named
        # even_if_destructive: true    # needed for a tool its server annotates as destructive
steps:
  - execute_tool: find_contact_by_email
    arguments: {email: {slot: contact_email}}
    fills: {contact_id: contact_id, contact_name: name}
    on_not_found: utter_contact_not_found
    on_error: utter_tool_failed
  - execute_tool: add_timeline_note
    arguments: {contact_id: {slot: contact_id}, text: {slot: note_text}}
    on_success: utter_note_saved
    on_error: utter_tool_failed
reset_slots: [contact_email, note_text]
```

Everything is checked when the action server starts; an invalid file is refused with the file, the
place in it and the reason.

Several calls, one question. A step may run once per item of a list, and a step may run only when a
value is there:

```yaml
  - execute_tool: find_contact_by_email
    for_each: {slot: contact_emails, as: contact_email}   # once per address; each run has its own
    arguments: {email: {slot: contact_email}}             # contact_email and its own lookups' fills
    fills: {contact_id: contact_id, contact_name: name}
  - execute_tool: add_timeline_note                       # so one note per contact
    arguments: {contact_id: {slot: contact_id}, text: {slot: note_text}}
  - execute_tool: create_follow_up_task
    when: {slot: follow_up_date}                          # only when the slot has a value
    arguments: {contact_id: {slot: contact_id}, due_date: {slot: follow_up_date}}
```

``for_each`` over a list that is unset or empty runs the step once, with the slots as they are (so a
request that names one contact runs as before). ``max_items`` (default :data:`DEFAULT_MAX_ITEMS`,
at most :data:`MAX_ITEMS_LIMIT`) bounds the list: a request whose list in the slots is longer starts
nothing, no lookup and no question (``for_each: {slot: contact_emails, as: contact_email,
max_items: 5}``); the bot says ``utter_too_many_items`` (variables: count, limit). Constrained
steps in a row, and a constrained step's runs over several items, are asked about in one question,
a numbered list; each line is the tool's ``describe`` (a format over the same variables as its
responses), and the person answers each call.
A constrained step that reads a slot a waiting step fills, or an earlier step's result, waits for
its own question after them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from mcp_bridge.config.yamlfile import YAMLFileError, load_yaml, schema_error
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.conditions import MAX_CONDITION_CHARS, check_condition, holds, references

LOCAL = "local"
_MCP_PREFIX = "mcp:"
# A Rasa Pro Mantle skill: skills/<id>/skill.md (mcp_bridge/skills/mantle.py).
MANTLE_SKILL_FILE = "skill.md"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RequiresConfirmation(_Strict):
    enabled: StrictBool
    utter_for_confirmation: str | None = None
    utter_on_user_denial: str | None = None
    # The call's line in a question about several calls, e.g. 'Note on {contact_name}'s record: "{arg_text}"'
    # (the variables of its responses); without it, the tool's name and arguments.
    describe: str | None = Field(default=None, max_length=500)


# A duration like "90s", "30m", "2h" or "1d"; an approval waits at most a week.
_DURATION = re.compile(r"([1-9][0-9]{0,5})([smhd])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_APPROVAL_SECONDS = 7 * 86400


def _duration_seconds(value: str, at_most: int, too_long: str) -> int:
    """Seconds in a duration like '90s', '30m', '2h' or '1d', at most ``at_most`` (else ``too_long``)."""
    match = _DURATION.fullmatch(value)
    if match is None:
        raise ValueError("a duration like '90s', '30m', '2h' or '1d'")
    seconds = int(match[1]) * _SECONDS[match[2]]
    if seconds > at_most:
        raise ValueError(too_long)
    return seconds


class ApprovalCondition(_Strict):
    """When a second approval is needed: the call's ``argument`` names one of ``contains_any``, as
    :mod:`mcp_bridge.approvals.textmatch` reads it: on a skeleton of the text (NFKC, no invisible characters,
    look-alike letters read as Latin, casefolded, no accents, no spaces, hyphens or punctuation), a
    term's inflections included (``write-off``: "written off", "writeoffs"); no patterns, so
    nothing a skill author writes can run slowly, and when in doubt the call is held."""

    argument: str
    contains_any: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, max_length=100
    )


class RequiresApproval(_Strict):
    """After the requester's yes, the call waits for a person with ``role`` (never the requester),
    for at most ``expires_after``; without ``when``, every call of the tool waits."""

    role: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    when: ApprovalCondition | None = None
    expires_after: str = "30m"

    @field_validator("expires_after")
    @classmethod
    def _duration(cls, value: str) -> str:
        _duration_seconds(value, MAX_APPROVAL_SECONDS, "at most 7 days ('7d')")
        return value

    @property
    def seconds(self) -> int:
        return _duration_seconds(self.expires_after, MAX_APPROVAL_SECONDS, "checked when read")


MAX_PERMISSION_SECONDS = 86400


class AllowsRemembering(_Strict):
    """The person may let later calls of the tool run without a question, for at most
    ``expires_after``: calls with the same values of ``same_arguments``, or with any arguments
    (``any_arguments: true``; exactly one of the two). Never for a tool its server annotates as
    destructive, unless ``even_if_destructive`` says so."""

    same_arguments: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=20
    )
    any_arguments: StrictBool = False
    expires_after: str
    even_if_destructive: StrictBool = False
    # How the permission is named to the person ("notes to {contact_name}"); the variables of the
    # tool's responses, for the call that was allowed.
    describe: str | None = Field(default=None, max_length=500)

    @field_validator("expires_after")
    @classmethod
    def _duration(cls, value: str) -> str:
        _duration_seconds(
            value, MAX_PERMISSION_SECONDS, "at most one day ('1d'): a permission is for today, not for good"
        )
        return value

    @property
    def seconds(self) -> int:
        return _duration_seconds(self.expires_after, MAX_PERMISSION_SECONDS, "checked when read")


class ToolConstraint(_Strict):
    requires_confirmation: RequiresConfirmation | None = None
    requires_approval_from: RequiresApproval | None = None
    allows_remembering: AllowsRemembering | None = None


class SlotArgument(_Strict):
    slot: str


class ResultArgument(_Strict):
    """A key of an earlier step's result in the same run (e.g. the contact id a lookup found)."""

    result: str


ArgumentSource = SlotArgument | ResultArgument | str | int | float | bool | None


DEFAULT_MAX_ITEMS = 20
MAX_ITEMS_LIMIT = 1000


class ForEach(_Strict):
    """Run the step once per item of the list in ``slot``, with the slot ``as`` set to the item;
    a list of more than ``max_items`` starts nothing (:func:`too_many_items`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    slot: str
    as_: str = Field(alias="as")
    max_items: int = Field(default=DEFAULT_MAX_ITEMS, ge=1, le=MAX_ITEMS_LIMIT)


@dataclass(frozen=True)
class TooManyItems:
    """A ``for_each`` list over its step's ``max_items``: which slot, how long, the limit."""

    slot: str
    count: int
    limit: int


def too_many_items(skill: Skill, slots: Mapping[str, Any]) -> TooManyItems | None:
    """The first ``for_each`` step of ``skill`` whose list in ``slots`` is over its ``max_items``.

    Checked before a request starts, so one message naming hundreds of addresses runs no lookup
    and asks no question of hundreds of calls."""
    for step in skill.steps:
        if step.for_each is None:
            continue
        items = slots.get(step.for_each.slot)
        if isinstance(items, list) and len(items) > step.for_each.max_items:
            return TooManyItems(step.for_each.slot, len(items), step.for_each.max_items)
    return None


class Step(_Strict):
    execute_tool: str
    # Once per item of a list (see ForEach); the item and what later steps fill stay apart per item.
    for_each: ForEach | None = None
    # Only when this slot or earlier result has a value (not unset, empty or false).
    when: SlotArgument | ResultArgument | None = None
    arguments: dict[str, ArgumentSource] = Field(default_factory=dict)
    # slot name <- key of the tool's result
    fills: dict[str, str] = Field(default_factory=dict)
    on_success: str | None = None
    on_error: str | None = None
    on_not_found: str | None = None
    # A result whose list under this key is empty counts as "nothing found".
    not_found_when_empty: str | None = None
    # A result whose value under this key is false counts as "nothing found" (e.g. `found`).
    not_found_when_false: str | None = None
    # How each item of a list in the result is shown in a response, e.g. "- {created_at:.10}: {text}".
    list_format: str | None = None
    # Said when a slot an argument needs is empty; the skill stops before calling anything.
    on_missing_argument: str | None = None
    # Only when this condition over the slots holds (Rasa Pro Mantle's grammar,
    # mcp_bridge/skills/conditions.py); otherwise the skill stops before calling anything, as for an
    # empty argument (on_missing_argument).
    requires: str | None = Field(default=None, min_length=1, max_length=MAX_CONDITION_CHARS)


ToolSource = Annotated[str, Field(pattern=r"^(local|mcp:[A-Za-z0-9_.-]+)$")]
# A skill's id and its action's name: they end up in the bot's domain.yml (`mcp-bridge init`) and
# as class names in the action server, so nothing but letters, digits and underscores.
SKILL_ID = re.compile(r"[A-Za-z0-9_]{1,100}")
ACTION_NAME = re.compile(r"action_[A-Za-z0-9_]{1,100}")


class SkillFile(_Strict):
    skill: str = Field(pattern=rf"^{SKILL_ID.pattern}$")
    # The Rasa custom action that runs this skill; `import mcp_bridge.rasa` serves it.
    action: str | None = Field(default=None, pattern=rf"^{ACTION_NAME.pattern}$")
    description: str = ""
    tools: dict[str, ToolSource]
    tool_constraints: list[dict[str, ToolConstraint]] = Field(default_factory=list)
    steps: list[Step] = Field(min_length=1)
    reset_slots: list[str] = Field(default_factory=list)
    # What a person may change while a question is pending: "change it to: ..." sets the `text`
    # slot, an email address in the answer sets the `email` slot; the skill then runs again from its
    # first step and asks a new question. Without an entry, such an answer is asked again.
    edits: dict[Literal["text", "email"], str] = Field(default_factory=dict)

    @property
    def action_name(self) -> str:
        """The Rasa action that runs this skill: ``action:``, or ``action_<skill>``."""
        return self.action or f"action_{self.skill}"

    @property
    def instructions(self) -> str:
        """Text for people that runs nothing (a Mantle skill's prose: :mod:`mcp_bridge.skills.mantle`)."""
        return ""

    def locate(self, path: Path, where: str) -> str:
        """``<file>: <place>`` for a place in this document (``steps[1].arguments.text``), as its
        author finds it: here the skill file itself."""
        return f"{path}: {where}"

    @field_validator("tool_constraints")
    @classmethod
    def _one_tool_per_entry(cls, value: list[dict[str, ToolConstraint]]) -> list[dict[str, ToolConstraint]]:
        for entry in value:
            if len(entry) != 1:
                raise ValueError(
                    "each constraint entry names exactly one tool, like '- add_timeline_note: ...'"
                )
        return value


@dataclass(frozen=True)
class ToolSourceRef:
    kind: Literal["local", "mcp"]
    server: str | None = None

    def __str__(self) -> str:
        return LOCAL if self.kind == "local" else f"{_MCP_PREFIX}{self.server}"


@dataclass(frozen=True)
class Skill:
    id: str
    path: Path
    action: str
    tools: Mapping[str, ToolSourceRef]
    constraints: Mapping[str, ToolConstraint]
    steps: tuple[Step, ...]
    reset_slots: tuple[str, ...]
    edits: Mapping[str, str] = field(default_factory=dict)
    # Text for people that never changes what runs: a Mantle skill's prose, for Mantle's LLM.
    prose: str = ""

    def mcp_imports(self) -> dict[str, str]:
        """``{tool_name: server}`` for this skill's ``mcp:<server>`` tool-source lines."""
        return {name: ref.server for name, ref in self.tools.items() if ref.kind == "mcp" and ref.server}


def load_skills(
    directory: str | Path,
    *,
    local_tools: Collection[str],
    mcp_servers: Collection[str],
    responses: Collection[str] | None,
) -> dict[str, Skill]:
    """Load and check every ``*.yml`` in ``directory``; raise :class:`ConfigError` on the first problem.

    ``responses`` is the set of response names the domain defines (None skips that check).
    """
    return check_skills(
        read_skill_dir(directory), local_tools=local_tools, mcp_servers=mcp_servers, responses=responses
    )


# Each skill file of a directory in name order: its document checked against the schema, or why not.
SkillFiles = tuple[tuple[Path, SkillFile | ConfigError], ...]


def skill_paths(directory: str | Path) -> list[Path]:
    """The skill files of ``directory`` in name order: every ``*.yml`` / ``*.yaml``, and the
    ``skill.md`` of every folder in it whose name does not start with ``_`` or ``.`` (Rasa Pro
    Mantle's ``skills/<id>/skill.md``; Mantle skips ``_`` folders too)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    files = [*directory.glob("*.yml"), *directory.glob("*.yaml")]
    for folder in directory.iterdir():
        if (
            folder.is_dir()
            and not folder.name.startswith(("_", "."))
            and (folder / MANTLE_SKILL_FILE).is_file()
        ):
            files.append(folder / MANTLE_SKILL_FILE)
    return sorted(files)


def read_skill_dir(directory: str | Path) -> SkillFiles:
    """Read every skill file of ``directory`` (:func:`skill_paths`) against the schema (the one
    parser of skill files; a ``skill.md`` is translated first, :mod:`mcp_bridge.skills.mantle`);
    ConfigError when it holds none.

    A file that fails is kept as its ConfigError rather than raised, so that a caller that only
    needs the good files' names (the action classes rasa_sdk registers on import) can skip it,
    and :func:`check_skills` reports the problems in file order, as the files are read.
    """
    directory = Path(directory)
    files = skill_paths(directory)
    if not files:
        raise ConfigError(f"{directory}: no skill files (*.yml, or <skill>/{MANTLE_SKILL_FILE}) found")
    read: list[tuple[Path, SkillFile | ConfigError]] = []
    for path in files:
        try:
            read.append((path, read_skill_file(path)))
        except ConfigError as exc:
            read.append((path, exc))
    return tuple(read)


def read_skill_file(path: Path) -> SkillFile:
    """One skill file, checked against the schema; ConfigError with the file, the place and the reason.

    A Mantle ``skill.md`` is read by :func:`mcp_bridge.skills.mantle.read_mantle_skill`, which builds on
    this module's schema (hence imported here, not at the top)."""
    if path.name == MANTLE_SKILL_FILE:
        from mcp_bridge.skills.mantle import read_mantle_skill

        return read_mantle_skill(path)
    try:
        return SkillFile.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise schema_error(path, exc, skip=UNION_MEMBER_NAMES) from None


def check_skills(
    files: SkillFiles,
    *,
    local_tools: Collection[str],
    mcp_servers: Collection[str],
    responses: Collection[str] | None,
) -> dict[str, Skill]:
    """Check read skill files against the tools, servers and responses there are; raise
    :class:`ConfigError` on the first problem."""
    skills: dict[str, Skill] = {}
    for _, checked in check_each(
        files, local_tools=local_tools, mcp_servers=mcp_servers, responses=responses
    ):
        if isinstance(checked, ConfigError):
            raise checked
        skills[checked.id] = checked
    return skills


def check_each(
    files: SkillFiles,
    *,
    local_tools: Collection[str],
    mcp_servers: Collection[str],
    responses: Collection[str] | None,
) -> list[tuple[Path, Skill | ConfigError]]:
    """Each read skill file, checked as :func:`check_skills` checks it: its skill, or why it does not
    load (a skill whose id or action a file before it has does not load either)."""
    checked: list[tuple[Path, Skill | ConfigError]] = []
    loaded: dict[str, Skill] = {}
    for path, parsed in files:
        try:
            if isinstance(parsed, ConfigError):
                raise parsed
            skill = _check(path, parsed, local_tools, mcp_servers, responses)
            if skill.id in loaded:
                raise ConfigError(f"{path}: skill {skill.id!r} is already defined in {loaded[skill.id].path}")
            clash = next((other for other in loaded.values() if other.action == skill.action), None)
            if clash is not None:
                raise ConfigError(f"{path}: action: {skill.action!r} is already the action of {clash.path}")
        except ConfigError as exc:
            checked.append((path, exc))
            continue
        loaded[skill.id] = skill
        checked.append((path, skill))
    return checked


def load_skill(
    path: Path,
    *,
    local_tools: Collection[str],
    mcp_servers: Collection[str],
    responses: Collection[str] | None,
) -> Skill:
    return _check(path, read_skill_file(path), local_tools, mcp_servers, responses)


def _check(
    path: Path,
    parsed: SkillFile,
    local_tools: Collection[str],
    mcp_servers: Collection[str],
    responses: Collection[str] | None,
) -> Skill:
    def fail(where: str, reason: str) -> ConfigError:
        return ConfigError(f"{parsed.locate(path, where)}: {reason}")

    tools: dict[str, ToolSourceRef] = {}
    for name, source in parsed.tools.items():
        where = f"tools.{name}"
        if source == LOCAL:
            if name not in local_tools:
                known = ", ".join(sorted(local_tools)) or "none"
                raise fail(where, f"no local tool named {name!r} is registered (local tools: {known})")
            tools[name] = ToolSourceRef("local")
        else:
            server = source.removeprefix(_MCP_PREFIX)
            if server not in mcp_servers:
                known = ", ".join(sorted(mcp_servers)) or "none"
                raise fail(where, f"MCP server {server!r} is not in endpoints.yml (servers: {known})")
            tools[name] = ToolSourceRef("mcp", server)

    def check_response(where: str, name: str | None) -> None:
        if name is not None and responses is not None and name not in responses:
            raise fail(where, f"response {name!r} is not defined in the domain")

    def check_confirmed(there: str, rule: RequiresConfirmation | None, why: str) -> None:
        """ConfigError at ``there`` unless the tool's ``requires_confirmation`` is enabled (``why``: why
        the constraint needs it)."""
        if rule is None or not rule.enabled:
            raise fail(there, f"needs requires_confirmation enabled on the same tool: {why}")

    constraints: dict[str, ToolConstraint] = {}
    for index, entry in enumerate(parsed.tool_constraints):
        ((tool, constraint),) = entry.items()
        where = f"tool_constraints[{index}].{tool}"
        if tool not in tools:
            raise fail(where, f"constraint on {tool!r}, which is not one of this skill's tools")
        if tool in constraints:
            raise fail(where, f"a second constraint entry for {tool!r}")
        rule = constraint.requires_confirmation
        if rule is not None and rule.enabled:
            for key in ("utter_for_confirmation", "utter_on_user_denial"):
                if getattr(rule, key) is None:
                    raise fail(f"{where}.requires_confirmation", f"{key!r} is required when enabled")
                check_response(f"{where}.requires_confirmation.{key}", getattr(rule, key))
        approval = constraint.requires_approval_from
        if approval is not None:
            there = f"{where}.requires_approval_from"
            check_confirmed(
                there, rule, "the requester confirms the exact call before a second person approves it"
            )
            arguments = {
                name for step in parsed.steps if step.execute_tool == tool for name in step.arguments
            }
            if approval.when is not None and approval.when.argument not in arguments:
                known = ", ".join(sorted(arguments)) or "none"
                raise fail(
                    f"{there}.when.argument",
                    f"{approval.when.argument!r} is not an argument of a step calling {tool!r} ({known})",
                )
        remembering = constraint.allows_remembering
        if remembering is not None:
            there = f"{where}.allows_remembering"
            check_confirmed(there, rule, "a permission is given in answer to its question")
            if remembering.any_arguments == bool(remembering.same_arguments):
                raise fail(
                    there,
                    "give exactly one of same_arguments (the arguments a later call must share) and "
                    "any_arguments: true",
                )
            arguments = {
                name for step in parsed.steps if step.execute_tool == tool for name in step.arguments
            }
            for place, name in enumerate(remembering.same_arguments):
                if name not in arguments:
                    known = ", ".join(sorted(arguments)) or "none"
                    raise fail(
                        f"{there}.same_arguments[{place}]",
                        f"{name!r} is not an argument of a step calling {tool!r} ({known})",
                    )
            if remembering.describe is not None:
                try:
                    remembering.describe.format_map(_AnyValue())
                except (ValueError, IndexError, AttributeError) as exc:
                    raise fail(f"{there}.describe", str(exc)) from None
        constraints[tool] = constraint

    filled_before: dict[str, int] = {}  # slot -> the first step that fills it
    for index, step in enumerate(parsed.steps):
        where = f"steps[{index}]"
        if step.for_each is not None and step.for_each.slot == step.for_each.as_:
            raise fail(f"{where}.for_each", "'as' must name another slot than the list's")
        if step.requires is not None:
            try:
                read = check_condition(step.requires, parsed.skill)
            except ValueError as exc:
                raise fail(f"{where}.requires", str(exc)) from None
            for slot in read:
                if slot in filled_before:
                    raise fail(
                        f"{where}.requires",
                        f"reads {slot!r}, which steps[{filled_before[slot]}] fills: the condition is judged "
                        "when the run reaches this step, before a call that is asked about has given its "
                        "result; judge it in that step's tool, or fill the slot before the skill runs",
                    )
        for slot in step.fills:
            filled_before.setdefault(slot, index)
        if step.execute_tool not in tools:
            raise fail(f"{where}.execute_tool", f"{step.execute_tool!r} is not one of this skill's tools")
        for key in ("on_success", "on_error", "on_not_found", "on_missing_argument"):
            check_response(f"{where}.{key}", getattr(step, key))

    slot_arguments = {
        source.slot
        for step in parsed.steps
        for source in step.arguments.values()
        if isinstance(source, SlotArgument)
    }
    for constraint_entry in parsed.tool_constraints:
        for tool, constraint in constraint_entry.items():
            rule = constraint.requires_confirmation
            if rule is not None and rule.describe is not None:
                try:
                    rule.describe.format_map(_AnyValue())
                except (ValueError, IndexError, AttributeError) as exc:
                    raise fail(f"tool_constraints.{tool}.requires_confirmation.describe", str(exc)) from None
    for change, slot in parsed.edits.items():
        if slot not in slot_arguments:
            raise fail(f"edits.{change}", f"slot {slot!r} is not an argument of any step")

    return Skill(
        id=parsed.skill,
        path=path,
        action=parsed.action_name,
        tools=tools,
        constraints=constraints,
        steps=tuple(parsed.steps),
        reset_slots=tuple(parsed.reset_slots),
        edits={str(change): slot for change, slot in parsed.edits.items()},
        prose=parsed.instructions,
    )


class _AnyValue(dict[str, Any]):
    """Every name a format asks for, as text: checks a ``describe`` format's shape only."""

    def __missing__(self, key: str) -> str:
        return ""


def runs_when(step: Step, slots: Mapping[str, Any], results: Mapping[str, Any]) -> bool:
    """The step's ``when`` holds: its slot or result has a value (not unset, empty or false)."""
    if step.when is None:
        return True
    if isinstance(step.when, SlotArgument):
        value = slots.get(step.when.slot)
    else:
        value = results.get(step.when.result)
    if isinstance(value, str):
        return bool(value.strip())
    return value is not None and value is not False and value != []


def step_arguments(
    step: Step, slots: Mapping[str, Any], results: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The step's arguments from slots and earlier results, and what stops the step: the names of
    those that were empty, and a ``requires`` that does not hold (the empty slots it reads, or the
    condition itself when none is empty)."""
    resolved: dict[str, Any] = {}
    missing: list[str] = []
    for name, source in step.arguments.items():
        if isinstance(source, SlotArgument | ResultArgument):
            key = source.slot if isinstance(source, SlotArgument) else source.result
            value = slots.get(key) if isinstance(source, SlotArgument) else (results or {}).get(key)
            if _empty(value):
                missing.append(key)
            resolved[name] = value
        else:
            resolved[name] = source
    if step.requires is not None and not holds(step.requires, slots):
        empty = [entry for _, entry in references(step.requires) if _empty(slots.get(entry))]
        missing.extend(slot for slot in empty if slot not in missing)
        if not empty:
            missing.append(f"requires {step.requires}")
    return resolved, missing


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def domain_documents(domain_path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """A Rasa domain: one file, or every ``*.yml`` in a domain directory, parsed."""
    path = Path(domain_path)
    files = sorted([*path.rglob("*.yml"), *path.rglob("*.yaml")]) if path.is_dir() else [path]
    documents = []
    for file in files:
        try:
            document = load_yaml(file) or {}
        except YAMLFileError as exc:
            raise ConfigError(f"{file}: cannot read the domain: {exc.reason}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"{file}: a domain file must be a mapping")
        documents.append((file, document))
    return documents


def domain_responses(domain_path: str | Path) -> set[str]:
    """Response names defined in a Rasa domain (``responses:`` keys), file or directory."""
    names: set[str] = set()
    for file, document in domain_documents(domain_path):
        responses = document.get("responses") or {}
        if not isinstance(responses, dict):
            raise ConfigError(f"{file}: 'responses' must be a mapping")
        names |= set(responses)
    return names


def answer_buttons_problem(variant: Any) -> str | None:
    """Why a variant of a confirmation question cannot be used (it carries buttons of its own), or None.

    The action server adds a question's answers itself: buttons where the channel shows them, words to
    type where it does not (``rasa shell``, whose menu of buttons a typed "yes" never reaches). Buttons
    in the domain would be shown beside those, and on the command line as that menu again.
    """
    if isinstance(variant, dict) and variant.get("buttons"):
        return (
            "a confirmation question carries no buttons of its own: the action server adds its answers "
            "(No, Yes, ...) where the channel shows buttons, and asks for a typed answer where it does "
            "not (rasa shell); remove the buttons (keep your wording)"
        )
    return None


def check_questions_carry_no_buttons(domain_path: str | Path, questions: Iterable[str]) -> None:
    """No variant of any confirmation question carries buttons (:func:`answer_buttons_problem`).
    Raises :class:`ConfigError` naming the file, response and reason."""
    responses: dict[str, Any] = {}
    where: dict[str, Path] = {}
    for file, document in domain_documents(domain_path):
        for name, variants in (document.get("responses") or {}).items():
            responses[name], where[name] = variants, file
    for name in sorted(set(questions)):
        variants = responses.get(name)
        if not isinstance(variants, list) or not variants:
            continue  # a missing response is reported where the skill names it
        for index, variant in enumerate(variants):
            problem = answer_buttons_problem(variant)
            if problem is not None:
                raise ConfigError(f"{where[name]}: responses.{name}[{index}]: {problem}")


# pydantic's names for the members of a union: noise to a skill author.
UNION_MEMBER_NAMES = {"SlotArgument", "ResultArgument", "str", "int", "float", "bool", "none"}
