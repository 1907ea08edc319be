"""`mcp-bridge check [DIR] [--actions PKG] [--live]`: the action server's start-up checks, for CI.

Offline (the default) it does what ``python -m rasa_sdk --actions actions`` does before it listens,
from the bot's folder: imports the bot's actions package (so its local tools are registered), then
builds the executor from ``endpoints.yml``, ``skills/`` and the domain (ENDPOINTS, SKILLS_DIR and
DOMAIN override them, as for the action server), and adds what only matters to Rasa: each skill's
``action:``, and the plugin's own actions, slot and intents, are in the domain.

Every skill is reported on its own, after the summary: the skills that load (the file, its action, each
tool and where it comes from, and which it asks about first), and, when one does not, each that does
not with the file, the place and the reason (then the exit status is 1). A Rasa Pro Mantle skill
(``skills/<id>/skill.md``) is reported as any skill file is.

Offline, an MCP server's url, token or api_key may use a ``${VAR}`` that is not set: the check
needs no server and no secret, so CI passes without them. It names the variables the action
server will need (never their values); the action server and ``--live`` refuse an unset one.

``--live`` also asks each MCP server a skill uses, for each tool the skill imports: it exists, the
step's arguments give every property its input schema requires and literal arguments satisfy it,
and it publishes an output schema (a tool annotated ``-> dict`` sends text blocks only, and the
``ok``/``error`` keys the steps branch on do not survive the wire). After the summary it prints,
for each of those servers, the protocol revision negotiated, the authentication configured (never a
secret) and the server's capabilities. A server that acts as the person is checked with the token in
MCP_OPERATOR_TOKEN; without one its tools are not checked, and the check says so, naming the
authorization server it discovered (see ``mcp-bridge tools``).

Exit status 0 with a one-line summary; 1 with the file, the place and the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import secrets
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema

from mcp_bridge.cli.command import actions_package, add_command, bot_folder
from mcp_bridge.cli.init import domain_location
from mcp_bridge.cli.tools import as_operator, before_sign_in, with_operator
from mcp_bridge.config.servers import MCPServerConfig, load_mcp_servers
from mcp_bridge.config.settings import Settings, process_environment
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import (
    APPROVAL_ACTION,
    APPROVAL_INTENT,
    ELICITATION_SLOT,
    PENDING_SLOT,
    PLUGIN_ACTIONS,
    PLUGIN_INTENTS,
    REVOKE_ACTION,
    REVOKE_INTENT,
)
from mcp_bridge.errors import ConfigError, ToolCallError
from mcp_bridge.mcp_client.runtime import MCPRuntime, ServerDescription
from mcp_bridge.skills.files import (
    MANTLE_SKILL_FILE,
    ResultArgument,
    Skill,
    SlotArgument,
    check_each,
    domain_documents,
    domain_responses,
    read_skill_dir,
)
from mcp_bridge.tools.local import registered_local_tools

_FILES = ("ENDPOINTS", "SKILLS_DIR", "DOMAIN")
# Files the action server reads from its working directory, the bot's folder.
_BOT_FILES = ("CONFIRMATION_WORDS", "AUDIT_LOG")


def bot_environment(bot: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The action server's environment for the bot in ``bot``: its files unless the caller set them.

    Every file is an absolute path, so nothing depends on this process's working directory: the
    three the caller may name on the command line are taken from where the caller stands, and the
    others from the bot's folder, where the action server runs."""
    env = dict(environ)
    defaults = {"ENDPOINTS": bot / "endpoints.yml", "SKILLS_DIR": bot / "skills"}
    for name in _FILES:
        if env.get(name):
            env[name] = str(Path(env[name]).resolve())
        else:
            env[name] = str(defaults[name] if name in defaults else domain_location(bot))
    for name in _BOT_FILES:
        if env.get(name):
            env[name] = str(bot / env[name])  # an absolute path stays as it is
    env.setdefault("AUDIT_LOG", "")  # a check writes no audit trail
    env.setdefault("CONFIRMATION_SECRET", secrets.token_urlsafe(32))  # and seals nothing
    return env


