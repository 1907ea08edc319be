"""``mcp-bridge test e2e PATH...``: arguments and the run."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from mcp_bridge.cli.e2e.approvals import ApproverError, password_for
from mcp_bridge.cli.e2e.cases import CaseFileError, load_paths
from mcp_bridge.cli.e2e.report import text_report, write_junit
from mcp_bridge.cli.e2e.runner import RunnerError, Target, audit_warning, run_cases
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability.audit import AuditKeys

DEFAULT_STATE = Path("var/run/stack.json")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    """Adds ``test e2e`` to the ``mcp-bridge`` command."""
    test = commands.add_parser("test", help=summary)
    kinds = test.add_subparsers(dest="kind", required=True, metavar="KIND")
    e2e = kinds.add_parser(
        "e2e",
        help="conversation tests in Rasa Pro's e2e format, with tool_called / no_tool_called steps",
        description="Run conversation test cases against a running Rasa server and action server.",
    )
    add_arguments(e2e)
    e2e.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, help="test-case files, or folders searched for *.yml")
    parser.add_argument(
        "--rasa-url",
        help="the Rasa server (REST channel and --enable-api); default: the one `make up` started "
        "(--state), else http://127.0.0.1:5005",
    )
    parser.add_argument(
        "--rasa-token",
        default=None,
        help="Rasa's --auth-token, if any (default: $RASA_AUTH_TOKEN, else the `rasa_token` of --state)",
    )
    parser.add_argument(
        "--rest-token-file",
        type=Path,
        help="a file holding the REST channel's bearer token (default: $REST_CHANNEL_TOKEN, else the "
        "`rest_token` of --state); a token is never taken on the command line",
    )
    parser.add_argument(
        "--audit",
        type=Path,
        default=None,
        help="the action server's audit trail (its AUDIT_LOG), read for tool_called / no_tool_called "
        "(default: $AUDIT_LOG or var/audit.jsonl)",
    )
    parser.add_argument(
        "--approval-page",
        help="the approval page, for approval steps (default: the one `make up` started, from --state)",
    )
    parser.add_argument(
        "--approver-passwords",
        type=Path,
        help="a folder holding approver_<name>_password files, for approvers whose APPROVER_<NAME>_PASSWORD "
        "is not set (default: the var/ folder of --state, where `make up` writes them)",
    )
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="the state file of `make up`")
    parser.add_argument("--junit", type=Path, help="also write a JUnit XML report here")
    parser.add_argument("--concurrency", type=int, default=4, help="cases run at the same time (default 4)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed for each HTTP request")


def run(args: argparse.Namespace) -> int:
    """0 when every case passed, 1 when one failed, 2 when the cases or options are unusable."""
    try:
        settings = Settings.from_env()
        audit_keys = AuditKeys.from_settings(settings)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        cases = load_paths(args.paths)
    except CaseFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        rest_token = _rest_token(args.rest_token_file, settings)
    except OSError as exc:
        print(f"error: --rest-token-file: {exc.strerror or exc}", file=sys.stderr)
        return 2
    approvers = sorted({step.value for case in cases for step in case.steps if step.kind == "approval"})
    folder = args.approver_passwords or args.state.resolve().parent.parent
    try:
        passwords = {name: password_for(name, folder, settings.environ) for name in approvers}
    except ApproverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    target = Target(
        rasa_url=args.rasa_url or _rasa_from_state(args.state) or "http://127.0.0.1:5005",
        rasa_token=args.rasa_token or settings.rasa_auth_token or _from_state(args.state, "rasa_token"),
        rest_token=rest_token or _from_state(args.state, "rest_token"),
        audit_log=args.audit or Path(settings.audit_log),
        timeout=args.timeout,
        approval_page=args.approval_page or _service_url(args.state, "approval_page"),
        approver_passwords=passwords,
        audit_keys=audit_keys,
    )
    try:
        results = asyncio.run(run_cases(cases, target, concurrency=args.concurrency))
    except RunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    warning = audit_warning(results, target)
    sys.stdout.write(text_report(results, [warning] if warning else []))
    if args.junit is not None:
        write_junit(results, args.junit)
    return 0 if all(result.passed for result in results) else 1


def _rest_token(path: Path | None, settings: Settings) -> str | None:
    if path is not None:
        return path.read_text(encoding="utf-8").strip() or None
    return settings.rest_channel_token


def _from_state(state: Path, key: str) -> str | None:
    """A token `make up` recorded in its state file, when there is one."""
    try:
        value = json.loads(state.read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def _rasa_from_state(state: Path) -> str | None:
    return _service_url(state, "rasa")


def _service_url(state: Path, name: str) -> str | None:
    """Where `make up` started the service ``name``, from its state file."""
    try:
        services = json.loads(state.read_text())
        return str(services[name]["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
