"""`mcp-bridge grpc`: the bot's actions over gRPC with the plugin's guarantees (rasa-sdk 3.21).

The command only parses its arguments here; the server is :mod:`mcp_bridge.action_server.grpc`, imported when
the command runs (it imports rasa_sdk and the bot's actions).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from mcp_bridge.cli.command import actions_package, add_command
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError


def register(commands: Any, summary: str) -> None:
    parser = add_command(
        commands,
        "grpc",
        run,
        help=summary,
        description=(
            "Serve the bot's actions over gRPC, as `python -m rasa_sdk --grpc` would, with the plugin's "
            "start-up checks, 127.0.0.1 by default, ACTION_SERVER_TOKEN checked on every call "
            "(metadata `authorization: Bearer ...`) and optional TLS client certificates. Run it from "
            "the bot's folder."
        ),
    )
    actions_package(parser)
    parser.add_argument(
        "--port", type=int, default=None, help="port (default: ACTION_SERVER_PORT, else 5055)"
    )
    parser.add_argument("--ssl-certificate", help="the server's TLS certificate (PEM)")
    parser.add_argument("--ssl-keyfile", help="its private key (PEM)")
    parser.add_argument("--ssl-ca-file", help="require client certificates signed by this CA (PEM)")
    parser.add_argument(
        "--endpoints", default=None, help="endpoints file (default: ENDPOINTS, else endpoints.yml)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        args.port = args.port or settings.action_server_port
        args.endpoints = args.endpoints or settings.endpoints
        from mcp_bridge.action_server.grpc import build_server

        server = build_server(args)
    except ConfigError as exc:
        print(f"action server not started: {exc}", file=sys.stderr, flush=True)
        return 2
    return asyncio.run(server.serve())
