"""Builds the one Executor this action server uses, from files and environment variables.

ENDPOINTS (endpoints.yml), SKILLS_DIR (skills), DOMAIN (domain.yml), AUDIT_LOG (var/audit.jsonl),
CONFIRMATION_TTL_SECONDS (300), CONFIRMATION_SECRET (signs pending confirmations; give every replica
the same value, or a question asked before a restart cannot be confirmed after it). The local tools
are the `crm` tool functions.
"""

import functools
import logging
import os

from crm.tools import TOOLS as CRM_TOOLS
from mcp_bridge import MCPRuntime, load_mcp_servers, metrics
from mcp_bridge.audit import AuditLog
from mcp_bridge.errors import ConfigError
from mcp_bridge.executor import ConfirmationPolicy, Executor, Responses
from mcp_bridge.skills import domain_responses, load_skills

log = logging.getLogger(__name__)

LOCAL_TOOLS = dict(CRM_TOOLS)


@functools.cache
def executor() -> Executor:
    """The executor, built once; raises ConfigError (file, place, reason) when a file is invalid."""
    endpoints = os.environ.get("ENDPOINTS", "endpoints.yml")
    skills_dir = os.environ.get("SKILLS_DIR", "skills")
    domain = os.environ.get("DOMAIN", "domain.yml")
    servers = load_mcp_servers(endpoints)
    responses = Responses()
    known_responses = domain_responses(domain)
    missing = sorted(responses.names() - known_responses)
    if missing:
        raise ConfigError(
            f"{domain}: the executor needs these responses, which are missing: {', '.join(missing)}"
        )
    skills = load_skills(skills_dir, local_tools=LOCAL_TOOLS, mcp_servers=servers, responses=known_responses)
    ttl = _positive_float("CONFIRMATION_TTL_SECONDS", 300.0)
    built = Executor(
        skills,
        LOCAL_TOOLS,
        MCPRuntime(servers),
        policy=ConfirmationPolicy(ttl_seconds=ttl),
        responses=responses,
        audit=AuditLog(
            os.environ.get("AUDIT_LOG", "var/audit.jsonl"), observers=[metrics.count_confirmation]
        ),
        secret=os.environ["CONFIRMATION_SECRET"].encode() if os.environ.get("CONFIRMATION_SECRET") else None,
    )
    for skill in skills.values():
        sources = ", ".join(f"{tool}={source}" for tool, source in skill.tools.items())
        log.info("skill %s from %s: %s", skill.id, skill.path, sources)
    return built


def _positive_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}: {raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"environment variable {name}: must be positive")
    return value
