"""What mcp_bridge adds to rasa_sdk's action server, through rasa_sdk's plugin hook.

Importing :mod:`mcp_bridge.rasa` (the bot's one import) registers this module with rasa_sdk's plugin
manager (:func:`install`), so a bot with a ``rasa_sdk_plugins`` package of its own keeps every
guarantee. rasa_sdk calls :func:`attach_sanic_app_extensions` after it has imported the bot's
actions and before it listens; rasa-sdk 3.21 (Sanic 25) builds the app again in each worker process
(``ACTION_SERVER_SANIC_WORKERS``, and after each auto-reload), and the hook runs there too. Here:

* the start-up checks: skills, endpoints, domain and word files are loaded now, and a bad one stops
  the server with the file, the place and the reason (exit status 2);
* the address: rasa_sdk binds 0.0.0.0 unless SANIC_HOST says otherwise; this plugin makes the
  default 127.0.0.1 (ACTION_SERVER_HOST or SANIC_HOST to change it; use 0.0.0.0 only behind a proxy);
* the token: with ACTION_SERVER_TOKEN set, /webhook, /actions and /metrics answer 401 unless the
  request carries it the way Rasa's ``action_endpoint: {token: ...}`` sends it (``?token=...``), or as
  ``Authorization: Bearer ...`` (rasa_sdk itself checks no credentials at all);
* the Host header, on loopback: a request that names another host is refused (421), so a web page
  the bot owner visits cannot reach the action server through a DNS name rebound to 127.0.0.1
  (ACTION_SERVER_ALLOWED_HOSTS adds names; the host of ACTION_SERVER_PUBLIC_URL is allowed);
* the approval page's route: with APPROVAL_TELL_TOKEN set (the page's value), ``POST
  /mcp-bridge/approvals/tell`` tells a requester's conversation of a decision
  (:mod:`mcp_bridge.action_server.approval_tell`), through Rasa's HTTP API (RASA_URL, RASA_AUTH_TOKEN, which
  must then be set); it checks that token, not ACTION_SERVER_TOKEN;
* the channel key: MCP_BRIDGE_CHANNEL_KEY checks who sent each message
  (:mod:`mcp_bridge.channels.proof`); without it the server does not start, unless
  MCP_BRIDGE_DEVELOPMENT=1 says it is a trial, which it warns about at every start, and which it refuses
  beside a channel key, an address other than loopback or a token (development mode never leaks into a
  deployment);
* tokens: a short or placeholder ACTION_SERVER_TOKEN or RASA_AUTH_TOKEN stops the server;
* Prometheus metrics at /metrics (:mod:`mcp_bridge.observability.metrics`), behind the token check;
* OpenTelemetry: the plugin's spans go to the tracer provider rasa-sdk 3.21 builds from the
  ``tracing:`` block of endpoints.yml (:mod:`mcp_bridge.observability.tracing`), and a ``metrics:``
  block or ``AUDIT_OTLP_LOGS=1`` sends metrics and audit entries by OTLP too
  (:mod:`mcp_bridge.observability.otel`); without them, nothing of it runs;
* every tool call is attributed to the conversation of the webhook request it answers (the audit
  trail records it under that conversation, whichever action made the call);
* MCP sessions are closed when the server stops;
* the worker processes log the way rasa_sdk's main process does (they share the record, and its key
  when no ``CONFIRMATION_SECRET`` is set, through the database).

rasa-sdk 3.21's gRPC mode (``--grpc``) calls no plugin hook, binds every address and checks no
credentials, so the plugin refuses to start there (:func:`refuse_grpc`); ``mcp-bridge grpc`` serves
the same servicer with the checks (:mod:`mcp_bridge.action_server.grpc`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import pluggy
from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.action_server import approval_tell, rasa_api, sign_in
from mcp_bridge.action_server.adapter import channel_check, warn_unsigned
from mcp_bridge.action_server.build import DEVELOPMENT_FLAG, executor, settings, weakness
from mcp_bridge.approvals.page import TELL_PATH
from mcp_bridge.auth.person import CALLBACK_PATH
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability import metrics, otel, tracing

hookimpl = pluggy.HookimplMarker("rasa_sdk")
log = logging.getLogger(__name__)

GRPC_REFUSAL = (
    "mcp_bridge: not started: rasa_sdk's gRPC mode (--grpc) runs no plugin hook, so the action server "
    "would listen on every address with no token check and no start-up checks, and a confirmation "
    "could be answered by anyone who reaches the port. Serve the actions over gRPC with "
    "`mcp-bridge grpc --actions actions` (the same servicer, with those checks), or over HTTP (the same "
    "command without --grpc)."
)


LOOPBACK = ("127.0.0.1", "::1", "localhost")
# An APPROVAL_TELL_TOKEN shorter than this is refused at start.
MIN_TELL_TOKEN_CHARS = 32
PUBLIC_WITHOUT_TOKEN = (
    "ACTION_SERVER_HOST={host} is not a loopback address and ACTION_SERVER_TOKEN is not set: anyone "
    "who reaches the port could post a conversation and answer its question. Set ACTION_SERVER_TOKEN "
    "(and give Rasa the same value in endpoints.yml's action_endpoint), or listen on 127.0.0.1"
)


def install(argv: Sequence[str] | None = None) -> None:
    """Register this module with rasa_sdk's plugin manager, once; refuse gRPC mode first.

    Called when a bot's actions import :mod:`mcp_bridge.rasa`, which rasa_sdk does (in the main
    process and in every worker) before it builds its app, so the hook below always runs.
    """
    refuse_grpc(sys.argv if argv is None else argv)
    from rasa_sdk.plugin import plugin_manager

    manager = plugin_manager()
    this = sys.modules[__name__]
    if not manager.is_registered(this):
        manager.register(this)


def refuse_grpc(argv: Sequence[str]) -> None:
    if "--grpc" in argv[1:]:
        print(GRPC_REFUSAL, file=sys.stderr, flush=True)
        raise SystemExit(2)


@hookimpl
def attach_sanic_app_extensions(app: Sanic[Any, Any]) -> None:
    try:
        config = settings()
    except ConfigError as exc:
        print(f"action server not started: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    # Sanic names a worker (SANIC_WORKER_NAME) after the imports that first read this process's settings
    # (`import mcp_bridge.rasa`, in the worker too), so whether this is a worker is read again here.
    in_worker = bool(Settings.from_env().worker_name)
    if in_worker and not logging.getLogger().handlers:
        # rasa_sdk configures logging in its main process only; a spawned worker starts bare.
        from rasa_sdk import utils

        utils.configure_colored_logging(None)
    for noisy in ("sanic.access", "httpx2", "httpcore2", "httpx", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    host = config.action_server_host
    token = config.action_server_token
    try:
        check_deployment(config)
        executor()
        check = channel_check()
        endpoints = config.endpoints
        otel.collectors(endpoints)  # a bad metrics: or tracing: block stops the start, saying why
    except ConfigError as exc:
        print(f"action server not started: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    os.environ["SANIC_HOST"] = host  # rasa_sdk reads it right after this hook
    tell_token = config.approval_tell_token
    refusal = tell_refusal(tell_token)
    if refusal:
        print(f"action server not started: {refusal}", file=sys.stderr, flush=True)
        sys.exit(2)
    warn_unsigned(check)
    if host in LOOPBACK:
        require_loopback_host(app, allowed_hosts(config))
    if token:
        require_token(app, token)
    runtime = executor().tools.runtime
    if runtime is not None and runtime.person_oauth is not None:
        sign_in.attach(app, runtime.person_oauth)  # its state authenticates it, not the token
    approvals = executor().approvals
    if tell_token and approvals is not None:
        approval_tell.attach(
            app, approvals, executor().seal, tell_token
        )  # its own token, not the action server's
    metrics.attach(app)  # behind the token check: the middleware guards every route
    log.info("mcp_bridge: listening on %s (%s)", host, "token required" if token else "no token configured")

    async def start_telemetry(app: Sanic[Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        # After rasa-sdk's own listener, which builds its tracer provider from endpoints.yml (3.21).
        tracing.configure(getattr(app.ctx, "tracer_provider", None))
        try:
            started = otel.start(
                endpoints, audit_records=config.audit_otlp_logs, service_name=config.tracing_service_name
            )
        except ConfigError as exc:
            log.error("mcp_bridge: OpenTelemetry not started: %s", exc)
            return
        parts = (["spans"] if tracing.enabled() else []) + started
        log.info("mcp_bridge: OpenTelemetry: %s", "; ".join(parts) if parts else "off (no tracing: block)")

    async def close_mcp_sessions(app: Sanic[Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        await executor().aclose()
        otel.shutdown()

    app.register_listener(start_telemetry, "before_server_start")
    app.register_listener(close_mcp_sessions, "after_server_stop")


def check_deployment(config: Settings) -> None:
    """ConfigError when the action server's address, tokens and mode do not go together: an address
    other than loopback without ACTION_SERVER_TOKEN; a short or placeholder token; development mode
    (unsigned messages taken as from nobody) beside a token or an address other than loopback (beside a
    channel key: :meth:`mcp_bridge.action_server.adapter.ChannelCheck.from_settings`)."""
    host, token = config.action_server_host, config.action_server_token
    if not token and host not in LOOPBACK:
        raise ConfigError(PUBLIC_WITHOUT_TOKEN.format(host=host))
    for name, value in (
        ("ACTION_SERVER_TOKEN", token),
        ("RASA_AUTH_TOKEN", config.rasa_auth_token),
    ):
        problem = weakness(value) if value else None
        if problem:
            raise ConfigError(
                f"environment variable {name} {problem}: anyone who guesses it gets in. Use at least 32 "
                "random bytes, e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
    if config.development:
        beside = [
            reason
            for reason, present in (
                (f"ACTION_SERVER_HOST={host}, not a loopback address", host not in LOOPBACK),
                ("ACTION_SERVER_TOKEN", bool(token)),
            )
            if present
        ]
        if beside:
            raise ConfigError(
                f"environment variable {DEVELOPMENT_FLAG}=1 (development: unsigned messages taken as from "
                f"nobody) is set beside {' and '.join(beside)}, which only a deployment has. Unset "
                f"{DEVELOPMENT_FLAG} in a deployment (a trial runs on loopback with neither)"
            )


def tell_refusal(tell_token: str | None) -> str | None:
    """Why the approval page's route cannot be served as configured, or None."""
    if tell_token is None:
        return None
    if len(tell_token) < MIN_TELL_TOKEN_CHARS:
        return f"APPROVAL_TELL_TOKEN must be at least {MIN_TELL_TOKEN_CHARS} random characters"
    if not rasa_api.configured():
        return (
            "APPROVAL_TELL_TOKEN is set, but RASA_URL or RASA_AUTH_TOKEN is not: the approval page's "
            "decisions could not be told to their conversations (Rasa's HTTP API)"
        )
    return None


