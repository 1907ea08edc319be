"""The bot's actions over gRPC (rasa-sdk 3.21's protocol, which Rasa Pro can use), with the plugin's
guarantees: ``mcp-bridge grpc --actions actions``.

``python -m rasa_sdk --grpc`` runs no plugin hook, listens on every address and checks no
credentials, so the plugin refuses to start there (:mod:`mcp_bridge.action_server.server`). This command
serves the same rasa_sdk servicer (``rasa_sdk.grpc_server.GRPCActionServerWebhook``) and health
service, and adds what the HTTP hook adds:

* the start-up checks: skills, endpoints, domain and word files are loaded before it listens, and a
  bad one stops it with the file, the place and the reason (exit status 2);
* the address: 127.0.0.1 unless ``ACTION_SERVER_HOST`` says otherwise; any other address needs a
  token or TLS client certificates, or it refuses to start;
* the token: with ``ACTION_SERVER_TOKEN`` set, every action call must carry
  ``authorization: Bearer <token>`` in its metadata, or it is answered ``UNAUTHENTICATED`` and
  nothing runs; with ``--ssl-ca-file``, TLS client certificates signed by that CA are required
  (rasa_sdk's own option, kept);
* every tool call is attributed to the conversation of the call it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import os
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

from mcp_bridge.action_server.server import LOOPBACK
from mcp_bridge.errors import ConfigError

log = logging.getLogger(__name__)


class GrpcActionServer:
    def __init__(self, servicer: Any, host: str, port: int, credentials: Any, token: str | None) -> None:
        self.servicer, self.host, self.port = servicer, host, port
        self.credentials, self.token = credentials, token

    async def serve(self) -> int:
        import signal

        from grpc import Compression, aio
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc
        from rasa_sdk.grpc_py import action_webhook_pb2_grpc

        from mcp_bridge.action_server.build import executor

        server = aio.server(futures.ThreadPoolExecutor(max_workers=4), compression=Compression.Gzip)
        health_servicer = health.HealthServicer()
        health_servicer.set("ActionServer", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        action_webhook_pb2_grpc.add_ActionServiceServicer_to_server(self.servicer, server)
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        if self.credentials is not None:
            server.add_secure_port(address, self.credentials)
        else:
            server.add_insecure_port(address)
        await server.start()
        auth = "token required" if self.token else "no token configured"
        tls = ", TLS client certificates required" if self.credentials is not None else ""
        log.info("mcp_bridge: gRPC action server listening on %s (%s%s)", address, auth, tls)
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
        await stopping.wait()
        await server.stop(grace=2)
        await executor().aclose()
        return 0


def build_server(args: argparse.Namespace) -> GrpcActionServer:
    """Import the actions, run the start-up checks and set up the servicer; nothing listens yet."""
    try:
        import grpc
        from rasa_sdk.executor import ActionExecutor
        from rasa_sdk.grpc_server import GRPCActionServerWebhook
        from rasa_sdk.tracing.utils import get_tracer_provider
    except ImportError:
        raise ConfigError(
            "gRPC needs rasa-sdk 3.21 or newer (rasa_sdk.grpc_server), which this environment lacks; "
            "serve the actions over HTTP with `python -m rasa_sdk --actions actions`"
        ) from None
    from mcp_bridge.action_server.build import executor, settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-8s %(name)s  - %(message)s")
    for noisy in ("httpx2", "httpcore2", "httpx", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    sys.path.insert(0, os.getcwd())  # the bot's actions package, as rasa_sdk finds it
    action_executor = ActionExecutor()
    action_executor.register_package(args.actions)
    executor()  # the start-up checks; raises ConfigError with file, place and reason
    from mcp_bridge.action_server.adapter import channel_check, warn_unsigned

    warn_unsigned(channel_check())  # who sent each message: MCP_BRIDGE_CHANNEL_KEY
    host, token = settings().action_server_host, settings().action_server_token
    credentials = None
    if args.ssl_certificate or args.ssl_keyfile:
        if not (args.ssl_certificate and args.ssl_keyfile):
            raise ConfigError("--ssl-certificate and --ssl-keyfile go together")
        ca = Path(args.ssl_ca_file).read_bytes() if args.ssl_ca_file else None
        credentials = grpc.ssl_server_credentials(
            [(Path(args.ssl_keyfile).read_bytes(), Path(args.ssl_certificate).read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )
    elif args.ssl_ca_file:
        raise ConfigError("--ssl-ca-file needs --ssl-certificate and --ssl-keyfile")
    client_certificates = credentials is not None and args.ssl_ca_file is not None
    if host not in LOOPBACK and not token and not client_certificates:
        raise ConfigError(
            f"ACTION_SERVER_HOST={host}: a gRPC action server on an address other than loopback needs "
            "ACTION_SERVER_TOKEN or TLS client certificates (--ssl-ca-file), or anyone who reaches it "
            "could answer for a conversation"
        )
    servicer_class = guarded_servicer(GRPCActionServerWebhook, token)
    servicer = servicer_class(action_executor, False, get_tracer_provider(args.endpoints))
    return GrpcActionServer(servicer, host, args.port, credentials, token)


def guarded_servicer(base: type[Any], token: str | None) -> type[Any]:
    """rasa_sdk's servicer, each call checked for the token and attributed to its conversation."""
    import grpc

    async def allowed(context: Any) -> bool:
        if token is None:
            return True
        metadata = dict(context.invocation_metadata() or ())
        supplied = str(metadata.get("authorization", ""))
        scheme, _, value = supplied.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
            return True
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong action server token")
        return False

    class Guarded(base):
        async def Actions(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC's names)
            await allowed(context)
            return await super().Actions(request, context)

        async def Webhook(self, request: Any, context: Any) -> Any:  # noqa: N802
            await allowed(context)
            return await super().Webhook(request, context)

        async def WebhookStream(self, request: Any, context: Any) -> Any:  # noqa: N802
            await allowed(context)
            async for event in super().WebhookStream(request, context):
                yield event

        async def AckStreamChunks(self, request: Any, context: Any) -> Any:  # noqa: N802
            await allowed(context)
            return await super().AckStreamChunks(request, context)

    return Guarded
