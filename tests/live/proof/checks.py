"""The conversation checks (issue 4's list), each judged from what was said and what the store holds."""

from __future__ import annotations

from collections import Counter

from tests.live.proof.conversations import Responses
from tests.live.proof.report import CheckResult, failed, passed
from tests.live.proof.runner import Outcome
from tests.live.proof.store import StoredNote, describe, listing


def _expected_note(outcome: Outcome) -> StoredNote:
    assert outcome.script.contact is not None
    return StoredNote(outcome.script.contact.contact_id, outcome.script.note)


def _heard(outcome: Outcome) -> str:
    return outcome.diverged or f"{outcome.script.label}: heard {outcome.answer_replies!r}"


def asks_first(tag: str, outcomes: list[Outcome]) -> CheckResult:
    """1. Logging a note makes the assistant ask before writing, quoting the exact note text."""
    name = f"[{tag}] 1 asks before writing, quoting the exact note"
    for outcome in outcomes:
        if not outcome.opening_ok:
            return failed(name, outcome.diverged or f"{outcome.script.label}: no question")
        if outcome.written_before_answer:
            return failed(
                name, f"{outcome.script.label}: {describe(outcome.written_before_answer)} before the answer"
            )
    example = outcomes[0].script.opening[-1].expect
    return passed(name, f"{len(outcomes)} questions, nothing written before the answer; e.g. «{example}»")


def yes_writes_once(tag: str, outcomes: list[Outcome]) -> CheckResult:
    """2. "Yes" writes exactly one note with exactly that text, to the right contact."""
    name = f'[{tag}] 2 "yes" writes one note: that text, that contact'
    for outcome in outcomes:
        answer = outcome.script.answer
        assert answer is not None
        if outcome.answer_replies != [answer.expect]:
            return failed(name, _heard(outcome))
        expected = _expected_note(outcome)
        if outcome.written != [expected]:
            return failed(
                name,
                f"{outcome.script.label}: {describe(outcome.written or [])}; "
                f'expected contact {expected.contact_id} "{expected.text}"',
            )
    contacts = len({outcome.script.email for outcome in outcomes})
    phrasings = ", ".join(repr(outcome.script.answer.says) for outcome in outcomes if outcome.script.answer)
    return passed(
        name, f"{len(outcomes)} notes, each once, exact text, on {contacts} contacts; said {phrasings}"
    )


def no_writes_nothing(tag: str, outcomes: list[Outcome], responses: Responses) -> CheckResult:
    """3. "No" writes nothing and the person hears the denial response."""
    name = f'[{tag}] 3 "no" writes nothing, says so'
    for outcome in outcomes:
        answer = outcome.script.answer
        assert answer is not None
        if outcome.answer_replies != [answer.expect]:
            return failed(name, _heard(outcome))
        if outcome.written:
            return failed(name, f"{outcome.script.label}: {describe(outcome.written)}")
    phrasings = ", ".join(repr(outcome.script.answer.says) for outcome in outcomes if outcome.script.answer)
    denial = responses.text("utter_note_cancelled")
    return passed(name, f"{len(outcomes)} × «{denial}», no note written; said {phrasings}")


def absent_not_found(tag: str, outcomes: list[Outcome]) -> CheckResult:
    """4. An absent contact writes nothing and is answered as not found, not as an error."""
    name = f"[{tag}] 4 absent contact: not found, nothing written"
    for outcome in outcomes:
        if not outcome.opening_ok:
            return failed(name, outcome.diverged or f"{outcome.script.label}: no answer")
        if outcome.written:
            return failed(name, f"{outcome.script.label}: {describe(outcome.written)}")
    said = " ".join(f"«{outcome.bot_messages[-1]}»" for outcome in outcomes)
    return passed(name, f"{len(outcomes)} addresses, no note written; {said}")


def identical_transcripts(first: tuple[str, list[Outcome]], second: tuple[str, list[Outcome]]) -> CheckResult:
    """5. The transcripts of the same conversations over local and over MCP tools are identical."""
    (tag_a, outcomes_a), (tag_b, outcomes_b) = first, second
    name = f"5 transcripts over {tag_a} and {tag_b} tools identical"
    by_label_b = {outcome.script.label: outcome for outcome in outcomes_b}
    messages = 0
    for outcome_a in outcomes_a:
        label = outcome_a.script.label
        outcome_b = by_label_b.get(label)
        if outcome_b is None:
            return failed(name, f"{label}: only over {tag_a}")
        said_a, said_b = outcome_a.bot_messages, outcome_b.bot_messages
        if said_a != said_b:
            index = next(
                (i for i, (x, y) in enumerate(zip(said_a, said_b, strict=False)) if x != y),
                min(len(said_a), len(said_b)),
            )
            at_a = said_a[index] if index < len(said_a) else "(nothing)"
            at_b = said_b[index] if index < len(said_b) else "(nothing)"
            return failed(name, f"{label}, bot message {index + 1}: {tag_a} {at_a!r} / {tag_b} {at_b!r}")
        messages += len(said_a)
    if len(outcomes_a) != len(outcomes_b):
        return failed(name, f"{len(outcomes_a)} conversations over {tag_a}, {len(outcomes_b)} over {tag_b}")
    return passed(name, f"{len(outcomes_a)} conversations, {messages} bot messages, word for word")


def at_once(tag: str, outcomes: list[Outcome], written: list[StoredNote]) -> CheckResult:
    """8. Ten conversations at once, half confirming, leave exactly the confirmed notes, each once."""
    name = f"[{tag}] 8 at once (x{len(outcomes)}): exactly the confirmed notes, once"
    for outcome in outcomes:
        answer = outcome.script.answer
        if outcome.diverged or answer is None or outcome.answer_replies != [answer.expect]:
            return failed(name, _heard(outcome))
    confirmed = [outcome for outcome in outcomes if outcome.script.confirms]
    expected = Counter(_expected_note(outcome) for outcome in confirmed)
    seen = Counter(written)
    if seen != expected:
        missing = list((expected - seen).elements())
        extra = list((seen - expected).elements())
        return failed(name, f"missing: {listing(missing)}; unexpected or repeated: {listing(extra)}")
    denied = len(outcomes) - len(confirmed)
    return passed(
        name, f"{len(confirmed)} confirmed → {len(written)} notes, each once; {denied} denied → none"
    )
