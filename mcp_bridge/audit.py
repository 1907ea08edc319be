"""The audit trail: every question, answer and outcome of a confirmation, one JSON line each.

Entries carry the argument digest, never the arguments: note text stays out of logs.
Read it back with ``python -m mcp_bridge.audit PATH``. Observers (the metrics, say) see every entry
as it is recorded, so whatever counts confirmations counts exactly what the trail says.
"""

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AuditObserver = Callable[[Mapping[str, Any]], None]


class AuditLog:
    """Appends entries to ``path`` (and the ``mcp_bridge.audit`` logger); ``None`` logs only.

    Each of ``observers`` is called with every entry after it is written.
    """

    def __init__(self, path: str | Path | None, *, observers: Iterable[AuditObserver] = ()) -> None:
        self.path = Path(path) if path else None
        self.observers = list(observers)
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, **entry: Any) -> None:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry}
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True)
        log.info("audit %s", line)
        if self.path is not None:
            with self._lock, self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        for observe in self.observers:
            try:
                observe(entry)
            except Exception:  # an observer's bug must not stop a confirmation
                log.exception("audit observer %r failed", observe)

    def entries(self) -> list[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mcp_bridge.audit PATH", file=sys.stderr)
        return 2
    for entry in AuditLog(argv[0]).entries():
        print(
            f"{entry['time']}  {entry['conversation']:<24} {entry['skill']}.{entry['tool']:<22} "
            f"{entry['decision']:<12} {entry.get('result') or ''}  digest={entry['digest'][:12]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