def load_bot(bot: Path, package: str) -> None:
    """Import the bot's actions package, as rasa_sdk does, so that its local tools are registered.

    The bot registers them in its own code (``register_local_tools``), which only an import runs;
    the skills that use them are checked afterwards (:func:`check_bot`). rasa_sdk runs from the
    bot's folder, which Python puts first on ``sys.path``, so the package and the bot's own modules
    (the example's ``crm``) import by their names: the folder is on ``sys.path`` for the import only.
    """
    imported_before = "mcp_bridge.rasa" in sys.modules
    sys.path.insert(0, str(bot))
    try:
        importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name == package:
            raise ConfigError(f"{bot}: no actions package {package!r} (use --actions to name it)") from None
        raise ConfigError(f"{bot / package}: importing it failed: {type(exc).__name__}: {exc}") from None
    except Exception as exc:
        raise ConfigError(f"{bot / package}: importing it failed: {type(exc).__name__}: {exc}") from None
    finally:
        with contextlib.suppress(ValueError):  # unless the bot's code took it off itself
            sys.path.remove(str(bot))
    if not imported_before and "mcp_bridge.rasa" not in sys.modules:
        raise ConfigError(
            f"{bot / package}: does not import mcp_bridge.rasa, so rasa_sdk would not serve the plugin's "
            f"actions; add `import mcp_bridge.rasa` to {package}/__init__.py"
        )


def check_domain(domain: str, skills: Mapping[str, Skill]) -> None:
    """Each skill's action and the plugin's own actions, slot and intents are in the domain."""
    actions: set[str] = set()
    slots: set[str] = set()
    intents: set[str] = set()
    for _, document in domain_documents(domain):
        actions |= _names(document.get("actions"))
        slots |= _names(document.get("slots"))
        intents |= _names(document.get("intents"))
    for skill in skills.values():
        if skill.action not in actions:
            raise ConfigError(
                f"{skill.path}: action: {skill.action!r} is not in the domain's actions ({domain}), so Rasa "
                "would never run it; add it there (`mcp-bridge init` does)"
            )
    missing = [f"action {name}" for name in PLUGIN_ACTIONS if name not in actions]
    missing += [f"slot {slot}" for slot in (PENDING_SLOT, ELICITATION_SLOT) if slot not in slots]
    missing += [f"intent {name}" for name in PLUGIN_INTENTS if name not in intents]
    approving = [
        s.path.name for s in skills.values() if any(c.requires_approval_from for c in s.constraints.values())
    ]
    if approving:
        _check_text_mappings(domain)
        needed = [f"action {APPROVAL_ACTION}"] if APPROVAL_ACTION not in actions else []
        needed += [f"intent {APPROVAL_INTENT}"] if APPROVAL_INTENT not in intents else []
        missing += [f"{need} (for requires_approval_from in {', '.join(approving)})" for need in needed]
    remembering = [
        s.path.name for s in skills.values() if any(c.allows_remembering for c in s.constraints.values())
    ]
    if remembering:
        needed = [f"action {REVOKE_ACTION}"] if REVOKE_ACTION not in actions else []
        needed += [f"intent {REVOKE_INTENT}"] if REVOKE_INTENT not in intents else []
        missing += [f"{need} (for allows_remembering in {', '.join(remembering)})" for need in needed]
    if missing:
        raise ConfigError(f"{domain}: the plugin needs {', '.join(missing)} (`mcp-bridge init` adds them)")


def _check_text_mappings(domain: str) -> None:
    """A second approver's decision arrives as a message of its own (text ``EXTERNAL: approval_decided``),
    maybe while a form asks for text: every ``from_text`` slot mapping must leave it alone."""
    for file, document in domain_documents(domain):
        slots = document.get("slots")
        for slot, spec in slots.items() if isinstance(slots, dict) else []:
            mappings = spec.get("mappings") if isinstance(spec, dict) else None
            for index, mapping in enumerate(mappings if isinstance(mappings, list) else []):
                if not isinstance(mapping, dict) or mapping.get("type") != "from_text":
                    continue
                excluded, only = (_listed(mapping.get(key)) for key in ("not_intent", "intent"))
                if APPROVAL_INTENT not in excluded and (not only or APPROVAL_INTENT in only):
                    raise ConfigError(
                        f"{file}: slots.{slot}.mappings[{index}]: a from_text mapping would take a second "
                        f"approver's decision (intent {APPROVAL_INTENT}) as the slot's text; add "
                        f"`not_intent: [{APPROVAL_INTENT}]`"
                    )


