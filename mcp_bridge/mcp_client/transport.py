"""The HTTP transport under the MCP SDK's streamable-HTTP client: aiohttp, and delivery tracking.

The SDK speaks MCP over an ``httpx2.AsyncClient`` (``httpx`` at mcp 1.30: :data:`mcp_bridge.mcp_sdk.http`)
that the caller may supply. Its default transport (httpcore2 and the pure-Python h11 parser on anyio
sockets) was about a third of the client's CPU per tool call when profiled; aiohttp, already a
dependency, parses HTTP in C and keeps connections alive the same way. So the bridge hands the SDK
an ``httpx2.AsyncClient`` whose transport is aiohttp: the SDK still does all of MCP (JSON-RPC,
sessions, SSE, validation); only the bytes travel differently.

The transport also records, per call, whether its request may have left this process: a request
refused at the TCP connect never did, anything later may have reached the server. The runtime's
retry rule rests on that distinction. Two exceptions: a request answered 401 or 403 was refused by
the server's authentication before any tool ran (the status line comes before the tool's result),
so it is recorded as refused, not as sent; and the OAuth flow's own requests (metadata, token,
marked with :data:`AUTH_REQUEST`) are no tool call at all.

One line of the SDK's is quietened (:class:`_LateMessageAfterClose`): a server's message that
arrives on a stream after its session closed has no reader left, and the SDK logs that as
"Error parsing SSE message" with a traceback, which `mcp-bridge check --live` printed now and then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass

import aiohttp
import anyio

from mcp_bridge.auth.client_credentials import AUTH_REQUEST
from mcp_bridge.mcp_sdk import http

log = logging.getLogger(__name__)

# Hop-by-hop and framing headers aiohttp computes itself from the body it sends.
_SKIPPED_REQUEST_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})


class _LateMessageAfterClose(logging.Filter):
    """Drops the SDK's "Error parsing SSE message" when its cause is only that the session's reader
    is gone (``anyio.BrokenResourceError`` / ``ClosedResourceError``): the session was closed, so no
    one waits for the message and nothing is lost. Any other parse error is logged as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if record.msg == "Error parsing SSE message" and isinstance(
            error, (anyio.BrokenResourceError, anyio.ClosedResourceError)
        ):
            log.debug("a server message arrived after its session closed; dropped")
            return False
        return True


logging.getLogger("mcp.client.streamable_http").addFilter(_LateMessageAfterClose())


# Statuses with which an MCP server's authentication refuses a request before anything runs.
_REFUSED = frozenset({401, 403})


@dataclass
class Delivery:
    """Whether one call's HTTP request may have left this process, or was refused unread."""

    maybe_sent: bool = False
    # The last status with which the server refused the call's request unauthenticated (401/403).
    refused: int | None = None


# The SDK runs each POST in a task that carries the caller's context, so the transport can tell,
# per call, whether the request got past the TCP connect.
delivery: ContextVar[Delivery | None] = ContextVar("mcp_bridge_delivery", default=None)


class _ResponseStream(http.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except asyncio.TimeoutError as exc:
            raise http.ReadTimeout(str(exc) or "read timed out") from exc
        except aiohttp.ClientError as exc:
            raise http.ReadError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(http.AsyncBaseTransport):
    """An ``mcp_sdk.http`` transport that sends with one ``aiohttp.ClientSession`` (made on first use)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
                # httpx2 (httpx) decodes content-encoding itself, from the headers passed on below.
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._session

    async def handle_async_request(self, request: http.Request) -> http.Response:
        timeouts = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeouts.get("connect"), sock_read=timeouts.get("read")
        )
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in request.headers.raw
            if name.lower() not in _SKIPPED_REQUEST_HEADERS
        ]
        body = await request.aread()
        try:
            response = await self._client().request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # Refused or timed out at the TCP connect: not a byte of the request was written.
            raise http.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        except BaseException as exc:
            _mark_sent(request)
            if isinstance(exc, asyncio.TimeoutError):
                raise http.ReadTimeout(str(exc) or "read timed out", request=request) from exc
            if isinstance(exc, aiohttp.ClientError):
                raise http.ReadError(str(exc) or type(exc).__name__, request=request) from exc
            raise
        _mark_sent(request, response.status)
        return http.Response(
            response.status,
            headers=[(bytes(name), bytes(value)) for name, value in response.raw_headers],
            stream=_ResponseStream(response),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _mark_sent(request: http.Request, status: int | None = None) -> None:
    tracked = delivery.get()
    if tracked is None or request.method != "POST" or request.extensions.get(AUTH_REQUEST):
        return
    if status in _REFUSED:
        tracked.refused = status
    else:
        tracked.maybe_sent = True
