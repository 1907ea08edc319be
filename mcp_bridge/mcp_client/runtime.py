"""MCPRuntime: long-lived MCP sessions, a tool catalogue per server, and guarded invocation.

The runtime knows servers and their tools, keyed by ``(server, tool)``; it knows nothing of skills.
Which skill may call which tool on which server is the skill's tool-source lines (``mcp:<server>``),
read where a skill's tool name is resolved (:class:`mcp_bridge.skills.toolbox.ToolBox`).

One session per server, opened on first use and reused for every call: opening a session costs
about fifteen times a warm call. Each session is owned by a background task, so a transport that
dies ends that session and never cancels the caller's task.

Retry rule: a call is repeated at most once, and only when it provably never reached the server
(the TCP connection was refused, or the server answered that it does not know the session, as
after a restart). A call that may have reached the server is never repeated here.

Protocol eras: the SDK's own negotiation (``Client(mode="auto")``) asks ``server/discover`` first
and falls back to the ``initialize`` handshake, so 2026-07-28 servers (stateless: no MCP session,
every request stands alone) and 2025-11-25 servers (a session) are both served through one
``ClientSession``, kept for the server's lifetime either way. On a 2026-07-28 server the catalogue
follows ``subscriptions/listen`` instead of the session's notification stream.

Results: a tool that publishes an output schema must answer with ``structuredContent`` that fits it.
The runtime checks, against the schema it checked before the call (bounded, and off the event loop
when costly: :mod:`mcp_bridge.tools.schema`; the SDK's own check is turned off); a result that does
not fit is :class:`ToolResultInvalidError`, naming the tool and the part of the result, and saying
that the tool ran (a write may have happened). A schema beyond the limits refuses the call unsent.

OAuth (a server with an ``oauth:`` block): a request answered 401 is answered by the SDK's provider
with one new token and one retry of that request (mcp_bridge.auth.client_credentials). That repetition is
safe only
because a 401 comes from the server's authentication, before any tool runs: the refused request
never ran. A call refused twice (401/403 again with the new token) is "not authorised", never
"may have run", and is not retried here either: a third token would be refused for the same reason.

Acting as the person (``grant: authorization_code``, :mod:`mcp_bridge.auth.person`): a call goes
out on a session of that server *and that person*, with the person's own token, read from the shared
store for every call (refreshed there when about to expire), so a token removed on any replica is
never used again. The SDK's session takes its credentials from its HTTP client, fixed when the
session opens, so there is one session per (server, person), kept in a bounded cache (the least
recently used one is closed). A person without a token, or whose token was refused, gets
:class:`~mcp_bridge.auth.person.SignInRequiredError` (with a sign-in link), and nothing is sent.
"""

import asyncio
import contextlib
import importlib.metadata
import logging
import sys
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitResult,
    Implementation,
    InputRequiredResult,
    ServerCapabilities,
)
from mcp_types import Tool as McpToolInfo
from mcp_types.jsonrpc import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_bridge import mcp_sdk
from mcp_bridge.auth.client_credentials import ClientCredentials
from mcp_bridge.auth.person import Acting, PersonOAuth
from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.errors import (
    InputRequiredError,
    NotAuthorisedError,
    OutcomeUnknownError,
    QuestionLapsedError,
    ServerUnavailableError,
    ToolCallError,
    ToolNotFoundError,
    ToolResultInvalidError,
    ToolTimeoutError,
)
from mcp_bridge.mcp_client import transport
from mcp_bridge.mcp_client.transport import AiohttpTransport, Delivery
from mcp_bridge.mcp_sdk import MCPError, Session, SubscriptionLost, http
from mcp_bridge.observability import metrics, tracing
from mcp_bridge.server_questions import elicitation, waiting_calls
from mcp_bridge.server_questions.elicitation import MAX_ROUNDS
from mcp_bridge.server_questions.waiting_calls import WaitingCall, WaitingCalls
from mcp_bridge.tools import results
from mcp_bridge.tools.results import ToolResult
from mcp_bridge.tools.schema import (
    SchemaRefusedError,
    checked,
    describe_result_problem,
    result_problem,
    validate_arguments,
)

