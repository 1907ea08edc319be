"""`mcp-bridge tools SERVER [DIR]`: an MCP server's tools as a table, with their annotations.

Above the table: the server, the protocol revision the bridge negotiated with it (2026-07-28,
stateless, or 2025-11-25 and older, with the initialize handshake), the authentication configured
for it (none, token, api_key or oauth client credentials; never a secret) and its capabilities.

SERVER is a name under ``mcp_servers:`` in the bot's endpoints.yml (ENDPOINTS overrides the file;
its ``${...}`` values are expanded as for the action server) or a URL. The hints are the server's
own claims; only a server marked ``trusted: true`` lets a read-only tool run unconfirmed.

A server that acts as the person (``grant: authorization_code``) answers only with a person's token,
so before anyone signs in its tools cannot be listed: the command says so, with the authorization
server it discovered (where people sign in), unless MCP_OPERATOR_TOKEN holds an access token for the
server (an operator's own, from that authorization server), which it then lists the tools with.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mcp_types import Tool

from mcp_bridge.auth.person import authorization_server
from mcp_bridge.cli.command import add_command, bot_folder
from mcp_bridge.config.servers import MCPServerConfig, load_mcp_servers
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError, ToolCallError
from mcp_bridge.mcp_client.runtime import MCPRuntime, ServerDescription

# An access token for a server that acts as the person, to list its tools with (never printed).
OPERATOR_TOKEN = "MCP_OPERATOR_TOKEN"
HEADERS = ("name", "read-only", "destructive", "idempotent", "output schema", "description")


def server_config(server: str, bot: Path) -> MCPServerConfig:
    if server.startswith(("http://", "https://")):
        return MCPServerConfig(name=server, url=server, type=server.split(":", 1)[0])
    settings = Settings.from_env()
    endpoints = settings.endpoints if settings.explicitly("ENDPOINTS") else str(bot / "endpoints.yml")
    # Only the server asked about must be usable: another one's unset token is no concern here.
    servers = load_mcp_servers(endpoints, settings.environ, allow_unset=True)
    if server not in servers:
        known = ", ".join(sorted(servers)) or "none"
        raise ConfigError(f"{endpoints}: mcp_servers: no server named {server!r} (servers: {known})")
    config = servers[server]
    if config.unset:
        # This command talks to the server, so it needs the values the offline check can do without.
        names = list(dict.fromkeys(name for _, name in config.unset))
        example = " ".join(f"{name}=..." for name in names)
        raise ConfigError(
            f"{config.unset_message()}; this command connects to the server, so set "
            f"{' and '.join(names)} first (e.g. `{example} mcp-bridge tools {server}`), "
            "or give the server's URL instead of its name"
        )
    return config


async def list_tools(config: MCPServerConfig) -> tuple[ServerDescription, list[Tool]]:
    runtime = MCPRuntime({config.name: config})
    try:
        described = await runtime.describe(config.name)
        return described, sorted((await runtime.tools(config.name)).values(), key=lambda tool: tool.name)
    finally:
        await runtime.aclose()


def as_operator(config: MCPServerConfig, token: str | None) -> MCPServerConfig | None:
    """A server that acts as the person, reached with the operator's token (``token``, from
    MCP_OPERATOR_TOKEN) in place of a person's; None when no operator's token is given."""
    return replace(config, oauth=None, api_key=None, token=token) if token else None


def with_operator(described: ServerDescription, config: MCPServerConfig) -> ServerDescription:
    """The description of a server listed with the operator's token, saying so."""
    return replace(described, auth=f"{config.auth_description()}; listed with the token in {OPERATOR_TOKEN}")


async def before_sign_in(config: MCPServerConfig) -> list[str]:
    """What can be said of a server that acts as the person before anyone signs in: where people
    sign in (discovered), and that its tools are listed after a sign-in."""
    issuer = await authorization_server(config)
    return [
        f"server: {config.name} ({config.url})",
        f"auth: {config.auth_description()}",
        f"authorization server: {issuer} (discovered from the server's protected-resource metadata)",
        "tools: not listed: this server acts as the person in the conversation and answers only with a "
        "person's token, so its tools are listed after someone signs in (the bot shows the link); to "
        f"list them now, set {OPERATOR_TOKEN} to an access token of yours for this server",
    ]


def _hint(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def table(tools: Sequence[Tool], width: int = 60) -> str:
    rows = [HEADERS]
    for tool in tools:
        notes = tool.annotations
        description = (tool.description or "").strip().splitlines()
        first = description[0] if description else ""
        rows.append(
            (
                tool.name,
                _hint(notes.read_only_hint if notes else None),
                _hint(notes.destructive_hint if notes else None),
                _hint(notes.idempotent_hint if notes else None),
                "yes" if tool.output_schema is not None else "NO",
                first if len(first) <= width else first[: width - 1] + "…",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(HEADERS))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        config = server_config(args.server, Path(args.dir).resolve())
        settings = Settings.from_env()
        operator = as_operator(config, settings.operator_token) if config.acts_as_person else None
        if config.acts_as_person and operator is None:
            print("\n".join(asyncio.run(before_sign_in(config))))
            return 0
        described, tools = asyncio.run(list_tools(operator or config))
    except (ConfigError, ToolCallError) as exc:
        print(f"mcp-bridge tools: {exc}", file=sys.stderr)
        return 1
    if operator is not None:
        described = with_operator(described, config)
    print("\n".join(described.lines()) + "\n")
    print(table(tools))
    if any(tool.output_schema is None for tool in tools):
        print(
            "\nA tool without an output schema answers with text blocks only; return a pydantic model "
            "from it so the server publishes outputSchema.",
        )
    return 0


def register(commands: Any, summary: str) -> None:
    parser = add_command(
        commands,
        "tools",
        run,
        help=summary,
        description=__doc__,
    )
    parser.add_argument("server", help="a server name from endpoints.yml, or the server's URL")
    bot_folder(parser)
