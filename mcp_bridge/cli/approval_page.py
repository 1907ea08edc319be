"""``mcp-bridge approval-page``: the page where second approvers decide held calls
(:mod:`mcp_bridge.approvals.page`)."""

from __future__ import annotations

import argparse
from typing import Any

from mcp_bridge.cli.command import add_command


def register(commands: Any, summary: str) -> None:
    parser = add_command(commands, "approval-page", _run, help=summary, description=_description())
    from mcp_bridge.approvals.page import add_arguments

    add_arguments(parser)


def _description() -> str | None:
    from mcp_bridge.approvals import page

    return page.__doc__


def _run(args: argparse.Namespace) -> int:
    from mcp_bridge.approvals.page import run

    return run(args)
