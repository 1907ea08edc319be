"""The one Executor of this action server, built from files and its settings on first use.

The settings (:class:`mcp_bridge.config.settings.Settings`: every variable, its default and what it does)
are read from the environment once per process, by :func:`settings`, and handed to what needs them:
the files (ENDPOINTS, SKILLS_DIR, DOMAIN), the plugin's database and its seal, the audit trail, the
reader's words and limit, the second approver's lease and characters, the people's tokens' key.
Local tools are whatever the bot registered with :func:`mcp_bridge.local_tool`.

Everything is checked here, so the action server refuses to start on a bad file or value, naming the
file or variable, the place and the reason; ``mcp-bridge check`` runs the same checks offline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.approvals import textmatch
from mcp_bridge.approvals.store import ApprovalTable
from mcp_bridge.auth.person import PersonOAuth
from mcp_bridge.auth.token_store import TokenStore, token_keys
from mcp_bridge.config.random_values import looks_like_a_placeholder
from mcp_bridge.config.servers import MCPServerConfig, load_mcp_servers
from mcp_bridge.config.settings import Settings
from mcp_bridge.confirmation.decisions import ConfirmationPolicy
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.confirmation.gate import declared
from mcp_bridge.contract import RESPONSES
from mcp_bridge.errors import ConfigError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability import metrics, otel, tracing
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.reading.reader import ConfirmationReader
from mcp_bridge.reading.words import load_words
from mcp_bridge.record.database import open_database
from mcp_bridge.record.store import Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import (
    SkillFiles,
    check_questions_carry_no_buttons,
    check_skills,
    domain_documents,
    domain_responses,
    read_skill_dir,
)
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.local import registered_local_tools

log = logging.getLogger(__name__)


@functools.cache
def settings() -> Settings:
    """This process's settings, read from its environment once."""
    return Settings.from_env()


def build_executor(given: Settings | None = None, *, allow_unset: bool = False) -> Executor:
    """An executor from the files and values of ``given`` (default: this process's :func:`settings`);
    raises ConfigError (file or variable, place, reason).

    ``allow_unset`` is for the offline check only: an unset ``${VAR}`` in a server's url, token or
    api_key is then recorded on the server (which is never connected to) instead of refused, and the
    record is one of this process only (no file is written).
    """
    config = settings() if given is None else given
    domain = config.domain
    servers = load_mcp_servers(config.endpoints, config.environ, allow_unset=allow_unset)
    check_meta_slots(servers, domain)
    responses = RESPONSES
    known_responses = domain_responses(domain)
    acts_as_person = any(server.acts_as_person for server in servers.values())
    location = ":memory:" if allow_unset else config.database
    try:
        database = open_database(location)
    except Exception as exc:  # an unreadable file, a folder that cannot be made
        raise ConfigError(f"the plugin's database {location}: {type(exc).__name__}: {exc}") from None
    record = Record(database)
    seal = confirmation_seal(config, record)
    person = None
    if acts_as_person and not allow_unset:
        person = PersonOAuth(
            servers, TokenStore(database, token_keys(config.token_key))
        )  # refuses a missing or weak key
    needed = responses.for_every_bot() | (responses.for_acting_as_the_person() if acts_as_person else set())
    _check_responses(
        domain, needed - known_responses, "the executor needs these responses, which are missing"
    )
    local = registered_local_tools()
    skills = check_skills(
        skill_files(config.skills_dir), local_tools=local, mcp_servers=servers, responses=known_responses
    )
    if any(c.allows_remembering for skill in skills.values() for c in skill.constraints.values()):
        _check_responses(
            domain,
            responses.for_remembering() - known_responses,
            "a skill allows remembered permissions, and these responses are missing",
        )
    questions = {responses.confirm_tool_call, responses.confirm_calls, responses.confirm_one_call} | {
        rule.utter_for_confirmation
        for skill in skills.values()
        for tool in skill.constraints
        if (rule := declared(skill, tool)) is not None and rule.utter_for_confirmation
    }
    policy = ConfirmationPolicy(ttl_seconds=config.confirmation_ttl_seconds)
    check_questions_carry_no_buttons(domain, questions)
    reader = build_reader(config, policy)
    # Counted, turned into spans and (when configured) sent as OpenTelemetry log records, entry by entry.
    audit = AuditLog.from_settings(
        config, observers=[metrics.count_confirmation, tracing.audit_span, otel.audit_record]
    )
    second_approvers = None
    if any(c.requires_approval_from for skill in skills.values() for c in skill.constraints.values()):
        _check_responses(
            domain,
            responses.for_approvals() - known_responses,
            "a skill requires a second approver, and these responses are missing",
        )
        textmatch.declare(config.approval_text_characters)  # refused at start when wrong
        second_approvers = approvals.Approvals(
            ApprovalTable(database), audit, run_lease=config.approval_run_lease_seconds
        )
    runtime = MCPRuntime(servers, person_oauth=person)
    runtime.waiting.wait_seconds = config.elicitation_wait_seconds
    runtime.waiting.limit = config.elicitation_max_waiting
    built = Executor(
        skills,
        ToolBox(local, runtime, audit=audit),  # every call is an entry too
        policy=policy,
        responses=responses,
        audit=audit,
        seal=seal,
        reader=reader,
        approvals=second_approvers,
        record=record,
    )
    for skill in skills.values():
        sources = ", ".join(f"{tool}={source}" for tool, source in skill.tools.items())
        log.info("skill %s (%s) from %s: %s", skill.id, skill.action, skill.path, sources)
    return built