if sys.version_info < (3, 11):  # a builtin from 3.11 on
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger(__name__)

# Sessions kept open per (server, person) for servers that act as the person.
PERSON_SESSIONS = 64


class _PersonBearer(http.Auth):
    """The person's access token on every request of their session (updated before each call)."""

    def __init__(self) -> None:
        self.token = ""

    async def async_auth_flow(self, request: http.Request) -> AsyncGenerator[http.Request, http.Response]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def _version() -> str:
    try:
        return importlib.metadata.version("rasa-mcp-bridge")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_CLIENT_INFO = Implementation(name="rasa-mcp-bridge", version=_version())

# After a lost subscriptions/listen stream, wait this long before listening again, doubling up to
# the cap while it keeps failing (a server that is down is not asked every second).
_RELISTEN_DELAY = 1.0
_RELISTEN_CAP = 30.0
# Errors with which a server refuses subscriptions/listen itself (not a lost connection).
_REFUSALS = frozenset({METHOD_NOT_FOUND, INVALID_REQUEST, INVALID_PARAMS})


@dataclass(frozen=True)
class ServerDescription:
    """What one MCP server is, as the bridge connected to it: for ``mcp-bridge tools`` / ``check``."""

    name: str
    url: str
    # The revision negotiated ("2026-07-28", "2025-11-25", ...).
    protocol_version: str
    # The server's own name and version (serverInfo), when it gave them.
    server_info: str | None
    # The authentication configured for it (never a secret): see MCPServerConfig.auth_description.
    auth: str
    # Its capabilities, one entry each ("tools (listChanged)", ...).
    capabilities: tuple[str, ...]

    @property
    def era(self) -> str:
        if self.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return "stateless: server/discover, no session"
        return "initialize handshake, one session"

    def lines(self) -> list[str]:
        """The description as ``key: value`` lines."""
        return [
            f"server: {self.name if self.name == self.url else f'{self.name} ({self.url})'}"
            + (f", serverInfo {self.server_info}" if self.server_info else ""),
            f"protocol: {self.protocol_version} ({self.era})",
            f"auth: {self.auth}",
            f"capabilities: {', '.join(self.capabilities) or 'none'}",
        ]


