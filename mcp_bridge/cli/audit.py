"""`mcp-bridge audit verify [PATH]`: is the audit trail as it was written?

Reads the trail (default: $AUDIT_LOG, else var/audit.jsonl) with the keys of the environment
(AUDIT_KEY and AUDIT_EXTRA_KEYS, as the action server has them; a key is never taken on the command
line) and checks every entry's MAC and its link to the entry before it
(:func:`mcp_bridge.observability.audit.verify`). Exit status 0 when the chain holds, 1 naming each line
that was edited or follows a removed one, 2 when the trail or the keys cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcp_bridge.cli.command import add_command
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability.audit import AuditKeys, verify

# Problems listed before the rest are only counted.
SHOWN = 20


def register(commands: Any, summary: str) -> None:
    parser = commands.add_parser("audit", help=summary, description=__doc__)
    actions = parser.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    checking = add_command(
        actions,
        "verify",
        run_verify,
        help="check the trail's chain: name each line edited, or after a removed one",
        description=__doc__,
    )
    checking.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=None,
        help="the trail (default: $AUDIT_LOG, else var/audit.jsonl)",
    )


def run_verify(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        keys = AuditKeys.from_settings(settings)
        args.path = args.path or Path(settings.audit_log or Settings.audit_log)
        found = verify(args.path, keys)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {args.path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not keys.configured:
        print(
            "warning: AUDIT_KEY is not set: checked with the public key, which tells accidental damage "
            "only (anyone can rewrite a chain under it)",
            file=sys.stderr,
        )
    older = f", {found.unchained_before} older unchained line(s) first" if found.unchained_before else ""
    if found.ok:
        print(f"{args.path}: {found.chained} entries, the chain holds{older}")
        return 0
    print(f"{args.path}: {found.lines} lines, {len(found.problems)} problem(s){older}:")
    for problem in found.problems[:SHOWN]:
        print(f"  {problem}")
    if len(found.problems) > SHOWN:
        print(f"  ... and {len(found.problems) - SHOWN} more")
    return 1
