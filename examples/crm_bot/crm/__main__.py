"""Command line: `python -m crm seed | rest | mcp`. Configuration comes from the environment
(see crm.config); the flags only choose where a server listens."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator

import uvicorn
import uvloop
from aiohttp import web

from crm import config, mcp_server, oauth, rest, tools, tracing
from crm.store import describe_store, open_store

log = logging.getLogger("crm")

# Long enough for in-flight tool calls to finish, short enough that an open MCP stream
# (a client's standing GET) cannot hold up a SIGTERM.
_GRACEFUL_SHUTDOWN_SECONDS = 3


async def _seed() -> int:
    store = open_store()
    await store.open()
    try:
        added = await store.seed()
    finally:
        await store.close()
    where = describe_store(store)
    if added:
        print(f"Seeded {where}: added {len(added)} demo contact(s).")
        for contact in added:
            print(f"  {contact.contact_id}: {contact.name} <{contact.email}>, {contact.company}")
    else:
        print(f"Seeded {where}: the demo contacts were already there; nothing added.")
    return 0


async def _serve_rest(host: str, port: int, token: str) -> None:
    store = open_store()
    runner = web.AppRunner(rest.create_app(store, token), access_log=None)
    await runner.setup()  # opens the store
    try:
        await web.TCPSite(runner, host, port).start()
        log.info("CRM REST API listening on http://%s:%d (%s)", host, port, describe_store(store))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        log.info("CRM REST API stopping")
    finally:
        await runner.cleanup()


class _AnnouncingServer(uvicorn.Server):
    """uvicorn.Server that logs one line once its socket is really bound."""

    def __init__(self, config: uvicorn.Config, message: str) -> None:
        super().__init__(config)
        self._message = message

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            log.info("%s", self._message)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own version re-raises the signal after its graceful shutdown, so the process
        # dies of SIGTERM (exit -15) before our cleanup runs. A graceful stop is a normal exit.
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def _resource_settings(host: str, port: int) -> oauth.ResourceSettings | None:
    issuer = config.mcp_issuer()
    if issuer is None:
        return None
    resource = config.mcp_resource(f"http://{host}:{port}{mcp_server.MCP_PATH}")
    return oauth.ResourceSettings(
        issuer=issuer,
        resource=resource,
        audience=config.mcp_audience(resource),
        scope=config.mcp_scope(),
        jwks_url=config.mcp_jwks_url() or oauth.discover_jwks_url(issuer),
    )


async def _serve_mcp(host: str, port: int) -> None:
    tracing.configure()  # with CRM_OTLP_ENDPOINT, the server's spans join the caller's trace
    token = config.mcp_token()
    stateless = config.mcp_stateless()
    resource = _resource_settings(host, port)
    if resource is not None:
        auth = f"access tokens from {resource.issuer} for {resource.audience} with scope {resource.scope}"
    else:
        auth = f"bearer token {'required' if token else 'not required'}"
    uvicorn_config = uvicorn.Config(
        mcp_server.create_app(token, host=host, stateless=stateless, oauth=resource),
        host=host,
        port=port,
        ws="none",  # rasa-sdk pins websockets 10, which uvicorn's auto-detection cannot import
        lifespan="on",  # the MCP session manager runs inside the app's lifespan
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
    )
    message = (
        f"CRM MCP server listening on http://{host}:{port}{mcp_server.MCP_PATH} "
        f"(tools reach the CRM at {config.crm_url()}; {auth}"
        f"{'; stateless' if stateless else ''})"
    )
    try:
        await _AnnouncingServer(uvicorn_config, message).serve()  # uvicorn handles SIGTERM and SIGINT
    finally:
        await tools.close_client()


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crm", description="The reference CRM and its MCP server")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "seed", help="add the demo contacts to the database (CRM_DATABASE_URL, else CRM_DB) (idempotent)"
    )
    rest_cmd = commands.add_parser("rest", help="serve the REST API over CRM_DATABASE_URL, else CRM_DB")
    rest_cmd.add_argument("--host", default="127.0.0.1", help="default: %(default)s")
    rest_cmd.add_argument("--port", type=int, default=config.DEFAULT_REST_PORT, help="default: %(default)s")
    mcp_cmd = commands.add_parser("mcp", help="serve the CRM tools over MCP; they call CRM_URL")
    mcp_cmd.add_argument("--host", default="127.0.0.1", help="default: %(default)s")
    mcp_cmd.add_argument("--port", type=int, default=config.DEFAULT_MCP_PORT, help="default: %(default)s")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The SDK logs every session and refused argument at INFO; only its warnings matter here.
    logging.getLogger("mcp").setLevel(logging.WARNING)

    if args.command == "seed":
        return asyncio.run(_seed())
    if args.command == "rest":
        token = config.api_token()
        if token is None:
            print(
                f"CRM REST API not started: environment variable {config.API_TOKEN_ENV} is not set. The API "
                "requires it as a bearer token from every caller (the MCP server's tools and the local tools "
                "send it); set the same random value for the API and its callers",
                file=sys.stderr,
            )
            return 2
        asyncio.run(_serve_rest(args.host, args.port, token))
    elif config.mcp_token() and config.mcp_issuer():
        print(
            "CRM MCP server not started: CRM_MCP_TOKEN (a static token) and CRM_MCP_ISSUER (OAuth access "
            "tokens) are two ways to authenticate; set one",
            file=sys.stderr,
        )
        return 2
    elif args.host not in _LOOPBACK and not (config.mcp_token() or config.mcp_issuer()):
        print(
            f"CRM MCP server not started: --host {args.host} is not a loopback address and CRM_MCP_TOKEN "
            "is not set, so anyone who reaches the port could write notes. Set CRM_MCP_TOKEN (and give "
            "the bridge the same value) or CRM_MCP_ISSUER (OAuth), or listen on 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    else:
        # uvloop: the SDK's server path is many small tasks and stream hops, which the stdlib loop
        # makes about a tenth dearer in CPU per call (profiled; see docs/reports/2026-11-30-mcp-cost.md).
        uvloop.run(_serve_mcp(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
