"""`make help` is the list of commands: every target of the Makefile is on it, the daily ones first,
and it names no target the Makefile does not have. The contributing page, which the README says
lists every target, names each one too."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A rule whose target is a name (not a file such as $(VENV)/.installed, not `x := value`).
TARGET = re.compile(r"^([a-z][a-z0-9_-]*)\s*:(?!=)", re.MULTILINE)
# A line of `make help` that introduces a target (its description's continuation lines do not).
LISTED = re.compile(r"^  make ([a-z][a-z0-9_-]*)\s", re.MULTILINE)
# What a contributor runs every day, in the order `make help` gives them.
DAILY = ["chat", "quick", "up", "down", "lint", "typecheck", "test"]


def targets() -> set[str]:
    return set(TARGET.findall((REPO / "Makefile").read_text(encoding="utf-8")))


def listed() -> list[str]:
    shown = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    return LISTED.findall(shown.stdout)


def test_make_help_lists_every_target_once_and_only_targets() -> None:
    names = listed()
    assert sorted(targets() - set(names)) == [], "targets `make help` does not list"
    assert sorted(set(names) - targets()) == [], "`make help` lists targets the Makefile does not have"
    assert sorted(name for name in set(names) if names.count(name) > 1) == [], "listed more than once"


def test_make_help_lists_the_daily_targets_first() -> None:
    assert listed()[: len(DAILY)] == DAILY


def test_the_contributing_page_names_every_target() -> None:
    page = (REPO / "docs" / "contributing" / "index.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`make ([a-z][a-z0-9_-]*)", page))
    assert sorted(targets() - named) == [], "targets docs/contributing/index.md does not name"
