"""Rasa Pro Mantle's skills, read as they are: ``skills/<id>/skill.md``, with the plugin's own keys
beside it in ``skills/<id>/mcp-bridge.yml`` (:mod:`mcp_bridge.skills.sidecar`), translated into the
plugin's skill model (:class:`~mcp_bridge.skills.files.SkillFile`), so every check of a skill file and
every rule of the confirmation applies to it unchanged.

```markdown
---
description: Log an interaction with a contact as a CRM timeline note.
import_tools: [mcp/crm:find_contact_by_email, mcp/crm:add_timeline_note]
tool_constraints:
  - add_timeline_note:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_note
        utter_on_user_denial: utter_note_cancelled
      on_success: utter_note_saved
---
Prose for Mantle's LLM: kept on the skill, never run.

:::ordered_block id=log
steps:
  - id: lookup
    execute_tool: find_contact_by_email
    parameters: {email: session.log_interaction.contact_email}
  - id: save
    execute_tool: add_timeline_note
    parameters: {contact_id: session.log_interaction.contact_id, text: session.log_interaction.note_text}
:::
```

Read exactly as Rasa Pro 3.21 reads it (:mod:`mcp_bridge.skills.mantle_format`): the same keys and
the same refusals, in Mantle's words. A file the plugin accepts is one Mantle's loader accepts
(``tests/plugin/test_mantle_pro.py`` checks it against Rasa Pro's own, in Rasa Pro's environment); the
plugin refuses more. Translated:

* the skill's id is its folder's name, its action ``action_<id>`` (or the sidecar's ``action``);
* ``import_tools``: ``mcp/<server>:<tool>`` is the tool-source line ``<tool>: mcp:<server>``; a bare
  name, and a tool a step calls that no import names (a skill's own ``@tool``), is ``local``;
* the one ordered block's ``execute_tool`` steps are the steps, in order; a parameter
  ``session.<this skill>.<entry>`` or ``session.project.<entry>`` is the slot ``<entry>``, any other
  value a literal (as Mantle passes it);
* ``collect`` with ``utterance``: said, and the skill stops, when the slot is empty as the next
  ``execute_tool`` step (which must read it) is reached: that step's ``on_missing_argument``;
* ``action: utter_*`` after an ``execute_tool`` step: said when that call succeeds (its ``on_success``);
* ``tool_constraints``: ``requires_confirmation`` enabled is the plugin's, an omitted question or
  denial the plugin's generic one (``utter_confirm_tool_call``, ``utter_tool_call_cancelled``);
  ``enabled: false`` is no constraint at all, so an MCP tool is still asked about as any is;
  ``requires`` (Mantle's grammar, over slots: :mod:`mcp_bridge.skills.conditions`), ``on_success``
  and ``on_failure`` go on every step that calls the tool (``requires``, ``on_success``, ``on_error``);
* the prose is kept on the skill (:attr:`~mcp_bridge.skills.files.Skill.prose`) and never changes what
  runs; ``name``, ``hidden``, ``always_include_in_prompt``, ``routing`` and ``knowledge_answering``
  steer Mantle's LLM and are read, not used.

What a deterministic runtime cannot honour is refused when the action server starts, with the file,
the place, the reason and what to do (:data:`REFUSED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from mcp_bridge.config.yamlfile import place
from mcp_bridge.contract import RESPONSES
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.conditions import PROJECT, check_condition, parameter_reference
from mcp_bridge.skills.files import SKILL_ID, UNION_MEMBER_NAMES, SkillFile
from mcp_bridge.skills.mantle_format import (
    END,
    MCP_IMPORT,
    Block,
    MantleAction,
    MantleCollect,
    MantleConstraint,
    MantleExecute,
    MantleFrontMatter,
    MantleStep,
    parse_step,
    read_document,
)
from mcp_bridge.skills.sidecar import SIDECAR, Sidecar, SidecarConstraint, read_sidecar

# Why each Mantle feature is refused, and what to do instead: "<reason>; <what to do>".
REFUSED = {
    "no_block": (
        "no :::ordered_block: what the skill does is prose for Mantle's LLM, which a deterministic runtime "
        "cannot run; write its steps as one `:::ordered_block id=<name>` of execute_tool steps (the prose "
        "may stay, for Mantle)"
    ),
    "blocks": (
        "the plugin runs one sequence of steps per skill; keep one ordered block, or make each block a "
        "skill of its own (a folder each)"
    ),
    "instructions": (
        "an `instructions` step is for Mantle's LLM to carry out; replace it with the execute_tool, "
        "collect and action steps it stands for"
    ),
    "branch": (
        "the next step depends on a condition; keep one path per skill (a condition on a call is "
        "`requires` under tool_constraints, a step that may be skipped is `when` in mcp-bridge.yml)"
    ),
    "jump": (
        "`next` jumps to another step than the one that follows; order the steps as they run (`next` may "
        "name the following step, or END on the last)"
    ),
    "noop": "a `noop` step only routes to other steps; remove it and keep one path per skill",
    "call": (
        "`{key}` hands the conversation to another skill or block; end the skill here and start the other "
        "from the bot's rules"
    ),
    "action_listen": "action_listen ends the turn mid-skill; remove it (a skill stops where it asks)",
    "hangup": "hangup ends the call, which is the channel's to do; remove it",
    "custom_action": (
        "a custom action in the middle of the steps (Mantle does not run one either); run it from the "
        "bot's rules, before or after the skill"
    ),
    "set_memory": (
        "set_memory sets memory to a value between the calls, and the plugin sets slots only from a "
        "call's result; fill slots from a result with `fills`, and clear them when the skill ends with "
        "`reset_slots`, both in mcp-bridge.yml"
    ),
    "precondition": (
        "a precondition parks the skill until a resolver skill has run (Mantle's LLM routing); start the "
        "skill from the bot's rules once what it needs is there (a form, a slot)"
    ),
    "utter": (
        "an utter trigger says a response when the skill starts or when a condition on memory turns true, "
        "outside the steps; say it from the bot's rules, or as an `action: utter_*` step after a call"
    ),
    "complete_when": (
        "complete_when is judged by Mantle's LLM to end the skill, and the plugin's skill ends when its "
        "steps do; remove it"
    ),
    "disabled": (
        "the plugin serves every skill it reads; move the folder out of skills/, or start its name "
        "with `_` (Mantle skips such a folder too)"
    ),
    "memory": (
        "{reference} is {whose}, which the plugin has no slot for; a skill reads slots: "
        "session.{skill}.<entry> or session.project.<entry>"
    ),
    "block_tools": (
        "`tools` in an ordered block constrains its tools for Mantle's LLM; put the constraint in the "
        "front matter's tool_constraints"
    ),
    "block_complete_when": (
        "complete_when in an ordered block is judged by Mantle's LLM; the block ends with its last step, "
        "remove it"
    ),
    "collect_no_utterance": (
        "a collect without `utterance` leaves the question to Mantle's LLM; name the response to say "
        "with `utterance:`"
    ),
    "ask_before_filling": (
        "ask_before_filling asks again when the value is there already, and the plugin asks only for an "
        "empty slot; remove it (the question of a call is its requires_confirmation)"
    ),
    "dtmf": "dtmf takes keypad input on a voice channel, which the plugin does not read; remove it",
    "collect_unread": (
        "Mantle asks for {slot!r} here, and the plugin asks for a value only when the call that needs it "
        "is reached and the slot is empty; put the collect just before the execute_tool step that reads "
        "it (a parameter or its requires), or remove it"
    ),
    "collect_two_questions": (
        "step {step!r} needs {slots}, which collects ask for with different responses ({responses}), and "
        "the plugin says one response when a call lacks a value; ask for them in one response, or fill "
        "them before the skill runs (a form)"
    ),
    "utter_placement": (
        "the plugin says a response after a call (its on_success), and {why}; move the response after "
        "an execute_tool step, or say it from the bot's rules"
    ),
    "end_not_last": "END ends the block, and steps follow it; put END last, or remove it",
    "parameter_value": (
        "a parameter is text, a number, true/false or null, or a session.<namespace>.<entry> reference; "
        "{what}"
    ),
    "unused_constraint": (
        "no step of the ordered block calls {tool!r}, and the plugin makes only the block's calls; remove "
        "the constraint, or call the tool in a step"
    ),
}


def refused(feature: str, **values: Any) -> str:
    """Why ``feature`` (a key of :data:`REFUSED`) is refused and what to do, with ``values`` filled in."""
    return REFUSED[feature].format(**values)


class MantleSkillFile(SkillFile):
    """A ``skill.md`` (and its sidecar) as a skill file, with its prose, and where each part came from."""

    prose: str = ""
    # A place in the translated skill file -> "<file>: <place>" where its author wrote it.
    places: dict[str, str] = Field(default_factory=dict)

    @property
    def instructions(self) -> str:
        return self.prose

    def locate(self, path: Path, where: str) -> str:
        return _locate(self.places, path, where)


def _locate(places: Mapping[str, str], path: Path, where: str) -> str:
    """``where`` in the translated skill file as its author wrote it: the longest translated place it
    starts with, and the rest of it."""
    best = ""
    for prefix in places:
        if len(prefix) > len(best) and (where == prefix or where.startswith((f"{prefix}.", f"{prefix}["))):
            best = prefix
    return f"{places[best]}{where[len(best) :]}" if best else f"{path}: {where}"


def read_mantle_skill(path: Path) -> MantleSkillFile:
    """``skills/<id>/skill.md`` and its sidecar as a skill file; ConfigError with the file, the place,
    the reason and, for what the plugin cannot honour, what to do."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the file: {exc}") from None
    document = read_document(path, text)
    translation = _Translation(path, document.front_matter, document.blocks, read_sidecar(path.parent))
    translated = translation.translate()
    try:
        return MantleSkillFile.model_validate(
            {**translated, "prose": document.prose, "places": translation.places}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = place(first["loc"], skip=UNION_MEMBER_NAMES)
        raise ConfigError(f"{_locate(translation.places, path, where)}: {first['msg']}") from None


class _Translation:
    """One ``skill.md`` (read as Mantle reads it) and its sidecar, into a skill file's document."""

    def __init__(
        self, path: Path, matter: MantleFrontMatter, blocks: tuple[Block, ...], sidecar: Sidecar
    ) -> None:
        self.path = path
        self.sidecar_path = path.parent / SIDECAR
        self.skill_id = path.parent.name
        self.matter = matter
        self.blocks = blocks
        self.sidecar = sidecar
        self.block = "ordered_block"
        self.places: dict[str, str] = {"skill": f"{path.parent}: the folder's name (the skill's id)"}
        # tool -> where its entry of tool_constraints is in the front matter
        self.constraint_places: dict[str, str] = {}

    def fail(self, where: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.path}: {where}: {reason}")

    def at(self, where: str) -> str:
        return f"{self.path}: {where}"

    def at_sidecar(self, where: str) -> str:
        return f"{self.sidecar_path}: {where}"

    def _front_matter(self) -> None:
        """Refuses what the front matter asks that the plugin cannot do."""
        matter = self.matter
        for key, present in (
            ("precondition", matter.precondition is not None),
            ("utter", bool(matter.utter)),
            ("complete_when", matter.complete_when is not None),
            ("disabled", matter.disabled),
        ):
            if present:
                raise self.fail(f"front matter: {key}", refused(key))

    def _block(self) -> list[Any]:
        """The one ordered block's steps."""
        if not self.blocks:
            raise self.fail("body", refused("no_block"))
        if len(self.blocks) > 1:
            raise self.fail(
                f"ordered blocks {', '.join(block.id for block in self.blocks)}", refused("blocks")
            )
        block = self.blocks[0]
        self.block = where = f"ordered_block id={block.id}"
        unknown = [str(key) for key in block.content if key not in ("steps", "tools", "complete_when")]
        if unknown:
            raise self.fail(where, f"unknown key(s) {', '.join(unknown)}; an ordered block has steps")
        if block.content.get("tools"):
            raise self.fail(f"{where}: tools", refused("block_tools"))
        if block.content.get("complete_when") is not None:
            raise self.fail(f"{where}: complete_when", refused("block_complete_when"))
        steps = block.content.get("steps") or []
        if not isinstance(steps, list) or not all(isinstance(step, dict) for step in steps):
            raise self.fail(f"{where}: steps", "must be a list of steps, each a mapping")
        return steps

    def _steps(self) -> list[MantleStep]:
        """The block's steps as Mantle reads them; refused where the plugin cannot run one."""
        raw_steps = self._block()
        parsed: list[MantleStep] = []
        for index, raw in enumerate(raw_steps):
            where = f"{self.block}: steps[{index}]"
            try:
                step = parse_step(raw)
            except ValueError as exc:
                raise self.fail(where, str(exc)) from None
            if step == END:
                others = [str(key) for key in raw if key != "id"]
                if others:
                    raise self.fail(
                        f"{where} (END)", f"END takes no other key ({', '.join(others)}); remove them"
                    )
                if index != len(raw_steps) - 1:
                    raise self.fail(f"{where} (END)", refused("end_not_last"))
                continue
            if isinstance(step, str):
                reason = refused("call", key=step) if step in ("call", "link") else refused(step)
                raise self.fail(f"{where} ({step})", reason)
            parsed.append(step)
        ids = [step.id for step in parsed]
        for position, step in enumerate(parsed):
            where = f"{self.block}: step {step.id!r}"
            if ids.count(step.id) > 1:
                raise self.fail(where, "a second step with this id; give each step its own id")
            following = ids[position + 1] if position + 1 < len(ids) else END
            if isinstance(step.next, list):
                raise self.fail(f"{where}: next", refused("branch"))
            if step.next is not None and step.next != following:
                raise self.fail(f"{where}: next", refused("jump"))
        return parsed

    def translate(self) -> dict[str, Any]:
        """The skill file's document: the tool-source lines, the constraints, the steps, and the
        sidecar's keys; where each came from in :attr:`places`."""
        if not SKILL_ID.fullmatch(self.skill_id):
            raise ConfigError(
                f"{self.places['skill']}: {self.skill_id!r}: the action that runs the skill is named after "
                "it (action_<id>), so letters, digits and underscores only; rename the folder"
            )
        self._front_matter()
        constraints = self._mantle_constraints()
        tools = self._imports()
        steps, step_ids = self._translated_steps(constraints, tools)
        self._sidecar_steps(steps, step_ids)
        sidecar = self.sidecar
        for key in ("reset_slots", "edits"):
            self.places[key] = self.at_sidecar(key)
        if sidecar.action is not None:
            self.places["action"] = self.at_sidecar("action")
        else:
            self.places["action"] = f"{self.path.parent}: the folder's name (the action is action_<id>)"
        self.places["description"] = self.at("front matter: description")
        document: dict[str, Any] = {
            "skill": self.skill_id,
            "description": self.matter.description or "",
            "tools": tools,
            "tool_constraints": self._constraints(constraints, {step["execute_tool"] for step in steps}),
            "steps": steps,
            "reset_slots": list(sidecar.reset_slots),
            "edits": dict(sidecar.edits),
        }
        if sidecar.action is not None:
            document["action"] = sidecar.action
        return document

    def _mantle_constraints(self) -> dict[str, MantleConstraint]:
        """The front matter's ``tool_constraints`` by tool (where each is: :attr:`constraint_places`)."""
        constraints: dict[str, MantleConstraint] = {}
        for index, (tool, constraint) in enumerate(self.matter.constraints()):
            where = f"front matter: tool_constraints[{index}].{tool}"
            if tool in constraints:
                raise self.fail(where, f"a second constraint entry for {tool!r}")
            constraints[tool], self.constraint_places[tool] = constraint, where
        return constraints

    def _imports(self) -> dict[str, str]:
        """The tool-source lines of ``import_tools``: ``mcp/<server>:<tool>`` is ``mcp:<server>``, a
        name ``local``."""
        tools: dict[str, str] = {}
        for index, entry in enumerate(self.matter.import_tools):
            match = MCP_IMPORT.fullmatch(entry)
            name, source = (match["tool"], f"mcp:{match['server']}") if match else (entry, "local")
            if name in tools and tools[name] != source:
                raise self.fail(
                    f"front matter: import_tools[{index}]", f"a second import of a tool named {name!r}"
                )
            tools[name] = source
            self.places[f"tools.{name}"] = self.at(f"front matter: import_tools[{index}] ({entry})")
        return tools

    def _translated_steps(
        self, constraints: Mapping[str, MantleConstraint], tools: dict[str, str]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The block's execute_tool steps as the plugin's, with what the collects before them ask and
        the responses after them say; a tool no import names joins ``tools`` as ``local``."""
        steps: list[dict[str, Any]] = []
        step_ids: list[str] = []
        pending: list[MantleCollect] = []
        for step in self._steps():
            where = f"{self.block}: step {step.id!r}"
            if isinstance(step, MantleCollect):
                self._check_collect(step, where)
                pending.append(step)
            elif isinstance(step, MantleAction):
                self._action(step, where, steps, step_ids, pending)
            else:
                steps.append(
                    self._execute(step, where, constraints.get(step.execute_tool), pending, len(steps))
                )
                step_ids.append(step.id)
                self.places[f"steps[{len(steps) - 1}]"] = self.at(where)
                pending = []
                if step.execute_tool not in tools:
                    tools[step.execute_tool] = "local"
                    self.places[f"tools.{step.execute_tool}"] = self.at(f"{where}: execute_tool")
        if pending:
            raise self.fail(
                f"{self.block}: step {pending[0].id!r}", refused("collect_unread", slot=pending[0].collect)
            )
        if not steps:
            raise self.fail(self.block, "no execute_tool step: nothing for the plugin to run")
        return steps, step_ids

    def _constraints(
        self, constraints: Mapping[str, MantleConstraint], called: set[str]
    ) -> list[dict[str, Any]]:
        """The plugin's ``tool_constraints``: Mantle's, with the sidecar's keys for each tool."""
        translated: list[dict[str, Any]] = []
        extras = self.sidecar.tool_constraints
        for tool in [*constraints, *(tool for tool in extras if tool not in constraints)]:
            if tool in constraints:
                where = self.at(self.constraint_places[tool])
                if tool not in called:
                    raise ConfigError(f"{where}: {refused('unused_constraint', tool=tool)}")
            else:
                where = self.at_sidecar(f"tool_constraints.{tool}")
                if tool not in called:
                    raise ConfigError(f"{where}: no step of the ordered block calls {tool!r}")
            constraint = self._constraint(tool, constraints.get(tool), extras.get(tool))
            if constraint is not None:
                self.places[f"tool_constraints[{len(translated)}].{tool}"] = where
                self._sidecar_constraint_places(tool, len(translated))
                translated.append({tool: constraint})
        return translated

    def _sidecar_steps(self, steps: list[dict[str, Any]], step_ids: list[str]) -> None:
        """The sidecar's keys added to the steps they name by id."""
        for step_id, keys in self.sidecar.steps.items():
            if step_id not in step_ids:
                raise ConfigError(
                    f"{self.at_sidecar(f'steps.{step_id}')}: no execute_tool step of the ordered block has "
                    f"the id {step_id!r} ({', '.join(step_ids)})"
                )
            index = step_ids.index(step_id)
            for key, value in keys.model_dump(by_alias=True, exclude_defaults=True).items():
                steps[index][key] = value
                self.places[f"steps[{index}].{key}"] = self.at_sidecar(f"steps.{step_id}.{key}")

    def _check_collect(self, step: MantleCollect, where: str) -> None:
        if step.utterance is None:
            raise self.fail(where, refused("collect_no_utterance"))
        if step.ask_before_filling:
            raise self.fail(f"{where}: ask_before_filling", refused("ask_before_filling"))
        if step.dtmf is not None:
            raise self.fail(f"{where}: dtmf", refused("dtmf"))

    def _action(
        self,
        step: MantleAction,
        where: str,
        steps: list[dict[str, Any]],
        step_ids: list[str],
        pending: list[MantleCollect],
    ) -> None:
        """``action: utter_*`` after a call: that call's ``on_success``."""
        if step.action == "action_listen":
            raise self.fail(where, refused("action_listen"))
        if step.action == "hangup":
            raise self.fail(where, refused("hangup"))
        if not step.action.startswith("utter_"):
            raise self.fail(where, refused("custom_action"))
        if not steps or pending:
            why = "no call comes before it" if not steps else "a collect comes between it and the call before"
            raise self.fail(where, refused("utter_placement", why=why))
        index = len(steps) - 1
        if "on_success" in steps[index]:
            said = self.places[f"steps[{index}].on_success"].removeprefix(f"{self.path}: ")
            raise self.fail(
                where, refused("utter_placement", why=f"step {step_ids[index]!r} already says {said}")
            )
        steps[index]["on_success"] = step.action
        self.places[f"steps[{index}].on_success"] = self.at(f"{where}: action")

    def _execute(
        self,
        step: MantleExecute,
        where: str,
        constraint: MantleConstraint | None,
        pending: list[MantleCollect],
        index: int,
    ) -> dict[str, Any]:
        """An execute_tool step as the plugin's ``index``-th step: its parameters as arguments, its
        tool's requires, on_success and on_failure, and the question of the collects before it."""
        translated: dict[str, Any] = {"execute_tool": step.execute_tool}
        arguments: dict[str, Any] = {}
        for name, value in step.parameters.items():
            there = f"{where}: parameters.{name}"
            if isinstance(value, str) and value.strip().startswith("session."):
                arguments[name] = {"slot": self._slot(value, there)}
            elif value is None or isinstance(value, str | int | float | bool):
                arguments[name] = value
            else:
                raise self.fail(there, refused("parameter_value", what=f"this is a {type(value).__name__}"))
            self.places[f"steps[{index}].arguments.{name}"] = self.at(there)
        translated["arguments"] = arguments
        reads = {source["slot"] for source in arguments.values() if isinstance(source, dict)}
        if constraint is not None:
            there = self.constraint_places[step.execute_tool]
            if constraint.requires is not None:
                translated["requires"] = constraint.requires
                try:
                    reads |= set(check_condition(constraint.requires, self.skill_id))
                except ValueError as exc:
                    raise self.fail(f"{there}: requires", str(exc)) from None
                self.places[f"steps[{index}].requires"] = self.at(f"{there}: requires")
            if constraint.on_success is not None:
                translated["on_success"] = constraint.on_success
                self.places[f"steps[{index}].on_success"] = self.at(f"{there}: on_success")
            if constraint.on_failure is not None:
                translated["on_error"] = constraint.on_failure
                self.places[f"steps[{index}].on_error"] = self.at(f"{there}: on_failure")
        for collect in pending:
            if collect.collect not in reads:
                raise self.fail(
                    f"{self.block}: step {collect.id!r}", refused("collect_unread", slot=collect.collect)
                )
        questions = list(dict.fromkeys(collect.utterance for collect in pending))
        if len(questions) > 1:
            raise self.fail(
                where,
                refused(
                    "collect_two_questions",
                    step=step.id,
                    slots=", ".join(repr(collect.collect) for collect in pending),
                    responses=", ".join(str(question) for question in questions),
                ),
            )
        if questions:
            translated["on_missing_argument"] = questions[0]
            self.places[f"steps[{index}].on_missing_argument"] = self.at(
                f"{self.block}: step {pending[0].id!r}: utterance"
            )
        return translated

    def _slot(self, value: str, where: str) -> str:
        """The slot a ``session.<namespace>.<entry>`` names; refused for another namespace or text that
        only looks like a reference."""
        found = parameter_reference(value)
        if found is None:
            raise self.fail(
                where,
                refused("parameter_value", what=f"{value!r} starts with 'session.' but is no such reference"),
            )
        namespace, entry = found
        if namespace not in (self.skill_id, PROJECT):
            whose = "Mantle's system memory" if namespace == "system" else "another skill's memory"
            raise self.fail(
                where,
                refused("memory", reference=f"session.{namespace}.{entry}", whose=whose, skill=self.skill_id),
            )
        return entry

    def _constraint(
        self, tool: str, constraint: MantleConstraint | None, extra: SidecarConstraint | None
    ) -> dict[str, Any] | None:
        """The plugin's constraint for ``tool``: Mantle's confirmation (when enabled) with the sidecar's
        keys; None when there is nothing for the gate (Mantle's ``enabled: false`` is no constraint)."""
        confirmation = constraint.requires_confirmation if constraint is not None else None
        translated: dict[str, Any] = {}
        if confirmation is not None and confirmation.enabled:
            translated["requires_confirmation"] = {
                "enabled": True,
                "utter_for_confirmation": confirmation.utter_for_confirmation or RESPONSES.confirm_tool_call,
                "utter_on_user_denial": confirmation.utter_on_user_denial or RESPONSES.tool_call_cancelled,
            }
        if extra is None:
            return translated or None
        if extra.requires_confirmation is not None:
            if "requires_confirmation" not in translated:
                there = self.at_sidecar(f"tool_constraints.{tool}.requires_confirmation.describe")
                raise ConfigError(
                    f"{there}: names the line of a question about {tool!r}, and {self.path}'s "
                    "requires_confirmation is not enabled for it"
                )
            translated["requires_confirmation"]["describe"] = extra.requires_confirmation.describe
        for key in ("requires_approval_from", "allows_remembering"):
            value = getattr(extra, key)
            if value is not None:
                translated[key] = value.model_dump(by_alias=True, exclude_defaults=True)
        return translated or None

    def _sidecar_constraint_places(self, tool: str, index: int) -> None:
        base = f"tool_constraints.{tool}"
        for key in ("requires_approval_from", "allows_remembering"):
            self.places[f"tool_constraints[{index}].{tool}.{key}"] = self.at_sidecar(f"{base}.{key}")
        describe = self.at_sidecar(f"{base}.requires_confirmation.describe")
        self.places[f"tool_constraints[{index}].{tool}.requires_confirmation.describe"] = describe
        self.places[f"{base}.requires_confirmation.describe"] = describe