class _Connection:
    """One initialised MCP session with one server, kept open by a background task."""

    def __init__(
        self,
        config: MCPServerConfig,
        on_tools_changed: "asyncio.Event",
        auth: http.Auth | None = None,
        waiting: WaitingCalls | None = None,
    ) -> None:
        self.config = config
        # Calls kept open while the person answers a 2025-11-25 server's question
        # (mcp_bridge.server_questions.waiting_calls).
        self._waiting = waiting if waiting is not None else WaitingCalls()
        self._auth = auth
        # The session's opening requests (initialize): whether the server refused them unauthenticated.
        self._opening = Delivery()
        self._tools_changed = on_tools_changed
        self._session: Session | None = None
        self._ready = asyncio.Event()
        # Resolved when the session ends, so a call in flight can wait on it without a task per call.
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._failure: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._session is not None and not self._ended.done()

    @property
    def protocol_version(self) -> str:
        return self._require_session().protocol_version or "unknown"

    @property
    def server_info(self) -> Implementation | None:
        return self._require_session().server_info

    @property
    def capabilities(self) -> ServerCapabilities | None:
        return self._require_session().server_capabilities

    async def open(self, timeout: float) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-session:{self.config.name}")
        ready = asyncio.create_task(self._ready.wait())
        try:
            await asyncio.wait({ready}, timeout=timeout)
        finally:
            ready.cancel()
        if not self.alive:
            await self.close()
            if self._opening.refused is not None and not self._opening.maybe_sent:
                raise NotAuthorisedError(
                    f"MCP server {self.config.name!r} refused the bridge (HTTP {self._opening.refused}): "
                    f"{_describe(self._failure) if self._failure else 'not authorised'}"
                )
            reason = _describe(self._failure) if self._failure else f"no answer within {timeout:g} s"
            raise ServerUnavailableError(f"MCP server {self.config.name!r} is not reachable: {reason}")

    async def _run(self) -> None:
        transport.delivery.set(self._opening)  # this task's own context: its requests only
        # The session outlives the turn that opened it: its own requests belong to no turn's trace.
        tracing.background(self.config.trace_context)
        try:
            async with (
                http.AsyncClient(
                    headers=self.config.headers(),
                    timeout=http.Timeout(30.0, read=300.0),
                    transport=AiohttpTransport(),
                    auth=self._auth,
                ) as http_client,
                # The SDK's era negotiation (mcp_bridge.mcp_sdk): server/discover (2026-07-28), and
                # the initialize handshake (2025-11-25 and older) when the server does not speak it.
                # Elicitation (form and URL) is declared, so servers may ask the person. On a
                # 2026-07-28 server the questions come back as input-required results; on a
                # 2025-11-25 server they reach _on_elicitation inside the call, which is then kept open
                # open while the person answers (mcp_bridge.server_questions.waiting_calls).
                mcp_sdk.connect(
                    self.config.url,
                    http_client,
                    client_info=_CLIENT_INFO,
                    on_tools_changed=self._tools_changed.set,
                    ask=self._on_elicitation,
                ) as session,
            ):
                self._session = session
                self._ready.set()
                subscription = session.listen_tools()
                listener = asyncio.create_task(self._listen(session)) if subscription is not None else None
                try:
                    await self._stop.wait()
                finally:
                    if listener is not None:
                        listener.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await listener
        except BaseException as exc:  # the session's end, whatever ended it, is recorded, not raised
            self._failure = exc
            if not isinstance(exc, asyncio.CancelledError):
                log.info("MCP session with %r ended: %s", self.config.name, _describe(exc))
        finally:
            self._ready.set()
            if not self._ended.done():
                self._ended.set_result(None)

    async def _on_elicitation(self, asked: dict[str, Any]) -> dict[str, Any]:
        """A 2025-11-25 server's question in the middle of a call: handed to the caller, whose call is
        then kept open here while the person answers over the next turns
        (mcp_bridge.server_questions.waiting_calls).

        The callback runs in the context of the call that asked (the SDK carries the caller's
        context), so :data:`waiting_calls.current` names it; a question with no call of ours to carry
        it (none in flight) is answered ``cancel``."""
        call = waiting_calls.current.get()
        if call is None:
            log.warning(
                "MCP server %r asked a question outside any call of the bridge: answered cancel",
                self.config.name,
            )
            return {"action": "cancel"}
        unasked = elicitation.begin(self.config.name, asked)
        if isinstance(unasked, elicitation.Replied):
            return {"action": unasked.action}  # nothing the chat may ask: declined at once
        return dict(await call.ask(asked))

    async def _listen(self, session: Session) -> None:
        """Mark the catalogue stale on each tools/list_changed event, for the connection's life.

        A subscription that ends is opened again after a pause (and the catalogue read afresh, as
        events in between are lost); a server that refuses it is not asked again. Whatever ends it,
        the catalogue is marked stale, so the next use reads it from the server."""
        delay = _RELISTEN_DELAY
        while True:
            try:
                listening = session.listen_tools()
                if listening is None:
                    return
                async with listening as subscription:
                    delay = _RELISTEN_DELAY
                    async for _ in subscription:
                        self._tools_changed.set()
            except MCPError as exc:
                if exc.code in _REFUSALS:
                    log.info("MCP server %r refused subscriptions/listen: %s", self.config.name, exc)
                    self._tools_changed.set()
                    return
                log.info("MCP server %r: subscriptions/listen ended: %s", self.config.name, _describe(exc))
            except (SubscriptionLost, TimeoutError, OSError, http.HTTPError) as exc:
                log.info("MCP server %r: subscriptions/listen ended: %s", self.config.name, _describe(exc))
            except Exception as exc:  # the listener is an optimisation: it never ends the connection
                log.warning(
                    "MCP server %r: subscriptions/listen failed: %s", self.config.name, _describe(exc)
                )
                self._tools_changed.set()
                return
            self._tools_changed.set()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RELISTEN_CAP)

    async def list_tools(self) -> list[McpToolInfo]:
        session = self._require_session()
        tools: list[McpToolInfo] = []
        cursor: str | None = None
        untraced = tracing.trace_context_off(not self.config.trace_context)
        try:
            while True:
                page = await session.list_tools(cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
        finally:
            tracing.restore(untraced)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        timeout: float,
        meta: dict[str, Any] | None,
        resume: tuple[dict[str, ElicitResult], str | None] | None = None,
    ) -> tuple[CallToolResult | InputRequiredResult | WaitingCall | None, BaseException | None, Delivery]:
        """Call and return (result, failure, delivery); a dying connection ends the wait at once.

        ``resume``: the answers to a 2026-07-28 server's questions and its ``request_state``. On a
        2025-11-25 server a question during the call returns the :class:`WaitingCall`, still running."""
        session = self._require_session()
        delivery = Delivery()
        legacy = not session.stateless
        waiting = WaitingCall(self.config.name, name, dict(arguments), self._waiting) if legacy else None
        token = transport.delivery.set(delivery)
        asking = waiting_calls.current.set(waiting)
        untraced = tracing.trace_context_off(not self.config.trace_context)
        responses, state = resume if resume is not None else (None, None)
        # A waiting call waits for the person too: the SDK's own deadline leaves room for that.
        read_timeout = timeout + self._waiting.wait_seconds * MAX_ROUNDS if legacy else timeout
        try:
            call = asyncio.create_task(
                session.call_tool(
                    name,
                    arguments,
                    read_timeout=read_timeout,
                    meta=meta,
                    input_responses=responses,
                    request_state=state,
                )
            )
        finally:
            tracing.restore(untraced)
            waiting_calls.current.reset(asking)
            transport.delivery.reset(token)
        if waiting is not None:
            waiting.task, waiting.ended, waiting.delivery = call, self._ended, delivery
        result, failure = await follow(call, self._ended, waiting, timeout, lambda: self._failure)
        return result, failure, delivery

    def _require_session(self) -> Session:
        if self._session is None or self._ended.done():
            raise ServerUnavailableError(f"MCP session with {self.config.name!r} is closed")
        return self._session

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout=5.0)
            if not self._task.done():
                self._task.cancel()