def allowed_hosts(config: Settings) -> frozenset[str]:
    """The names a request's Host header may give a loopback action server (without the port)."""
    names = {"127.0.0.1", "localhost", "::1"}
    names |= {name.lower() for name in config.action_server_allowed_hosts}
    public = urlsplit(config.action_server_public_url or "").hostname
    if public:
        names.add(public.lower())
    return frozenset(names)


def host_name(header: str) -> str:
    """The host of a Host header, without its port (``[::1]:5055`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def require_loopback_host(app: Sanic[Any, Any], names: frozenset[str]) -> None:
    @app.middleware("request")
    async def check_host(request: Request) -> HTTPResponse | None:
        if host_name(request.headers.get("host", "")) in names:
            return None
        log.warning("a request naming another host than this loopback action server's was refused")
        return response.json({"error": "this action server answers on its loopback address only"}, status=421)


def require_token(app: Sanic[Any, Any], token: str) -> None:
    @app.middleware("request")
    async def check_token(request: Request) -> HTTPResponse | None:
        if request.path in ("/health", CALLBACK_PATH, TELL_PATH):
            # The sign-in callback: a browser's, authenticated by its sealed state; the approval
            # page's route checks its own token.
            return None
        supplied = request.args.get("token") or _bearer(request.headers.get("authorization", ""))
        if supplied and hmac.compare_digest(supplied.encode(), token.encode()):
            return None
        return response.json({"error": "missing or wrong action server token"}, status=401)


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
