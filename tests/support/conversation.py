"""Helpers to drive the Executor turn by turn, with slots carried the way Rasa's tracker carries them."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from mcp_bridge.confirmation.decisions import Decision, Turn
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT

REPO = Path(__file__).resolve().parents[2] / "examples" / "crm_bot"


def notes_for(db: Path, email: str) -> list[str]:
    """The texts of a contact's notes, oldest first, read straight from the SQLite file."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT n.text FROM notes n JOIN contacts c ON c.id = n.contact_id"
            " WHERE c.email = ? COLLATE NOCASE ORDER BY n.id",
            (email,),
        ).fetchall()
    return [row[0] for row in rows]


def all_notes(db: Path) -> list[tuple[int, int, str, str | None]]:
    """Every note as (id, contact_id, text, idempotency_key), oldest first."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT id, contact_id, text, idempotency_key FROM notes ORDER BY id").fetchall()
    return [(int(r[0]), int(r[1]), str(r[2]), r[3]) for r in rows]


def skills_with_source(target: Path, source: str) -> Path:
    """A copy of skills/ in ``target`` with every tool-source line set to ``source`` (local or mcp:crm)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in (REPO / "skills").glob("*.yml"):
        text = path.read_text()
        if source == "local":
            text = text.replace(": mcp:crm", ": local")
        (target / path.name).write_text(text)
    return target


class Conversation:
    """One conversation: its slots, how many messages the person has sent, and who sends the next
    one as the channel names them (``user``; None: a channel that names nobody)."""

    def __init__(
        self, executor: Executor, conversation_id: str = "test", *, user: str | None = None, **slots: Any
    ) -> None:
        self.executor = executor
        self.conversation_id = conversation_id
        self.user = user
        self.slots: dict[str, Any] = dict(slots)
        self.user_turn = 0
        # What the channel's signature says of the next message: when it was received (None:
        # unsigned) and why no channel vouches for it (None: one does, or none is required).
        self.said_at: float | None = None
        self.unvouched: str | None = None
        # The latest message's id, as the action server's record knows it (a channel's signature's
        # digest): a new one for every message the person sends.
        self.message_id: str | None = None

    def next_message(self) -> None:
        """The person sends a new message."""
        self.user_turn += 1
        self.message_id = uuid.uuid4().hex

    def turn(
        self,
        intent: str | None,
        confidence: float = 0.98,
        deny: float = 0.0,
        *,
        text: str = "",
        new_message: bool = True,
        loop_active: bool | None = None,
    ) -> Turn:
        ranking = {intent: confidence} if intent else {}
        if deny:
            ranking["deny"] = deny
        return Turn(
            self.conversation_id,
            dict(self.slots),
            self.user_turn,
            intent,
            confidence,
            ranking,
            text=text,
            new_message=new_message,
            # As in Rasa: the confirmation loop is active while a question is pending.
            loop_active=self.slots.get(PENDING_SLOT) is not None if loop_active is None else loop_active,
            user=self.user,
            said_at=self.said_at,
            unvouched=self.unvouched,
            message_id=None if self.unvouched is not None else self.message_id,
        )

    def absorb(self, decision: Decision) -> Decision:
        self.slots.update(decision.slots)
        return decision

    async def start(
        self, skill: str = "log_interaction", *, interrupting: bool = False, text: str = ""
    ) -> Decision:
        """A request that starts ``skill``, sent as ``text``.

        A new request replaces the confirmation loop in Rasa (a form starts), so the loop is not
        active; ``interrupting`` is a request handed back from the loop (a lookup in the middle).
        """
        self.next_message()
        turn = self.turn(skill, loop_active=interrupting, text=text)
        return self.absorb(await self.executor.start(skill, turn))

    async def say(
        self, text: str, intent: str | None = None, confidence: float = 0.98, deny: float = 0.0
    ) -> Decision:
        """The person answers the pending question with ``text`` (NLU: ``intent``)."""
        self.next_message()
        turn = self.turn(intent, confidence, deny, text=text)
        return self.absorb(await self.executor.answer(turn))

    async def yes(self, confidence: float = 0.98, deny: float = 0.0, intent: str = "affirm") -> Decision:
        return await self.say("yes", intent, confidence, deny)

    async def no(self) -> Decision:
        return await self.say("no", "deny")

    async def drop(self) -> Decision:
        """The bot's own "stop" rule runs ``action_deny_tool``."""
        self.next_message()
        return self.absorb(await self.executor.deny(self.turn("stop")))

    async def resume(self) -> Decision:
        """Rasa runs the loop again after the bot handled a message that was not an answer."""
        return self.absorb(await self.executor.answer(self.turn(None, new_message=False)))

    def other_message(self) -> None:
        """The person said something else; the executor is not involved."""
        self.next_message()


def responses(decision: Decision) -> list[str]:
    return [say.response for say in decision.say]


def asked_call(slot: Mapping[str, Any], place: int = 1) -> dict[str, Any]:
    """One call of the question a slot holds (the first by default), beside the question's own fields
    (its skill, who was asked and when): what a test reads of a question."""
    question = {name: value for name, value in slot.items() if name != "calls"}
    return {**question, **slot["calls"][place - 1]}


def forged(slot: Mapping[str, Any], place: int = 1, **changes: Any) -> dict[str, Any]:
    """A copy of the question in ``slot`` with one call's fields changed and the seal left as it was:
    what someone who edits the tracker would send."""
    calls = [dict(call) for call in slot["calls"]]
    calls[place - 1].update(changes)
    return {**slot, "calls": calls}