async def follow(
    call: "asyncio.Task[Any]",
    ended: "asyncio.Future[None]",
    waiting: WaitingCall | None,
    timeout: float,
    failure: Any,
) -> tuple[CallToolResult | InputRequiredResult | WaitingCall | None, BaseException | None]:
    """Wait for the call's result, the connection's end, or (a waiting call) the server's question,
    whichever comes first; ``failure()`` is why the connection ended. A call that asked stays
    running, watched, in the background; any other call not finished in time is cancelled."""
    question = asyncio.create_task(waiting.next_question()) if waiting is not None else None
    pending: set[asyncio.Future[Any]] = {call, ended, *([question] if question else [])}
    try:
        done, _ = await asyncio.wait(pending, timeout=timeout + 1.0, return_when="FIRST_COMPLETED")
    finally:
        if question is not None and not question.done():
            question.cancel()
    if call not in done and question is not None and question in done and waiting is not None:
        waiting_calls.watch(call, waiting)
        return waiting, None
    if call in done:
        if call.cancelled():
            return None, failure() or asyncio.CancelledError()
        error = call.exception()
        if error is None:
            answer = call.result()
            if isinstance(answer, CallToolResult | InputRequiredResult):
                return answer, None
            return None, RuntimeError(f"unexpected result {type(answer).__name__}")
        return None, error
    call.cancel()
    if not done:
        return None, TimeoutError(f"no answer within {timeout:g} s")
    return None, failure() or ConnectionError("MCP session closed")


