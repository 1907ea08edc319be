"""`mcp-bridge`: the plugin's command. A thin dispatcher; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from mcp_bridge import catalogue, check, init

Command = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mcp-bridge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _COMMANDS:
        register(commands)
    args = parser.parse_args(argv)
    handler: Command = args.handler
    return handler(args)


def _register_none(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Placeholder until the first subcommand registers itself here."""


_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _register_none,
    init.register,
    check.register,
    catalogue.register,
]


if __name__ == "__main__":
    sys.exit(main())
