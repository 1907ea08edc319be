"""The CRM tools served over MCP (streamable HTTP at /mcp), from the same code as the local tools.

`create_app` wraps the SDK's app in `GuardedMCPApp`, a pure-ASGI layer that checks the bearer
token and counts the MCP sessions the server opens (`GET /stats`), which is how tests prove
that a client reuses its session instead of opening one per call. A 2026-07-28 client opens no
session (every request stands alone); what it does once per connection is `server/discover`,
counted apart as `discovers`.

With `oauth` settings (crm.oauth) the server is an OAuth 2 protected resource instead of
checking a static token: the SDK publishes its protected-resource metadata and refuses requests
without a valid access token, and each note or task written is stored with its author: the
verified token's subject (the person who signed in, or the service client's id for client
credentials), passed to the CRM's REST API; with a static token nobody is named.

Every request is a span of the SDK's (its server middleware), continuing the trace context the
request's ``_meta`` carries (``traceparent``, ``tracestate``): with ``CRM_OTLP_ENDPOINT`` set
(crm.tracing) the server's spans join the bridge's trace of the call.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crm import tools
from crm.oauth import JWTVerifier, ResourceSettings, auth_settings
from crm.tools import (
    ContactIdArg,
    DueDateArg,
    IdempotencyKeyArg,
    NoteResult,
    NoteTextArg,
    TaskResult,
    TaskTitleArg,
)

SERVER_NAME = "crm"
MCP_PATH = "/mcp"
STATS_PATH = "/stats"
IDEMPOTENCY_META_KEY = "idempotency_key"
_SESSION_HEADER = b"mcp-session-id"
# A 2026-07-28 request names its method in this header (the SDK's client sets it).
_METHOD_HEADER = b"mcp-method"
log = logging.getLogger("crm.mcp")


def _key(idempotency_key: str | None, ctx: Context) -> str | None:
    """The key from the arguments, else from the request's `_meta` (an explicit argument wins)."""
    if idempotency_key is not None:
        return idempotency_key
    meta = ctx.request_context.meta or {}
    from_meta = meta.get(IDEMPOTENCY_META_KEY)
    return from_meta if isinstance(from_meta, str) else None


async def add_timeline_note(
    contact_id: ContactIdArg, text: NoteTextArg, ctx: Context, idempotency_key: IdempotencyKeyArg = None
) -> NoteResult:
    # A thin wrapper only because MCP lets a client send the key in the request's `_meta`
    # instead of the arguments; the schema and the result are those of tools.add_timeline_note.
    idempotency_key = _key(idempotency_key, ctx)
    token = _verified_token(ctx)
    result = await tools.write_note(contact_id, text, idempotency_key, author=_author(token))
    if result.ok:
        log.info("note %s on contact %s written by %s", result.note_id, contact_id, _caller(token))
    return result


def _verified_token(ctx: Context) -> AccessToken | None:
    """The caller's access token as the SDK's middleware verified it; None with a static token."""
    request = ctx.request_context.request
    user = getattr(request, "scope", {}).get("user") if request is not None else None
    return user.access_token if isinstance(user, AuthenticatedUser) else None


def _author(token: AccessToken | None) -> str | None:
    """Who a write is stored as: the token's subject (the person, or the service client itself)."""
    return (token.subject or token.client_id) if token is not None else None


def _caller(token: AccessToken | None) -> str:
    """Who called, for the log: the token's client (and subject, when it differs)."""
    if token is None:
        return "the holder of the static token"
    if token.subject and token.subject != token.client_id:
        return f"client {token.client_id!r} (subject {token.subject!r})"
    return f"client {token.client_id!r}"


add_timeline_note.__doc__ = tools.add_timeline_note.__doc__


async def create_follow_up_task(
    contact_id: ContactIdArg,
    title: TaskTitleArg,
    due_date: DueDateArg,
    ctx: Context,
    idempotency_key: IdempotencyKeyArg = None,
) -> TaskResult:
    # A wrapper for the same reason as add_timeline_note's: the key may come in `_meta`.
    token = _verified_token(ctx)
    key = _key(idempotency_key, ctx)
    result = await tools.write_task(contact_id, title, due_date, key, author=_author(token))
    if result.ok:
        log.info("task %s on contact %s written by %s", result.task_id, contact_id, _caller(token))
    return result


create_follow_up_task.__doc__ = tools.create_follow_up_task.__doc__


