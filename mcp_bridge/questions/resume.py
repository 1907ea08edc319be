"""The answers to a server's questions, carried to the call they resume.

:mod:`mcp_bridge.confirmation.server_questions` sets them around the resumed call;
:mod:`mcp_bridge.mcp_client.runtime` takes them for the matching call, once.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

# At most this many rounds of questions for one call: a server that keeps asking is stopped.
MAX_ROUNDS = 5


@dataclass
class Resume:
    """The answers for one call to one tool, sent with its next request only."""

    server: str
    tool: str
    responses: dict[str, dict[str, Any]]
    request_state: str | None
    # A 2025-11-25 call held open in this process (mcp_bridge.questions.waiting_calls), or None.
    handle: str | None = None


# Set around the resumed call; the runtime takes it for the matching call (once, then it is gone).
resume_input: ContextVar[Resume | None] = ContextVar("mcp_bridge_resume_input", default=None)
# Which round of questions a resumed call is in (1 for a call's first questions).
current_round: ContextVar[int] = ContextVar("mcp_bridge_question_round", default=1)


def take_resume(server: str, tool: str) -> tuple[dict[str, dict[str, Any]], str | None, str | None] | None:
    """The answers waiting for this call, if the executor is resuming it (used by the runtime): the
    responses, a 2026-07-28 server's ``request_state`` and a held 2025-11-25 call's handle."""
    waiting = resume_input.get()
    if waiting is None or (waiting.server, waiting.tool) != (server, tool):
        return None
    resume_input.set(None)
    return waiting.responses, waiting.request_state, waiting.handle
