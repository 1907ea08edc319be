"""What a call is for: the context the executor passes to every tool, explicitly, with each call.

Nothing about a call travels in a global or a context variable: who the call is for, in which
conversation and skill, under which idempotency key, with which slots, and the answers it resumes
with are all here, handed down from the executor through the tool's layers to the tool (and, for an
MCP tool, to the MCP client), the way pydantic-ai hands its ``RunContext`` to ``call_tool``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NOBODY", "CallContext", "Resume"]


@dataclass(frozen=True)
class Resume:
    """The answers to a server's questions, sent with the call they resume (and only with it)."""

    responses: Mapping[str, Mapping[str, Any]]
    # A 2026-07-28 server's opaque state for the call, or None.
    request_state: str | None
    # A 2025-11-25 call kept open in this process (mcp_bridge.server_questions.waiting_calls), or None.
    handle: str | None = None
    # Which round of questions this call is answering (1: its first questions).
    round: int = 1


@dataclass(frozen=True)
class CallContext:
    """One call's context. ``NOBODY``: a call made outside any conversation (``mcp-bridge check``)."""

    conversation_id: str | None = None
    # Who the call is for, as the channel named them: a server that acts as the person is called
    # with this person's token, and with nobody's when None.
    person: str | None = None
    skill: str | None = None
    # The key a confirmed call carries, so a repeat cannot write twice; None for an unconfirmed call.
    idempotency_key: str | None = None
    # The conversation's slots at the call (an MCP server's ``meta_map.from_slots`` reads them).
    slots: Mapping[str, Any] = field(default_factory=dict)
    resume: Resume | None = None


NOBODY = CallContext()
