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
    """The SQLite file (`CRM_DB`, relative to the working directory); its parent is created."""
    path = Path(os.environ.get("CRM_DB") or DEFAULT_DB)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def crm_url() -> str:
    """Base URL of the CRM REST API (`CRM_URL`), without a trailing slash."""
    return (os.environ.get("CRM_URL") or DEFAULT_URL).rstrip("/")


def mcp_token() -> str | None:
    """Bearer token the MCP server requires (`CRM_MCP_TOKEN`); None when unset or empty.

    The value is a secret: callers may say whether one is set, never what it is.
    """
    return os.environ.get("CRM_MCP_TOKEN") or None
