"""Reading a message takes time in proportion to its length, whatever the message is made of.

Every pattern the confirmation reader, the example bot's form and the bot's NLU (``regex: email`` in
data/nlu.yml, which Rasa runs on every message) apply to a person's text is timed on adversarial
inputs of n and of 8n characters: a megabyte of "@", of dots, of one letter, an address followed by
endless labels, words, an edit marker followed by spaces. Linear code takes about 8 times as long
for 8n; the old quadratic patterns took 64 times and more (the reader's address pattern is cubic on
"@"), so the bound here, 24 times (or 50 ms, whichever is more, for inputs read in microseconds),
catches them with room for a busy machine. Times are CPU time of this process, the best of three,
and the larger input is abandoned once it runs three times the bound, so a regression fails quickly.
No absolute time is asserted.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_bridge.reading.answers import NluOpinion
from mcp_bridge.reading.reader import ConfirmationReader
from mcp_bridge.reading.text import address_spans
from tests.support.example_form import load_form
from tests.support.procs import EXAMPLE_BOT

BOT = EXAMPLE_BOT
N = 2_000
GROWTH = 8
MAX_RATIO = 24.0
FLOOR_SECONDS = 0.05
CALL = {"contact_id": 1, "text": "Dana called about the VAT rate on invoice 4471."}
TWO_CALLS = [CALL, {"contact_id": 2, "title": "Call Dana back"}]
OVERCONFIDENT = NluOpinion("affirm", 0.99, {"affirm": 0.99})
# Read without the limit: the point is how reading scales, not that long messages are refused.
UNLIMITED = ConfirmationReader(max_chars=10**9)


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "one letter": lambda n: "a" * n,
    "all @": lambda n: "@" * n,
    "a@ pairs": lambda n: _repeat("a@", n),
    "dots": lambda n: _repeat("a.", n),
    "address, then endless labels": lambda n: "a@" + _repeat("b.", n - 2),
    "address, then one endless label": lambda n: "a@" + "b" * (n - 2),
    "at-dot runs": lambda n: _repeat("a.@", n),
    "yes words": lambda n: _repeat("yes ", n),
    "a yes and instructions": lambda n: _repeat("yes save it, ", n),
    "one drawn-out yes": lambda n: "y" + "e" * (n - 2) + "s",
    "edit marker, then spaces": lambda n: "change it to" + " " * (n - 12),
    "edit markers without their end": lambda n: _repeat("change it ", n),
    "quotes and apostrophes": lambda n: _repeat("that's 'right' ", n),
    "a sentence": lambda n: _repeat("Dana called about invoice 4471, ok? ", n),
    # The word file's rules: each tried where it can start, and most of them fail late.
    "a grant rule without its end": lambda n: _repeat("yes, don't bother asking ", n),
    "this-time-only rules, over and over": lambda n: _repeat("yes, but only just for this ", n),
    "praise and thanks": lambda n: _repeat("brilliant, thanks so much ", n),
    "pointing, never finished": lambda n: _repeat("that's exactly the ", n),
    "a go-ahead without its place": lambda n: _repeat("add it to the ", n),
    "a repeated yes": lambda n: _repeat("yup ", n),
    "ironic leads": lambda n: _repeat("oh just wow gee ", n),
}


def _nlu_email_pattern() -> re.Pattern[str]:
    """The bot's `regex: email`, compiled as Rasa's RegexEntityExtractor does (case_sensitive: false)."""
    nlu = yaml.safe_load((BOT / "data" / "nlu.yml").read_text())["nlu"]
    (entry,) = [item for item in nlu if item.get("regex") == "email"]
    (pattern,) = [line[2:].strip() for line in entry["examples"].splitlines() if line.startswith("- ")]
    return re.compile(pattern, re.IGNORECASE)


FORM = load_form()
NLU_EMAIL = _nlu_email_pattern()

READERS: dict[str, Callable[[str], Any]] = {
    "reader.read": lambda text: UNLIMITED.read(text, OVERCONFIDENT, CALL),
    "reader.way_out": UNLIMITED.way_out,
    "reader.read_calls": lambda text: UNLIMITED.read_calls(text, OVERCONFIDENT, TWO_CALLS, ("note", "task")),
    "address_spans": address_spans,
    "form find_email": FORM.find_email,
    "form note_from_request": FORM.note_from_request,
    "nlu.yml regex: email": lambda text: list(NLU_EMAIL.finditer(text)),
}


class _TooSlow(Exception):
    pass


@contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Raise _TooSlow in this (the main) thread after ``seconds``, from a timer thread by SIGUSR1:
    pytest-timeout owns SIGALRM, and an ITIMER_PROF makes this machine's CPU clock coarse. The
    regex engine checks for signals as it runs, so a runaway match is stopped too."""
    done = False

    def stop(signum: int, frame: Any) -> None:
        if not done:
            raise _TooSlow

    previous = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(seconds, signal.pthread_kill, (threading.get_ident(), signal.SIGUSR1))
    timer.start()
    try:
        yield
    finally:
        done = True
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGUSR1, previous)


