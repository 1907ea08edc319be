"""Questions from 2025-11-25 servers: the call that asks, kept open here while the person answers.

A 2025-11-25 server asks the person inside the running ``tools/call`` (``elicitation/create`` on the
call's own stream) and wants the answer within that exchange, while the action server must answer
Rasa before the person can even see the question. So the call is kept open: the SDK's elicitation
callback hands the question to the caller (:meth:`WaitingCall.ask`), the caller raises
:class:`~mcp_bridge.errors.InputRequiredError` with the call's ``handle``, the executor asks the
person over turns exactly as for a 2026-07-28 server, and on the answer turn the runtime gives the
answers to the waiting call (:meth:`WaitingCalls.claim`, :meth:`WaitingCall.deliver`) and waits for
its result.

Limits, by design:

* The callback waits for the person at most :data:`WAIT_SECONDS` (``ELICITATION_WAIT_SECONDS``,
  default 120) per question; then the server hears ``cancel`` and its tool decides what to do
  without the answer (it may still write: the bot says so when the answer comes late).
* At most :data:`MAX_WAITING` calls (``ELICITATION_MAX_HELD``, default 16) are held at once per
  runtime; a question beyond that is answered ``cancel`` at once.
* The answer must reach this process: it works with one action-server worker, or with sticky
  routing per conversation. An answer that reaches another process, or this one after a restart,
  finds no waiting call (:class:`~mcp_bridge.errors.QuestionLapsedError`).

Every waiting call's task is watched: when it ends (result, failure or the connection closing) it
leaves the registry, and its outcome is retrieved, so nothing leaks.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# The key a 2025-11-25 server's one question goes under (it asks one at a time).
KEY = "elicitation"
CANCEL: dict[str, Any] = {"action": "cancel"}


# Defaults; the action server reads ELICITATION_WAIT_SECONDS and ELICITATION_MAX_WAITING at start
# (mcp_bridge.action_server.build), with its other settings.
WAIT_SECONDS = 120.0
MAX_WAITING = 16


@dataclass
class _Asked:
    """A server's question the call waits on: its params, and the person's reply when it comes."""

    params: dict[str, Any]
    reply: asyncio.Future[dict[str, Any]]


@dataclass
class WaitingCall:
    """One ``tools/call`` in flight that may ask the person (set as :data:`current` around it)."""

    server: str
    tool: str
    arguments: dict[str, Any]
    registry: WaitingCalls
    handle: str = field(default_factory=lambda: uuid.uuid4().hex)
    # The running call, the end of its connection, and its transport's delivery record (the runtime's).
    task: asyncio.Task[Any] | None = None
    ended: asyncio.Future[None] | None = None
    delivery: Any = None
    _questions: asyncio.Queue[_Asked] = field(default_factory=asyncio.Queue)
    _asking: _Asked | None = None

    # -- the SDK's callback side ---------------------------------------------------------------

    async def ask(self, params: dict[str, Any]) -> dict[str, Any]:
        """The server's question: handed to the caller, and the person's answer awaited (bounded)."""
        if not self.registry.room(self):
            log.warning(
                "MCP server %r asked the person a question, but %d calls are already waiting for "
                "answers: answered cancel",
                self.server,
                self.registry.limit,
            )
            return dict(CANCEL)
        question = _Asked(params, asyncio.get_running_loop().create_future())
        self.registry.wait(self)
        self._questions.put_nowait(question)
        try:
            return await asyncio.wait_for(asyncio.shield(question.reply), self.registry.wait_seconds)
        except TimeoutError:
            log.warning(
                "MCP server %r: no answer from the person within %g s; the server was told cancel "
                "and its tool %r decides what to do without it",
                self.server,
                self.registry.wait_seconds,
                self.tool,
            )
            return dict(CANCEL)
        finally:
            if not question.reply.done():
                question.reply.cancel()  # a late answer finds it gone
            self.registry.release(self)

    # -- the caller's side ---------------------------------------------------------------------

    async def next_question(self) -> dict[str, Any]:
        """Wait for the server's next question (the caller races this against the call itself)."""
        question = await self._questions.get()
        self._asking = question
        return question.params

    def deliver(self, responses: Mapping[str, Mapping[str, Any]]) -> bool:
        """Give the person's answer to the question being asked; False if it is no longer awaited."""
        question, self._asking = self._asking, None
        if question is None or question.reply.done():
            return False
        question.reply.set_result(dict(responses.get(KEY, CANCEL)))
        return True


# The call the current task is making (read by the SDK's elicitation callback, which runs in the
# caller's context).
current: ContextVar[WaitingCall | None] = ContextVar("mcp_bridge_waiting_call", default=None)


class WaitingCalls:
    """The calls kept open in this process, by handle (one registry per runtime)."""

    def __init__(self, limit: int = MAX_WAITING, wait_seconds: float = WAIT_SECONDS) -> None:
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._waiting: dict[str, WaitingCall] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def room(self, call: WaitingCall) -> bool:
        return call.handle in self._waiting or len(self._waiting) < self.limit

    def wait(self, call: WaitingCall) -> None:
        self._waiting[call.handle] = call

    def release(self, call: WaitingCall) -> None:
        if self._waiting.get(call.handle) is call:
            del self._waiting[call.handle]

    def claim(self, handle: str, server: str, tool: str, arguments: Mapping[str, Any]) -> WaitingCall | None:
        """The waiting call ``handle`` names, if it is still waiting here for this very call's answer."""
        call = self._waiting.get(handle)
        if call is None or (call.server, call.tool, call.arguments) != (server, tool, dict(arguments)):
            return None
        if call._asking is None or call._asking.reply.done():
            return None
        return call


def watch(task: asyncio.Task[Any], call: WaitingCall) -> None:
    """When ``task`` (the waiting call) ends, it leaves the registry and its outcome is retrieved."""

    def ended(done: asyncio.Task[Any]) -> None:
        call.registry.release(call)
        if not done.cancelled():
            done.exception()  # retrieved: a waiting call abandoned by its caller logs no warning

    task.add_done_callback(ended)