class MCPRuntime:
    """Sessions, catalogues and invocation for the MCP servers in endpoints.yml, by ``(server, tool)``.

    Use it from one event loop (the action server's).
    """

    def __init__(
        self,
        servers: Mapping[str, MCPServerConfig],
        *,
        connect_timeout: float = 10.0,
        person_oauth: PersonOAuth | None = None,
        person_sessions: int = PERSON_SESSIONS,
    ) -> None:
        self._servers = dict(servers)
        # Servers that act as the person: their tokens and sign-ins; sessions per (server, person).
        self.person_oauth = person_oauth
        self._people: OrderedDict[tuple[str, str], tuple[_Connection, _PersonBearer]] = OrderedDict()
        self._person_sessions = person_sessions
        self._connections: dict[str, _Connection] = {}
        self._catalogues: dict[str, dict[str, McpToolInfo]] = {}
        self._stale: dict[str, asyncio.Event] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # One OAuth provider per server with an oauth block, kept across sessions: a new session
        # reuses the token.
        self._auth: dict[str, ClientCredentials] = {}
        # Calls kept open while the person answers a 2025-11-25 server's question.
        self.waiting = WaitingCalls()
        self._connect_timeout = connect_timeout
        self.sessions_opened = 0

    @property
    def servers(self) -> Mapping[str, MCPServerConfig]:
        return self._servers

    async def tools(
        self, server: str, *, refresh: bool = False, acting: Acting | None = None
    ) -> Mapping[str, McpToolInfo]:
        """The server's tool catalogue (schemas and annotations), cached until it changes. ``acting``:
        whom a server that acts as the person is asked for (None: nobody, which it refuses)."""
        connection = await self._connection(server, acting)
        stale = self._stale[server]
        if refresh or stale.is_set() or server not in self._catalogues:
            stale.clear()
            listed = await connection.list_tools()
            self._catalogues[server] = {tool.name: tool for tool in listed}
        return self._catalogues[server]

    async def describe(self, server: str) -> ServerDescription:
        """Which revision ``server`` speaks, its capabilities and the auth configured (connects)."""
        connection = await self._connection(server, None)
        config = self._servers[server]
        info = connection.server_info
        return ServerDescription(
            name=server,
            url=config.url,
            protocol_version=connection.protocol_version,
            server_info=f"{info.name} {info.version}".strip() if info is not None else None,
            auth=config.auth_description(),
            capabilities=_capabilities(connection.capabilities),
        )

    async def get_tool(self, server: str, tool_name: str, *, acting: Acting | None = None) -> McpToolInfo:
        """What ``server`` publishes about ``tool_name`` (schemas, annotations); the catalogue is read
        again once before the tool is declared missing."""
        catalogue = await self.tools(server, acting=acting)
        if tool_name not in catalogue:
            catalogue = await self.tools(server, refresh=True, acting=acting)
        if tool_name not in catalogue:
            raise ToolNotFoundError(f"MCP server {server!r} does not serve a tool named {tool_name!r}")
        return catalogue[tool_name]

    async def invoke(
        self,
        server: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        timeout: float | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        slots: Mapping[str, Any] | None = None,
        input_responses: Mapping[str, Mapping[str, Any]] | None = None,
        request_state: str | None = None,
        handle: str | None = None,
        acting: Acting | None = None,
    ) -> ToolResult:
        """Validate, call once (see the retry rule above) and normalise the result. ``acting``: whom
        a server that acts as the person is called for (None: nobody, which it refuses unsent).

        The call's ``_meta`` is the server's ``meta_map`` (``static``, then the ``from_slots`` values
        read from ``slots``, the conversation's) with ``meta`` (the bridge's own keys) on top.

        A 2026-07-28 server that stops the call to ask the person raises :class:`InputRequiredError`
        (its questions and ``request_state``); the same call sent again with ``input_responses``
        (each ``{"action": ..., "content": ...}``, by the question's key) and that ``request_state``
        goes on where it stopped. A 2025-11-25 server asks inside the call instead: the call is kept
        open here and the error carries its ``handle`` (no ``request_state``); the same call with
        ``input_responses`` and that ``handle`` gives the answers to the waiting call and returns its
        result (:class:`QuestionLapsedError` when it is no longer waiting: see
        mcp_bridge.server_questions.waiting_calls).
        """
        if server not in self._servers:
            raise ToolNotFoundError(f"no MCP server named {server!r} in endpoints.yml")
        config = self._servers[server]
        timeout = config.timeout if timeout is None else timeout
        args = dict(arguments)
        tool = await self.get_tool(server, tool_name, acting=acting)
        await validate_arguments(tool.name, tool.input_schema, args)
        # A result's schema that cannot be checked (a pattern RE2 cannot run, beyond the schema
        # limits) would be found only after the call ran (and maybe wrote): refused before it is sent.
        if tool.output_schema is not None:
            await checked(tool.name, tool.output_schema)
        call_meta = {**config.call_meta(slots), **(meta or {})}
        if config.trace_context:
            # The server's spans join this call's trace (mcp 1.30 does not send it; 2.x does too).
            tracing.inject(call_meta)
        resume = None
        if handle is not None:
            return await self._answer_waiting(server, tool_name, args, handle, input_responses or {}, timeout)
        if input_responses is not None or request_state is not None:
            answers = {
                key: ElicitResult.model_validate(dict(value))
                for key, value in (input_responses or {}).items()
            }
            resume = (answers, request_state)
        for attempt in (1, 2):
            connection = await self._connection(server, acting)
            result, failure, delivery = await connection.call_tool(
                tool_name, args, timeout, call_meta or None, resume
            )
            if isinstance(result, InputRequiredResult):
                raise _input_required(server, tool_name, result)
            if isinstance(result, WaitingCall):
                raise _waiting_question(server, tool_name, result)
            if result is not None:
                await _check_result(server, tool, result)
                return results.from_mcp(tool_name, server, result)
            assert failure is not None
            if delivery.refused is not None and not delivery.maybe_sent:
                if config.acts_as_person:
                    await self._person_refused(server, acting)  # raises SignInRequiredError: nothing ran
                # Refused by the server's authentication, after the one new token: it never ran.
                raise NotAuthorisedError(
                    f"MCP tool {tool_name!r} on server {server!r} was refused (HTTP {delivery.refused}): "
                    "the bridge is not authorised; nothing ran"
                )
            never_arrived = _never_arrived(failure, delivery)
            if never_arrived and attempt == 1:
                log.info("MCP call %s.%s never reached the server; reconnecting once", server, tool_name)
                await self._drop(server, connection)
                continue
            raise _call_error(server, tool_name, failure, never_arrived, timeout)
        raise AssertionError("unreachable")

    async def _answer_waiting(
        self,
        server: str,
        tool_name: str,
        arguments: dict[str, Any],
        handle: str,
        responses: Mapping[str, Mapping[str, Any]],
        timeout: float,
    ) -> ToolResult:
        """Give the person's answers to the 2025-11-25 call kept open here, and follow it again."""
        where = f"MCP tool {tool_name!r} on server {server!r}"
        waiting = self.waiting.claim(handle, server, tool_name, arguments)
        if waiting is None or waiting.task is None or waiting.ended is None or not waiting.deliver(responses):
            raise QuestionLapsedError(
                f"{where} stopped waiting for the person's answer (the wait ran out, or another "
                "process holds the call): the server was told cancel and the tool decided without "
                "the answer, so it may have written"
            )

        def failure() -> BaseException | None:
            return None

        result, failed = await follow(waiting.task, waiting.ended, waiting, timeout, failure)
        if isinstance(result, WaitingCall):
            raise _waiting_question(server, tool_name, result)
        if isinstance(result, CallToolResult):
            await _check_result(server, await self.get_tool(server, tool_name), result)
            return results.from_mcp(tool_name, server, result)
        # The call was under way at the server: whatever ended it, it may have run.
        raise _call_error(server, tool_name, failed or RuntimeError("no result"), False, timeout)

    async def aclose(self) -> None:
        for server, connection in list(self._connections.items()):
            await self._drop(server, connection)
        while self._people:
            _, (connection, _) = self._people.popitem()
            await connection.close()
        if self.person_oauth is not None:
            await self.person_oauth.aclose()

    async def _person_connection(self, server: str, who: Acting | None) -> _Connection:
        """The session of ``server`` for the person ``who`` names, with their valid token now."""
        if self.person_oauth is None:
            raise ServerUnavailableError(
                f"MCP server {server!r} acts as the person, and no token store is set up"
            )
        if who is None or who.person is None:
            # Refused before anything is sent: no one to act as (raises, with no link).
            await self.person_oauth.access_token(server, None, "", None)
            raise AssertionError("unreachable")
        token = await self.person_oauth.access_token(server, who.person, who.conversation, who.skill)
        key = (server, who.person)
        kept = self._people.get(key)
        if kept is not None and kept[0].alive:
            self._people.move_to_end(key)
            kept[1].token = token
            return kept[0]
        if kept is not None:
            del self._people[key]
            await kept[0].close()
        bearer = _PersonBearer()
        bearer.token = token
        stale = self._stale.setdefault(server, asyncio.Event())
        connection = _Connection(self._servers[server], stale, bearer)
        await connection.open(self._connect_timeout)
        self.sessions_opened += 1
        metrics.opened_session(server)
        stale.set()
        self._people[key] = (connection, bearer)
        while len(self._people) > self._person_sessions:
            _, (oldest, _) = self._people.popitem(last=False)
            await oldest.close()
        return connection

    async def _person_refused(self, server: str, who: Acting | None) -> None:
        """The server refused the person's token: it is dropped, and they are asked to sign in again."""
        assert self.person_oauth is not None and who is not None and who.person is not None
        kept = self._people.pop((server, who.person), None)
        if kept is not None:
            await kept[0].close()
        await self.person_oauth.forget(server, who.person)
        await self.person_oauth.access_token(server, who.person, who.conversation, who.skill)  # raises
        raise AssertionError("unreachable")

    async def _connection(self, server: str, acting: Acting | None) -> _Connection:
        if server in self._servers and self._servers[server].acts_as_person:
            return await self._person_connection(server, acting)
        connection = self._connections.get(server)
        if connection is not None and connection.alive:
            return connection
        if server not in self._servers:
            raise ToolNotFoundError(f"no MCP server named {server!r} in endpoints.yml")
        unset = self._servers[server].unset_message()
        if unset is not None:
            # Read for the offline check only: its url or secret is not known, so nothing is sent.
            raise ServerUnavailableError(unset)
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            connection = self._connections.get(server)
            if connection is not None and connection.alive:
                return connection
            if connection is not None:
                await connection.close()
            stale = self._stale.setdefault(server, asyncio.Event())
            config = self._servers[server]
            if config.oauth is not None and not config.acts_as_person and server not in self._auth:
                self._auth[server] = ClientCredentials(config.url, config.oauth)
            connection = _Connection(config, stale, self._auth.get(server), self.waiting)
            await connection.open(self._connect_timeout)
            self.sessions_opened += 1
            metrics.opened_session(server)
            # A new session may face a new server build: read its catalogue afresh.
            stale.set()
            self._connections[server] = connection
            return connection

    async def _drop(self, server: str, connection: _Connection) -> None:
        if self._connections.get(server) is connection:
            del self._connections[server]
        for key, (kept, _) in list(self._people.items()):
            if kept is connection:
                del self._people[key]
        await connection.close()


