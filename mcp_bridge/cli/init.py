"""`mcp-bridge init [DIR]`: make a Rasa bot ready for mcp_bridge, keeping everything of the bot's.

It adds only what is missing, from the fragments in ``mcp_bridge/cli/bot/``:

* the domain entries the plugin needs (intents ``affirm``/``deny``, the ``pending_confirmation``
  slot, ``action_confirm_tool``/``action_deny_tool``, the executor's responses) and every skill
  file's ``action:``: into ``domain.yml``, or as ``domain/mcp_bridge.yml`` when the bot keeps its
  domain in a directory;
* the confirmation loop's rule and the second approver's (``data/mcp_bridge.yml``), unless the bot
  has the loop's rule already; then only the second approver's, if missing
  (``data/mcp_bridge_approvals.yml``);
* when a skill has ``allows_remembering``: the ``revoke_permissions`` intent,
  ``action_revoke_permissions``, their responses, and the rule from
  the intent to the action (in ``data/mcp_bridge.yml``, or ``data/mcp_bridge_permissions.yml`` for a
  bot that has the loop's rule already);
* examples for ``affirm``/``deny`` (``data/mcp_bridge_nlu.yml``), only for an intent without any (and
  for ``revoke_permissions``, when a skill has ``allows_remembering``);
* ``mcp_servers:`` (and an ``action_endpoint:`` if there is none) in ``endpoints.yml``;
* when a server there acts as the person (``oauth: {grant: authorization_code}``): the intent,
  actions and responses of the sign-in (``person_domain.yml``) and the rule that goes on after it
  (``data/mcp_bridge_person.yml``), unless the bot has that rule already;
* a sample skill, ``skills/save_reminder.yml.example``, when ``skills/`` holds no skill yet (the
  suffix keeps it from being loaded until it is renamed);
* with ``--from-mantle MANTLE``, the skills of a Rasa Pro Mantle project the plugin can run, with the
  slots, responses and MCP servers they need (:mod:`mcp_bridge.cli.from_mantle`).

Existing files keep every byte they had: new entries are inserted as text after the last entry
of their section (see :mod:`mcp_bridge.cli.yaml_splice`). A bot's own rewording of a response is kept.
Where the bot defines something the plugin needs differently (a ``pending_confirmation`` slot of
another type, ``affirm`` as an entity, a confirmation question with buttons of its own), nothing
is written and each clash is named with file, place and reason (exit status 1). A second run
changes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mcp_bridge.cli.command import add_command, bot_folder
from mcp_bridge.cli.from_mantle import MantleImport, existing_servers, read_mantle
from mcp_bridge.cli.yaml_splice import (
    Splice,
    block_of,
    compose,
    entry_name,
    leading_comment_line,
    load,
    reindent,
    top_level,
)
from mcp_bridge.config.servers import AUTHORIZATION_CODE
from mcp_bridge.contract import (
    APPROVAL_ACTION,
    APPROVAL_INTENT,
    CONFIRMATION_LOOP,
    PENDING_SLOT,
    PLUGIN_ACTIONS,
    PLUGIN_INTENTS,
    RESPONSES,
    RESUME_ACTION,
    REVOKE_ACTION,
    REVOKE_INTENT,
)
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.files import (
    ACTION_NAME,
    MANTLE_SKILL_FILE,
    SkillFile,
    answer_buttons_problem,
    skill_paths,
)
from mcp_bridge.skills.mantle import read_mantle_skill

DOMAIN_FILE = "mcp_bridge.yml"
RULE_FILE = Path("data") / "mcp_bridge.yml"
NLU_FILE = Path("data") / "mcp_bridge_nlu.yml"
APPROVAL_RULE_FILE = Path("data") / "mcp_bridge_approvals.yml"
PERMISSIONS_RULE_FILE = Path("data") / "mcp_bridge_permissions.yml"
PERSON_FILE = Path("data") / "mcp_bridge_person.yml"
SAMPLE_SKILL = Path("skills") / "save_reminder.yml.example"
_SECTIONS = ("intents", "slots", "actions", "responses")
_LIST_SECTIONS = ("intents", "actions")


class InitClash(Exception):
    """The bot defines something the plugin needs differently; ``problems`` names each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def fragment_text(name: str) -> str:
    return (resources.files("mcp_bridge.cli") / "bot" / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Fragment:
    """One of the plugin's fragment files: its text and, per section, each entry's text block."""

    text: str
    blocks: dict[str, dict[str, str]]
    values: dict[str, Any]

    @classmethod
    def read(cls, name: str, sections: tuple[str, ...], name_of: Callable[[Node], str | None]) -> Fragment:
        text = fragment_text(name)
        root = compose(text, f"mcp_bridge/cli/bot/{name}")
        blocks: dict[str, dict[str, str]] = {}
        for section in sections:
            found = top_level(root, section)
            assert found is not None, f"fragment {name} has no {section}"
            blocks[section] = _entry_blocks(text, found[1], name_of)
        values = load(text, name) or {}
        return cls(text, blocks, values)

    def header(self) -> str:
        """The text before the first section (``version:`` and the file's comment)."""
        root = compose(self.text, "fragment")
        assert isinstance(root, MappingNode)
        first = next(k for k, _ in root.value if isinstance(k, ScalarNode) and k.value != "version")
        start = leading_comment_line(self.text, first.start_mark.line, 0)
        lines = self.text.splitlines(keepends=True)
        return "".join(lines[:start])


def _entry_blocks(text: str, section: Node, name_of: Callable[[Node], str | None]) -> dict[str, str]:
    blocks: dict[str, str] = {}
    if isinstance(section, SequenceNode):
        for item in section.value:
            line_start = text.rfind("\n", 0, item.start_mark.index) + 1
            dash = text.index("-", line_start) - line_start
            first = leading_comment_line(text, item.start_mark.line, dash)
            name = name_of(item)
            assert name is not None
            blocks[name] = block_of(text, item, first, dash)
    elif isinstance(section, MappingNode):
        for key, value in section.value:
            column = key.start_mark.column
            first = leading_comment_line(text, key.start_mark.line, column)
            blocks[str(key.value)] = block_of(text, value, first, column)
    return blocks


def _nlu_name(node: Node) -> str | None:
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if key.value == "intent":
                return str(value.value)
    return None


@dataclass
class Plan:
    """What init would write: new contents per file, and one line per thing added."""

    bot: Path
    files: dict[Path, str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    # --from-mantle: the skills not carried over (file, place, reason), and what was left out of others
    refused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def write(self) -> None:
        """Each file whole or not at all: written beside it, then renamed over it (a crash midway
        leaves the bot's file as it was), keeping its permissions."""
        for path, content in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(content)
                    handle.flush()
                    os.fsync(handle.fileno())
                if path.exists():
                    shutil.copymode(path, temporary)
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise


@dataclass
class _DomainFile:
    path: Path
    text: str
    values: dict[str, Any]


def _names(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(key) for key in value]
    if isinstance(value, list):
        names = []
        for entry in value:
            if isinstance(entry, str):
                names.append(entry)
            elif isinstance(entry, dict) and len(entry) == 1:
                names.append(str(next(iter(entry))))
        return names
    return []


def _yaml_files(folder: Path) -> list[Path]:
    return sorted([*folder.rglob("*.yml"), *folder.rglob("*.yaml")]) if folder.is_dir() else []


def domain_location(bot: Path, domain: Path | None = None) -> Path:
    """``domain.yml``, or the ``domain/`` directory; ConfigError when the bot has neither (or both)."""
    if domain is not None:
        return domain if domain.is_absolute() else bot / domain
    single, folder = bot / "domain.yml", bot / "domain"
    if single.is_file() and folder.is_dir():
        raise ConfigError(f"{bot}: has both domain.yml and domain/; say which one with --domain")
    if folder.is_dir():
        return folder
    if single.is_file():
        return single
    raise ConfigError(f"{bot}: no domain.yml and no domain/ directory; is this a Rasa bot's folder?")


def skill_actions(skills_dir: Path) -> list[tuple[Path, str]]:
    """Each skill file's action (``action:``, default ``action_<skill>``), as the action server names it.

    A name that is not ``action_`` and letters, digits and underscores is refused (ConfigError)
    before anything is written: it is spliced into the bot's domain.yml, where a newline or a colon
    would write YAML of its own. A Mantle ``skills/<id>/skill.md`` that does not read is left to
    `mcp-bridge check` to report, as a broken skill file is."""
    found = []
    for path in skill_paths(skills_dir):
        if path.name == MANTLE_SKILL_FILE:
            mantle = _mantle_skill(path)
            if mantle is not None:
                found.append((path, mantle.action_name))
            continue
        try:
            document = load(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, ConfigError):
            continue  # `mcp-bridge check` reports a broken skill file with its place
        if isinstance(document, dict) and isinstance(document.get("skill"), str):
            action = document.get("action") or f"action_{document['skill']}"
            if not isinstance(action, str) or not ACTION_NAME.fullmatch(action):
                key = "action" if document.get("action") else "skill"
                raise ConfigError(
                    f"{path}: {key}: {action!r} is not a valid action name (action_ followed by "
                    "letters, digits and underscores)"
                )
            found.append((path, action))
    return found


def _mantle_skill(path: Path) -> SkillFile | None:
    try:
        return read_mantle_skill(path)
    except ConfigError:
        return None


def plan(bot: Path, domain: Path | None = None, mantle: Path | None = None) -> Plan:
    """Everything init would write for the bot in ``bot`` (with ``mantle``, taking over that Mantle
    project's skills); raises InitClash or ConfigError."""
    bot = bot.resolve()
    if not bot.is_dir():
        raise ConfigError(f"{bot}: no such folder")
    result = Plan(bot)
    problems: list[str] = []
    taken = read_mantle(mantle, bot) if mantle is not None else MantleImport()
    result.files.update(taken.files)
    for folder in dict.fromkeys(path.parent for path in taken.files):
        names = ", ".join(path.name for path in taken.files if path.parent == folder)
        result.added.append(f"{_rel(bot, folder)}/: the Mantle skill ({names})")
    result.refused, result.notes = taken.refused, taken.notes
    constraints = [c for skill in taken.skills.values() for e in skill.tool_constraints for c in e.values()]
    approving = approving_skills(bot / "skills") or any(c.requires_approval_from for c in constraints)
    remembering = skills_using(bot / "skills", "allows_remembering") or any(
        c.allows_remembering for c in constraints
    )
    _plan_domain(bot, domain_location(bot, domain), result, problems, approving, remembering, taken)
    _plan_data(bot, result, problems, approving, remembering)
    _plan_endpoints(bot, result, problems, taken.servers)
    skills = bot / "skills"
    has_skills = bool(skill_paths(skills)) or bool(taken.skills)
    if not has_skills and not (bot / SAMPLE_SKILL).exists():
        result.files[bot / SAMPLE_SKILL] = fragment_text("skill.yml")
        result.added.append(f"{SAMPLE_SKILL}: a sample skill (rename it to .yml to use it)")
    if problems:
        raise InitClash(problems)
    return result


def _read_domain(location: Path) -> list[_DomainFile]:
    files = _yaml_files(location) if location.is_dir() else [location]
    documents = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        values = load(text, str(path)) or {}
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: a domain file must be a mapping")
        documents.append(_DomainFile(path, text, values))
    return documents


def approving_skills(skills_dir: Path) -> bool:
    """Some skill file of ``skills_dir`` has ``requires_approval_from`` (a second approver): the bot
    then needs the approval pieces of the fragments, and only then gets them."""
    return skills_using(skills_dir, "requires_approval_from")


def skills_using(skills_dir: Path, key: str) -> bool:
    """Some skill file of ``skills_dir`` has the constraint option ``key`` on a tool."""
    for path in skill_paths(skills_dir):
        if path.name == MANTLE_SKILL_FILE:
            mantle = _mantle_skill(path)
            constraints = mantle.tool_constraints if mantle is not None else []
            if any(getattr(c, key) for entry in constraints for c in entry.values()):
                return True
            continue
        try:
            document = load(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, ConfigError):
            continue
        entries = document.get("tool_constraints") if isinstance(document, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            for constraint in entry.values() if isinstance(entry, dict) else []:
                if isinstance(constraint, dict) and constraint.get(key):
                    return True
    return False


# The fragments' pieces for a second approver, added only for a bot whose skills use one.
_APPROVAL_PIECES = {
    "intents": {APPROVAL_INTENT},
    "actions": {APPROVAL_ACTION},
    "responses": RESPONSES.for_approvals(),
}
# The pieces for remembered permissions, added only for a bot whose skills allow them.
_REMEMBERING_PIECES = {
    "intents": {REVOKE_INTENT},
    "actions": {REVOKE_ACTION},
    "responses": {
        "utter_permission_granted",
        "utter_permission_used",
        "utter_permissions_revoked",
        "utter_permission_declined",
    },
}


def _plan_domain(
    bot: Path,
    location: Path,
    result: Plan,
    problems: list[str],
    approving: bool,
    remembering: bool,
    taken: MantleImport,
) -> None:
    fragment = Fragment.read("domain.yml", _SECTIONS, entry_name)
    files = _read_domain(location)
    defined: dict[str, set[str]] = {section: set() for section in (*_SECTIONS, "entities", "forms")}
    for file in files:
        for section in defined:
            defined[section] |= set(_names(file.values.get(section)))
        problems.extend(_domain_clashes(file, fragment))

    wanted: dict[str, dict[str, str]] = {
        section: {
            name: block
            for name, block in fragment.blocks[section].items()
            if (approving or name not in _APPROVAL_PIECES.get(section, set()))
            and (remembering or name not in _REMEMBERING_PIECES.get(section, set()))
        }
        for section in _SECTIONS
    }
    if acts_as_person(bot):
        person = Fragment.read("person_domain.yml", ("intents", "actions", "responses"), entry_name)
        for section in _SECTIONS:
            wanted[section].update(person.blocks.get(section, {}))
    for path, action in skill_actions(bot / "skills"):
        where = path.relative_to(bot / "skills").as_posix()
        wanted["actions"].setdefault(action, f"- {action}  # the skill in skills/{where}\n")
    for section, taken_blocks in (
        ("actions", taken.actions),
        ("slots", taken.slots),
        ("responses", taken.responses),
    ):
        for name, block in taken_blocks.items():
            wanted[section].setdefault(name, block)
    missing = {
        section: {name: block for name, block in blocks.items() if name not in defined[section]}
        for section, blocks in wanted.items()
    }
    if not any(missing.values()):
        return

    if location.is_dir():
        target = location / DOMAIN_FILE
        existing = next((file for file in files if file.path == target), None)
        splice = Splice(existing.text if existing else fragment.header(), str(target))
    else:
        target = location
        splice = Splice(files[0].text, str(target))
    try:
        for section in _SECTIONS:
            blocks = list(missing[section].values())
            if not blocks:
                continue
            if section in _LIST_SECTIONS:
                splice.add_list_items(section, blocks)
            else:
                splice.add_map_entries(section, blocks, spaced=section == "responses")
            result.added.append(f"{_rel(bot, target)}: {section} {', '.join(missing[section])}")
    except ConfigError as exc:
        problems.append(str(exc))
        return
    spliced = splice.result()
    _check_spliced(spliced, str(target), missing)
    result.files[target] = spliced


def _check_spliced(text: str, where: str, added: dict[str, dict[str, str]]) -> None:
    """The new domain file parses, and holds exactly what was added where it was meant to go."""
    values = load(text, where)
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: the edited domain would not be a mapping; nothing was written")
    for section, names in added.items():
        absent = set(names) - set(_names(values.get(section)))
        if absent:
            raise ConfigError(
                f"{where}: the edited domain would lack {section} {', '.join(sorted(absent))}; "
                "nothing was written"
            )


def _domain_clashes(file: _DomainFile, fragment: Fragment) -> list[str]:
    where = str(file.path)
    problems: list[str] = []
    for section, kind in (("intents", list), ("actions", list), ("slots", dict), ("responses", dict)):
        value = file.values.get(section)
        if value is not None and not isinstance(value, kind):
            problems.append(f"{where}: {section}: must be a {'list' if kind is list else 'mapping'}")
    slots = file.values.get("slots") if isinstance(file.values.get("slots"), dict) else {}
    assert isinstance(slots, dict)
    mine = fragment.values["slots"][PENDING_SLOT]
    theirs = slots.get(PENDING_SLOT)
    if PENDING_SLOT in slots:
        if not isinstance(theirs, dict):
            problems.append(f"{where}: slots.{PENDING_SLOT}: must be a mapping like the plugin's")
        else:
            for key in ("type", "influence_conversation", "mappings"):
                if theirs.get(key) != mine[key]:
                    problems.append(
                        f"{where}: slots.{PENDING_SLOT}.{key}: is {theirs.get(key)!r}, but the plugin "
                        f"keeps its signed question there and needs {mine[key]!r}; rename the bot's slot"
                    )
    for intent in PLUGIN_INTENTS:
        if intent in slots:
            problems.append(f"{where}: slots.{intent}: the plugin needs {intent!r} as an intent, not a slot")
        if intent in _names(file.values.get("entities")):
            problems.append(
                f"{where}: entities: {intent!r} is an entity, but the plugin needs it as an intent "
                f"(a question's Yes/No buttons send /{intent})"
            )
    for action in PLUGIN_ACTIONS:
        if action in _names(file.values.get("forms")):
            problems.append(f"{where}: forms.{action}: the plugin serves {action!r} as a custom action")
    responses = file.values.get("responses") if isinstance(file.values.get("responses"), dict) else {}
    assert isinstance(responses, dict)
    questions = (RESPONSES.confirm_tool_call, RESPONSES.confirm_calls, RESPONSES.confirm_one_call)
    for name in questions:
        if name not in responses:
            continue
        variants = responses[name]
        if not isinstance(variants, list) or not variants:
            problems.append(f"{where}: responses.{name}: must be a list of variants")
            continue
        for index, variant in enumerate(variants):
            problem = answer_buttons_problem(variant)
            if problem is not None:
                problems.append(f"{where}: responses.{name}[{index}]: {problem}")
    return problems


def _plan_data(bot: Path, result: Plan, problems: list[str], approving: bool, remembering: bool) -> None:
    data = bot / "data"
    with_examples: set[str] = set()
    has_rule = has_approval_rule = has_resume_rule = has_revoke_rule = False
    nlu_intents = (*PLUGIN_INTENTS, REVOKE_INTENT) if remembering else PLUGIN_INTENTS
    for path in _yaml_files(data):
        try:
            document = load(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            problems.append(f"{path}: cannot read the training data: {exc}")
            continue
        if not isinstance(document, dict):
            continue
        for item in document.get("nlu") or []:
            if isinstance(item, dict) and item.get("intent") in nlu_intents and item.get("examples"):
                with_examples.add(str(item["intent"]))
        has_rule = has_rule or any(_is_loop_rule(rule) for rule in document.get("rules") or [])
        has_approval_rule = has_approval_rule or any(
            _is_approval_rule(rule) for rule in document.get("rules") or []
        )
        has_resume_rule = has_resume_rule or any(
            _is_resume_rule(rule) for rule in document.get("rules") or []
        )
        has_revoke_rule = has_revoke_rule or any(
            _is_revoke_rule(rule) for rule in document.get("rules") or []
        )

    if acts_as_person(bot) and not has_resume_rule:
        if (bot / PERSON_FILE).exists():
            problems.append(
                f"{bot / PERSON_FILE}: exists but holds no rule from mcp_signed_in to {RESUME_ACTION}; "
                "move the file away and run init again"
            )
        else:
            result.files[bot / PERSON_FILE] = fragment_text("person_rules.yml")
            result.added.append(f"{PERSON_FILE}: the rule that goes on after a sign-in")

    if not has_rule:
        if (bot / RULE_FILE).exists():
            problems.append(
                f"{bot / RULE_FILE}: exists but holds no rule for the confirmation loop; "
                f"move the file away and run init again"
            )
        else:
            text = fragment_text("rules.yml")
            if not approving:
                text = text[: text.index(_APPROVAL_RULE_COMMENT)].rstrip("\n") + "\n"
            if not remembering:
                start, end = text.index(_REVOKE_RULE_COMMENT), text.find(_APPROVAL_RULE_COMMENT)
                text = text[:start] + (text[end:] if end != -1 else "")
                text = text.rstrip("\n") + "\n"
            result.files[bot / RULE_FILE] = text
            result.added.append(f"{RULE_FILE}: the rule for the confirmation loop")
            if remembering:
                result.added.append(f'{RULE_FILE}: the rule for "stop saving without asking"')
            if approving:
                result.added.append(f"{RULE_FILE}: the rule for a second approver's decision")
    elif approving and not has_approval_rule and not (bot / APPROVAL_RULE_FILE).exists():
        # A bot initialised before second approvers: their rule alone, as the fragment has it.
        text = fragment_text("rules.yml")
        rule = text[text.index(_APPROVAL_RULE_COMMENT) :]
        result.files[bot / APPROVAL_RULE_FILE] = f'version: "3.1"\n\nrules:\n{rule}'
        result.added.append(f"{APPROVAL_RULE_FILE}: the rule for a second approver's decision")

    if has_rule and remembering and not has_revoke_rule and not (bot / PERMISSIONS_RULE_FILE).exists():
        # A bot initialised before remembered permissions: their rule alone, as the fragment has it.
        text = fragment_text("rules.yml")
        rule = text[text.index(_REVOKE_RULE_COMMENT) : text.index(_APPROVAL_RULE_COMMENT)].rstrip("\n")
        result.files[bot / PERMISSIONS_RULE_FILE] = f'version: "3.1"\n\nrules:\n{rule}\n'
        result.added.append(f'{PERMISSIONS_RULE_FILE}: the rule for "stop saving without asking"')

    lacking = [intent for intent in nlu_intents if intent not in with_examples]
    if lacking:
        if (bot / NLU_FILE).exists():
            problems.append(f"{bot / NLU_FILE}: exists but has no examples for {', '.join(lacking)}")
            return
        nlu = Fragment.read("nlu.yml", ("nlu",), _nlu_name)
        splice = Splice(nlu.header(), str(bot / NLU_FILE))
        splice.add_list_items("nlu", [nlu.blocks["nlu"][intent] for intent in lacking])
        result.files[bot / NLU_FILE] = splice.result()
        result.added.append(f"{NLU_FILE}: examples for {', '.join(lacking)}")


_APPROVAL_RULE_COMMENT = "  # A second approver decided"
_REVOKE_RULE_COMMENT = '  # "stop saving without asking"'


def _is_revoke_rule(rule: Any) -> bool:
    steps = rule.get("steps") if isinstance(rule, dict) else None
    return isinstance(steps, list) and steps[:2] == [{"intent": REVOKE_INTENT}, {"action": REVOKE_ACTION}]


def _is_approval_rule(rule: Any) -> bool:
    steps = rule.get("steps") if isinstance(rule, dict) else None
    return isinstance(steps, list) and steps[:2] == [{"intent": APPROVAL_INTENT}, {"action": APPROVAL_ACTION}]


def _is_resume_rule(rule: Any) -> bool:
    steps = rule.get("steps") if isinstance(rule, dict) else None
    return isinstance(steps, list) and steps[:2] == [{"intent": "mcp_signed_in"}, {"action": RESUME_ACTION}]


def acts_as_person(bot: Path) -> bool:
    """An MCP server in the bot's endpoints.yml acts as the person (``oauth.grant: authorization_code``)."""
    path = bot / "endpoints.yml"
    try:
        document = load(path.read_text(encoding="utf-8"), str(path)) if path.exists() else None
    except (OSError, UnicodeDecodeError, ConfigError):
        return False  # reported where endpoints.yml is read
    servers = document.get("mcp_servers") if isinstance(document, dict) else None
    return any(
        isinstance(server, dict)
        and isinstance(server.get("oauth"), dict)
        and server["oauth"].get("grant") == AUTHORIZATION_CODE
        for server in servers or []
    )


def _is_loop_rule(rule: Any) -> bool:
    if not isinstance(rule, dict):
        return False
    condition = rule.get("condition") or []
    steps = rule.get("steps") or []
    return {"active_loop": CONFIRMATION_LOOP} in condition and steps == [
        {"action": CONFIRMATION_LOOP},
        {"active_loop": None},
    ]


_ACTION_ENDPOINT = """\
# The action server: rasa_sdk with mcp_bridge (`python -m rasa_sdk --actions actions`), on rasa_sdk's
# default port, 5055. For another port, change it here and start the action server with --port.
action_endpoint:
  url: "http://localhost:5055/webhook"
"""


def _plan_endpoints(bot: Path, result: Plan, problems: list[str], servers: dict[str, str]) -> None:
    path = bot / "endpoints.yml"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    root = compose(text, str(path))
    splice = Splice(text, str(path))
    have = existing_servers(load(text, str(path)) if text.strip() else None)
    added = {name: block for name, block in servers.items() if name not in have}
    if top_level(root, "action_endpoint") is None:
        splice.append(_ACTION_ENDPOINT)
        result.added.append(
            "endpoints.yml: action_endpoint (http://localhost:5055/webhook; for another port, change "
            "it there and start the action server with --port)"
        )
    found = top_level(root, "mcp_servers")
    if found is None and added:
        fragment = fragment_text("endpoints.yml")
        header = fragment[: fragment.index("mcp_servers:")]
        splice.append(header + "mcp_servers:\n" + "".join(reindent(block, 2) for block in added.values()))
    elif found is None:
        splice.append(fragment_text("endpoints.yml"))
        result.added.append("endpoints.yml: mcp_servers (none yet)")
    elif not isinstance(found[1], SequenceNode) and not (
        isinstance(found[1], ScalarNode) and found[1].value in ("", "null", "~")
    ):
        problems.append(f"{path}: mcp_servers: must be a list of servers")
    elif added:
        try:
            splice.add_list_items("mcp_servers", list(added.values()))
        except ConfigError as exc:
            problems.append(str(exc))
    if added:
        result.added.append(f"endpoints.yml: mcp_servers {', '.join(added)} (from Mantle's integrations.yml)")
    if splice.changed:
        result.files[path] = splice.result()


def _rel(bot: Path, path: Path) -> str:
    try:
        return str(path.relative_to(bot))
    except ValueError:
        return str(path)


def run(args: argparse.Namespace) -> int:
    bot = Path(args.dir)
    try:
        mantle = Path(args.from_mantle) if args.from_mantle else None
        planned = plan(bot, Path(args.domain) if args.domain else None, mantle)
    except InitClash as clash:
        print("mcp-bridge init: nothing was written; the bot defines these differently:", file=sys.stderr)
        for problem in clash.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"mcp-bridge init: nothing was written: {exc}", file=sys.stderr)
        return 1
    for note in planned.notes:
        print(f"note: {note}")
    for refusal in planned.refused:
        print(f"mcp-bridge init: not carried over: {refusal}", file=sys.stderr)
    status = 1 if planned.refused else 0
    if not planned.files:
        print(f"mcp-bridge init: {bot} is ready for mcp_bridge; nothing to change")
        return status
    planned.write()
    for line in planned.added:
        print(f"added {line}")
    print(
        "next: a skill in skills/, `import mcp_bridge.rasa` in actions/__init__.py, `mcp-bridge check` "
        "(docs/ADOPTING.md, steps 3 to 7)"
    )
    return status


def register(commands: Any, summary: str) -> None:
    parser = add_command(
        commands,
        "init",
        run,
        help=summary,
        description=__doc__,
    )
    bot_folder(parser)
    parser.add_argument("--domain", help="domain.yml or a domain directory (default: found in DIR)")
    parser.add_argument(
        "--from-mantle",
        metavar="MANTLE",
        help="a Rasa Pro Mantle project (or its skills/ folder): take over the skills the plugin can run, "
        "with their slots, responses and MCP servers",
    )
