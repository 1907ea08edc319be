"""`mcp-bridge`: the plugin's command. A thin dispatcher; each subcommand lives in its own module,
imported only when it runs (``init`` never pays for the MCP SDK that ``check`` and ``tools`` load)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Command = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Subcommand:
    """A subcommand: its name, the module that defines it (``register(commands, help)``), its one line."""

    name: str
    module: str
    help: str

    def register(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        importlib.import_module(self.module).register(commands, self.help)


SUBCOMMANDS = [
    Subcommand("test", "mcp_bridge.cli.e2e.command", "run tests of a bot"),
    Subcommand(
        "init",
        "mcp_bridge.cli.init",
        "make a Rasa bot ready for mcp_bridge (domain, rule, endpoints, a sample skill)",
    ),
    Subcommand(
        "check",
        "mcp_bridge.cli.check",
        "the action server's start-up checks, offline (for CI); --live also asks the MCP servers",
    ),
    Subcommand(
        "tools", "mcp_bridge.cli.tools", "list an MCP server's tools with their annotations, as a table"
    ),
    Subcommand(
        "grpc",
        "mcp_bridge.cli.grpc",
        "serve the bot's actions over gRPC (rasa-sdk 3.21), with the token check and start-up checks",
    ),
    Subcommand(
        "audit",
        "mcp_bridge.cli.audit",
        "check the audit trail: `audit verify` names an edited or removed line",
    ),
    Subcommand(
        "approval-page",
        "mcp_bridge.cli.approval_page",
        "serve the approval page where second approvers decide held calls (or: hash a password)",
    ),
]


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: every subcommand in full, or only ``only`` in full and the others by name
    and one line (what ``mcp-bridge --help`` shows)."""
    built = argparse.ArgumentParser(prog="mcp-bridge", description=__doc__)
    commands = built.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for subcommand in SUBCOMMANDS:
        if only is None or subcommand.name == only:
            subcommand.register(commands)
        else:
            commands.add_parser(subcommand.name, help=subcommand.help)
    return built


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = next((argument for argument in arguments if not argument.startswith("-")), None)
    known = {subcommand.name for subcommand in SUBCOMMANDS}
    args = parser(only=chosen if chosen in known else "").parse_args(arguments)
    handler: Command = args.handler
    return handler(args)
