"""The example bot's supervisor rule (examples/crm_bot/skills/log_interaction.yml: a note naming a
refund, a write-off or a credit note waits for a supervisor) cannot be spelt around: every spelling
below is held by mcp_bridge.approvals.second_approver.required, which mcp_bridge.confirmation.permissions
also asks before a
remembered permission covers a call; innocent notes are not held."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_bridge.action_server.build import build_executor
from mcp_bridge.approvals import second_approver as approvals
from mcp_bridge.approvals import textmatch
from mcp_bridge.config.settings import Settings
from mcp_bridge.config.yamlfile import load_yaml
from mcp_bridge.confirmation.gate import Ask, Confirmed, Gate, Hold, Reached
from mcp_bridge.errors import ConfigError
from mcp_bridge.question import AskedCall, Question
from mcp_bridge.sealing import call_digest
from mcp_bridge.skills.files import RequiresConfirmation, Skill, load_skills
from mcp_bridge.tools.context import NOBODY
from tests.plugin.approvals.test_second_approver import DANA, Bench
from tests.support.conversation import Conversation

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_SKILLS = ROOT / "examples" / "crm_bot" / "skills"
LOOKALIKES = ROOT / "mcp_bridge" / "approvals" / "lookalikes.yml"
WHEN_REFUND = "        role: supervisor\n        when: {argument: text, contains_any: [refund]}\n"
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

# The classes issue 37 found spelling around the rule on `make up` (small capitals, letters the table
# did not have, Cherokee small letters that casefold to capitals, the Hangul fillers, which are
# default-ignorable letters): each waits for the supervisor now.
FILLERS = {"U+115F": "\u115f", "U+1160": "\u1160", "U+3164": "\u3164", "U+FFA0": "\uffa0"}
ISSUE_SPELLINGS = {
    "small capitals": "a \u0280\u1d07\ua730\u1d1c\u0274\u1d05",  # ʀᴇꜰᴜɴᴅ
    "small capital R": "\u0280efund",
    "small capital F": "re\ua730und",
    "small capital N": "refu\u0274d",
    "small capital D": "refun\u1d05",
    "f with hook": "re\u0192und",  # ƒ
    "open e": "r\u025bfund",  # ɛ
    "open e in credit": "cr\u025bdit note",
    "d with hook": "refun\u0257",  # ɗ
    "d with hook in credit": "cre\u0257it note",
    "estimated symbol": "r\u212efund",  # ℮
    "estimated symbol in write": "writ\u212e off",
    "Cherokee small letter": "\uab71efund",  # ꭱ casefolds to Ꭱ, read as R
    "Cherokee small letters": "\uabafredit note",  # ꮯ casefolds to Ꮯ, read as C
    **{f"Hangul filler {name}": f"re{char}fund" for name, char in FILLERS.items()},
    "Hangul filler in write-off": "write\u3164off",
}
# Of our own: default-ignorables of other kinds, small capitals, other scripts.
OWN_SPELLINGS = {
    "Mongolian vowel separator": "re\u180efund",
    "variation selector": "refu\ufe0fnd",
    "tag letter": "ref\U000e0041und",
    "combining grapheme joiner": "cre\u034fdit note",
    "Khmer inherent vowel": "write\u17b4off",
    "invisible plus": "refund\u2064s",
    "small capitals, write off": "\u1d21\u0280\u026a\u1d1b\u1d07 \u1d0f\ua730\ua730",  # ᴡʀɪᴛᴇ ᴏꜰꜰ
    "small capitals, credit note": "\u1d04\u0280\u1d07\u1d05\u026a\u1d1b \u0274\u1d0f\u1d1b\u1d07",
    "Lisu letters": "\ua4e3\ua4f0\ua4dd\ua4f4\ua4e0\ua4d3",  # ꓣꓰꓝꓴꓠꓓ
    "Canadian syllabics": "\u1587E\u15b4U\u144e\u15ea",  # ᖇEᖴUᑎᗪ
    "Cherokee capitals": "\u13df\u13a1\u13ac\u13a0I\u13a2 note",  # ᏟᎡᎬᎠIᎢ
    "enclosed letters": "\U0001f181\U0001f134\U0001f135\U0001f184\U0001f13d\U0001f133",  # 🆁🄴🄵🅄🄽🄳
    "a note in Russian": "\u041a\u043b\u0438\u0435\u043d\u0442 \u043f\u0440\u043e\u0441\u0438\u0442 "
    "\u0432\u043e\u0437\u0432\u0440\u0430\u0442",  # Клиент просит возврат: the client asks for a refund
}

INNOCENT = {
    "the usual note": "Dana called about the VAT rate on invoice 4471",
    "a follow-up": "Sent the offer; follow up next week",
    "a meeting": "Met Priya to talk about the new contract",
    "a credit check": "credit check passed, invoice to follow",
    "writing it up": "wrote up the call notes",
    "accents and typography": "M\u00fcller called: caf\u00e9 meeting on Tuesday \u2013 "
    "\u201cnext steps\u201d \u2026 budget \u20ac40k",
    "Nordic and Polish letters": "\u00d8rsted and \u0141\u00f3d\u017a offices, Stra\u00dfe 5",
    "decomposed accents": "Cafe\u0301 Mu\u0308ller, Zoe\u0308 in copy",
    "percent and quotes": "Sent 3 quotes; 10 % discount agreed, 'no changes'",
    "Romanian letters": "\u0218tefan from Cluj: contract \u00eentr-o s\u0103pt\u0103m\u00e2n\u0103",
    "dates and times": "Called back at 10:30 on 2026-03-01; left a voicemail",
    "apostrophes": "O\u2019Brien asked about the \u00c5ngstr\u00f6m project (Q3)",
    "non-breaking space": "Budget\u00a0approved \u2014 next review in May",
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


def task_held(skill: Skill, title: str) -> bool:
    arguments = {"contact_id": "c1", "title": title, "due_date": "2026-03-01"}
    return approvals.required(skill, "create_follow_up_task", arguments) is not None


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


@pytest.mark.parametrize("label", sorted(ISSUE_SPELLINGS))
def test_the_issues_spellings_wait_for_the_supervisor(skill: Skill, label: str) -> None:
    assert held(skill, ISSUE_SPELLINGS[label]), f"{label}: {ISSUE_SPELLINGS[label]!r} was not held"


@pytest.mark.parametrize("label", sorted(OWN_SPELLINGS))
def test_more_spellings_wait_for_the_supervisor(skill: Skill, label: str) -> None:
    assert held(skill, OWN_SPELLINGS[label]), f"{label}: {OWN_SPELLINGS[label]!r} was not held"


def test_enough_spellings_and_innocent_notes() -> None:
    assert len(ISSUE_SPELLINGS) >= 15 and len(OWN_SPELLINGS) >= 10 and len(INNOCENT) >= 10


@pytest.mark.parametrize("label", sorted(FILLERS))
def test_a_hangul_filler_is_held_even_where_hangul_is_declared(label: str) -> None:
    hangul = textmatch.Characters.parse("U+1100-U+11FF U+3130-U+318F U+AC00-U+D7A3 U+FFA0-U+FFDC", "test")
    why = textmatch.why_held(
        f"Dana{FILLERS[label]} called", ["refund"], textmatch.declared_characters() | hangul
    )
    assert why is not None and why.startswith("invisible:") and label in why


def test_a_declared_script_is_read_and_its_look_alikes_still_found() -> None:
    cherokee = textmatch.declared_characters("U+13A0-U+13FF U+AB70-U+ABBF")
    # Declared, so not held for being there; the small letter is read as the Latin one it looks like.
    assert textmatch.why_held("\u13a0\u13a1 called", ["refund"], cherokee) is None
    assert textmatch.why_held("\uab71efund", ["refund"], cherokee) == "names: the text names 'refund'"
    greek = textmatch.declared_characters("U+0370..U+03FF, U+1F00-U+1FFF")
    assert textmatch.why_held("\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5", ["refund"], greek) is None
    assert textmatch.why_held("\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5", ["refund"]) is not None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("Greek", "'Greek' is not a code point (U+00E6) or a range of them (U+0370-U+03FF)"),
        ("0370-03FF", "'0370-03FF' is not a code point"),
        ("U+03FF-U+0370", "'U+03FF-U+0370' is not a range of code points"),
        ("U+110000", "'U+110000' is not a range of code points"),
        ("U+D800-U+DBFF", "includes surrogates"),
    ],
)
def test_a_wrong_declaration_is_a_clear_config_error(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        textmatch.declared_characters(value)
    assert str(refused.value).startswith(f"environment variable {textmatch.ENV_VARIABLE}: ")
    assert says in str(refused.value)


def example_environment(tmp_path: Path) -> dict[str, str]:
    bot = ROOT / "examples" / "crm_bot"
    return {
        "ENDPOINTS": str(bot / "endpoints.yml"),
        "SKILLS_DIR": str(bot / "skills"),
        "DOMAIN": str(bot / "domain.yml"),
        "AUDIT_LOG": "",
        "APPROVALS_DATABASE": str(tmp_path / "approvals.sqlite3"),
        "CONFIRMATION_SECRET": "a test secret that is long enough to seal",
        "CRM_MCP_TOKEN": "offline",
    }


def test_the_action_server_refuses_to_start_with_a_wrong_declaration(tmp_path: Path) -> None:
    env = example_environment(tmp_path)
    build_executor(Settings.from_env(env), allow_unset=True)  # the example as it is starts
    with pytest.raises(ConfigError, match=textmatch.ENV_VARIABLE):
        build_executor(Settings.from_env({**env, textmatch.ENV_VARIABLE: "Cyrillic"}), allow_unset=True)


def test_the_action_server_declares_its_characters_for_the_rules_it_holds_calls_by(tmp_path: Path) -> None:
    """What APPROVAL_TEXT_CHARACTERS declares is what a rule reads, read once when the action server is
    built (the example's log_interaction skill has a second approver's rule)."""
    greek = "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5"
    env = example_environment(tmp_path)
    try:
        build_executor(Settings.from_env({**env, textmatch.ENV_VARIABLE: "U+0370-U+03FF"}), allow_unset=True)
        assert textmatch.why_held(greek, ["refund"]) is None
        build_executor(Settings.from_env(env), allow_unset=True)
        assert (textmatch.why_held(greek, ["refund"]) or "").startswith("undeclared:")
    finally:
        textmatch.declare("")


async def test_the_audit_says_why_a_call_waits_and_never_the_text(tmp_path: Path) -> None:
    bench = Bench(tmp_path, WHEN_REFUND)
    for cid, note in (("c1", f"Dana{FILLERS['U+3164']} called back"), ("c2", "Dana asked for a refund")):
        conversation = Conversation(
            bench.executor, cid, user="rest:alice", contact_email=DANA, note_text=note
        )
        assert (await conversation.start()).outcome == "pending"
        assert (await conversation.yes()).outcome == "awaiting_approval"
    first, second = [e for e in bench.audit.entries() if e["decision"] == "approval_requested"]
    assert first["result"] == "invisible: the text has a default-ignorable character (U+3164)"
    assert second["result"] == "names: the text names 'refund'"
    trail = (tmp_path / "audit.jsonl").read_text(encoding="utf-8")
    assert "called back" not in trail and "asked for" not in trail


def test_every_supported_python_makes_the_same_skeleton() -> None:
    """The digest scripts/lookalikes.py recorded (at one Python) of every code point's skeleton
    assigned by Unicode 13.0 is what this Python makes too (make pytest-sdk36 runs this at 3.10)."""
    document = load_yaml(LOOKALIKES)
    rows = textmatch.per_character(
        {char: target for target, chars in document["lookalikes"].items() for char in chars},
        document["assigned"],
    )
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == document["skeleton_digest"]


def test_the_table_is_what_unicodes_data_makes() -> None:
    """lookalikes.yml is generated from the pinned files, never edited by hand."""
    run = subprocess.run(
        [sys.executable, "scripts/lookalikes.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("label", sorted(INNOCENT))
def test_an_innocent_note_is_not_held(skill: Skill, label: str) -> None:
    assert not held(skill, INNOCENT[label]), textmatch.why_held(INNOCENT[label], ["refund"])
    assert not task_held(skill, INNOCENT[label])


@pytest.mark.parametrize(
    "text",
    [REFUND["plain"], WRITE_OFF["past tense"], CREDIT_NOTE["Cyrillic о"], ISSUE_SPELLINGS["small capitals"]],
)
def test_the_follow_up_task_has_the_notes_rule(skill: Skill, text: str) -> None:
    """The example makes the note's text the task's title: the task waits when the note would."""
    assert held(skill, text) and task_held(skill, text)


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

    gate = Gate(RequiresConfirmation(enabled=True, utter_for_confirmation="utter_confirm_tool_call"))
    for text in (REFUND["zero-width space"], WRITE_OFF["past participle"], CREDIT_NOTE["Cyrillic о"]):
        arguments = {"contact_id": "c1", "text": text}
        verdict = await gate.verdict(skill, "add_timeline_note", Tool(), arguments, Reached(), NOBODY)  # type: ignore[arg-type]
        assert isinstance(verdict, Ask) and verdict.remember is None, text
        # ... and a yes to it is held for the approver.
        yes = Confirmed(question_about(skill, "add_timeline_note", arguments))
        after_yes = await gate.verdict(skill, "add_timeline_note", Tool(), arguments, yes, NOBODY)  # type: ignore[arg-type]
        assert isinstance(after_yes, Hold), text


def question_about(skill: Skill, tool: str, arguments: dict[str, object]) -> Question:
    """A question of one call, as the person was asked it."""
    source = str(skill.tools[tool])
    digest = call_digest(skill.id, tool, source, arguments)
    call = AskedCall("c", tool, 0, source, dict(arguments), digest, "c")
    return Question("q", skill.id, (call,), False, 0.0, 1, "rest:dana", None)


def test_a_term_of_symbols_only_is_still_found() -> None:
    assert textmatch.names_any("a credit of 40 \u20ac", ["\u20ac"])
    assert textmatch.names_any("a credit of 40 \uff04", ["$"])  # fullwidth dollar sign
    assert not textmatch.names_any("a credit of 40 EUR", ["\u20ac"])
