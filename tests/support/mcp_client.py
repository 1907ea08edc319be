"""A raw mcp SDK client for tests: one initialized session over streamable HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@asynccontextmanager
async def mcp_session(
    url: str, token: str | None = None, *, transport: httpx2.AsyncBaseTransport | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized ClientSession to the MCP endpoint `url` (…/mcp), closed on exit.

    `transport`: the HTTP transport under the SDK (None: httpx2's default, the SDK out of the box).
    """
    async with (
        httpx2.AsyncClient(
            headers=auth_headers(token), timeout=httpx2.Timeout(10.0, read=30.0), transport=transport
        ) as http,
        streamable_http_client(url, http_client=http) as (read_stream, write_stream),
        ClientSession(read_stream, write_stream) as session,
    ):
        await session.initialize()
        yield session


async def _stats(base_url: str, token: str | None) -> dict[str, int]:
    async with httpx2.AsyncClient(headers=auth_headers(token), timeout=10.0) as http:
        response = await http.get(f"{base_url}/stats")
        response.raise_for_status()
        return {key: int(value) for key, value in response.json().items()}


async def sessions_opened(base_url: str, token: str | None = None) -> int:
    """How many MCP sessions (2025-11-25 handshakes) the server at `base_url` has opened (GET /stats)."""
    return (await _stats(base_url, token))["sessions_opened"]


async def connections_opened(base_url: str, token: str | None = None) -> int:
    """How many times a client connected to the server at `base_url`, in either protocol era: an
    initialize handshake (a session) or a `server/discover` answered (2026-07-28 has no sessions)."""
    stats = await _stats(base_url, token)
    return stats["sessions_opened"] + stats["discovers"]
