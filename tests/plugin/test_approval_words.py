"""The example bot's supervisor rule (examples/crm_bot/skills/log_interaction.yml: a note naming a
refund, a write-off or a credit note waits for a supervisor) cannot be spelt around: every spelling
below is held by mcp_bridge.approvals.second_approver.required, which mcp_bridge.confirmation.permissions
also asks before a
remembered permission covers a call; innocent notes are not held."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.approvals import textmatch
from mcp_bridge.confirmation.gate import Ask, Confirmed, Hold, Reached, gate
from mcp_bridge.skills.files import RequiresConfirmation, Skill, load_skills
from mcp_bridge.tools.context import NOBODY

EXAMPLE_SKILLS = Path(__file__).resolve().parents[2] / "examples" / "crm_bot" / "skills"
SHY, ZWSP, ZWJ, BOM, RLM = "\u00ad", "\u200b", "\u200d", "\ufeff", "\u200f"

REFUND = {
    "plain": "Dana asked for a refund",
    "upper case": "REFUND on invoice 4471",
    "title case": "Refund agreed",
    "plural": "two refunds issued",
    "past tense": "we refunded the VAT",
    "gerund": "refunding the overcharge",
    "inside a word": "marked as non-refundable",
    "soft hyphen": f"a re{SHY}fund",
    "zero-width space": f"a ref{ZWSP}und",
    "zero-width joiner": f"a refu{ZWJ}nd",
    "byte order mark": f"a {BOM}refund",
    "bidi mark": f"a ref{RLM}und",
    "Cyrillic е": "a r\u0435fund",
    "Cyrillic е and Armenian ս": "r\u0435f\u057dnd for Dana",
    "Greek υ": "a ref\u03c5nd",
    "fullwidth": "ａ ｒｅｆｕｎｄ",
    "mathematical bold": "a \U0001d42b\U0001d41e\U0001d41f\U0001d42e\U0001d427\U0001d41d",
    "accents": "a réfünd",
    "hyphen inside": "a re-fund",
    "spaced letters": "r e f u n d please",
    "dotted letters": "r.e.f.u.n.d.",
    "underscores": "re_fund",
    "punctuation around": "(refund!)",
    "line break inside": "ref\nund",
    "Cyrillic capital Е": "R\u0415FUND",
}

WRITE_OFF = {
    "plain": "a write-off of 40 EUR",
    "space": "write off the balance",
    "no separator": "a writeoff",
    "underscore": "write_off",
    "Unicode hyphen": "write\u2010off",
    "en dash": "write\u2013off",
    "em dash": "write\u2014off",
    "non-breaking hyphen": "write\u2011off",
    "dot": "write.off",
    "upper case": "WRITE-OFF",
    "plural": "two write-offs",
    "third person": "she writes off the fee",
    "gerund": "writing off the fee",
    "past participle": "the fee was written off",
    "past tense": "we wrote off the fee",
    "soft hyphen": f"write{SHY}off",
    "zero-width space": f"wr{ZWSP}ite off",
    "Cyrillic о": "write \u043eff",
    "Cyrillic е and Greek ο": "writ\u0435-\u03bfff",
    "fullwidth": "ｗｒｉｔｅ－ｏｆｆ",
    "two spaces": "write  off",
    "line break": "write\noff",
    "punctuation around": '"write-off".',
    "digit zero for o": "write 0ff",
}

CREDIT_NOTE = {
    "plain": "send a credit note",
    "hyphen": "a credit-note",
    "no separator": "a creditnote",
    "underscore": "credit_note",
    "plural": "two credit notes",
    "hyphen plural": "credit-notes",
    "upper case": "CREDIT NOTE",
    "title case": "Credit Note 17",
    "mixed case, hyphen": "Credit-Notes",
    "en dash": "credit\u2013note",
    "non-breaking space": "credit\u00a0note",
    "ideographic space": "credit\u3000note",
    "soft hyphen": f"cre{SHY}dit note",
    "zero-width joiner": f"credit{ZWJ} note",
    "Cyrillic с and е": "\u0441r\u0435dit note",
    "Cyrillic о": "credit n\u043ete",
    "Greek ο and τ capitals": "CREDIT N\u039f\u03a4E",
    "fullwidth": "ｃｒｅｄｉｔ ｎｏｔｅ",
    "digit one for i": "cred1t note",
    "letter l for i": "credlt note",
    "accents": "crédit nóte",
    "punctuation around": "[credit note]",
    "line break": "credit\nnote",
    "dotted": "c.r.e.d.i.t n.o.t.e",
}

INNOCENT = {
    "the usual note": "Dana called about the VAT rate on invoice 4471",
    "a follow-up": "Sent the offer; follow up next week",
    "a meeting": "Met Priya to talk about the new contract",
    "a credit check": "credit check passed, invoice to follow",
    "writing it up": "wrote up the call notes",
}


@pytest.fixture(scope="module")
def skill() -> Skill:
    skills = load_skills(
        EXAMPLE_SKILLS,
        local_tools=set(),
        mcp_servers={"crm"},
        responses=None,
    )
    return skills["log_interaction"]


def held(skill: Skill, text: str) -> bool:
    return approvals.required(skill, "add_timeline_note", {"contact_id": "c1", "text": text}) is not None


@pytest.mark.parametrize(
    ("word", "label", "text"),
    [
        (word, label, text)
        for word, spellings in (("refund", REFUND), ("write-off", WRITE_OFF), ("credit note", CREDIT_NOTE))
        for label, text in spellings.items()
    ],
)
def test_every_spelling_of_a_supervisor_word_is_held(skill: Skill, word: str, label: str, text: str) -> None:
    assert held(skill, text), f"{word}, {label}: {text!r} was not held for a supervisor"


def test_at_least_twenty_spellings_of_each_word() -> None:
    assert min(len(REFUND), len(WRITE_OFF), len(CREDIT_NOTE)) >= 20


@pytest.mark.parametrize("label", sorted(INNOCENT))
def test_an_innocent_note_is_not_held(skill: Skill, label: str) -> None:
    assert not held(skill, INNOCENT[label])


def test_a_text_too_long_to_read_is_held(skill: Skill) -> None:
    assert held(skill, "a" * (textmatch.MAX_TEXT_CHARS + 1))


def test_matching_is_linear_in_the_text(skill: Skill) -> None:
    text = ("write o" * 14_000)[: textmatch.MAX_TEXT_CHARS]
    started = time.perf_counter()
    assert not held(skill, text)
    elapsed = time.perf_counter() - started
    print(f"\n{len(text)} characters read in {elapsed * 1000:.1f} ms")
    assert elapsed < 0.5


async def test_a_remembered_permission_never_covers_a_held_spelling(skill: Skill) -> None:
    class Tool:  # what the gate asks of the tool: only when the rule lets it get that far
        async def annotations(self) -> object:
            raise AssertionError("a held call is refused before its tool is asked")

    generic = RequiresConfirmation(enabled=True, utter_for_confirmation="utter_confirm_tool_call")
    for text in (REFUND["zero-width space"], WRITE_OFF["past participle"], CREDIT_NOTE["Cyrillic о"]):
        arguments = {"contact_id": "c1", "text": text}
        verdict = await gate(
            skill, "add_timeline_note", Tool(), arguments, Reached(), generic=generic, context=NOBODY
        )  # type: ignore[arg-type]
        assert isinstance(verdict, Ask) and verdict.remember is None, text
        # ... and a yes to it is held for the approver.
        after_yes = await gate(
            skill, "add_timeline_note", Tool(), arguments, Confirmed(), generic=generic, context=NOBODY
        )  # type: ignore[arg-type]
        assert isinstance(after_yes, Hold), text


def test_a_term_of_symbols_only_is_still_found() -> None:
    assert textmatch.names_any("a credit of 40 \u20ac", ["\u20ac"])
    assert textmatch.names_any("a credit of 40 \uff04", ["$"])  # fullwidth dollar sign
    assert not textmatch.names_any("a credit of 40 EUR", ["\u20ac"])
