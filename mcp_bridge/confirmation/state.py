"""Where the conversation stands, read once from the tracker's slots: each entry point of the executor
is a ``match`` over it.

* :class:`Idle`: no question of ours is pending.
* :class:`Asking`: a question (:class:`~mcp_bridge.question.Question`) waits for the person's answer.
* :class:`ServerAsking`: an MCP server's question waits (:mod:`mcp_bridge.confirmation.server_questions`).
* :class:`Malformed`: the question's slot holds something that does not open (edited, forged,
  copied from another conversation, or unreadable); ``claimed`` is what it says, when that can be read.

``left_behind``: the confirmation loop is not the conversation's active loop, so the person started
something else (a new request) while the question was pending; an interruption the bot handled
inside the loop keeps it active.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_bridge.confirmation.decisions import Turn
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.question import Forged, Question, open_question
from mcp_bridge.sealing import Seal

__all__ = ["Asking", "ConversationState", "Idle", "Malformed", "ServerAsking", "read_state"]


@dataclass(frozen=True)
class Idle:
    pass


@dataclass(frozen=True)
class Asking:
    question: Question
    left_behind: bool


@dataclass(frozen=True)
class ServerAsking:
    slot: Any
    left_behind: bool


@dataclass(frozen=True)
class Malformed:
    claimed: Question | None
    left_behind: bool


ConversationState = Idle | Asking | ServerAsking | Malformed


def read_state(turn: Turn, seal: Seal) -> ConversationState:
    left_behind = not turn.loop_active
    server_question = turn.slots.get(ELICITATION_SLOT)
    if server_question is not None:
        return ServerAsking(server_question, left_behind)
    opened = open_question(turn.slots.get(PENDING_SLOT), seal, turn.conversation_id)
    if opened is None:
        return Idle()
    if isinstance(opened, Forged):
        return Malformed(opened.question, left_behind)
    return Asking(opened, left_behind)