def _input_required(server: str, tool: str, result: InputRequiredResult) -> ToolCallError:
    where = f"MCP tool {tool!r} on server {server!r}"
    requests = result.input_requests or {}
    others = sorted(
        {request.method for request in requests.values() if not isinstance(request, ElicitRequest)}
    )
    if others:
        return ToolCallError(
            f"{where} asks for {', '.join(others)}, which the bridge does not offer; nothing ran"
        )
    if not requests:
        return ToolCallError(f"{where} asked for input without saying what; nothing ran")
    asked = {
        key: request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
        for key, request in requests.items()
        if isinstance(request, ElicitRequest)
    }
    return InputRequiredError(
        f"{where} asks the person {len(asked)} question(s) before it goes on; it has not run to completion",
        requests=asked,
        request_state=result.request_state,
    )


def _waiting_question(server: str, tool: str, waiting: WaitingCall) -> InputRequiredError:
    asking = waiting._asking
    requests: dict[str, dict[str, object]] = {waiting_calls.KEY: dict(asking.params) if asking else {}}
    return InputRequiredError(
        f"MCP tool {tool!r} on server {server!r} asks the person a question in the middle of the call; "
        "the call is kept open here until the answer comes",
        requests=requests,
        request_state=None,
        handle=waiting.handle,
    )


