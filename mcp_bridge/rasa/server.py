"""What mcp_bridge adds to rasa_sdk's action server, through rasa_sdk's plugin hook.

rasa_sdk calls :func:`attach_sanic_app_extensions` after it has imported the bot's actions and
before it listens (``rasa_sdk_plugins.init_hooks`` registers this module). Here:

* the start-up checks: skills, endpoints, domain and word files are loaded now, and a bad one stops
  the server with the file, the place and the reason (exit status 2);
* the address: rasa_sdk binds 0.0.0.0 unless SANIC_HOST says otherwise; this plugin makes the
  default 127.0.0.1 (ACTION_SERVER_HOST or SANIC_HOST to change it; use 0.0.0.0 only behind a proxy);
* the token: with ACTION_SERVER_TOKEN set, /webhook and /actions answer 401 unless the request
  carries it the way Rasa's ``action_endpoint: {token: ...}`` sends it (``?token=...``), or as
  ``Authorization: Bearer ...`` (rasa_sdk itself checks no credentials at all);
* every tool call is attributed to the conversation of the webhook request it answers (the audit
  trail records it under that conversation, whichever action made the call);
* MCP sessions are closed when the server stops.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import sys

import pluggy
from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.audit import attribute_to
from mcp_bridge.errors import ConfigError
from mcp_bridge.rasa.build import executor

hookimpl = pluggy.HookimplMarker("rasa_sdk")
log = logging.getLogger(__name__)


@hookimpl
def attach_sanic_app_extensions(app: Sanic) -> None:
    for noisy in ("sanic.access", "httpx2", "httpcore2", "httpx", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        executor()
    except ConfigError as exc:
        print(f"action server not started: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    host = os.environ.get("ACTION_SERVER_HOST") or os.environ.get("SANIC_HOST") or "127.0.0.1"
    os.environ["SANIC_HOST"] = host  # rasa_sdk reads it right after this hook
    token = os.environ.get("ACTION_SERVER_TOKEN") or None
    attribute_calls(app)
    if token:
        require_token(app, token)
    log.info("mcp_bridge: listening on %s (%s)", host, "token required" if token else "no token configured")

    async def close_mcp_sessions(app: Sanic, loop: asyncio.AbstractEventLoop) -> None:
        await executor().aclose()

    app.register_listener(close_mcp_sessions, "after_server_stop")


def attribute_calls(app: Sanic) -> None:
    """Every tool call made while answering a webhook request is recorded under its conversation.

    Rasa names the conversation in the request body (``sender_id``). Request middleware runs in
    the request's own task, before the handler, so the attribution holds for the whole request.
    """

    @app.middleware("request")
    async def attribute(request: Request) -> None:
        sender = None
        if request.method == "POST":
            try:
                body = request.json
            except Exception:  # not JSON: rasa_sdk refuses the request itself
                body = None
            if isinstance(body, dict) and body.get("sender_id") is not None:
                sender = str(body["sender_id"])
        attribute_to(sender)


def require_token(app: Sanic, token: str) -> None:
    @app.middleware("request")
    async def check_token(request: Request) -> HTTPResponse | None:
        if request.path == "/health":
            return None
        supplied = request.args.get("token") or _bearer(request.headers.get("authorization", ""))
        if supplied and hmac.compare_digest(supplied.encode(), token.encode()):
            return None
        return response.json({"error": "missing or wrong action server token"}, status=401)


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
