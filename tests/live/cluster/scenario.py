"""Conversations through nginx while replicas die: what the person saw, and what was written.

Each conversation is a person logging a call: "log a call with <email>", then the note (unique
to the conversation), then "yes" (even-numbered conversations) or "no" (odd). A person who gets
an error (nginx's 502, a timeout, an empty answer) says the same thing once more, as people do;
a person who gets an answer that does not fit stops there and says neither yes nor no.

While they talk, `Faults` kills (SIGKILL) one action server, then one MCP server, then one Rasa
server, each once a given number of conversations have started, and starts it again on the same
port. The last conversations wait until every killed replica is back, so the restarted ones
serve too.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from devstack.cluster import Cluster

CONTACTS = ["dana@example.com", "priya@example.com", "tom@example.org", "lena.fischer@example.net"]
ASK_NOTE = "What should the note say?"
QUESTION = "Save this to "
SAVED = "Saved to "
CANCELLED = "Nothing was written."
REQUEST_TIMEOUT = 60.0


@dataclass
class Answer:
    texts: list[str]
    rasa_replica: str | None
    error: str | None  # the kind of error the person saw, or None


@dataclass
class Conversation:
    index: int
    sender: str
    email: str
    note: str
    says_yes: bool
    outcome: str = "not started"  # saved / cancelled / stopped: <step> / other: <what the bot said>
    errors: list[str] = field(default_factory=list)
    rasa_replicas: set[str] = field(default_factory=set)
    started_at: float = 0.0


def _kind_of(texts: list[str]) -> str:
    """A short name for an answer that does not fit, without any note text in it."""
    if not texts:
        return "empty answer"
    first = texts[0]
    if first.startswith(QUESTION):
        return "asked the question again"
    return first[:70]


class Person:
    """Talks to the REST channel through nginx (which passes the bearer token on), one message at a time."""

    def __init__(self, rasa_url: str, rest_token: str) -> None:
        self.webhook = f"{rasa_url}/webhooks/rest/webhook"
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {rest_token}"}

    def send(self, sender: str, message: str) -> Answer:
        request = urllib.request.Request(
            self.webhook,
            data=json.dumps({"sender": sender, "message": message}).encode(),
            method="POST",
            headers=self.headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
                replica = response.headers.get("X-Upstream")
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return Answer([], exc.headers.get("X-Upstream"), f"HTTP {exc.code} from nginx")
        except TimeoutError:
            return Answer([], None, "no answer within 60 s")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return Answer([], None, f"connection failed ({type(exc).__name__})")
        texts = [str(item["text"]) for item in body if isinstance(item, dict) and "text" in item]
        if not texts:
            return Answer([], replica, "empty answer")
        return Answer(texts, replica, None)

    def say(
        self, chat: Conversation, message: str, expect: str, *, answers_again: bool = False
    ) -> list[str] | None:
        """Send `message`; on an error, once more. The answer's texts when one contains
        `expect`; otherwise None (the conversation stops, noted in `chat`).

        `answers_again`: the message answers the question. After an error the bot may ask that
        question again (the server that died may have lost the answer's events, and a late answer is
        asked about again); the person then answers it once more, as people do."""
        errors = 0
        for _attempt in range(3):
            answer = self.send(chat.sender, message)
            if answer.rasa_replica:
                chat.rasa_replicas.add(answer.rasa_replica.split(",")[-1].strip())
            if answer.error is None:
                if any(expect in text for text in answer.texts):
                    return answer.texts
                if answers_again and errors and any(QUESTION in text for text in answer.texts):
                    chat.errors.append("asked the question again after an error")
                    continue
                chat.errors.append(f"unexpected answer: {_kind_of(answer.texts)}")
                return None
            chat.errors.append(answer.error)
            errors += 1
            if errors == 2:
                return None
            time.sleep(1.0)
        return None

    def converse(self, chat: Conversation) -> None:
        chat.started_at = time.monotonic()
        if self.say(chat, f"log a call with {chat.email}", ASK_NOTE) is None:
            chat.outcome = "stopped: asking to log a call"
            return
        if self.say(chat, chat.note, QUESTION) is None:
            chat.outcome = "stopped: giving the note"
            return
        texts = self.say(
            chat, "yes" if chat.says_yes else "no", SAVED if chat.says_yes else CANCELLED, answers_again=True
        )
        if texts is not None:
            chat.outcome = "saved" if chat.says_yes else "cancelled"
        else:
            chat.outcome = "stopped: answering the question"


@dataclass
class FaultRecord:
    name: str
    at_conversation: int
    in_flight: int
    back_after_s: float | None = None
    error: str | None = None


class Faults:
    """Kills and restarts one replica of each kind, in turn, as the run passes each threshold."""

    def __init__(self, cluster: Cluster, schedule: list[tuple[str, int]]) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.records: list[FaultRecord] = []
        self.all_back = threading.Event()
        self._started = 0
        self._in_flight = 0
        self._changed = threading.Condition()

    def conversation_started(self) -> None:
        with self._changed:
            self._started += 1
            self._in_flight += 1
            self._changed.notify_all()

    def conversation_ended(self) -> None:
        with self._changed:
            self._in_flight -= 1

    def run(self) -> None:
        try:
            for name, threshold in self.schedule:
                with self._changed:
                    self._changed.wait_for(lambda t=threshold: self._started >= t, timeout=600)  # type: ignore[misc]
                    in_flight = self._in_flight
                record = FaultRecord(name, self._started, in_flight)
                self.records.append(record)
                self.cluster.kill(name)
                print(
                    f"    killed {name} (SIGKILL) after {record.at_conversation} conversations started",
                    flush=True,
                )
                began = time.monotonic()
                try:
                    self.cluster.restart(name)
                    record.back_after_s = time.monotonic() - began
                    print(f"    {name} is back after {record.back_after_s:.1f} s", flush=True)
                except Exception as exc:  # reported in the figures; the run goes on
                    record.error = str(exc).splitlines()[0]
        finally:
            self.all_back.set()


def run_conversations(
    cluster: Cluster, run_id: str, count: int, workers: int, faults: Faults, hold_back_from: int
) -> list[Conversation]:
    person = Person(cluster.rasa_url, cluster.secrets["rest_token"])
    chats = [
        Conversation(
            index=i,
            sender=f"cluster-{run_id}-{i:03d}",
            email=CONTACTS[i % len(CONTACTS)],
            note=f"Cluster check {run_id} conversation {i:03d}: asked for a callback on Friday.",
            says_yes=i % 2 == 0,
        )
        for i in range(count)
    ]

    def one(chat: Conversation) -> None:
        if chat.index >= hold_back_from:
            faults.all_back.wait(timeout=600)
        faults.conversation_started()
        try:
            person.converse(chat)
        finally:
            faults.conversation_ended()

    fault_thread = threading.Thread(target=faults.run, name="faults")
    fault_thread.start()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, chats))
    fault_thread.join(timeout=600)
    return chats


def audit_replicas(cluster: Cluster, replicas: int) -> dict[str, dict[str, list[int]]]:
    """conversation id -> decision -> the action-server replicas that recorded it, in order."""
    seen: dict[str, dict[str, list[int]]] = {}
    for replica in range(1, replicas + 1):
        path = cluster.audit_log(replica)
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry: dict[str, Any] = json.loads(line)
            seen.setdefault(str(entry["conversation"]), {}).setdefault(str(entry["decision"]), []).append(
                replica
            )
    return seen


def errors_by_kind(chats: list[Conversation]) -> Counter[str]:
    return Counter(error for chat in chats for error in chat.errors)