def _check_responses(domain: str, missing: set[str], why: str) -> None:
    """ConfigError when any response is ``missing`` from the domain: ``{domain}: {why}: {names}``."""
    if missing:
        raise ConfigError(f"{domain}: {why}: {', '.join(sorted(missing))} (`mcp-bridge init` adds them)")


def skill_files(skills_dir: str | Path) -> SkillFiles:
    """The skill files of ``skills_dir``, read and schema-checked once per process.

    rasa_sdk needs the skills' action classes as soon as the bot imports :mod:`mcp_bridge.rasa`
    (:func:`mcp_bridge.action_server.actions.serve_skills`), before the bot has registered its local tools;
    the start-up checks (:func:`build_executor`) come later. Both read the directory through here,
    so the actions served are the skills checked, from one reading of the files.
    """
    return _read_skill_dir(Path(skills_dir).resolve())


@functools.cache
def _read_skill_dir(directory: Path) -> SkillFiles:
    return read_skill_dir(directory)


def check_meta_slots(servers: Mapping[str, MCPServerConfig], domain: str) -> None:
    """Every slot a server's ``meta_map.from_slots`` sends is a slot of the domain."""
    if not any(server.meta_from_slots for server in servers.values()):
        return
    slots: set[str] = set()
    for _, document in domain_documents(domain):
        declared = document.get("slots")
        slots |= set(declared) if isinstance(declared, dict) else set()
    for server in servers.values():
        for index, entry in enumerate(server.meta_from_slots):
            if entry.slot not in slots:
                raise ConfigError(
                    f"{server.where}: meta_map.from_slots[{index}].slot: {entry.slot!r} is not a slot of "
                    f"the domain ({domain}), so _meta[{entry.param!r}] would never be sent; add the slot "
                    "or fix its name"
                )


@functools.cache
def executor() -> Executor:
    """This action server's executor, built once (see :func:`build_executor`)."""
    return build_executor()


def build_reader(config: Settings, policy: ConfirmationPolicy) -> ConfirmationReader:
    """The reader of answers: the English words plus the word file CONFIRMATION_WORDS names, messages
    up to MESSAGE_MAX_CHARS, the policy's intents and confidences; ConfigError (file, place, reason)."""
    extra_words = [config.confirmation_words] if config.confirmation_words else []
    return ConfirmationReader(
        load_words(*extra_words),
        affirm_intent=policy.affirm_intent,
        deny_intent=policy.deny_intent,
        min_confidence=policy.min_confidence,
        deny_margin=policy.deny_margin,
        max_chars=config.message_max_chars,
    )


