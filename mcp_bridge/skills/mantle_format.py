"""How Rasa Pro 3.21's Mantle reads a ``skill.md``, and nothing else: the front matter between the
first two ``---`` lines (YAML's safe loader), its keys with their types and refusals
(``rasa/mantle/skills/frontmatter.py``), the ``:::ordered_block id=<name>`` sections of the body and
the prose around them (``markdown_skill_compiler.py``, ``prose_scoping.py``), and the steps of a block
(``steps.py``), with Mantle's own words for what it refuses.

What Mantle refuses is refused here, so a file read here is one Mantle's loader reads; what the plugin
makes of it, and refuses beyond, is :mod:`mcp_bridge.skills.mantle`'s. The models follow Mantle's
key for key (``tests/plugin/test_mantle_pro.py`` checks the two against each other in Rasa Pro's
environment).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mcp_bridge.config.yamlfile import parse_yaml
from mcp_bridge.errors import ConfigError

END = "END"
MCP_IMPORT = re.compile(r"^mcp/(?P<server>[A-Za-z0-9][A-Za-z0-9_.-]*):(?P<tool>[A-Za-z0-9][A-Za-z0-9_.-]*)$")
_PROVIDER_SAFE_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _reject_non_string(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    raise ValueError("must be a string")


def _reject_non_string_items(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    for item in value:
        if not isinstance(item, str):
            raise ValueError("must be a string")
    return value


def _single_key_mapping(value: Any, *, label: str) -> Any:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"Each {label} entry must be a single-key mapping.")
    name, config = next(iter(value.items()))
    if not isinstance(name, str) or not name:
        raise ValueError(f"Each {label} entry must use a non-empty string key.")
    if config is None:
        return {name: {}}
    if not isinstance(config, dict):
        raise ValueError(f"{label} options for {name!r} must be a mapping.")
    return value


class _MantleModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MantleConfirmation(_MantleModel):
    """``requires_confirmation`` under a tool of ``tool_constraints``."""

    enabled: bool = False
    utter_for_confirmation: str | None = None
    utter_on_user_denial: str | None = None

    @field_validator("utter_for_confirmation", "utter_on_user_denial", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        return _reject_non_string(value)

    @field_validator("enabled", mode="before")
    @classmethod
    def _strict_enabled(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError("enabled must be a boolean")
        return value


class MantleConstraint(_MantleModel):
    """One tool's options under ``tool_constraints``."""

    requires: str | None = None
    requires_confirmation: MantleConfirmation | None = None
    on_success: str | None = None
    on_failure: str | None = None

    @field_validator("requires", "on_success", "on_failure", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        return _reject_non_string(value)

    @model_validator(mode="before")
    @classmethod
    def _null_confirmation(cls, value: Any) -> Any:
        if (
            isinstance(value, dict)
            and "requires_confirmation" in value
            and value["requires_confirmation"] is None
        ):
            raise ValueError("requires_confirmation must be a mapping")
        return value


class _ConstraintEntry(RootModel[dict[str, MantleConstraint]]):
    @model_validator(mode="before")
    @classmethod
    def _single_tool(cls, value: Any) -> Any:
        return _single_key_mapping(value, label="tool_constraints")


class _CompleteWhen(_MantleModel):
    condition: str | None = None
    criteria: list[str] = Field(default_factory=list)

    @field_validator("condition", mode="before")
    @classmethod
    def _condition(cls, value: Any) -> Any:
        return _reject_non_string(value)

    @field_validator("criteria", mode="before")
    @classmethod
    def _criteria(cls, value: Any) -> Any:
        return _reject_non_string_items(value)

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, value: Any) -> Any:
        if value is None or isinstance(value, dict):
            return value
        raise ValueError(
            "complete_when must be a mapping with 'condition' and/or 'criteria' "
            "(bare strings are not allowed)."
        )


class _KnowledgeAnswering(_MantleModel):
    instructions: str | None = None

    @field_validator("instructions", mode="before")
    @classmethod
    def _instructions(cls, value: Any) -> Any:
        return _reject_non_string(value)


class _Routing(_MantleModel):
    is_default: bool = False
    engine_managed: bool = False


