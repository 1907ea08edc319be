"""`mcp-bridge init --from-mantle MANTLE`: what a Rasa bot takes over from a Rasa Pro Mantle project.

MANTLE is the project's folder (``skills/<id>/skill.md``, ``responses.yml``, ``integrations.yml``) or
its ``skills/`` folder. For each skill the plugin can run (read and translated as the action server
reads it, :mod:`mcp_bridge.skills.mantle`), init adds to the bot:

* the skill's folder, into ``skills/<id>/`` (``skill.md``, ``mcp-bridge.yml``, ``memory.yml``,
  ``responses.yml``: the same files, so the skill stays a Mantle skill), unless the bot has it;
* its action (``action_<id>``), and a slot (``type: any``, filled by the skill or by the bot's own
  mappings) for each value it reads or fills, in the domain;
* each response it names that the domain lacks, from Mantle's ``responses.yml`` (the skill's, then the
  project's): the text, with ``{session.<namespace>.<entry>}`` written ``{entry}`` as the plugin
  fills it; a confirmation question carries no buttons (the plugin adds its own Yes and No where the
  channel shows buttons); a Mantle ``condition`` or a ``set:`` button has no Rasa equivalent and is
  left out, saying so;
* each MCP server a skill imports from ``integrations.yml``, into ``endpoints.yml``'s ``mcp_servers``
  with its ``type`` written out (Rasa Pro's endpoints.yml requires it) and its ``${...}`` values quoted
  (so Rasa leaves them to the action server).

A skill the plugin cannot run is not carried over; init names it with the file, the place and the
reason, writes the rest, and exits with status 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mcp_bridge.config.servers import MANTLE_FILE, load_mcp_servers
from mcp_bridge.config.yamlfile import load_yaml
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.conditions import references
from mcp_bridge.skills.files import MANTLE_SKILL_FILE, SlotArgument, skill_paths
from mcp_bridge.skills.mantle import MantleSkillFile, read_mantle_skill
from mcp_bridge.skills.sidecar import SIDECAR

# The files of a skill's folder the bot takes over (a skill's own tools' Python is Mantle's).
SKILL_FOLDER_FILES = (MANTLE_SKILL_FILE, SIDECAR, "memory.yml", "responses.yml")
_SESSION_PLACEHOLDER = re.compile(r"\{session\.[A-Za-z0-9_-]+\.([A-Za-z0-9_]+)\}")

SLOT_BLOCK = "{name}:\n  type: any\n  influence_conversation: false\n  mappings:\n    - type: custom\n"


@dataclass
class MantleImport:
    """What the bot takes over: files to write, domain and endpoints entries (each as the text of its
    block, at indent 0), and what is left out and why."""

    files: dict[Path, str] = field(default_factory=dict)
    skills: dict[str, MantleSkillFile] = field(default_factory=dict)
    actions: dict[str, str] = field(default_factory=dict)
    slots: dict[str, str] = field(default_factory=dict)
    responses: dict[str, str] = field(default_factory=dict)
    servers: dict[str, str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def mantle_project(source: Path) -> tuple[Path, Path]:
    """The project folder and its skills folder for MANTLE (either of the two)."""
    source = source.resolve()
    if (source / "skills").is_dir():
        return source, source / "skills"
    if source.is_dir() and any(path.name == MANTLE_SKILL_FILE for path in skill_paths(source)):
        return source.parent, source
    raise ConfigError(f"{source}: no Mantle skills here (skills/<id>/skill.md)")


def read_mantle(source: Path, bot: Path) -> MantleImport:
    """What the bot in ``bot`` takes over from the Mantle project in ``source``."""
    project, skills_dir = mantle_project(source)
    taken = MantleImport()
    for path in skill_paths(skills_dir):
        if path.name != MANTLE_SKILL_FILE:
            continue
        try:
            skill = read_mantle_skill(path)
        except ConfigError as exc:
            taken.refused.append(str(exc))
            continue
        _take_folder(path.parent, bot / "skills" / skill.skill, taken)
        taken.skills[skill.skill] = skill
        taken.actions[skill.action_name] = (
            f"- {skill.action_name}  # the Mantle skill in skills/{skill.skill}/\n"
        )
        for slot in slots_of(skill):
            taken.slots.setdefault(slot, SLOT_BLOCK.format(name=slot))
    _take_responses(project, skills_dir, taken)
    _take_servers(project, taken)
    return taken


def _take_folder(source: Path, dest: Path, taken: MantleImport) -> None:
    yaml_twin = dest.parent / f"{dest.name}.yml"
    if yaml_twin.exists():
        raise ConfigError(f"{yaml_twin}: the bot has a skill {dest.name!r} already; move one of the two away")
    for name in SKILL_FOLDER_FILES:
        if not (source / name).is_file():
            continue
        text = (source / name).read_text(encoding="utf-8")
        if (dest / name).exists() and (dest / name).read_text(encoding="utf-8") != text:
            raise ConfigError(
                f"{dest / name}: exists and differs from {source / name}; nothing was written (move one away)"
            )
        if not (dest / name).exists():
            taken.files[dest / name] = text


def slots_of(skill: MantleSkillFile) -> list[str]:
    """The slots a translated skill reads or fills, in order."""
    found: list[str] = []
    for step in skill.steps:
        found += [source.slot for source in step.arguments.values() if isinstance(source, SlotArgument)]
        found += [entry for _, entry in references(step.requires)] if step.requires else []
        found += [step.for_each.slot, step.for_each.as_] if step.for_each else []
        found += [step.when.slot] if isinstance(step.when, SlotArgument) else []
        found += list(step.fills)
    found += [*skill.reset_slots, *skill.edits.values()]
    return list(dict.fromkeys(found))


def responses_of(skill: MantleSkillFile) -> tuple[list[str], set[str]]:
    """The responses a translated skill names, in order, and which of them are confirmation questions."""
    names: list[str] = []
    questions: set[str] = set()
    for entry in skill.tool_constraints:
        for constraint in entry.values():
            rule = constraint.requires_confirmation
            if rule is not None and rule.utter_for_confirmation and rule.utter_on_user_denial:
                names += [rule.utter_for_confirmation, rule.utter_on_user_denial]
                questions.add(rule.utter_for_confirmation)
    for step in skill.steps:
        names += [
            name
            for name in (step.on_success, step.on_error, step.on_not_found, step.on_missing_argument)
            if name
        ]
    return list(dict.fromkeys(names)), questions


def _mantle_responses(project: Path, skills_dir: Path, skill: str) -> dict[str, Any]:
    """Mantle's responses for ``skill``: the skill's ``responses.yml``, then the project's over them."""
    found: dict[str, Any] = {}
    for path in (skills_dir / skill / "responses.yml", project / "responses.yml"):
        if path.is_file():
            document = load_yaml(path) or {}
            entries = document.get("responses") if isinstance(document, dict) else None
            found.update(entries if isinstance(entries, dict) else {})
    return found


