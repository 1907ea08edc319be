"""The confirmation reader against a labelled set of answers (tests/plugin/reading/confirmation_answers.yml).

Each answer is read twice: with no NLU opinion, and with an NLU that says "affirm" at 0.99 whatever
it hears (as DIET does on text it has never seen). An unsafe write is an answer that is not a yes
but was read as one (a yes, a yes for this time only, or a grant); an unsafe grant is one read as a
grant that is not labelled one. The suite fails on any. Yes recall is held per class: at least 95 %
on each of the `classes`, and no lower than it was on the older sets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_bridge.errors import ConfigError
from mcp_bridge.reading.answers import (
    Choices,
    Edit,
    EditCall,
    Grant,
    NluOpinion,
    No,
    Other,
    Redirect,
    TooLong,
    Unclear,
    Yes,
    YesThisTime,
)
from mcp_bridge.reading.reader import ConfirmationReader
from mcp_bridge.reading.words import load_words

ANSWERS: dict[str, Any] = yaml.safe_load((Path(__file__).with_name("confirmation_answers.yml")).read_text())
CALL = ANSWERS["call"]
OVERCONFIDENT = NluOpinion("affirm", 0.99, {"affirm": 0.99})
READER = ConfirmationReader()


CLASSES: dict[str, Any] = ANSWERS["classes"]
# What each label must be read as, for the labels of answers that write.
READ_AS = {"yes": Yes, "yes_this_time": YesThisTime, "grant": Grant}
# Yes recall of the older sets when the classes were added (the one miss: "yes, invoice 4471 is
# right"); it may rise, never fall.
RECALL_FLOOR = {"yes": 95 / 96, "grant": 1.0}


def labelled() -> list[tuple[str, str]]:
    labels = ("yes", "no", "unclear", "sarcasm", "grant", "grant_traps")
    pairs = [(text, label) for label in labels for text in ANSWERS[label]]
    return pairs + [(entry["answer"], "edit") for entry in ANSWERS["edit"]]


def by_class() -> list[tuple[str, str, str]]:
    """Every answer as (text, label, class): the older sets are each a class, labelled by their name;
    an answer of the `classes` is labelled by what it must be read as, or "near_miss"."""
    rows = [(text, label, label) for text, label in labelled()]
    for name, entries in CLASSES.items():
        rows += [(text, entries["reads_as"], name) for text in entries["yes"]]
        rows += [(text, "near_miss", name) for text in entries["near_misses"]]
    return rows


def test_the_answer_set_covers_every_class() -> None:
    classes = ("yes", "no", "edit", "unclear", "sarcasm")
    counts = {label: sum(1 for _, lab in labelled() if lab == label) for label in classes}
    assert sum(counts.values()) >= 150, counts
    assert all(count >= 15 for count in counts.values()), counts
    assert counts["sarcasm"] >= 20, counts


def test_each_class_has_its_yeses_and_as_many_near_misses() -> None:
    assert len(CLASSES) >= 6
    for name, entries in CLASSES.items():
        assert entries["reads_as"] in READ_AS, name
        assert len(entries["yes"]) >= 15, name
        assert len(entries["near_misses"]) >= len(entries["yes"]), name


def test_unsafe_writes_are_zero_and_yes_recall_is_high(capsys: pytest.CaptureFixture[str]) -> None:
    """Per class: yes recall (read as what the label says, the NLU agreeing), unsafe writes and
    unsafe grants (either NLU opinion), printed; the asserts are on the whole set and each class."""
    figures: dict[str, dict[str, Any]] = {}
    for text, label, name in by_class():
        row = figures.setdefault(name, {"yeses": 0, "read": 0, "unsafe": [], "grants": [], "missed": []})
        for opinion in (None, OVERCONFIDENT):
            reading = READER.read(text, opinion, CALL)
            if label not in READ_AS and isinstance(reading, Yes | YesThisTime | Grant):
                row["unsafe"].append((text, "no NLU" if opinion is None else "NLU says affirm"))
            if label != "grant" and isinstance(reading, Grant):
                row["grants"].append((text, "no NLU" if opinion is None else "NLU says affirm"))
        if label in READ_AS:
            row["yeses"] += 1
            if type(READER.read(text, OVERCONFIDENT, CALL)) is READ_AS[label]:
                row["read"] += 1
            else:
                row["missed"].append(text)
    lines = [f"\nconfirmation reader on {len(by_class())} labelled answers, per class:"]
    for name, row in figures.items():
        recall = (
            f"{row['read'] / row['yeses']:6.1%} ({row['read']}/{row['yeses']})" if row["yeses"] else "n/a"
        )
        lines.append(
            f"  {name:22} yes recall {recall:16} unsafe writes {len(row['unsafe'])}  "
            f"unsafe grants {len(row['grants'])}" + (f"  missed: {row['missed']}" if row["missed"] else "")
        )
    with capsys.disabled():
        print("\n".join(lines))
    assert [row["unsafe"] for row in figures.values() if row["unsafe"]] == []
    assert [row["grants"] for row in figures.values() if row["grants"]] == []
    for name, row in figures.items():
        if row["yeses"]:
            floor = RECALL_FLOOR.get(name, 0.95)
            assert row["read"] / row["yeses"] >= floor, (name, row["missed"])


@pytest.mark.parametrize("text", ANSWERS["grant"])
def test_a_yes_that_says_not_to_ask_again_is_a_grant(text: str) -> None:
    assert READER.read(text, None, CALL) == Grant()
    assert READER.read(text, OVERCONFIDENT, CALL) == Grant()
    # A grant is a yes: the NLU must agree, as for a yes.
    assert isinstance(READER.read(text, NluOpinion("deny", 0.99), CALL), Unclear)


@pytest.mark.parametrize("text", ANSWERS["grant_traps"])
def test_what_only_looks_like_a_grant_is_asked_again(text: str) -> None:
    for opinion in (None, OVERCONFIDENT):
        assert isinstance(READER.read(text, opinion, CALL), Unclear | No), (text, opinion)


CLASS_YESES = [(text, name) for name, entries in CLASSES.items() for text in entries["yes"]]


@pytest.mark.parametrize(("text", "name"), CLASS_YESES, ids=[text for text, _ in CLASS_YESES])
def test_every_way_of_saying_yes_needs_the_nlu_to_agree(text: str, name: str) -> None:
    assert isinstance(READER.read(text, NluOpinion("deny", 0.99), CALL), Unclear), name
    assert isinstance(READER.read(text, NluOpinion("affirm", 0.5), CALL), Unclear), name


def test_a_yes_for_this_time_only_is_its_own_answer() -> None:
    for text in ("yes, just this once", "yes, but ask me again next time", "sure, only for this note"):
        assert READER.read(text, OVERCONFIDENT, CALL) == YesThisTime(), text
    # Alone, beside a permission, or beside a no it is no yes.
    assert READER.read("only this once", OVERCONFIDENT, CALL) == Unclear("this time only, without a yes")
    assert READER.read("yes, once, and don't ask again", OVERCONFIDENT, CALL) == Unclear(
        "a permission and a refusal of one, together"
    )
    assert isinstance(READER.read("no, just this once", OVERCONFIDENT, CALL), Unclear)


def test_the_one_call_ways_of_saying_yes_do_not_answer_several_calls() -> None:
    calls, names = [{}, {}], ["note", "task"]
    # "only this one", "that one", "add the note": which of the two? Asked again.
    for text in ("yes, only this one", "yes, just this once", "that one", "this one please", "add the note"):
        assert isinstance(READER.read_calls(text, OVERCONFIDENT, calls, names), Unclear), text
    for text in ("add it", "jot it down", "that's the one"):
        assert isinstance(READER.read_calls(text, OVERCONFIDENT, calls, names), Unclear), text
    # Praise and an eager repeated yes are a yes to all, as "yes" is.
    for text in ("yes, brilliant, thanks", "yup yup"):
        assert READER.read_calls(text, OVERCONFIDENT, calls, names) == Choices((True, True)), text


def test_a_bot_writes_its_own_rules(tmp_path: Path) -> None:
    words = tmp_path / "words.yml"
    words.write_text(
        'yes: ["sí", "(claro|vale) [que sí]"]\n'
        'this_time_only: ["[pero] (solo|sólo) (esta|por esta) vez"]\n'
        'remember: ["no (me|lo) (preguntes|vuelvas a preguntar) más"]\n'
        'praise: ["genial"]\n'
    )
    reader = ConfirmationReader(load_words(words))
    assert reader.read("claro que sí", None, CALL) == Yes()
    assert reader.read("vale, genial", None, CALL) == Yes()
    assert reader.read("sí, pero solo esta vez", None, CALL) == YesThisTime()
    assert reader.read("sí, no me preguntes más", None, CALL) == Grant()
    assert isinstance(reader.read("solo esta vez", None, CALL), Unclear)
    assert isinstance(reader.read("oh genial", None, CALL), Unclear)  # the default irony of praise
    assert isinstance(reader.read("claro que", None, CALL), Unclear)  # "que" alone is no choice


def test_a_grant_is_not_an_answer_to_several_calls() -> None:
    for text in ANSWERS["grant"]:
        reading = READER.read_calls(text, OVERCONFIDENT, [{}, {}], ["note", "note"])
        assert isinstance(reading, Unclear), text
    assert READER.read_calls("no, and don't ask again", None, [{}, {}]) == Choices((False, False))


@pytest.mark.parametrize("text", ANSWERS["no"])
def test_plain_noes_are_read_as_no(text: str) -> None:
    assert isinstance(READER.read(text, None, CALL), No)
    assert isinstance(READER.read(text, NluOpinion("deny", 0.99), CALL), No)


@pytest.mark.parametrize("entry", ANSWERS["edit"], ids=lambda entry: entry["answer"])
def test_edits_carry_exactly_the_new_text_or_address(entry: dict[str, str]) -> None:
    reading = READER.read(entry["answer"], OVERCONFIDENT, CALL)
    if "text" in entry:
        assert reading == Edit(entry["text"])
    else:
        assert reading == Redirect(entry["email"])


@pytest.mark.parametrize("text", ANSWERS["unclear"])
def test_unclear_answers_are_asked_again_offline(text: str) -> None:
    assert isinstance(READER.read(text, None, CALL), Unclear)


@pytest.mark.parametrize("text", ANSWERS["sarcasm"])
def test_sarcasm_made_of_yes_words_is_never_a_yes(text: str) -> None:
    # Asked again; a no only where the answer also says one ("yeah right, no").
    for opinion in (None, OVERCONFIDENT):
        assert isinstance(READER.read(text, opinion, CALL), Unclear | No), (text, opinion)


def test_what_makes_yes_words_ironic_is_the_whole_not_each_word() -> None:
    # Each word alone, or beside a different yes, is a plain yes ...
    for text in ("yeah", "right", "sure", "great", "oh ok", "ok, sure", "yesss", "that's right"):
        assert READER.read(text, OVERCONFIDENT, CALL) == Yes(), text
    # ... together, doubled, drawn out or in a tone they doubt; an instruction beside a doubled yes
    # keeps it a yes, beside an idiom it does not.
    for text, reason in (
        ("yeah right", "yes-words that sound ironic"),
        ("oh sure, go ahead", "yes-words that sound ironic"),
        ("suuure", "yes-words that sound ironic"),
        ("sure, sure", "a yes said twice, which sounds ironic"),
        ("sure...", "an ellipsis beside the yes"),
        ('"sure"', "a yes in quotes"),
        ("sUrE", "a yes in mocking case"),
    ):
        assert READER.read(text, OVERCONFIDENT, CALL) == Unclear(reason), text
    assert READER.read("sure, sure, save it", OVERCONFIDENT, CALL) == Yes()
    assert READER.read("yeah right, no", None, CALL) == No()


def test_a_bot_lists_its_own_irony(tmp_path: Path) -> None:
    words = tmp_path / "words.yml"
    words.write_text(
        'yes: ["claro", "vale"]\nironic: ["pues claro"]\ndrawn_out: ["claro"]\npolite: ["pues"]\n'
    )
    reader = ConfirmationReader(load_words(words))
    assert reader.read("claro, vale", None, CALL) == Yes()
    assert reader.read("pues vale", None, CALL) == Yes()
    assert reader.read("pues claro", None, CALL) == Unclear("yes-words that sound ironic")
    assert reader.read("claaaro", None, CALL) == Unclear("yes-words that sound ironic")
    assert reader.read("vaaale", None, CALL) == Yes()  # not listed as drawn_out


def test_yes_needs_the_nlu_to_agree() -> None:
    assert isinstance(READER.read("yes", NluOpinion("affirm", 0.98), CALL), Yes)
    assert isinstance(READER.read("yes", NluOpinion("deny", 0.98), CALL), Unclear)
    assert isinstance(READER.read("yes", NluOpinion("affirm", 0.5), CALL), Unclear)
    assert isinstance(READER.read("yes", NluOpinion("affirm", 0.7, {"deny": 0.6}), CALL), Unclear)


def test_a_message_for_the_bot_is_handed_back_only_when_it_holds_no_answer() -> None:
    lookup = NluOpinion("lookup_contact", 0.97)
    assert isinstance(READER.read("who is priya@example.com?", lookup, CALL), Other)
    assert isinstance(READER.read("help", NluOpinion("help", 0.99), CALL), Other)
    new_log = NluOpinion("log_interaction", 0.99)
    assert isinstance(READER.read("log a call with priya@example.com: Second", new_log, CALL), Other)
    # A yes, a no or a hedge in it keeps it with the question.
    assert isinstance(READER.read("yes, who is priya?", lookup, CALL), Unclear)
    assert isinstance(READER.read("maybe", NluOpinion("greet", 0.99), CALL), Unclear)
    # The NLU's fallback is not another intent.
    assert isinstance(READER.read("blorp", NluOpinion("nlu_fallback", 0.9), CALL), Unclear)


def test_form_way_out_is_only_the_whole_answer() -> None:
    for text in ("cancel", "Stop.", "never mind", "forget it", "quit", "cancel please"):
        assert READER.way_out(text) == "cancel", text
    assert READER.way_out("help") == "help"
    for text in ("cancel the order for invoice 4471", "no", "stop by on Friday", "helpful call"):
        assert READER.way_out(text) is None, text


def test_a_bot_adds_words_of_its_own_language(tmp_path: Path) -> None:
    words = tmp_path / "words.yml"
    words.write_text('yes: ["sí", "claro"]\nno: ["no gracias"]\n')  # unquoted yes:/no: keys work too
    reader = ConfirmationReader(load_words(words))
    assert isinstance(reader.read("sí", None, CALL), Yes)
    assert isinstance(reader.read("claro, gracias", None, CALL), Unclear)  # "gracias" is not listed
    assert isinstance(reader.read("no gracias", None, CALL), No)
    assert isinstance(READER.read("sí", None, CALL), Unclear)  # the defaults do not know it


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("yes: [1, 2]", "yes[0]: Input should be a valid string"),
        ("maybe: [perhaps]", "maybe: Extra inputs are not permitted"),
        ('yes: [""]', "yes[0]: an empty entry matches nothing"),
        ('yes: ["stop"]', "listed both as a yes (or polite) and as a no, hedge or irony: stop"),
        ('ironic: ["sure"]', "listed both as a yes (or polite) and as a no, hedge or irony: sure"),
        ('instruction: ["never"]', "listed both as a yes (or polite) and as a no, hedge or irony: never"),
        ("yes: [unclosed", "not valid YAML"),
        ('yes: ["(sure|fine"]', "yes[0]: a group that is not closed with ')'"),
        ('yes: ["(sure|[fine])"]', "yes[0]: groups do not nest"),
        ('yes: ["[sure] | fine"]', "yes[0]: a '|' outside a group"),
        ('yes: ["(sure|) then"]', "yes[0]: an empty choice in a (...) group"),
        ('yes: ["[sure|fine]"]', "yes[0]: a rule with nothing it requires matches any text"),
        ('yes: ["<nothing> then"]', "a rule names <nothing>, which is no list of the word file"),
        ('yes: ["oh <remember>"]', "a rule names <remember>, a list that holds rules itself"),
        ('edit: ["(change|alter) it to"]', "edit[0]: a rule ((...), [...], <...>) is read only in"),
        (
            'no: ["(sure|fine) thing"]',
            "listed both as a yes (or polite) and as a no, hedge or irony: sure thing",
        ),
        ('yes: ["(stop|halt)"]', "listed both as a yes (or polite) and as a no, hedge or irony: stop"),
        ('remember: ["ask me next time"]', "listed both as a permission (remember) and as a refusal of one"),
    ],
)
def test_a_bad_word_file_stops_start_up_naming_file_place_and_reason(
    tmp_path: Path, content: str, message: str
) -> None:
    words = tmp_path / "words.yml"
    words.write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_words(words)
    assert str(words) in str(caught.value) and message in str(caught.value)


def test_a_message_over_the_limit_is_refused_unread() -> None:
    reader = ConfirmationReader(max_chars=10)
    assert reader.read("yes" + " " * 7, OVERCONFIDENT, CALL) == Yes()  # 10 characters: read
    assert reader.read("yes" + " " * 8, OVERCONFIDENT, CALL) == TooLong(11, 10)
    assert reader.read("/affirm" + " " * 4, OVERCONFIDENT, CALL) == TooLong(11, 10)  # buttons too
    assert reader.way_out("cancel") == "cancel"
    assert reader.way_out("cancel" + " " * 5) is None  # the form refuses it itself (too_long)
    assert reader.too_long("x" * 11) == TooLong(11, 10) and reader.too_long("x" * 10) is None
    assert ConfirmationReader().max_chars == 5000
    with pytest.raises(ValueError):
        ConfirmationReader(max_chars=0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 5000),
        ("12000", 12000),
        ("0", "environment variable MESSAGE_MAX_CHARS: must be a positive whole number"),
        ("5k", "environment variable MESSAGE_MAX_CHARS: '5k' is not a whole number"),
    ],
)
def test_the_bot_owner_sets_the_limit_with_message_max_chars(
    value: str | None, expected: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_bridge.action_server.build import build_executor
    from mcp_bridge.config.settings import Settings

    repo = Path(__file__).resolve().parents[3] / "examples" / "crm_bot"
    env = {
        "ENDPOINTS": str(repo / "endpoints.yml"),
        "SKILLS_DIR": str(repo / "skills"),
        "DOMAIN": str(repo / "domain.yml"),
        "AUDIT_LOG": "",
        "CONFIRMATION_SECRET": "a test secret that is long enough to seal",
        "CRM_MCP_TOKEN": "offline",  # endpoints.yml's ${CRM_MCP_TOKEN}, read from this environment
    }
    if value is not None:
        env["MESSAGE_MAX_CHARS"] = value
    if isinstance(expected, int):
        assert build_executor(Settings.from_env(env)).reader.max_chars == expected
    else:
        with pytest.raises(ConfigError, match=expected):
            build_executor(Settings.from_env(env))


# -- answers to a question about several calls ------------------------------------------------

ANOTHER_INTENT = NluOpinion("goodbye", 0.99, {"goodbye": 0.99})
SEVERAL = [
    (block, entry["answer"], entry["approved"])
    for block in ANSWERS["several_calls"]
    for entry in block["answers"]
]


def _read_calls(block: dict[str, Any], text: str, opinion: NluOpinion | None) -> list[str] | str:
    reading = READER.read_calls(text, opinion, block["calls"], block["names"])
    return ["y" if yes else "n" for yes in reading.approved] if isinstance(reading, Choices) else "unclear"


def test_the_several_calls_set_is_large_and_covers_every_kind() -> None:
    labels = [
        approved if approved == "unclear" else "mixed" if len(set(approved)) > 1 else approved[0]
        for _, _, approved in SEVERAL
    ]
    assert len(SEVERAL) >= 60
    assert labels.count("mixed") >= 25 and labels.count("unclear") >= 40
    assert labels.count("y") >= 10 and labels.count("n") >= 8


def test_several_calls_unsafe_writes_are_zero_and_recall_is_high(capsys: pytest.CaptureFixture[str]) -> None:
    """No call is ever written that the label does not approve, whatever the NLU says; and the
    answers that decide every call are read as labelled."""
    unsafe: list[tuple[str, str]] = []
    missed: list[str] = []
    decided = 0
    for block, text, approved in SEVERAL:
        for name, opinion in (
            ("no NLU", None),
            ("NLU says affirm", OVERCONFIDENT),
            ("NLU says deny", NluOpinion("deny", 0.99, {"deny": 0.99})),
            ("NLU says goodbye", ANOTHER_INTENT),
        ):
            got = _read_calls(block, text, opinion)
            allowed = approved if approved != "unclear" else ["n"] * len(block["calls"])
            if got != "unclear" and any(g == "y" and a != "y" for g, a in zip(got, allowed, strict=True)):
                unsafe.append((text, name))
        if approved != "unclear":
            decided += 1
            # The NLU's intent does not matter to an answer that names calls ("all" is "goodbye" to
            # DIET); a plain yes still needs its affirm.
            opinions = [OVERCONFIDENT] if text == "yes" else [None, OVERCONFIDENT, ANOTHER_INTENT]
            if any(_read_calls(block, text, opinion) != approved for opinion in opinions):
                missed.append(text)
    with capsys.disabled():
        print(
            f"\nreader on {len(SEVERAL)} answers to several calls: unsafe writes {len(unsafe)} (must be 0); "
            f"read as labelled {decided - len(missed)}/{decided} (missed: {missed})"
        )
    assert unsafe == []
    assert not missed


@pytest.mark.parametrize(
    ("block", "text", "approved"),
    [entry for entry in SEVERAL if entry[2] == "unclear"],
    ids=[entry[1] for entry in SEVERAL if entry[2] == "unclear"],
)
def test_an_answer_that_does_not_decide_every_call_is_unclear(
    block: dict[str, Any], text: str, approved: str
) -> None:
    for opinion in (None, OVERCONFIDENT):
        assert isinstance(READER.read_calls(text, opinion, block["calls"], block["names"]), Unclear | Other)


def test_an_edit_of_several_calls_names_the_call() -> None:
    block = ANSWERS["several_calls"][0]
    calls, names = block["calls"], block["names"]
    assert READER.read_calls("change 2 to: call back on Monday", None, calls, names) == EditCall(
        2, "call back on Monday"
    )
    assert READER.read_calls('edit the first one to say "Signed."', None, calls, names) == EditCall(
        1, "Signed."
    )
    assert isinstance(READER.read_calls("change 3 to: x", None, calls, names), Unclear)
    assert isinstance(READER.read_calls("change it to: x", None, calls, names), Unclear)
    assert isinstance(READER.read_calls("change 2 to:", None, calls, names), Unclear)


def test_a_plain_yes_to_several_calls_still_needs_the_nlu() -> None:
    block = ANSWERS["several_calls"][0]
    calls, names = block["calls"], block["names"]
    assert READER.read_calls("yes", OVERCONFIDENT, calls, names) == Choices((True, True))
    assert isinstance(READER.read_calls("yes", NluOpinion("deny", 0.98), calls, names), Unclear)
    # A message for the bot is handed back, as to one call.
    lookup = NluOpinion("lookup_contact", 0.97)
    assert isinstance(READER.read_calls("who is priya@example.com?", lookup, calls, names), Other)