class _UtterOptions(_MantleModel):
    on: Literal["activate"] | None = None
    when: str | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _when(cls, value: Any) -> Any:
        return _reject_non_string(value)

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        data = dict(value)
        if True in data and "on" not in data:
            data["on"] = data.pop(True)
        if "on" in data and data["on"] is None:
            data["on"] = "activate"
        if "on" in data and data["on"] != "activate":
            raise ValueError(f"unsupported on: value {data['on']!r}")
        return data


class _UtterEntry(RootModel[dict[str, _UtterOptions]]):
    @model_validator(mode="before")
    @classmethod
    def _single_response(cls, value: Any) -> Any:
        return _single_key_mapping(value, label="utter")


class MantleFrontMatter(_MantleModel):
    """The front matter of ``skill.md``: Mantle's ``SkillFrontmatter``, key for key."""

    name: str | None = None
    description: str | None = None
    precondition: str | None = None
    hidden: bool = False
    disabled: bool = False
    always_include_in_prompt: bool = False
    complete_when: _CompleteWhen | None = None
    import_tools: list[str] = Field(default_factory=list)
    tool_constraints: list[_ConstraintEntry] = Field(default_factory=list)
    utter: list[_UtterEntry] = Field(default_factory=list)
    knowledge_answering: _KnowledgeAnswering | None = None
    routing: _Routing = Field(default_factory=_Routing)

    @field_validator("name", "description", mode="before")
    @classmethod
    def _optional_string(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return value

    @field_validator("precondition", mode="before")
    @classmethod
    def _precondition(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"precondition must be a non-empty semantic name string, got {type(value).__name__}."
            )
        return value.strip()

    @field_validator("hidden", "disabled", "always_include_in_prompt", mode="before")
    @classmethod
    def _strict_bool(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise ValueError(f"'{info.field_name}' must be a boolean.")
        return value

    @field_validator("routing", mode="before")
    @classmethod
    def _null_routing(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("import_tools", "tool_constraints", "utter", mode="before")
    @classmethod
    def _null_list(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("import_tools", mode="before")
    @classmethod
    def _import_strings(cls, value: Any) -> Any:
        return _reject_non_string_items(value)

    def constraints(self) -> list[tuple[str, MantleConstraint]]:
        return [next(iter(entry.root.items())) for entry in self.tool_constraints]


# Mantle's messages for a refused front matter (frontmatter.py, _format_frontmatter_error).
_CONSTRAINT_KEYS = ("requires", "requires_confirmation", "on_success", "on_failure")
_CONFIRMATION_KEYS = ("enabled", "utter_for_confirmation", "utter_on_user_denial")


def _front_matter_message(error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc", ()))
    key = loc[-1] if loc else "unknown"
    if error.get("type") in {"extra_forbidden", "invalid_key"}:
        if loc and loc[0] == "complete_when":
            return f"unknown keys: {key}"
        if loc and loc[0] == "tool_constraints" and "requires_confirmation" not in loc:
            return f"Unknown key(s): {key}. Allowed keys: {', '.join(_CONSTRAINT_KEYS)}."
        if loc and "requires_confirmation" in loc:
            return f"Unknown key(s): {key}. Allowed keys: {', '.join(_CONFIRMATION_KEYS)}."
        return f"Unknown key(s): {key}"
    message = str(error.get("msg", "invalid frontmatter"))
    where = ".".join(str(part) for part in loc)
    return f"{where}: {message}" if where and where not in message else message


class _Step(_MantleModel):
    id: str


class _DTMF(_MantleModel):
    length: int | None = None
    finish_on_key: str | None = None
    allow_audio_input: bool = True


class MantleCollect(_Step):
    collect: str
    utterance: str | None = None
    description: str | None = None
    dtmf: _DTMF | None = None
    ask_before_filling: bool = False
    next: str | list[Any] | None = None


class MantleAction(_Step):
    action: str
    next: str | list[Any] | None = None


class MantleExecute(_Step):
    execute_tool: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    next: str | list[Any] | None = None


MantleStep = MantleCollect | MantleAction | MantleExecute


_BLOCK = re.compile(
    r":::ordered_block(?:\s+id=(?P<block_id>[\w-]+))?\s*\n(?P<block_body>.*?)^:::\s*$",
    re.DOTALL | re.MULTILINE,
)
_BLOCK_REFERENCE = re.compile(r"(?<![\w])@block\.([\w-]+)(?![\w-])(?!\.[\w-])")
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n+")


@dataclass(frozen=True)
class Block:
    """An ``:::ordered_block``: its id, its YAML mapping, and the line of the file it starts on."""

    id: str
    content: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Document:
    """A ``skill.md`` as Mantle reads it: the front matter, the ordered blocks, the prose paragraphs."""

    front_matter: MantleFrontMatter
    blocks: tuple[Block, ...]
    prose: str


def read_document(path: Path, text: str) -> Document:
    """``text``, the file ``path``, as Mantle reads it; ConfigError (file, place, Mantle's reason) for
    what Mantle refuses."""

    def fail(where: str, reason: str) -> ConfigError:
        return ConfigError(f"{path}: {where}: {reason}")

    content = text.strip()
    skipped = text[: len(text) - len(text.lstrip())].count("\n")
    lines = content.splitlines()
    closing = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if not lines or lines[0].strip() != "---" or closing is None:
        raise fail("top", "skill.md must start with YAML frontmatter (--- ... ---)")
    front_line, body_line = skipped + 2, skipped + closing + 2
    raw = parse_yaml("\n".join(lines[1:closing]), path, where="front matter", first_line=front_line) or {}
    try:
        front_matter = read_front_matter(raw)
    except FrontMatterRefused as exc:
        raise fail(f"front matter{exc.place}", str(exc)) from None
    body = "\n".join(lines[closing + 1 :])
    blocks, prose = _blocks(body, body_line, fail, path)
    return Document(front_matter, blocks, prose)


class FrontMatterRefused(ValueError):
    """Mantle refuses the front matter: its reason, in Mantle's words, and where (``: import_tools[0]``,
    or nothing for the front matter as a whole)."""

    def __init__(self, reason: str, place: str = "") -> None:
        super().__init__(reason)
        self.place = place


def read_front_matter(raw: Any) -> MantleFrontMatter:
    """The parsed front matter ``raw`` as Mantle reads it (its compiler's front matter stage: the keys,
    then the ``import_tools`` entries); :class:`FrontMatterRefused` for what Mantle refuses."""
    if not isinstance(raw, dict):
        raise FrontMatterRefused("skill.md frontmatter must be a YAML mapping.")
    if "requires" in raw:
        raise FrontMatterRefused(
            "Skill-level requires is no longer supported. Use precondition to park the skill until a "
            "resolver runs, or hidden: true to omit it from routing. Tool-level requires under "
            "tool_constraints is unchanged.",
            ": requires",
        )
    try:
        front_matter = MantleFrontMatter.model_validate(raw)
    except ValidationError as exc:
        raise FrontMatterRefused(_front_matter_message(exc.errors()[0])) from None
    for index, entry in enumerate(front_matter.import_tools):
        reason = import_problem(entry)
        if reason is not None:
            raise FrontMatterRefused(reason, f": import_tools[{index}]")
    return front_matter


def import_problem(entry: str) -> str | None:
    """Why Mantle refuses the ``import_tools`` entry ``entry`` (``mcp/<server>:<tool>`` or a tool's
    name), or None."""
    if not entry.startswith("mcp/"):
        return None
    match = MCP_IMPORT.fullmatch(entry)
    if match is None:
        return f"Invalid MCP tool import {entry!r}; expected 'mcp/<server-id>:<tool-name>'."
    if not _PROVIDER_SAFE_TOOL_NAME.fullmatch(match["tool"]):
        return (
            f"Invalid MCP tool name {match['tool']!r} in {entry!r}; the tool name is sent to the LLM as a "
            "function name and may only contain letters, digits, '_', and '-' (at most 64 characters)."
        )
    return None


def _blocks(body: str, first_line: int, fail: Any, path: Path) -> tuple[tuple[Block, ...], str]:
    """The body's ordered blocks and its prose (the text around them, in paragraphs)."""
    blocks: list[Block] = []
    prose: list[str] = []
    cursor = 0
    for match in _BLOCK.finditer(body):
        prose.append(body[cursor : match.start()])
        cursor = match.end()
        block_id = match["block_id"]
        if not block_id:
            raise fail(
                "body",
                "Each :::ordered_block section must declare an id attribute "
                "(e.g. :::ordered_block id=verify).",
            )
        where = f"ordered_block id={block_id}"
        block_body = match["block_body"] or ""
        start = match.start("block_body") + len(block_body) - len(block_body.lstrip())
        line = first_line + body[:start].count("\n")
        content = block_body.strip()
        raw = (parse_yaml(content, path, where=where, first_line=line) if content else None) or {}
        if not isinstance(raw, dict):
            raise fail(where, f"Ordered block '{block_id}' body must be a YAML mapping.")
        if any(block.id == block_id for block in blocks):
            raise fail(where, f"Duplicate ordered block id '{block_id}'.")
        if "routable" in raw:
            raise fail(
                f"{where}: routable",
                f"Ordered block '{block_id}' must not set 'routable'. Remove the routable key from skill.md.",
            )
        if "description" in raw:
            raise fail(
                f"{where}: description",
                f"Ordered block '{block_id}' must not set 'description'. Remove it; the orchestrator "
                "routes on the skill description.",
            )
        blocks.append(Block(block_id, raw, line))
    prose.append(body[cursor:])
    text = "\n\n".join(paragraph for chunk in prose for paragraph in _paragraphs(chunk, fail))
    ids = {block.id for block in blocks}
    for reference in _BLOCK_REFERENCE.findall(text):
        if reference not in ids:
            raise fail(
                "prose",
                f"Unknown ordered block {reference!r} on skill {path.parent.name!r}; @block. must reference "
                "a block id defined in this skill.",
            )
    return tuple(blocks), text


def _paragraphs(chunk: str, fail: Any) -> list[str]:
    """The paragraphs of a stretch of prose, refused as Mantle refuses them (``prose_scoping.py``)."""
    stripped = chunk.strip()
    if not stripped:
        return []
    paragraphs = []
    for unit in _PARAGRAPH.split(stripped):
        lines = unit.splitlines()
        first = lines[0].strip()
        for marker in ("else:", "elif:"):
            if first.startswith(marker):
                raise fail(
                    "prose",
                    f"'{marker}' is not allowed in prose. Prefer separate 'if:' paragraphs for each case, "
                    "or use an ordered block for true if/else branching.",
                )
        if first.startswith("if:"):
            if not first[3:].strip():
                raise fail("prose", "Prose 'if:' marker must include a non-empty condition.")
            if not "\n".join(lines[1:]).strip():
                raise fail("prose", "Prose 'if:' marker must be followed by a non-empty paragraph body.")
        paragraphs.append(unit.strip())
    return paragraphs


# Mantle's keys that pick a step's kind, in its order (steps.py, infer_step_kind), and the kinds
# modelled here; the others are named only.
_KINDS: tuple[tuple[str, type[MantleStep] | str], ...] = (
    ("instructions", "instructions"),
    ("collect", MantleCollect),
    ("action", MantleAction),
    ("execute_tool", MantleExecute),
    ("set_memory", "set_memory"),
    ("call", "call"),
    ("link", "link"),
)


def parse_step(raw: Mapping[str, Any]) -> MantleStep | str:
    """A step as Mantle reads it: the model of a collect, action (or legacy ``utter``) or execute_tool
    step, or the name of its kind for the others (``END``, ``noop``, ``instructions``, ``set_memory``,
    ``call``, ``link``); ValueError with Mantle's reason when Mantle refuses it."""
    if raw.get("id") == END:
        return END
    if raw.get("noop") is True:
        return "noop"
    if "utter" in raw and "action" not in raw:
        raw = {("action" if key == "utter" else key): value for key, value in raw.items()}
    key, kind = next(((key, kind) for key, kind in _KINDS if key in raw), ("", None))
    if kind is None:
        raise ValueError(
            f"Cannot infer step kind from YAML keys {list(raw)!r}. Expected one of: instructions, collect, "
            "action, utter, noop, execute_tool, set_memory, call, link; or id == 'END'."
        )
    if isinstance(kind, str):
        return kind
    try:
        return kind.model_validate(dict(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        step_id = str(raw.get("id", "<unknown>"))
        if first["type"] == "extra_forbidden":
            reason = f"Unknown step property {field!r} on step {step_id!r}. Remove it or check for typos."
        elif first["type"] == "missing":
            reason = f"Step {step_id!r} is missing required property {field!r}."
        else:
            reason = f"Step {step_id!r}, property {field!r}: {first['msg']}."
        raise ValueError(reason) from None