async def _check_result(server: str, tool: McpToolInfo, result: CallToolResult) -> None:
    """A result that breaks the output schema the tool published is :class:`ToolResultInvalidError`.

    The bridge checks, not the SDK (:mod:`mcp_bridge.mcp_sdk` turns the SDK's own check off): bounded
    and, when costly, off the event loop (:mod:`mcp_bridge.tools.schema`); the value itself stays out
    of the message. An error result is not checked, as the SDK does not."""
    if tool.output_schema is None or result.is_error:
        return
    where = f"MCP tool {tool.name!r} on server {server!r}"
    if result.structured_content is None:
        raise ToolResultInvalidError(
            f"{where} publishes an output schema but answered without structuredContent{_RAN}"
        )
    try:
        problem = await result_problem(tool.name, tool.output_schema, result.structured_content)
    except SchemaRefusedError as exc:
        raise ToolResultInvalidError(
            f"{where}: its output schema could not be checked ({exc}){_RAN}"
        ) from None
    if problem is not None:
        described = describe_result_problem(problem)
        raise ToolResultInvalidError(
            f"{where} answered with a result that breaks its output schema ({described}){_RAN}"
        )


_RAN = "; the result was not used. The tool ran, so it may have written: check before repeating it"


def _capabilities(capabilities: ServerCapabilities | None) -> tuple[str, ...]:
    """One entry per capability: its name, and in brackets the flags it sets."""
    if capabilities is None:
        return ()
    dumped = capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
    entries: list[str] = []
    for name, value in dumped.items():
        if isinstance(value, dict) and name in ("extensions", "experimental"):
            entries.extend(f"{name[:-1] if name.endswith('s') else name} {key}" for key in value)
        elif isinstance(value, dict) and value:
            flags = [
                key if flag is True or isinstance(flag, dict | list) else f"{key}: {flag}"
                for key, flag in value.items()
                if flag is not False
            ]
            entries.append(f"{name} ({', '.join(flags)})" if flags else name)
        else:
            entries.append(name)
    return tuple(entries)