def _best_of_three(read: Callable[[str], Any], text: str, budget: float | None = None) -> float:
    """The least CPU time of three readings; inf as soon as one passes ``budget``. A reading that
    takes more than a tenth of a second is not repeated: noise no longer matters at that size."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        try:
            with _budget(budget or 3600.0):
                read(text)
        except _TooSlow:
            return float("inf")
        best = min(best, time.process_time() - started)
        if best > 0.1:
            break
    return best


@pytest.mark.parametrize("shape", ADVERSARIAL)
@pytest.mark.parametrize("reader", READERS)
def test_reading_grows_linearly_with_the_message(reader: str, shape: str) -> None:
    read, make = READERS[reader], ADVERSARIAL[shape]
    small, large = make(N), make(N * GROWTH)
    assert len(small) == N and len(large) == N * GROWTH
    for _ in range(3):  # a busy moment gets two more chances; past the budget there is no second one
        base = _best_of_three(read, small)
        bound = max(MAX_RATIO * base, FLOOR_SECONDS)
        # The budget is wall time, so a busy machine may cut a linear reading short: it gets the
        # retries too. Measured is CPU time.
        grown = _best_of_three(read, large, budget=bound * 3)
        if grown <= bound:
            break
    if grown > bound:
        ratio = (
            "over 1.5 times the bound"
            if grown == float("inf")
            else f"{grown / max(base, 1e-9):.0f} times as long"
        )
        pytest.fail(
            f"{reader} on {shape!r}: {N * GROWTH} characters took {ratio} as {N} did "
            f"({base * 1000:.2f} ms); linear is about {GROWTH} times, the bound {MAX_RATIO:.0f} times"
        )


PER_CALL: dict[str, Callable[[int], str]] = {
    "yes to 1, no to 2": lambda n: _repeat("yes to 1, no to 2, ", n),
    "targets and separators": lambda n: _repeat("1, 2 and 1 but ", n),
    "only the first": lambda n: _repeat("only the first ", n),
    "one yes, then targets": lambda n: "yes to " + _repeat("1 and 2, ", n - 7),
}


@pytest.mark.parametrize("shape", PER_CALL)
def test_the_per_call_reader_reads_50000_characters_in_linear_time(shape: str) -> None:
    """The answer to a question about several calls, 5,000 and 50,000 characters of per-call
    grammar: ten times the text, about ten times the time (a list rebuilt per word made it a
    hundred). The bound is a ratio, 30 times, not a wall-clock time."""
    read = READERS["reader.read_calls"]
    small, large = PER_CALL[shape](5_000), PER_CALL[shape](50_000)
    for _ in range(3):
        base = _best_of_three(read, small)
        bound = max(30.0 * base, FLOOR_SECONDS)
        grown = _best_of_three(read, large, budget=bound * 3)
        if grown <= bound:
            break
    print(f"read_calls on {shape!r}: 5,000 characters {base * 1000:.1f} ms, 50,000 {grown * 1000:.1f} ms")
    assert grown <= bound, f"50,000 characters took {grown / max(base, 1e-9):.0f} times as long as 5,000"


# The linear scans find exactly what the old patterns found (on short texts, where those were quick).
_OLD_READER_EMAIL = re.compile(r"[^\s<>(),;:\"'\[\]]+@[^\s<>(),;:\"'\[\]]+\.[^\s<>(),;:\"'\[\]]+")
_OLD_FORM_CANDIDATE = re.compile(r"[^\s<>(),;:\"'\[\]]+@[^\s<>(),;:\"'\[\]]+")
_ADDRESSY = st.text(alphabet="ab1.@-_ :,<'\"x", max_size=24)


@settings(max_examples=3000, deadline=None)
@given(_ADDRESSY)
def test_address_spans_are_what_the_old_pattern_matched(text: str) -> None:
    assert address_spans(text) == [m.span() for m in _OLD_READER_EMAIL.finditer(text)]


@settings(max_examples=3000, deadline=None)
@given(_ADDRESSY)
def test_the_forms_candidates_are_what_the_old_pattern_matched(text: str) -> None:
    assert [m.span() for m in FORM.email_candidates(text)] == [
        m.span() for m in _OLD_FORM_CANDIDATE.finditer(text)
    ]