def _listed(value: Any) -> set[str]:
    """A mapping's ``intent`` / ``not_intent``: one name or a list of names."""
    return {value} if isinstance(value, str) else _names(value)


def _names(value: Any) -> set[str]:
    if isinstance(value, dict):
        return {str(key) for key in value}
    if isinstance(value, list):
        return {
            str(next(iter(entry))) if isinstance(entry, dict) and len(entry) == 1 else str(entry)
            for entry in value
        }
    return set()


async def check_live(
    executor: Executor, operator_token: str | None
) -> tuple[list[str], int, list[ServerDescription], list[str]]:
    """Problems found at the MCP servers (file, place, reason each), how many tools were checked,
    what each server reached is (protocol revision, auth, capabilities), and what is said of each
    server that acts as the person and could not be listed (no operator's token: see cli.tools)."""
    runtime = executor.tools.runtime
    assert runtime is not None
    problems: list[str] = []
    checked = 0
    unreachable: set[str] = set()
    described: dict[str, ServerDescription] = {}
    not_listed: dict[str, list[str]] = {}
    # A server that acts as the person is listed with the operator's token, on a runtime of its own.
    operators: dict[str, MCPRuntime] = {}
    try:
        for skill in executor.skills.values():
            for tool_name, server in skill.mcp_imports().items():
                if server in unreachable or server in not_listed:
                    continue
                where = f"{skill.path}: tools.{tool_name}"
                config = runtime.servers[server]
                asks = runtime
                try:
                    if config.acts_as_person:
                        operator = as_operator(config, operator_token)
                        if operator is None:
                            not_listed[server] = await before_sign_in(config)
                            continue
                        asks = operators.setdefault(server, MCPRuntime({server: operator}))
                    catalogue = await asks.tools(server)
                    if server not in described:
                        found = await asks.describe(server)
                        described[server] = with_operator(found, config) if asks is not runtime else found
                except ToolCallError as exc:
                    unreachable.add(server)
                    problems.append(f"{where}: {exc} (url {config.url})")
                    continue
                tool = catalogue.get(tool_name)
                if tool is None:
                    served = ", ".join(sorted(catalogue)) or "none"
                    problems.append(
                        f"{where}: MCP server {server!r} has no tool named {tool_name!r} ({served})"
                    )
                    continue
                checked += 1
                if tool.output_schema is None:
                    problems.append(
                        f"{where}: MCP tool {tool_name!r} on server {server!r} publishes no output schema, "
                        "so its result arrives as text blocks and the keys the steps read (ok, error, ...) "
                        "are lost; fix the server: return a pydantic model (e.g. `-> ReminderResult`, not "
                        "`-> dict`) so it publishes outputSchema and answers with structuredContent"
                    )
                problems.extend(_check_steps(skill, tool_name, dict(tool.input_schema)))
    finally:
        for operator_runtime in operators.values():
            await operator_runtime.aclose()
    lines = [line for server in not_listed.values() for line in ["", *server]]
    return problems, checked, list(described.values()), lines


