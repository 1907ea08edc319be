"""Where the CRM keeps its data and where its services are reached, read from the environment.

Every value is read when asked for, not at import, so a test (or a supervisor) can point a
process at another database or URL by setting the environment before the call.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DB = "var/crm.sqlite3"
DEFAULT_URL = "http://127.0.0.1:8100"
DEFAULT_REST_PORT = 8100
DEFAULT_MCP_PORT = 8200


def db_path() -> Path:
    """The SQLite file (`CRM_DB`, relative to the working directory; used when `CRM_DATABASE_URL`
    is unset); its parent is created."""
    path = Path(os.environ.get("CRM_DB") or DEFAULT_DB)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def database_url() -> str | None:
    """PostgreSQL URL of the CRM store (`CRM_DATABASE_URL`); None keeps the SQLite file.

    The URL may carry a password: callers may say whether one is set, never print it.
    """
    return os.environ.get("CRM_DATABASE_URL") or None


def crm_url() -> str:
    """Base URL of the CRM REST API (`CRM_URL`), without a trailing slash."""
    return (os.environ.get("CRM_URL") or DEFAULT_URL).rstrip("/")


API_TOKEN_ENV = "CRM_API_TOKEN"


def api_token() -> str | None:
    """Bearer token of the CRM REST API (`CRM_API_TOKEN`): the API requires it, and its clients (the
    MCP server's tools, the local tools in the action server) send it. None when unset or empty.

    The value is a secret: callers may say whether one is set, never what it is. A short or placeholder
    one stops the process (:func:`strong`).
    """
    return strong(API_TOKEN_ENV, os.environ.get(API_TOKEN_ENV) or None)


def mcp_token() -> str | None:
    """Bearer token the MCP server requires (`CRM_MCP_TOKEN`); None when unset or empty; a short or
    placeholder one stops the process (:func:`strong`).

    The value is a secret: callers may say whether one is set, never what it is.
    """
    return strong("CRM_MCP_TOKEN", os.environ.get("CRM_MCP_TOKEN") or None)


MIN_TOKEN_CHARS = 32
_PLACEHOLDERS = ("change", "placeholder", "example", "replace", "your-token", "your_token", "secret-here")


def strong(name: str, token: str | None) -> str | None:
    """``token`` when it is long and random-looking (or unset); otherwise SystemExit naming ``name`` and
    why, never the value: deploy/example.env's `replace-me` must never guard a deployment."""
    if token is None:
        return None
    lowered = token.lower()
    if len(token) < MIN_TOKEN_CHARS:
        why = f"is {len(token)} characters long, shorter than {MIN_TOKEN_CHARS}"
    elif any(word in lowered for word in _PLACEHOLDERS) or len(set(token)) < 8:
        why = "looks like a placeholder, not a random value"
    else:
        return token
    raise SystemExit(
        f"environment variable {name} {why}: use a random value, e.g. "
        "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
    )


def mcp_stateless() -> bool:
    """Serve MCP without sessions (`CRM_MCP_STATELESS=1`), so any replica behind a load balancer
    can answer any request; the default keeps one session per client."""
    return (os.environ.get("CRM_MCP_STATELESS") or "").strip().lower() in {"1", "true", "yes"}


def mcp_issuer() -> str | None:
    """Issuer URL of the authorization server whose access tokens the MCP server accepts
    (`CRM_MCP_ISSUER`); None keeps the static token (or none)."""
    return (os.environ.get("CRM_MCP_ISSUER") or "").rstrip("/") or None


def mcp_resource(default: str) -> str:
    """The URL clients reach the MCP server at (`CRM_MCP_RESOURCE`; behind a proxy or load balancer
    it is not where the server binds): its protected-resource metadata names it."""
    return os.environ.get("CRM_MCP_RESOURCE") or default


def mcp_audience(default: str) -> str:
    """The `aud` an access token must carry (`CRM_MCP_AUDIENCE`): by default the MCP URL itself,
    the resource indicator a client asks for."""
    return os.environ.get("CRM_MCP_AUDIENCE") or default


def mcp_scope() -> str:
    """The scope an access token must carry (`CRM_MCP_SCOPE`, default crm.notes)."""
    return os.environ.get("CRM_MCP_SCOPE") or "crm.notes"


def mcp_jwks_url() -> str | None:
    """Where the authorization server's keys are (`CRM_MCP_JWKS_URL`); None: its `jwks_uri`."""
    return os.environ.get("CRM_MCP_JWKS_URL") or None
