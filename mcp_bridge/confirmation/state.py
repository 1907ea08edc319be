"""Where the conversation stands, read once from the action server's record: each entry point of the
executor is a ``match`` over it.

* :class:`Idle`: no question of ours is open, and the tracker claims none.
* :class:`Asking`: a question (:class:`~mcp_bridge.question.Question`) waits for the person's answer.
* :class:`ServerAsking`: an MCP server's question waits (:mod:`mcp_bridge.confirmation.server_asking`).
* :class:`Malformed`: the tracker's slots claim a question the record does not hold open (answered,
  refused or replaced already, never asked, forged, copied from another conversation, unreadable), or
  the record's own row does not open; ``claimed`` is what the slot says, when that can be read, and
  ``reason`` why it is no open question (for the audit).

The record decides (:mod:`mcp_bridge.record.store`): whatever the tracker's slots say, only the
question the record holds open can be answered. The slots are copies for Rasa.

``left_behind``: the confirmation loop is not the conversation's active loop, so the person started
something else (a new request) while the question was pending; an interruption the bot handled
inside the loop keeps it active.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_bridge.confirmation.decisions import Turn
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.question import Forged, Question, claimed, open_question
from mcp_bridge.record.store import Record, StoredQuestion
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
    stored: StoredQuestion
    left_behind: bool


@dataclass(frozen=True)
class Malformed:
    claimed: Question | None
    left_behind: bool
    reason: str = "it does not open"
    # How the record says the claimed question ended (None: the record never asked it).
    ended: str | None = None


ConversationState = Idle | Asking | ServerAsking | Malformed


async def read_state(turn: Turn, seal: Seal, record: Record) -> ConversationState:
    left_behind = not turn.loop_active
    stored = await record.open_question(turn.conversation_id)
    if stored is None:
        slot = turn.slots.get(PENDING_SLOT)
        if slot is None and turn.slots.get(ELICITATION_SLOT) is None:
            return Idle()
        question = claimed(slot)
        known = await record.question(question.id) if question is not None else None
        if known is None or known.conversation_id != turn.conversation_id:
            return Malformed(question, left_behind, "the action server's record holds no such question here")
        return Malformed(question, left_behind, f"the question was {known.state} already", known.state)
    if stored.kind == "server":
        return ServerAsking(stored, left_behind)
    opened = open_question(stored.sealed, seal, turn.conversation_id)
    if isinstance(opened, Forged) or opened is None:
        return Malformed(opened.question if opened else None, left_behind, "its record does not open")
    return Asking(opened, left_behind)
