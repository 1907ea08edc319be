"""`mcp-bridge`: the plugin's command. A thin dispatcher; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from mcp_bridge.cli import approval_page, check, grpc, init, tools
from mcp_bridge.cli.e2e import command as e2e_command

Command = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mcp-bridge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _COMMANDS:
        register(commands)
    args = parser.parse_args(argv)
    handler: Command = args.handler
    return handler(args)


_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    e2e_command.register,  # mcp-bridge test e2e
    init.register,
    check.register,
    tools.register,
    grpc.register,  # mcp-bridge grpc
    approval_page.register,  # mcp-bridge approval-page
]
