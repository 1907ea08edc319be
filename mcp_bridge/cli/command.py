"""How a subcommand of ``mcp-bridge`` is declared: one call, and the arguments several share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def add_command(commands: Any, name: str, handler: Handler, *, help: str, description: str | None) -> Any:
    """Add subcommand ``name`` (its ``--help`` shows ``description`` as written) that runs ``handler``;
    returns its parser, for the command's own arguments."""
    parser = commands.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.set_defaults(handler=handler)
    return parser


def bot_folder(parser: argparse.ArgumentParser) -> None:
    """The optional positional DIR: the bot's folder."""
    parser.add_argument("dir", nargs="?", default=".", help="the bot's folder (default: this one)")


def actions_package(parser: argparse.ArgumentParser) -> None:
    """``--actions``: the bot's actions package, as rasa_sdk's own option names it."""
    parser.add_argument("--actions", default="actions", help="the bot's actions package (default: actions)")