@functools.cache
def confirmation_reader() -> ConfirmationReader:
    """The reader this action server's executor reads answers with (its word file and limit), for a
    bot's own forms: one list of words serves the form and the confirmation.

    Built once, from the same settings as the executor's reader, and nothing else: no endpoints, skills
    or database are read for it."""
    return build_reader(settings(), ConfirmationPolicy())


# Development only, with a warning at every start: accept a short or placeholder CONFIRMATION_SECRET,
# and messages no channel signed as from nobody (mcp_bridge.action_server.adapter.ChannelCheck).
DEVELOPMENT_FLAG = "MCP_BRIDGE_DEVELOPMENT"
MIN_SECRET_BYTES = 32


def confirmation_seal(config: Settings, record: Record | None = None) -> Seal:
    """The seal for CONFIRMATION_SECRET (and CONFIRMATION_EXTRA_SECRETS); refuses a short or
    placeholder secret (ConfigError).

    Anyone who knows a secret can forge a question's seal: each must be long and random.
    CONFIRMATION_SECRET seals and opens; the extra secrets (separated by commas) only open, for a
    rotation: add the new secret there on every replica, then swap the two, then drop the old one.
    Unset, the key is one the record draws once and keeps in a SQLite database (so `make chat`, `rasa run
    actions` and the image need nothing set, and a restart keeps it); a PostgreSQL database, shared by
    replicas, needs the secret (a database writer could otherwise forge what the seal protects). Without
    a record (a test), a key for the returned seal alone.
    """
    secret = config.confirmation_secret
    extra = config.confirmation_extra_secrets
    if not secret:
        if extra:
            raise ConfigError(
                "environment variable CONFIRMATION_EXTRA_SECRETS is set but CONFIRMATION_SECRET is not: "
                "the extra secrets only open what they sealed; set the one that seals"
            )
        if record is None:
            return Seal.ephemeral()
        if record.database.dialect != "sqlite":
            raise ConfigError(
                f"environment variable CONFIRMATION_SECRET is not set, and the plugin's database is "
                f"{record.database.where}: replicas sharing a database must share the key questions are "
                "sealed with. Set CONFIRMATION_SECRET to the same long random value on every replica"
            )
        return Seal(_now(record.seal_key()))
    named = [("CONFIRMATION_SECRET", secret)]
    named += [(f"secret {n} of CONFIRMATION_EXTRA_SECRETS", s) for n, s in enumerate(extra, start=1)]
    for which, value in named:
        problem = weakness(value)
        if problem and config.development:
            log.warning(
                "%s %s; accepted only because %s=1 (never in production)", which, problem, DEVELOPMENT_FLAG
            )
        elif problem:
            raise ConfigError(
                f"environment variable {which} {problem}: anyone who can guess it can forge a "
                "confirmation. Use at least 32 random bytes, e.g. the output of "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`, the same on every replica "
                f"(for a local trial only, {DEVELOPMENT_FLAG}=1 accepts it)"
            )
    return Seal(*(value.encode() for _, value in named))


def weakness(secret: str) -> str | None:
    """Why ``secret`` is no random value (too short, or a placeholder's words), or None."""
    size = len(secret.encode())
    if size < MIN_SECRET_BYTES:
        return f"is {size} bytes long, shorter than {MIN_SECRET_BYTES}"
    if looks_like_a_placeholder(secret):
        return "looks like a placeholder, not a random value"
    return None


def _now(work: Coroutine[Any, Any, _Result]) -> _Result:
    """``work`` run to its end from synchronous code (the start-up checks), on a loop of its own in a
    worker thread, whether or not this thread runs one. Only for SQLite, whose connection is bound to no
    event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


_Result = TypeVar("_Result")
