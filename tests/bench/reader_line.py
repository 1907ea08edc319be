"""The confirmation reader's time for 1 kB, 64 kB and 1 MB messages: an ordinary text and the worst of
the adversarial ones (a run of "@", of dots, of one letter, "a@" pairs, yes-words, an address followed
by endless labels). Read without the limit, so the line shows how reading scales; the last row is what
the action server does with a 1 MB message at the default limit (it refuses it unread).

`python -m tests.bench.reader_line` prints the lines alone (seconds, no services); `make bench`
prints them with the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_bridge.reading.answers import NluOpinion
from mcp_bridge.reading.reader import ConfirmationReader
from tests.bench.stats import Series

SIZES = {"1 kB": 1_000, "64 kB": 64_000, "1 MB": 1_000_000}
REPEATS = {"1 kB": 200, "64 kB": 10, "1 MB": 3}
CALL = {"contact_id": 1, "text": "Dana called about the VAT rate on invoice 4471."}
NLU = NluOpinion("affirm", 0.99, {"affirm": 0.99})


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


ORDINARY: Callable[[int], str] = lambda n: _repeat("Dana called about the VAT rate on invoice 4471. ", n)  # noqa: E731
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "all @": lambda n: "@" * n,
    "a@ pairs": lambda n: _repeat("a@", n),
    "dots": lambda n: _repeat("a.", n),
    "one letter": lambda n: "a" * n,
    "yes words": lambda n: _repeat("yes ", n),
    "address, endless labels": lambda n: "a@" + _repeat("b.", n - 2),
}


@dataclass
class ReaderLine:
    ordinary: dict[str, Series] = field(default_factory=dict)
    # The slowest adversarial input at each size, and which one it was.
    worst: dict[str, Series] = field(default_factory=dict)
    worst_input: dict[str, str] = field(default_factory=dict)
    refusal: Series = field(default_factory=lambda: Series("1 MB refused at the default limit"))

    def summary(self) -> dict[str, Any]:
        return {
            "ordinary": {size: s.summary(with_samples=False) for size, s in self.ordinary.items()},
            "worst_adversarial": {
                size: {"input": self.worst_input[size], **s.summary(with_samples=False)}
                for size, s in self.worst.items()
            },
            "refusal_1mb_default_limit": self.refusal.summary(with_samples=False),
        }


def _time(read: Callable[[str], object], text: str, repeats: int, name: str) -> Series:
    read(text)  # warm-up
    series = Series(name)
    for _ in range(repeats):
        started = time.perf_counter()
        read(text)
        series.samples.append(time.perf_counter() - started)
    return series


def measure() -> ReaderLine:
    unlimited = ConfirmationReader(max_chars=10**9)
    read = lambda text: unlimited.read(text, NLU, CALL)  # noqa: E731
    line = ReaderLine()
    for size, n in SIZES.items():
        line.ordinary[size] = _time(read, ORDINARY(n), REPEATS[size], f"ordinary text, {size}")
        timed = {name: _time(read, make(n), REPEATS[size], name) for name, make in ADVERSARIAL.items()}
        worst = max(timed, key=lambda name: timed[name].median_ms)
        line.worst[size], line.worst_input[size] = timed[worst], worst
    default = ConfirmationReader()
    line.refusal = _time(lambda text: default.read(text, NLU, CALL), "@" * SIZES["1 MB"], 200, "refused")
    return line


def lines(line: ReaderLine) -> list[str]:
    """The rows for the printed table: median ms, and microseconds per kB (flat when linear)."""
    out = ["", "Confirmation reader (no limit; per kB flat = linear time)"]
    out.append(f"  {'message':<44}{'n':>6}{'median ms':>11}{'us per kB':>11}")
    for size, n in SIZES.items():
        for label, series in (
            (f"{size} ordinary text", line.ordinary[size]),
            (f"{size} worst adversarial ({line.worst_input[size]})", line.worst[size]),
        ):
            per_kb = series.median_ms * 1000 / (n / 1000)
            out.append(f"  {label:<44}{series.n:>6}{series.median_ms:>11.2f}{per_kb:>11.1f}")
    refusal = line.refusal
    out.append(f"  {'1 MB at the default limit: refused unread':<44}{refusal.n:>6}{refusal.median_ms:>11.4f}")
    return out


if __name__ == "__main__":
    print("\n".join(lines(measure())))
