"""The action server's own record: which question is open, how each ended, which messages were used,
which permissions stand. Authoritative over anything a tracker says.

A tracker reaches the action server from Rasa, and whoever holds Rasa's API token, its tracker store,
its event broker or the action endpoint's token can write one. So a tracker's slots only carry sealed
*copies*; what authorises a write is read here, and every change is one atomic transition in the
database (:mod:`mcp_bridge.record.database`), whichever replica makes it:

``one_open_question``
    A conversation has at most one open question (ours, or a server's). Asking one ends the one before
    it (``replaced``).
``ends_once``
    A question goes from ``open`` to how it ended (``answered``, ``refused``, ``expired``, ``replaced``,
    ``dropped``, ``rejected``) once: two replicas given the same yes at the same moment run it once.
``answers_once``
    A message (:class:`Message`, the digest of its channel's signature) answers at most one question.
``starts_once``
    A message starts at most one question or run under a permission, and only while it is the newest
    message of its conversation the action server has acted on and younger than the start window: the
    person's earlier messages cannot be used to start something now.
``permissions_stand``
    A permission is granted, perhaps used, perhaps withdrawn; a withdrawn or expired one covers nothing,
    whatever a tracker carries.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mcp_bridge.record.database import Database, Tx

__all__ = ["Ended", "Message", "Record", "NotMade", "StoredQuestion", "QuestionKind"]

QuestionKind = Literal["question", "server"]
Ended = Literal["answered", "refused", "expired", "replaced", "dropped", "rejected"]
# A message older than this (on the action server's clock, from the time its channel signed) starts
# nothing: a question is started by what the person just said.
START_WINDOW_SECONDS = 300.0
# The channel's clock and the action server's may disagree by this much.
CLOCK_SKEW_SECONDS = 5.0


@dataclass(frozen=True)
class Message:
    """A message as the record knows it: ``id`` the digest of its channel's signature (or, unsigned in
    development, Rasa's message id; or a sign-in's resume), who the channel said sent it, and when."""

    id: str
    person: str | None
    said_at: float | None


@dataclass(frozen=True)
class StoredQuestion:
    id: str
    conversation_id: str
    kind: QuestionKind
    person: str | None
    sealed: dict[str, Any]
    asked_at: float
    # When the channel received the message it was asked in (None: asked in an unsigned turn).
    asked_after: float | None
    state: str
    ended_at: float | None
    reason: str | None


@dataclass(frozen=True)
class NotMade:
    """A transition the record did not make, and why (for the audit)."""

    reason: str


class _Abort(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


_QUESTION_COLUMNS = (
    "id, conversation_id, kind, person, sealed, asked_at, asked_after, state, ended_at, reason"
)


def _question(row: tuple[Any, ...]) -> StoredQuestion:
    id_, conversation, kind, person, sealed, asked_at, asked_after, state, ended_at, reason = row
    return StoredQuestion(
        id=str(id_),
        conversation_id=str(conversation),
        kind="server" if kind == "server" else "question",
        person=person or None,
        sealed=json.loads(sealed),
        asked_at=float(asked_at),
        asked_after=None if asked_after is None else float(asked_after),
        state=str(state),
        ended_at=None if ended_at is None else float(ended_at),
        reason=reason,
    )


class Record:
    """The record over one database; ``clock`` is the action server's."""

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], float] = time.time,
        start_window: float = START_WINDOW_SECONDS,
    ) -> None:
        self.database = database
        self._clock = clock
        self.start_window = start_window

    def now(self) -> float:
        """The action server's clock, which the record's times are on."""
        return self._clock()

    # -- questions ----------------------------------------------------------------------------------

    async def asked(
        self,
        *,
        conversation_id: str,
        kind: QuestionKind,
        question_id: str,
        person: str | None,
        sealed: Mapping[str, Any],
        asked_after: float | None,
        message: Message | None,
        new_words: bool,
    ) -> NotMade | None:
        """``one_open_question``: record a question asked now, ending the open one before it. With
        ``new_words`` (not the same calls asked again) it is started by ``message`` (``starts_once``),
        which must not have started anything yet; None when recorded."""
        now = self._clock()
        try:
            async with self.database.transaction() as tx:
                if new_words and message is not None:
                    await self._start(tx, conversation_id, message, f"question:{question_id}", now)
                await tx.execute(
                    "UPDATE record_questions SET state = 'replaced', ended_at = ?, reason = ? "
                    "WHERE conversation_id = ? AND state = 'open'",
                    now,
                    f"replaced by {question_id}",
                    conversation_id,
                )
                await tx.execute(
                    "INSERT INTO record_questions (id, conversation_id, kind, person, sealed, asked_at, "
                    "asked_after, asked_by, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open')",
                    question_id,
                    conversation_id,
                    kind,
                    person or "",
                    json.dumps(dict(sealed), sort_keys=True),
                    now,
                    asked_after,
                    message.id if message is not None else None,
                )
        except _Abort as refused:
            return NotMade(refused.reason)
        return None

    async def open_question(self, conversation_id: str) -> StoredQuestion | None:
        """The conversation's open question, if it has one."""
        rows = await self.database.fetch(
            f"SELECT {_QUESTION_COLUMNS} FROM record_questions WHERE conversation_id = ? AND state = 'open' "
            "ORDER BY asked_at DESC LIMIT 1",
            conversation_id,
        )
        return _question(rows[0]) if rows else None

    async def question(self, question_id: str) -> StoredQuestion | None:
        rows = await self.database.fetch(
            f"SELECT {_QUESTION_COLUMNS} FROM record_questions WHERE id = ?", question_id
        )
        return _question(rows[0]) if rows else None

    async def end(
        self, question_id: str, how: Ended, *, message: Message | None = None, reason: str | None = None
    ) -> NotMade | None:
        """``ends_once`` (and ``answers_once`` for ``message``): the open question ends ``how``; None when
        this call ended it, else why not (it had ended already, or the message answered another)."""
        now = self._clock()
        try:
            async with self.database.transaction() as tx:
                ended = await tx.fetch(
                    "UPDATE record_questions SET state = ?, ended_at = ?, ended_by = ?, reason = ? "
                    "WHERE id = ? AND state = 'open' RETURNING conversation_id",
                    how,
                    now,
                    message.id if message is not None else None,
                    reason,
                    question_id,
                )
                if not ended:
                    rows = await tx.fetch("SELECT state FROM record_questions WHERE id = ?", question_id)
                    raise _Abort(
                        f"the question was {rows[0][0]} already"
                        if rows
                        else "the action server never asked it"
                    )
                if message is not None:
                    await self._seen(tx, str(ended[0][0]), message, now)
                    used = await tx.execute(
                        "UPDATE record_messages SET answered = ? WHERE id = ? AND answered IS NULL",
                        question_id,
                        message.id,
                    )
                    if not used:
                        raise _Abort("this message answered another question already")
        except _Abort as refused:
            return NotMade(refused.reason)
        return None

    # -- messages -----------------------------------------------------------------------------------

    async def started(self, message_id: str) -> str | None:
        """What the message started already (a question or a run), or None."""
        rows = await self.database.fetch("SELECT started FROM record_messages WHERE id = ?", message_id)
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    async def start(self, conversation_id: str, message: Message, what: str) -> NotMade | None:
        """``starts_once`` on its own (a run that asks nothing but must not repeat)."""
        try:
            async with self.database.transaction() as tx:
                await self._start(tx, conversation_id, message, what, self._clock())
        except _Abort as refused:
            return NotMade(refused.reason)
        return None

    async def _seen(self, tx: Tx, conversation_id: str, message: Message, now: float) -> None:
        await tx.execute(
            "INSERT INTO record_messages (id, conversation_id, person, said_at, seen_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            message.id,
            conversation_id,
            message.person or "",
            message.said_at,
            now,
        )

    async def _start(self, tx: Tx, conversation_id: str, message: Message, what: str, now: float) -> None:
        if message.said_at is not None:
            if now - message.said_at > self.start_window + CLOCK_SKEW_SECONDS:
                raise _Abort("the message is too old to start anything")
            newer = await tx.fetch(
                "SELECT id FROM record_messages WHERE conversation_id = ? AND said_at > ? AND id <> ? "
                "AND (answered IS NOT NULL OR started IS NOT NULL) LIMIT 1",
                conversation_id,
                message.said_at,
                message.id,
            )
            if newer:
                raise _Abort("a newer message of this conversation was acted on already")
        await self._seen(tx, conversation_id, message, now)
        started = await tx.execute(
            "UPDATE record_messages SET started = ? WHERE id = ? AND started IS NULL", what, message.id
        )
        if not started:
            raise _Abort("this message started a question or a run already")

    # -- permissions ---------------------------------------------------------------------------------

    async def grant(
        self,
        *,
        permission_id: str,
        conversation_id: str,
        person: str | None,
        sealed: Mapping[str, Any],
        granted_at: float,
        expires_at: float,
    ) -> None:
        await self.database.execute(
            "INSERT INTO record_permissions (id, conversation_id, person, sealed, granted_at, expires_at, "
            "state) VALUES (?, ?, ?, ?, ?, ?, 'granted')",
            permission_id,
            conversation_id,
            person or "",
            json.dumps(dict(sealed), sort_keys=True),
            granted_at,
            expires_at,
        )

    async def permissions(self, conversation_id: str, person: str | None) -> list[dict[str, Any]]:
        """The sealed permissions ``person`` gave in the conversation that stand now (granted, not
        withdrawn, unexpired), oldest first."""
        rows = await self.database.fetch(
            "SELECT sealed FROM record_permissions WHERE conversation_id = ? AND person = ? "
            "AND state = 'granted' AND expires_at > ? ORDER BY granted_at",
            conversation_id,
            person or "",
            self._clock(),
        )
        return [json.loads(row[0]) for row in rows]

    async def ended_permissions(
        self, conversation_id: str, person: str | None
    ) -> list[tuple[dict[str, Any], str]]:
        """The sealed permissions ``person`` gave in the conversation that no longer stand, each with why
        (``withdrawn``, ``expired``), newest first: for the audit of a call one of them would have covered."""
        rows = await self.database.fetch(
            "SELECT sealed, state, expires_at FROM record_permissions "
            "WHERE conversation_id = ? AND person = ? AND (state <> 'granted' OR expires_at <= ?) "
            "ORDER BY granted_at DESC LIMIT 20",
            conversation_id,
            person or "",
            self._clock(),
        )
        return [(json.loads(row[0]), "withdrawn" if row[1] == "withdrawn" else "expired") for row in rows]

    async def use(self, permission_id: str, conversation_id: str, message: Message | None) -> NotMade | None:
        """``permissions_stand`` and ``starts_once``: a run under the permission, started by ``message``;
        None when the permission still stands and the message started nothing yet."""
        now = self._clock()
        try:
            async with self.database.transaction() as tx:
                used = await tx.execute(
                    "UPDATE record_permissions SET uses = uses + 1, last_used_at = ? "
                    "WHERE id = ? AND conversation_id = ? AND state = 'granted' AND expires_at > ?",
                    now,
                    permission_id,
                    conversation_id,
                    now,
                )
                if not used:
                    raise _Abort("the permission was withdrawn or has expired")
                if message is None:
                    raise _Abort("no message of the person's started the run")
                await self._start(tx, conversation_id, message, f"permission:{permission_id}", now)
        except _Abort as refused:
            return NotMade(refused.reason)
        return None

    async def withdraw(self, conversation_id: str, person: str | None) -> list[dict[str, Any]]:
        """Every permission ``person`` gave in the conversation withdrawn; the sealed ones that stood."""
        now = self._clock()
        async with self.database.transaction() as tx:
            rows = await tx.fetch(
                "SELECT sealed, expires_at FROM record_permissions WHERE conversation_id = ? AND person = ? "
                "AND state = 'granted'",
                conversation_id,
                person or "",
            )
            await tx.execute(
                "UPDATE record_permissions SET state = 'withdrawn', withdrawn_at = ? "
                "WHERE conversation_id = ? AND person = ? AND state = 'granted'",
                now,
                conversation_id,
                person or "",
            )
        return [json.loads(row[0]) for row in rows]

    # -- the sealing key -------------------------------------------------------------------------------

    async def seal_key(self) -> bytes:
        """The key this deployment seals with when no ``CONFIRMATION_SECRET`` is set: drawn once, kept."""
        await self.database.execute(
            "INSERT INTO record_keys (name, value, created_at) VALUES ('seal', ?, ?) "
            "ON CONFLICT (name) DO NOTHING",
            secrets.token_hex(32),
            self._clock(),
        )
        rows = await self.database.fetch("SELECT value FROM record_keys WHERE name = 'seal'")
        return bytes.fromhex(str(rows[0][0]))
