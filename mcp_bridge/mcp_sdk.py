"""The MCP SDK, as the plugin uses it: mcp 2.3, or mcp 1.30 (what Rasa Pro 3.21 pins).

Every other module reaches the ``mcp`` package only through this one. The protocol's types are
``mcp_types`` (its own package, the same at both SDKs), so what a session hands back is always an
``mcp_types`` object: a tool, a result, capabilities.

mcp 2.3 (:data:`MCP_1` false) is used as it is: its ``Client(mode="auto")`` asks
``server/discover`` first and falls back to the ``initialize`` handshake, so it speaks the
2026-07-28 revision (stateless, ``subscriptions/listen``, input-required results) and 2025-11-25
and older (a session). HTTP goes through ``httpx2``.

mcp 1.30 (:data:`MCP_1` true) has the ``initialize`` handshake only (2025-11-25 at most) and
``httpx``. What the bridge needs from it and the SDK does not do the same way is done here:

* the caller's context variables reach the task that sends its HTTP request (the transport's
  per-call delivery record) and the callback that answers a server's question in the middle of
  that call (the call it belongs to): mcp 2.3 carries them itself, mcp 1.30 does not;
* a server's question is answered in a task of its own, so a question kept open while the person
  answers does not stop the session reading other calls' results (mcp 1.30 reads them in line);
* its errors become :class:`MCPError` with the protocol's codes (a timeout is ``REQUEST_TIMEOUT``,
  an unknown session is ``INVALID_REQUEST``), as mcp 2.3 raises them;
* what it cannot speak is refused, never guessed: a server that speaks only 2026-07-28 is
  :class:`RevisionUnsupportedError` when the session opens; input-required results and
  ``subscriptions/listen`` never occur (they are 2026-07-28's), and the catalogue follows the
  session's ``tools/list_changed`` notifications instead.

Neither SDK checks a result against the tool's output schema here: both would run a server's schema
unbounded on the event loop, so the runtime checks instead (:mod:`mcp_bridge.tools.schema`).

OAuth: both SDKs have the same providers and discovery helpers; the names that differ
(``scope``/``scopes``, the deprecation warning's class), the RFC 9207 ``iss`` check mcp 1.30
lacks, and metadata read with its URLs as the server wrote them (mcp 1.30's models add a ``/`` to
``http://host:port``, so an issuer would no longer match the ``iss`` a sign-in returns) are given
here once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import importlib.metadata
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider as _ClientCredentialsOAuthProvider,
)
from mcp.client.auth.oauth2 import PKCEParameters
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    issuers_match,
    validate_metadata_issuer,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from mcp_types.jsonrpc import INVALID_REQUEST, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_bridge.errors import ServerUnavailableError

log = logging.getLogger(__name__)

MCP_VERSION = importlib.metadata.version("mcp")
# mcp 1.x: the initialize handshake and httpx. The tested one is 1.30 (Rasa Pro 3.21's pin).
MCP_1 = int(MCP_VERSION.split(".")[0]) < 2

if TYPE_CHECKING or not MCP_1:
    # mypy reads this branch only (it runs where mcp 2.3 is installed).
    import httpx2 as http
    from mcp.client import Client as _Client
    from mcp.client.auth.utils import validate_authorization_response_iss as _sdk_iss_check
    from mcp.client.subscriptions import SubscriptionLost as SubscriptionLost
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata as func_metadata
    from mcp.shared.exceptions import MCPDeprecationWarning as _DeprecationWarning
    from mcp.shared.exceptions import MCPError as MCPError
else:
    import httpx as http
    from mcp import types as _v1_types
    from mcp.client.session import ClientSession as _V1Session
    from mcp.client.streamable_http import StreamableHTTPTransport as _V1Transport
    from mcp.server.fastmcp.utilities.func_metadata import func_metadata as func_metadata
    from mcp.shared.exceptions import McpError as _V1Error
    from mcp.shared.message import SessionMessage as _SessionMessage

    _DeprecationWarning = DeprecationWarning
    _sdk_iss_check = None

    class MCPError(Exception):
        """An error the server answered with (mcp 2.3's ``MCPError``): ``code``, ``message``, ``data``."""

        def __init__(self, code: int, message: str, data: Any = None) -> None:
            super().__init__(code, message, data)
            self.error = mcp_types.ErrorData(code=code, message=message, data=data)

        @property
        def code(self) -> int:
            return self.error.code

        @property
        def message(self) -> str:
            return self.error.message

        @property
        def data(self) -> Any:
            return self.error.data

        def __str__(self) -> str:
            return self.message

    class SubscriptionLost(Exception):
        """Never raised at mcp 1.x: it has no ``subscriptions/listen``."""

    from pydantic import ConfigDict as _ConfigDict

    _SdkOAuthMetadata, _SdkResourceMetadata = OAuthMetadata, ProtectedResourceMetadata
    _sdk_auth_metadata = handle_auth_metadata_response
    _sdk_resource_metadata = handle_protected_resource_response

    class OAuthMetadata(_SdkOAuthMetadata):  # type: ignore[no-redef]
        """mcp 1.30's model, keeping a URL as the server wrote it (``http://host:port``, no ``/``
        added), as mcp 2.3's does: RFC 9207 compares an authorization response's ``iss`` with the
        issuer as a plain string."""

        model_config = _ConfigDict(url_preserve_empty_path=True)

    class ProtectedResourceMetadata(_SdkResourceMetadata):  # type: ignore[no-redef]
        """mcp 1.30's model, keeping the URLs as the server wrote them (as mcp 2.3's does)."""

        model_config = _ConfigDict(url_preserve_empty_path=True)

    async def handle_auth_metadata_response(response: Any) -> tuple[bool, Any]:  # type: ignore[no-redef]
        """The SDK's reading of an RFC 8414 answer, the metadata parsed as :class:`OAuthMetadata`."""
        go_on, found = await _sdk_auth_metadata(response)
        return go_on, None if found is None else OAuthMetadata.model_validate_json(response.content)

    async def handle_protected_resource_response(response: Any) -> Any:  # type: ignore[no-redef]
        """The SDK's reading of an RFC 9728 answer, parsed as :class:`ProtectedResourceMetadata`."""
        found = await _sdk_resource_metadata(response)
        return None if found is None else ProtectedResourceMetadata.model_validate_json(response.content)


# ``http`` is the HTTP client the SDK speaks over (``httpx2`` at mcp 2.3, ``httpx`` at 1.30): the
# bridge's transport, its OAuth providers and the clients they run in are built on it.

__all__ = [
    "MCP_1",
    "MCP_VERSION",
    "ClientCredentialsOAuthProvider",
    "MCPError",
    "OAuthClientInformationFull",
    "OAuthClientMetadata",
    "OAuthClientProvider",
    "OAuthFlowError",
    "OAuthMetadata",
    "OAuthToken",
    "PKCEParameters",
    "ProtectedResourceMetadata",
    "RevisionUnsupportedError",
    "Session",
    "SubscriptionLost",
    "build_oauth_authorization_server_metadata_discovery_urls",
    "build_protected_resource_metadata_discovery_urls",
    "check_resource_allowed",
    "connect",
    "create_oauth_metadata_request",
    "extract_resource_metadata_from_www_auth",
    "extract_scope_from_www_auth",
    "func_metadata",
    "get_client_metadata_scopes",
    "handle_auth_metadata_response",
    "handle_protected_resource_response",
    "http",
    "issuers_match",
    "resource_url_from_server_url",
    "validate_authorization_response_iss",
    "validate_metadata_issuer",
]


class RevisionUnsupportedError(ServerUnavailableError):
    """The server speaks only a revision this SDK cannot (2026-07-28 at mcp 1.30): nothing was called."""


class ClientCredentialsOAuthProvider(_ClientCredentialsOAuthProvider):
    """The SDK's client credentials provider; ``scope`` is the keyword at both SDKs."""

    def __init__(
        self,
        server_url: str,
        storage: Any,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        issuer: str | None = None,
    ) -> None:
        with warnings.catch_warnings():
            # Without `issuer` the SDK warns that the MCP server decides where the credentials go;
            # the bridge then sends them only to the configured token_url (mcp_bridge.auth).
            warnings.simplefilter("ignore", _DeprecationWarning)
            if MCP_1:
                super().__init__(  # type: ignore[call-arg]
                    server_url, storage, client_id, client_secret, scopes=scope, issuer=issuer
                )
            else:
                super().__init__(
                    server_url,
                    storage,
                    client_id=client_id,
                    client_secret=client_secret,
                    scope=scope,
                    issuer=issuer,
                )


def validate_authorization_response_iss(iss: str | None, metadata: OAuthMetadata | None) -> None:
    """RFC 9207: the ``iss`` of an authorization response names the server the request went to.

    mcp 2.3's own check; mcp 1.30 has none, so the same rule is applied here (the metadata's
    ``authorization_response_iss_parameter_supported`` read from its extra fields there)."""
    if _sdk_iss_check is not None:
        _sdk_iss_check(iss, metadata)
        return
    expected = str(metadata.issuer) if metadata is not None else None
    if iss is not None:
        if iss != expected:
            raise OAuthFlowError(f"Authorization response iss mismatch: {iss} != {expected}")
        return
    extra = (metadata.model_extra or {}) if metadata is not None else {}
    if extra.get("authorization_response_iss_parameter_supported") is True:
        raise OAuthFlowError(
            "Authorization response missing iss parameter advertised by the authorization server"
        )


# -- sessions ---------------------------------------------------------------------------------------

# A server's question in the middle of a call, as JSON (its params), answered with an ElicitResult's JSON.
AskFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Session(Protocol):
    """One connection to one MCP server, as the runtime uses it (the same at both SDKs)."""

    @property
    def protocol_version(self) -> str | None: ...

    @property
    def server_info(self) -> mcp_types.Implementation | None: ...

    @property
    def server_capabilities(self) -> mcp_types.ServerCapabilities | None: ...

    @property
    def stateless(self) -> bool:
        """2026-07-28: no session; questions come back as input-required results."""
        ...

    async def list_tools(self, cursor: str | None) -> mcp_types.ListToolsResult: ...

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        read_timeout: float,
        meta: dict[str, Any] | None,
        input_responses: dict[str, mcp_types.ElicitResult] | None,
        request_state: str | None,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult: ...

    def listen_tools(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[object]] | None:
        """``subscriptions/listen`` for tools/list_changed, when the server offers it (2026-07-28)."""
        ...


def connect(
    url: str,
    http_client: Any,
    *,
    client_info: mcp_types.Implementation,
    on_tools_changed: Callable[[], None],
    ask: AskFn,
) -> contextlib.AbstractAsyncContextManager[Session]:
    """An open :class:`Session` with the server at ``url``, over ``http_client`` (an ``http.AsyncClient``).

    ``on_tools_changed``: called on each tools/list_changed the session's stream carries;
    ``ask``: a 2025-11-25 server's question during a call, run in that call's context."""
    if MCP_1:
        return _v1_connect(url, http_client, client_info, on_tools_changed, ask)
    return _modern_connect(url, http_client, client_info, on_tools_changed, ask)


# -- mcp 2.3 ---------------------------------------------------------------------------------------


async def _checked_by_the_runtime(name: str, result: Any) -> None:
    """The SDK's check of a result against the tool's output schema, turned off: it runs a server's
    schema unbounded, on the event loop. The runtime checks instead, bounded and off the loop when
    costly (mcp_bridge.mcp_client.runtime, mcp_bridge.tools.schema)."""


class _Modern:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._session = client.session
        self._session.validate_tool_result = _checked_by_the_runtime

    @property
    def protocol_version(self) -> str | None:
        return self._session.protocol_version  # type: ignore[no-any-return]

    @property
    def server_info(self) -> mcp_types.Implementation | None:
        return self._session.server_info  # type: ignore[no-any-return]

    @property
    def server_capabilities(self) -> mcp_types.ServerCapabilities | None:
        return self._session.server_capabilities  # type: ignore[no-any-return]

    @property
    def stateless(self) -> bool:
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def list_tools(self, cursor: str | None) -> mcp_types.ListToolsResult:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        return await self._session.list_tools(params=params)  # type: ignore[no-any-return]

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        read_timeout: float,
        meta: dict[str, Any] | None,
        input_responses: dict[str, mcp_types.ElicitResult] | None,
        request_state: str | None,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        return await self._session.call_tool(  # type: ignore[no-any-return]
            name,
            arguments,
            read_timeout_seconds=read_timeout,
            meta=meta,
            input_responses=input_responses,
            request_state=request_state,
            allow_input_required=True,
        )

    def listen_tools(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[object]] | None:
        capabilities = self.server_capabilities
        tools = capabilities.tools if capabilities is not None else None
        if not self.stateless or not (tools and tools.list_changed):
            return None
        return self._client.listen(tools_list_changed=True)  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def _modern_connect(
    url: str,
    http_client: Any,
    client_info: mcp_types.Implementation,
    on_tools_changed: Callable[[], None],
    ask: AskFn,
) -> AsyncIterator[Session]:
    from mcp.client.streamable_http import streamable_http_client

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            on_tools_changed()

    async def on_elicitation(context: Any, params: Any) -> mcp_types.ElicitResult:
        # mcp 2.3 runs this in the context of the call that was asked.
        asked = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        return mcp_types.ElicitResult.model_validate(await ask(asked))

    async with _Client(
        streamable_http_client(url, http_client=http_client),
        # server/discover (2026-07-28), and the initialize handshake when the server does not speak it.
        mode="auto",
        message_handler=on_message,
        # The runtime keeps the catalogue itself (refreshed on list_changed).
        cache=None,
        client_info=client_info,
        # Declares elicitation (form and URL), so servers may ask the person.
        elicitation_callback=on_elicitation,
    ) as client:
        yield _Modern(client)


# -- mcp 1.30 --------------------------------------------------------------------------------------

# Defined below where mcp 1.x is installed (mypy, run at mcp 2.3, reads only the declaration).
_v1_connect: Callable[..., contextlib.AbstractAsyncContextManager[Session]]

if MCP_1 and not TYPE_CHECKING:

    def _modern(model: Any, kind: Any) -> Any:
        """An mcp 1.30 object as its ``mcp_types`` twin (the same JSON on the wire)."""
        return kind.model_validate(model.model_dump(by_alias=True, mode="json", exclude_none=True))

    def _carry(captured: contextvars.Context) -> None:
        """The sender's context variables, set in the current task (which serves only that sender)."""
        for variable, value in captured.items():
            variable.set(value)

    class _Senders:
        """Per session: the context of each request in flight, by its JSON-RPC id, and the server's
        requests (its questions) by theirs, each tied to the call whose response stream carried it."""

        def __init__(self) -> None:
            self.requests: dict[Any, contextvars.Context] = {}
            self.questions: dict[Any, contextvars.Context] = {}

    _REFUSAL_MAX_BYTES = 64 * 1024

    class _Transport(_V1Transport):
        """The SDK's streamable-HTTP transport; each request is sent in its caller's context."""

        def __init__(self, url: str, senders: _Senders) -> None:
            super().__init__(url)
            self._senders = senders

        async def _handle_post_request(self, ctx: Any) -> None:
            root = ctx.session_message.message.root
            captured = self._senders.requests.get(getattr(root, "id", None))
            if captured is not None and isinstance(root, _v1_types.JSONRPCRequest):
                _carry(captured)  # this task was started for this one request
                ctx = dataclasses.replace(
                    ctx, read_stream_writer=_Tagging(ctx.read_stream_writer, captured, self._senders)
                )
            refusals = None
            if self._is_initialization_request(ctx.session_message.message):
                refusals = _KeepingRefusal(ctx.client)
                ctx = dataclasses.replace(ctx, client=refusals)
            try:
                await super()._handle_post_request(ctx)
            except http.HTTPStatusError:
                refusal = refusals.refusal() if refusals is not None else None
                if refusal is None:
                    raise
                await ctx.read_stream_writer.send(_SessionMessage(refusal))

    class _KeepingRefusal:
        """The HTTP client of an ``initialize`` request: a 400's body (at most 64 KiB) is read before
        mcp 1.30 raises on the status without reading it, because it says why (a server that speaks
        only 2026-07-28 refuses the handshake with a JSON-RPC error naming the revision)."""

        def __init__(self, client: Any) -> None:
            self._client = client
            self._body: bytes | None = None

        async def send(self, request: Any, **kwargs: Any) -> Any:
            response = await self._client.send(request, **kwargs)
            if response.status_code == 400:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > _REFUSAL_MAX_BYTES:
                        break
                self._body = bytes(body) if len(body) <= _REFUSAL_MAX_BYTES else None
            return response

        def refusal(self) -> Any:
            """The JSON-RPC error the 400 carried, or None (the HTTP error then stands)."""
            if self._body is None:
                return None
            try:
                parsed = _v1_types.JSONRPCMessage.model_validate_json(self._body)
            except ValueError:
                return None
            return parsed if isinstance(parsed.root, _v1_types.JSONRPCError) else None

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

    class _Tagging:
        """The read stream of one request's response: a server request on it belongs to that call."""

        def __init__(self, inner: Any, captured: contextvars.Context, senders: _Senders) -> None:
            self._inner = inner
            self._captured = captured
            self._senders = senders

        async def send(self, item: Any) -> None:
            if isinstance(item, _SessionMessage) and isinstance(item.message.root, _v1_types.JSONRPCRequest):
                self._senders.questions[item.message.root.id] = self._captured
            await self._inner.send(item)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    class _Session(_V1Session):
        """mcp 1.30's ClientSession: requests remember their sender, questions run in tasks of their own."""

        def __init__(self, read: Any, write: Any, senders: _Senders, ask: AskFn, **kwargs: Any) -> None:
            super().__init__(read, write, elicitation_callback=self._elicit, **kwargs)
            self._senders = senders
            self._ask = ask
            self._questions: set[asyncio.Task[None]] = set()

        async def send_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            request_id = self._request_id  # the id super() gives it: it reads and increments at once
            self._senders.requests[request_id] = contextvars.copy_context()
            try:
                return await super().send_request(request, *args, **kwargs)
            finally:
                self._senders.requests.pop(request_id, None)

        async def _received_request(self, responder: Any) -> None:
            if not isinstance(responder.request.root, _v1_types.ElicitRequest):
                await super()._received_request(responder)
                return
            captured = self._senders.questions.pop(responder.request_id, None)
            task = asyncio.create_task(self._answer(responder, captured))
            self._questions.add(task)
            task.add_done_callback(self._questions.discard)

        async def _answer(self, responder: Any, captured: contextvars.Context | None) -> None:
            if captured is not None:
                _carry(captured)
            params = responder.request.root.params
            with responder:
                try:
                    answer = await self._elicit(None, params)
                except Exception as exc:  # the server is told, the session goes on
                    log.warning("answering an MCP server's question failed: %s", type(exc).__name__)
                    answer = _v1_types.ElicitResult(action="cancel")
                await responder.respond(_v1_types.ClientResult(root=answer))

        async def _elicit(self, context: Any, params: Any) -> Any:
            asked = params.model_dump(by_alias=True, mode="json", exclude_none=True)
            return _v1_types.ElicitResult.model_validate(await self._ask(asked))

        async def _validate_tool_result(self, name: str, result: Any) -> None:
            await _checked_by_the_runtime(name, result)

        async def aclose_questions(self) -> None:
            for task in list(self._questions):
                task.cancel()

    def _error(exc: Any) -> BaseException:
        code, message = exc.error.code, exc.error.message
        if code == 408:  # mcp 1.30's own read timeout (an HTTP status as the code)
            return MCPError(REQUEST_TIMEOUT, message)
        if code == 32600:  # mcp 1.30's "Session terminated" on a 404 (the sign is missing)
            return MCPError(INVALID_REQUEST, message)
        return MCPError(code, message, exc.error.data)

    class _V1:
        def __init__(self, session: _Session, initialized: Any) -> None:
            self._session = session
            self._version = str(initialized.protocolVersion)
            self._info = _modern(initialized.serverInfo, mcp_types.Implementation)
            self._capabilities = _modern(initialized.capabilities, mcp_types.ServerCapabilities)

        @property
        def protocol_version(self) -> str | None:
            return self._version

        @property
        def server_info(self) -> mcp_types.Implementation | None:
            return self._info  # type: ignore[no-any-return]

        @property
        def server_capabilities(self) -> mcp_types.ServerCapabilities | None:
            return self._capabilities  # type: ignore[no-any-return]

        @property
        def stateless(self) -> bool:
            return False

        async def list_tools(self, cursor: str | None) -> mcp_types.ListToolsResult:
            params = _v1_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await self._session.list_tools(params=params)
            except _V1Error as exc:
                raise _error(exc) from exc
            return _modern(page, mcp_types.ListToolsResult)  # type: ignore[no-any-return]

        async def call_tool(
            self,
            name: str,
            arguments: dict[str, Any],
            *,
            read_timeout: float,
            meta: dict[str, Any] | None,
            input_responses: dict[str, mcp_types.ElicitResult] | None,
            request_state: str | None,
        ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
            if input_responses is not None or request_state is not None:
                raise RevisionUnsupportedError(
                    f"answers to a 2026-07-28 server's questions cannot be sent with mcp {MCP_VERSION}"
                )
            from datetime import timedelta

            try:
                result = await self._session.call_tool(
                    name, arguments, read_timeout_seconds=timedelta(seconds=read_timeout), meta=meta
                )
            except _V1Error as exc:
                raise _error(exc) from exc
            return _modern(result, mcp_types.CallToolResult)  # type: ignore[no-any-return]

        def listen_tools(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[object]] | None:
            return None

    @contextlib.asynccontextmanager
    async def _v1_streams(url: str, http_client: Any, senders: _Senders) -> AsyncIterator[tuple[Any, Any]]:
        """mcp 1.30's ``streamable_http_client``, with the :class:`_Transport` above."""
        import anyio

        read_writer, read = anyio.create_memory_object_stream[Any](0)
        write, write_reader = anyio.create_memory_object_stream[Any](0)
        transport = _Transport(url, senders)
        async with anyio.create_task_group() as tg:
            try:

                def start_get_stream() -> None:
                    tg.start_soon(transport.handle_get_stream, http_client, read_writer)

                tg.start_soon(
                    transport.post_writer, http_client, write_reader, read_writer, write, start_get_stream, tg
                )
                try:
                    yield read, write
                finally:
                    if transport.session_id:
                        await transport.terminate_session(http_client)
                    tg.cancel_scope.cancel()
            finally:
                await read_writer.aclose()
                await write.aclose()

    @contextlib.asynccontextmanager
    async def _v1_connect(
        url: str,
        http_client: Any,
        client_info: mcp_types.Implementation,
        on_tools_changed: Callable[[], None],
        ask: AskFn,
    ) -> AsyncIterator[Session]:
        async def on_message(message: object) -> None:
            root = getattr(message, "root", None)
            if isinstance(root, _v1_types.ToolListChangedNotification):
                on_tools_changed()

        senders = _Senders()
        info = _v1_types.Implementation.model_validate(
            client_info.model_dump(by_alias=True, exclude_none=True)
        )
        async with (
            _v1_streams(url, http_client, senders) as (read, write),
            _Session(read, write, senders, ask, message_handler=on_message, client_info=info) as session,
        ):
            try:
                initialized = await session.initialize()
            except _V1Error as exc:
                raise _refused(url, exc) from exc
            try:
                yield _V1(session, initialized)
            finally:
                await session.aclose_questions()

    def _refused(url: str, exc: Any) -> BaseException:
        """The initialize handshake refused: a server that speaks only 2026-07-28 says so here."""
        text = f"{exc.error.message} {exc.error.data or ''}"
        if any(version in text for version in MODERN_PROTOCOL_VERSIONS) or "server/discover" in text:
            return RevisionUnsupportedError(
                f"the MCP server at {url} speaks only the {', '.join(MODERN_PROTOCOL_VERSIONS)} revision "
                f"(stateless), which mcp {MCP_VERSION} cannot: it has the initialize handshake only "
                "(2025-11-25 and older). Install mcp 2.3 where the plugin runs, or serve 2025-11-25 too"
            )
        return _error(exc)