def _check_steps(skill: Skill, tool_name: str, schema: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    for index, step in enumerate(skill.steps):
        if step.execute_tool != tool_name:
            continue
        where = f"{skill.path}: steps[{index}].arguments"
        missing = sorted(required - set(step.arguments))
        if missing:
            given = ", ".join(missing)
            problems.append(f"{where}: {tool_name!r} requires {given}, which the step does not give")
        unknown = sorted(set(step.arguments) - set(properties))
        if unknown and schema.get("additionalProperties") is False:
            problems.append(f"{where}: {tool_name!r} takes no argument {', '.join(unknown)}")
        for name, source in step.arguments.items():
            if isinstance(source, SlotArgument | ResultArgument) or name not in properties:
                continue
            partial = {"type": "object", "properties": {name: properties[name]}}
            if "$defs" in schema:
                partial["$defs"] = schema["$defs"]
            error = jsonschema.exceptions.best_match(
                jsonschema.Draft202012Validator(partial).iter_errors({name: source})
            )
            if error is not None:
                problems.append(f"{where}.{name}: {source!r} does not fit {tool_name!r}: {error.message}")
    return problems


def skill_report(files: Mapping[str, str], bot: Path) -> tuple[list[str], bool]:
    """One line per skill file of the bot's skills folder: what loads (its action, its tools and their
    sources, ``asks first`` for a declared confirmation) and what does not (file, place, reason); and
    whether every one loads. ``files`` names the endpoints, skills and domain (as
    :func:`bot_environment` does); they are read and checked as the action server checks them."""
    endpoints, skills_dir, domain = (files[name] for name in _FILES)
    servers = load_mcp_servers(endpoints, files, allow_unset=True)
    checked = check_each(
        read_skill_dir(skills_dir),
        local_tools=registered_local_tools(),
        mcp_servers=servers,
        responses=domain_responses(domain),
    )
    lines = []
    for path, skill in checked:
        if isinstance(skill, ConfigError):
            lines.append(f"  does not load: {skill}")
            continue
        kind = " (a Mantle skill)" if path.name == MANTLE_SKILL_FILE else ""
        tools = ", ".join(
            f"{name} ({source}{', asks first' if _declared(skill, name) else ''})"
            for name, source in skill.tools.items()
        )
        shown = path.relative_to(bot) if path.is_relative_to(bot) else path
        lines.append(f"  loads: {skill.id}{kind}, {shown}: {skill.action}; {tools}")
    return lines, all(isinstance(skill, Skill) for _, skill in checked)


def _declared(skill: Skill, tool: str) -> bool:
    constraint = skill.constraints.get(tool)
    rule = constraint.requires_confirmation if constraint is not None else None
    return rule is not None and rule.enabled


async def check_bot(bot: Path, *, package: str = "actions", live: bool = False) -> str:
    """Run the checks for the bot in ``bot``; the summary line and a line per skill, or ConfigError
    with the first problem (every skill's line when a skill does not load)."""
    env = bot_environment(bot, process_environment())
    config = Settings.from_env(env)
    load_bot(bot, package)
    report, every_one_loads = skill_report(env, bot)
    if not every_one_loads:
        loads = sum(line.startswith("  loads:") for line in report)
        raise ConfigError(f"{loads} of {len(report)} skill(s) load:\n" + "\n".join(report))
    # Imported here, not at the top: it imports rasa_sdk, which `mcp-bridge init` does not need.
    from mcp_bridge.action_server.build import build_executor

    # Offline, a server's url or secret may come from a variable that only the action server's
    # environment sets (CI has no such value): the file's shape is checked, the variable listed.
    executor = build_executor(config, allow_unset=not live)
    try:
        check_domain(config.domain, executor.skills)
        checked = 0
        described: list[ServerDescription] = []
        not_listed: list[str] = []
        if live:
            problems, checked, described, not_listed = await check_live(executor, config.operator_token)
            if problems:
                raise ConfigError("\n".join(problems))
    finally:
        await executor.aclose()
    skills = ", ".join(sorted(skill.action for skill in executor.skills.values()))
    runtime = executor.tools.runtime
    servers = len(runtime.servers) if runtime is not None else 0
    mode = f"live: {checked} MCP tool(s) checked at their servers" if live else "offline"
    summary = (
        f"mcp-bridge check: ok: {len(executor.skills)} skill(s) ({skills}), {servers} MCP server(s), "
        f"{len(registered_local_tools())} local tool(s); {mode}"
    )
    needed = needed_variables(runtime.servers.values() if runtime is not None else [], env)
    lines = [summary] + [f"the action server needs these environment variables: {needed}"] * bool(needed)
    lines += ["skills:", *report]
    for server in described:
        lines += ["", *server.lines()]
    return "\n".join(lines + not_listed)


def needed_variables(servers: Iterable[MCPServerConfig], env: Mapping[str, str]) -> str:
    """The variables the servers' url, token and api_key need, and whether each is set here (never
    its value)."""
    names = dict.fromkeys(name for server in servers for name in server.variables)
    return ", ".join(f"{name} ({'set' if env.get(name) is not None else 'not set'} here)" for name in names)


def run(args: argparse.Namespace) -> int:
    bot = Path(args.dir).resolve()
    try:
        summary = asyncio.run(check_bot(bot, package=args.actions, live=args.live))
    except ConfigError as exc:
        print(f"mcp-bridge check: {exc}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def register(commands: Any, summary: str) -> None:
    parser = add_command(
        commands,
        "check",
        run,
        help=summary,
        description=__doc__,
    )
    bot_folder(parser)
    actions_package(parser)
    parser.add_argument("--live", action="store_true", help="also connect to each MCP server")
