"""`make e2e`: the CRM bot's conversation tests, over MCP tools and again over local tools.

Starts the whole stack on free ports (tests/live/e2e/e2e_stack.py), then runs `mcp-bridge test e2e`:

1. over MCP tools: tests/e2e/cases;
2. still over MCP tools, with the CRM's MCP server stopped: tests/e2e/mcp_down (restarted after);
3. over MCP tools, with approvals expiring after a few seconds: tests/e2e/approval_expiry;
4. over local tools: tests/e2e/cases again, the same files.

E2E_CASES (a space-separated list of files or folders) replaces tests/e2e/cases, for example
`make e2e E2E_CASES=examples/crm_bot/tests/e2e/cases/confirm_deny.yml`. JUnit reports go to results/e2e-*.xml.
Exit status 0 only when every run passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.live.e2e.e2e_stack import E2EStack, Variant
from tests.support.procs import EXAMPLE_BOT, REPO_ROOT

CASES = EXAMPLE_BOT / "tests" / "e2e" / "cases"
MCP_DOWN = EXAMPLE_BOT / "tests" / "e2e" / "mcp_down"
APPROVAL_EXPIRY = EXAMPLE_BOT / "tests" / "e2e" / "approval_expiry"
# The command of the venv running this (each end of the supported range has its own).
MCP_BRIDGE = Path(sys.executable).parent / "mcp-bridge"


def run_suite(stack: E2EStack, variant: Variant, paths: list[Path], label: str) -> int:
    """`mcp-bridge test e2e` against the running stack; its exit status."""
    print(f"\n==> {label}", flush=True)
    command = [
        str(MCP_BRIDGE),
        "test",
        "e2e",
        *(str(path) for path in paths),
        "--rasa-url",
        stack.rasa_url,
        "--audit",
        str(stack.audit_log(variant)),
        "--approval-page",
        stack.approval_page_url,
        "--junit",
        str(REPO_ROOT / "results" / f"e2e-{label.split()[0]}.xml"),
    ]
    return subprocess.run(command, cwd=REPO_ROOT, env=stack.command_env(), check=False).returncode


def main() -> int:
    cases = [Path(part) for part in os.environ.get("E2E_CASES", "").split()] or [CASES]
    with tempfile.TemporaryDirectory(prefix="e2e-") as tmp:
        stack = E2EStack(Path(tmp))
        try:
            print("==> starting the CRM, its MCP server, an action server and Rasa (Rasa takes a while)")
            stack.start()
            mcp, local = stack.mcp_tools(), stack.local_tools()
            stack.use(mcp)
            stack.wait_for_rasa()
            statuses = [run_suite(stack, mcp, cases, "mcp tools")]
            if not os.environ.get("E2E_CASES"):
                stack.stop_mcp()
                statuses.append(run_suite(stack, mcp, [MCP_DOWN], "mcp-down MCP server stopped"))
                stack.start_mcp()
                short = stack.short_approvals()
                stack.use(short)
                statuses.append(
                    run_suite(stack, short, [APPROVAL_EXPIRY], "approval-expiry approvals expire")
                )
            stack.use(local)
            statuses.append(run_suite(stack, local, cases, "local tools"))
        except Exception as exc:
            print(f"error: {exc}", file=sys.stderr)
            print(f"(service logs: {stack.logs})", file=sys.stderr)
            return 2
        finally:
            stack.close()
    failed = sum(1 for status in statuses if status != 0)
    print(f"\n==> e2e: {len(statuses) - failed} of {len(statuses)} runs passed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
