"""The audit trail: every question, answer and outcome of a confirmation, and every tool call
the executor makes, one JSON line each.

Entries carry digests, never the arguments: note text stays out of logs. A call entry
(``decision: "called"``) has the digest of the whole call and one digest per argument
(:func:`argument_digest`), so a test can check "this tool was called with this text" without the
text ever being written down. A call is attributed to the conversation its context names
(:class:`mcp_bridge.tools.context.CallContext`).

Each entry names the process that wrote it (``pid``): an action server with several workers, or
several replicas on one host, write to one trail. Read it back with
``python -m mcp_bridge.observability.audit PATH``. Observers (the metrics, say) see every entry as it is
recorded,
so whatever counts confirmations counts exactly what the trail says.
"""

import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mcp_bridge.question import AskedCall, Question
from mcp_bridge.sealing import call_digest

log = logging.getLogger(__name__)

AuditObserver = Callable[[Mapping[str, Any]], None]

CALLED = "called"


def argument_digest(name: str, value: Any) -> str:
    """The digest of one argument of a call, as call entries record it under ``arguments``."""
    canonical = json.dumps(
        {"name": name, "value": value}, sort_keys=True, ensure_ascii=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def argument_digests(arguments: Mapping[str, Any]) -> dict[str, str]:
    return {name: argument_digest(name, value) for name, value in arguments.items()}


class AuditWriteError(OSError):
    """An entry could not be written to the trail (it was logged). Before a call: do not make it.
    After a call: the call happened; say so, whatever the trail."""


class AuditLog:
    """Appends entries to ``path`` (and the ``mcp_bridge.observability.audit`` logger); ``None`` logs only.

    Each of ``observers`` is called with every entry after it is written.
    """

    def __init__(self, path: str | Path | None, *, observers: Iterable[AuditObserver] = ()) -> None:
        self.path = Path(path) if path else None
        self.observers = list(observers)
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def record_question(
        self,
        conversation: str,
        question: Question,
        call: AskedCall,
        decision: str,
        result: str | None,
        **extra: Any,
    ) -> None:
        """An entry about one call of a question: what was decided about it, and what came of it."""
        self.record(
            conversation=conversation,
            # Who was asked (None: the channel names nobody).
            user=question.user,
            skill=question.skill,
            tool=call.tool,
            source=call.source,
            confirmation=call.id,
            digest=call.digest,
            decision=decision,
            result=result,
            **extra,
        )

    def record(self, **entry: Any) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pid": os.getpid(), **entry}
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True)
        log.info("audit %s", line)
        if self.path is not None:
            try:
                with self._lock, self.path.open("a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
            except OSError as exc:
                log.error("audit trail %s could not be written (%s): %s", self.path, exc, line)
                raise AuditWriteError(f"audit trail {self.path}: {exc}") from exc
        for observe in self.observers:
            try:
                observe(entry)
            except Exception:  # an observer's bug must not stop a confirmation
                log.exception("audit observer %r failed", observe)

    def called(
        self,
        skill: str,
        tool: str,
        source: str,
        arguments: Mapping[str, Any],
        *,
        conversation: str | None,
        key: str | None,
        result: str,
        sent: bool,
    ) -> None:
        """Record one call of a tool (``decision: "called"``) made in ``conversation``."""
        self.record(
            conversation=conversation,
            skill=skill,
            tool=tool,
            source=source,
            confirmation=key,
            digest=call_digest(skill, tool, source, arguments),
            arguments=argument_digests(arguments),
            decision=CALLED,
            result=result,
            # False when the request provably never reached the tool (server unreachable, refused).
            sent=sent,
        )

    def entries(self) -> list[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mcp_bridge.observability.audit PATH", file=sys.stderr)
        return 2
    for entry in AuditLog(argv[0]).entries():
        print(
            f"{entry['time']}  {entry.get('conversation') or '-':<24} {entry['skill']}.{entry['tool']:<22} "
            f"{entry['decision']:<12} {entry.get('result') or ''}  digest={entry['digest'][:12]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
