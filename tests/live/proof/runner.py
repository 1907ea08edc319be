"""Plays a script against the assistant and records what was said and what the store holds."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tests.live.proof.chat import ChatError, RasaChat
from tests.live.proof.conversations import Script, Turn
from tests.live.proof.store import StoredNote, StoreReader


@dataclass
class Outcome:
    script: Script
    sender: str
    # The highest note id before the conversation started.
    mark: int = 0
    # (what the person said, what the assistant answered), in order
    transcript: list[tuple[str, list[str]]] = field(default_factory=list)
    # Set when a reply was not the expected one: what was said, expected and heard.
    diverged: str | None = None
    # Notes written between the start of the conversation and the question (None: not looked at).
    written_before_answer: list[StoredNote] | None = None
    # Notes written during the whole conversation (None: not looked at).
    written: list[StoredNote] | None = None

    @property
    def bot_messages(self) -> list[str]:
        return [message for _, replies in self.transcript for message in replies]

    @property
    def opening_ok(self) -> bool:
        """The opening was said in full and every reply was the expected one."""
        heard = [replies for _, replies in self.transcript[: len(self.script.opening)]]
        return heard == [[turn.expect] for turn in self.script.opening]

    @property
    def answer_replies(self) -> list[str] | None:
        if self.script.answer is None or len(self.transcript) <= len(self.script.opening):
            return None
        return self.transcript[len(self.script.opening)][1]


class Runner:
    def __init__(self, chat: RasaChat, store: StoreReader, run_id: str) -> None:
        self.chat = chat
        self.store = store
        self.run_id = run_id

    def sender(self, phase: str, label: str) -> str:
        return f"proof-{self.run_id}-{phase}-{label.replace(' ', '').replace('#', '')}-{uuid.uuid4().hex[:6]}"

    def say(self, outcome: Outcome, turn: Turn) -> bool:
        """Say one thing; False (and the outcome says why) when the reply is not the expected one."""
        try:
            replies = self.chat.send(outcome.sender, turn.says)
        except ChatError as exc:
            outcome.transcript.append((turn.says, []))
            outcome.diverged = f"{outcome.script.label}: said {turn.says!r}: {exc}"
            return False
        outcome.transcript.append((turn.says, replies))
        if replies != [turn.expect]:
            nlu = f" (NLU: {self.chat.intent_of(turn.says)})" if turn.by_intent else ""
            said = f"{outcome.script.label}: said {turn.says!r}{nlu}"
            outcome.diverged = f"{said}, heard {replies!r}, expected {turn.expect!r}"
            return False
        return True

    def opening(self, script: Script, phase: str, *, watch_store: bool = True) -> Outcome:
        """Play the opening, up to the question (or "not found")."""
        mark = self.store.mark() if watch_store else 0
        outcome = Outcome(script, self.sender(phase, script.label), mark)
        for turn in script.opening:
            if not self.say(outcome, turn):
                break
        if watch_store:
            outcome.written_before_answer = self.store.notes_after(mark)
            outcome.written = list(outcome.written_before_answer)
        return outcome

    def answer(self, outcome: Outcome, *, watch_store: bool = True) -> Outcome:
        """Say the script's "yes" or "no" (only when the opening went as expected)."""
        script = outcome.script
        if script.answer is not None and outcome.diverged is None:
            self.say(outcome, script.answer)
        if watch_store:
            outcome.written = self.store.notes_after(outcome.mark)
        return outcome

    def play(self, script: Script, phase: str) -> Outcome:
        return self.answer(self.opening(script, phase))

    def play_all(self, scripts: list[Script], phase: str) -> list[Outcome]:
        return [self.play(script, phase) for script in scripts]

    def play_at_once(self, scripts: list[Script], phase: str) -> list[Outcome]:
        """All scripts in parallel; every "yes" and "no" is sent at the same moment."""
        barrier = threading.Barrier(len(scripts))

        def one(script: Script) -> Outcome:
            outcome = self.opening(script, phase, watch_store=False)
            _wait(barrier.wait)
            return self.answer(outcome, watch_store=False)

        with ThreadPoolExecutor(max_workers=len(scripts)) as pool:
            return list(pool.map(one, scripts))


def _wait(wait: Callable[[float], object], timeout: float = 120.0) -> None:
    try:
        wait(timeout)
    except threading.BrokenBarrierError:
        pass
