"""The ``mcp-bridge`` command: a thin dispatcher over subcommands that each live in their own module.

A subcommand module offers ``add_arguments(parser)`` and ``run(args) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mcp_bridge.e2e import command as e2e_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-bridge", description="Guarded tool calls for Rasa.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    test = commands.add_parser("test", help="run tests of a bot")
    kinds = test.add_subparsers(dest="kind", required=True, metavar="KIND")
    e2e = kinds.add_parser(
        "e2e",
        help="conversation tests in Rasa Pro's e2e format, with tool_called / no_tool_called steps",
        description="Run conversation test cases against a running Rasa server and action server.",
    )
    e2e_command.add_arguments(e2e)
    e2e.set_defaults(run=e2e_command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