def _take_responses(project: Path, skills_dir: Path, taken: MantleImport) -> None:
    for skill_id, skill in taken.skills.items():
        defined = _mantle_responses(project, skills_dir, skill_id)
        names, questions = responses_of(skill)
        for name in names:
            if name in taken.responses or name not in defined:
                continue
            variants, left_out = _rasa_variants(defined[name], question=name in questions)
            taken.notes += [f"responses.{name}: {what}" for what in left_out]
            if variants:
                taken.responses[name] = _yaml({name: variants})


def _rasa_variants(variants: Any, *, question: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """A Mantle response's variants as a Rasa domain writes them, and what was left out."""
    kept: list[dict[str, Any]] = []
    left_out: list[str] = []
    for variant in variants if isinstance(variants, list) else []:
        variant = {"text": str(variant)} if not isinstance(variant, dict) else variant
        if variant.get("condition") is not None:
            left_out.append(
                "a variant on a Mantle condition is left out (Rasa's conditional variations can say it)"
            )
            continue
        rasa: dict[str, Any] = {"text": _SESSION_PLACEHOLDER.sub(r"{\1}", str(variant.get("text") or ""))}
        buttons = [
            {"title": button["title"], "payload": button["payload"]}
            for button in variant.get("buttons") or []
            if isinstance(button, dict) and str(button.get("payload", "")).startswith("/")
        ]
        if question:
            # The plugin adds the question's Yes and No itself, bound to the question
            # (mcp_bridge.contract.YES_NO_BUTTONS); a question's own buttons would be refused at start.
            if variant.get("buttons"):
                left_out.append(
                    "a confirmation question's own buttons are left out (the plugin adds Yes and No)"
                )
            buttons = []
        elif len(buttons) != len(variant.get("buttons") or []):
            left_out.append(
                "buttons whose payload is no /intent are left out (Mantle's set: has no Rasa equal)"
            )
        if buttons:
            rasa["buttons"] = buttons
        kept.append(rasa)
    return kept, list(dict.fromkeys(left_out))


def _take_servers(project: Path, taken: MantleImport) -> None:
    used = {
        ref.removeprefix("mcp:")
        for skill in taken.skills.values()
        for ref in skill.tools.values()
        if ref.startswith("mcp:")
    }
    path = project / MANTLE_FILE
    if not used:
        return
    if not path.is_file():
        taken.notes.append(
            f"{path}: not found; add the MCP servers {', '.join(sorted(used))} to endpoints.yml"
        )
        return
    servers = load_mcp_servers(path, env={}, allow_unset=True)  # read as Mantle reads it
    raw = {entry["name"]: entry for entry in (load_yaml(path) or {}).get("mcp_servers") or []}
    for name in sorted(used):
        if name not in servers:
            taken.notes.append(f"{path}: has no MCP server {name!r}; add it to endpoints.yml")
            continue
        entry = {"name": name, **{key: value for key, value in raw[name].items() if key != "name"}}
        entry["type"] = servers[name].type
        taken.servers[name] = _yaml([entry])


class _Dumper(yaml.SafeDumper):
    """YAML as the bot's files are written: lists indented under their key, and ``${...}`` values
    double-quoted (Rasa expands ``${VAR}`` in endpoints.yml unless it is quoted)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = '"' if "${" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def _yaml(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)


def existing_servers(document: Mapping[str, Any] | None) -> set[str]:
    """The names of the servers an endpoints.yml document has."""
    entries = document.get("mcp_servers") if isinstance(document, Mapping) else None
    return {str(entry.get("name")) for entry in entries or [] if isinstance(entry, dict)}
