"""One printed line per check: `  ✓ <name>   <what it saw>` or `  ✗ ...`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

NAME_WIDTH = 60
SAW_LIMIT = 600


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    saw: str


def passed(name: str, saw: str) -> CheckResult:
    return CheckResult(name, True, saw)


def failed(name: str, saw: str) -> CheckResult:
    return CheckResult(name, False, saw)


class Report:
    """Prints each check as it completes and remembers whether any failed."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.results: list[CheckResult] = []

    def section(self, title: str) -> None:
        print(title, file=self.out, flush=True)

    def add(self, result: CheckResult) -> CheckResult:
        self.results.append(result)
        mark = "✓" if result.ok else "✗"
        saw = " ".join(result.saw.split())
        if len(saw) > SAW_LIMIT:
            saw = saw[: SAW_LIMIT - 1] + "…"
        print(f"  {mark} {result.name:<{NAME_WIDTH}} {saw}".rstrip(), file=self.out, flush=True)
        return result

    @property
    def failures(self) -> list[CheckResult]:
        return [result for result in self.results if not result.ok]
