"""The example CRM's MCP server fails closed: a public address needs a token."""

from __future__ import annotations

import subprocess
import sys

from tests.support import procs


def test_public_address_without_a_token_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "crm", "mcp", "--host", "0.0.0.0", "--port", str(procs.free_port())],
        cwd=procs.EXAMPLE_BOT,
        env=procs.child_env(),  # no CRM_* variable: no token
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "not a loopback address and CRM_MCP_TOKEN is not set" in result.stderr
