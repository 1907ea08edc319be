"""A TCP proxy for fault tests: forwards bytes between a client (the bridge) and a real server.

It runs its own event loop in a background thread, so both sync and async tests can use it, and
its switches can be flipped from the test while traffic flows:

* ``delay``: seconds to wait before forwarding each chunk the server sends (a slow server);
* ``request_delay``: seconds to wait before forwarding each chunk the client sends (a request
  still on its way when the server dies);
* ``cut_after_request(*markers)``: the next connection whose request bytes contain every marker
  gets its request forwarded, the server's answer withheld, and the connection cut (both sides
  aborted) as soon as the server has answered, that is after the server received and ran the call.
  Nothing of that answer reaches the client. Optionally the proxy then refuses every new
  connection (the server died right after committing).

Only bytes are inspected; the proxy knows nothing about HTTP or MCP beyond the markers it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from types import TracebackType

from tests.support.procs import HOST, free_port

_CHUNK = 65536
# How much of a connection's recent request bytes is kept to look for markers across chunks.
_REQUEST_WINDOW = 65536
# A withheld answer counts as complete once it shows one of these (a JSON-RPC result or error).
_ANSWER_MARKERS = (b'"result"', b'"error"')
# Cut anyway if the server has not answered by then.
_HOLD_TIMEOUT = 15.0


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    request_bytes: bytearray = field(default_factory=bytearray)
    holding: bool = False
    withheld: bytearray = field(default_factory=bytearray)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    def abort(self) -> None:
        for writer in (self.client, self.server):
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()


class TcpProxy:
    """Listens on ``HOST:port`` and forwards every connection to ``target_host:target_port``."""

    def __init__(self, target_port: int, *, target_host: str = HOST, port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self.delay = 0.0
        self.request_delay = 0.0
        self.cuts_done = 0
        self.connections = 0
        self._cut_markers: tuple[bytes, ...] | None = None
        self._refuse_after_cut = False
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- switches (call from any thread) -------------------------------------------------------

    def url(self, path: str = "") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def cut_after_request(self, *markers: bytes, then_refuse: bool = False) -> None:
        """Arm a single cut: see the module docstring.

        With ``then_refuse`` the proxy also stops listening at the moment of the cut, so every later
        connection is refused, as if the server had died right after it committed.
        """
        with self._lock:
            self._cut_markers = tuple(markers)
            self._refuse_after_cut = then_refuse

    def disarm(self) -> None:
        with self._lock:
            self._cut_markers = None

    @property
    def armed(self) -> bool:
        return self._cut_markers is not None

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(asyncio.start_server(self._handle, HOST, self.port))
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"tcp-proxy:{self.port}", daemon=True)
        self._thread.start()
        ready.wait(10.0)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10.0)
        self._loop = self._thread = None

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- forwarding ----------------------------------------------------------------------------

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()  # the target is down: the client sees the connection die
            return
        link = _Link(client_writer, server_writer)
        self._links.add(link)
        up = asyncio.create_task(self._client_to_server(link, client_reader))
        down = asyncio.create_task(self._server_to_client(link, server_reader))
        self._tasks.update((up, down))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if link.holding:
                # The request was sent: give the server time to answer, then cut both sides.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(link.answered.wait(), _HOLD_TIMEOUT)
        finally:
            link.abort()
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            self._tasks.difference_update((up, down))
            self._links.discard(link)

    async def _client_to_server(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(_CHUNK):
            if not link.holding and self._cut_markers is not None:
                link.request_bytes += chunk
                del link.request_bytes[:-_REQUEST_WINDOW]
                with self._lock:
                    markers = self._cut_markers
                    if markers is not None and all(m in link.request_bytes for m in markers):
                        self._cut_markers = None
                        link.holding = True  # before forwarding: none of the answer may get through
            if self.request_delay > 0:
                await asyncio.sleep(self.request_delay)
            link.server.write(chunk)
            await link.server.drain()

    async def _server_to_client(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(_CHUNK):
            if link.holding:
                link.withheld += chunk
                if any(marker in link.withheld for marker in _ANSWER_MARKERS):
                    if self._refuse_after_cut and self._server is not None:
                        self._server.close()
                    self.cuts_done += 1
                    link.answered.set()
                    link.abort()
                    return
                continue
            if self.delay > 0:
                await asyncio.sleep(self.delay)
            link.client.write(chunk)
            await link.client.drain()