async def _errors_carry_structured_content(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Give a failed tool call (bad arguments, unknown tool) the same `ok`/`error` keys as a result.

    The SDK answers those with `isError` and a text block only; clients branch on `ok` and `error`,
    so they get them on every tools/call result. `{ok, error}` satisfies every tool's output schema.
    """
    result = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
        if result.get("structuredContent") is None:
            texts = [
                block.get("text", "") for block in result.get("content", []) if block.get("type") == "text"
            ]
            message = "\n".join(texts) or "The tool call failed."
            result = {**result, "structuredContent": {"ok": False, "error": message}}
    return result


def build_server(oauth: ResourceSettings | None = None) -> MCPServer:
    server: MCPServer = MCPServer(
        SERVER_NAME,
        middleware=[_errors_carry_structured_content],
        auth=auth_settings(oauth) if oauth else None,
        token_verifier=JWTVerifier(oauth) if oauth else None,
    )
    server.add_tool(
        tools.find_contact_by_email,
        annotations=ToolAnnotations(title="Find a contact by email", read_only_hint=True),
    )
    server.add_tool(
        tools.list_timeline_notes,
        annotations=ToolAnnotations(title="List timeline notes", read_only_hint=True),
    )
    server.add_tool(
        add_timeline_note,
        annotations=ToolAnnotations(
            title="Add a timeline note",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
        ),
    )
    server.add_tool(
        create_follow_up_task,
        annotations=ToolAnnotations(
            title="Create a follow-up task",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
        ),
    )
    return server


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    payload = json.dumps(body).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": start_headers + headers})
    await send({"type": "http.response.body", "body": payload})


class GuardedMCPApp:
    """Pure ASGI (so lifespan and streaming pass through untouched): bearer token check,
    `GET /stats`, and a count of the sessions the wrapped MCP app opened (2025-11-25 and older)
    and of the `server/discover` requests it answered (2026-07-28, which has no sessions)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self.sessions_opened = 0
        self.discovers = 0

    def _authorized(self, scope: Scope) -> bool:
        if self._token is None:
            return True
        for name, value in scope["headers"]:
            if name.lower() == b"authorization":
                scheme, _, presented = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(presented.strip(), self._token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _send_json(
                send, 401, {"error": "A valid bearer token is required."}, [(b"www-authenticate", b"Bearer")]
            )
            return
        if scope["path"] == STATS_PATH:
            if scope["method"] != "GET":
                await _send_json(send, 405, {"error": "Use GET for /stats."}, [(b"allow", b"GET")])
                return
            stats = {"sessions_opened": self.sessions_opened, "discovers": self.discovers}
            await _send_json(send, 200, stats, [])
            return
        # A request that carries a session id belongs to a session counted already.
        may_open_session = not any(name.lower() == _SESSION_HEADER for name, _ in scope["headers"])
        discover = any(
            name.lower() == _METHOD_HEADER and value == b"server/discover" for name, value in scope["headers"]
        )
        started = completed = False

        async def observing_send(message: Message) -> None:
            nonlocal started, completed
            if message["type"] == "http.response.start":
                started = True
                if discover and message["status"] == 200:
                    self.discovers += 1
                elif may_open_session and any(
                    name.lower() == _SESSION_HEADER for name, _ in message["headers"]
                ):
                    self.sessions_opened += 1
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                completed = True
            await send(message)

        await self.app(scope, receive, observing_send)
        if started and not completed:
            # On shutdown the SDK abandons a client's open event stream mid-response; ending it
            # here closes the stream properly instead of uvicorn logging an ASGI error for it.
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def create_app(
    token: str | None,
    *,
    host: str = "127.0.0.1",
    stateless: bool = False,
    oauth: ResourceSettings | None = None,
) -> GuardedMCPApp:
    """The ASGI app: MCP over streamable HTTP at /mcp, plus /stats; `token` None means open, unless
    `oauth` makes /mcp a protected resource (then /stats stays open: it only counts sessions).

    `host` is where the server binds; on loopback the SDK refuses requests whose Host header
    names anything else (DNS-rebinding protection). `stateless`: no MCP session, every request
    stands alone (no server-to-client notifications), so replicas behind a load balancer need
    no sticky routing and a replica's death loses no session.
    """
    # One JSON body per call instead of an SSE stream: measured about 1.5 ms less per call. The CRM
    # tools send no progress or log messages during a call, which is all an SSE reply would add;
    # server notifications such as tools/list_changed still travel on the session's GET stream.
    if token and oauth:
        raise ValueError("a static token and OAuth are two ways to authenticate; configure one")
    inner = build_server(oauth).streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, json_response=True, stateless_http=stateless
    )
    return GuardedMCPApp(inner, token)