def _never_arrived(failure: BaseException, delivery: Delivery) -> bool:
    if (
        isinstance(failure, MCPError)
        and failure.code == INVALID_REQUEST
        and "session" in failure.message.lower()
    ):
        return True  # the server does not know our session: it restarted and ran nothing
    if isinstance(failure, MCPError) and failure.code == REQUEST_TIMEOUT:
        return False
    return not delivery.maybe_sent and not isinstance(failure, TimeoutError)


def _call_error(
    server: str, tool: str, failure: BaseException, never_arrived: bool, timeout: float
) -> ToolCallError:
    where = f"MCP tool {tool!r} on server {server!r}"
    if never_arrived:
        return ServerUnavailableError(f"{where} could not be reached: {_describe(failure)}")
    timed_out = isinstance(failure, TimeoutError) or (
        isinstance(failure, MCPError) and failure.code == REQUEST_TIMEOUT
    )
    if timed_out:
        return ToolTimeoutError(f"{where} gave no answer within {timeout:g} s; it may still have run")
    if isinstance(failure, MCPError) and failure.code != CONNECTION_CLOSED:
        return OutcomeUnknownError(f"{where} failed: {failure.message}")
    return OutcomeUnknownError(
        f"{where}: the connection broke after the call was sent ({_describe(failure)})"
    )


def _describe(exc: BaseException | None) -> str:
    """The innermost useful message, without exception-group noise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "unknown error"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
