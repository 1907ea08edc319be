"""What counts as "yes": the confirmation reader. The one place that decides it.

While a question is pending, every message the person sends is read here first, from its *text*,
with the NLU's intent as a second opinion. The reading is one of a closed set of answers:

* :class:`TooLong`: the message is longer than ``max_chars`` (5,000 by default). It is refused
  before any of it is read; nothing else below applies.
* :class:`Yes`: every word of the answer is a plain yes ("yes", "sure, go ahead", "👍", "yse") or a
  polite filler, there is no question mark, no number the pending call does not contain, nothing
  that makes the yes-words ironic (below), and the NLU also read it as the affirm intent. Anything
  else is never a yes. Beside the yes-words, the word file names four more ways of saying it, each
  a rule of its own: ``praise`` beside a yes ("yes, brilliant, thanks"; never a yes alone),
  ``pointing`` at what was asked ("that's the one"), a ``go_ahead`` naming the action and no one
  else ("jot it down", "add it to the record"), and a ``repeatable`` yes said again in eagerness
  ("yup yup").
* :class:`YesThisTime`: a yes, read exactly as above, that also refuses a standing permission: every
  word is a yes-word, a filler or a ``this_time_only`` phrase, with at least one of each ("yes, just
  this once", "yes, but ask me again next time"). The call is written and nothing is remembered.
  Alone ("only this once") it is unclear, and beside a ``remember`` phrase it contradicts itself.
* :class:`Grant`: a yes, read exactly as above (the NLU agreeing), that also says not to ask again:
  every word is a yes-word, a filler or a ``remember`` phrase, with at least one of each ("yes, and
  don't ask again today", "yes, always allow this"). A ``remember`` phrase alone ("don't ask again")
  is unclear, and beside a no it is a no ("no, and don't ask again"): only a plain yes grants.
* :class:`No`: every word is a plain no or a filler ("no", "nope, cancel", "👎", "never mind",
  "definitely not").
* :class:`Edit`: "change it to: ...", "make it say ...", "actually: ..." replace the call's text.
* :class:`Redirect`: an email address beside a redirecting word ("no, it's for x@y.com",
  "save it to x@y.com instead") moves the call to that contact.
* :class:`Other`: a message for the bot's normal handling (a lookup, help, a new request): the NLU
  gave another of the bot's intents and the text holds no yes, no or hedge at all.
* :class:`Unclear`: everything else, among them negations beside a yes ("yes but..."), questions,
  hedges, a bare name, unknown words and unknown emoji. The person is asked again.

Yes-words can say no. Three things make an answer of yes-words ironic, so unclear, never a yes:

* a phrase the word file lists as ``ironic`` ("yeah right", "oh sure", "oh great"), also with the
  words misspelt or drawn out ("yeahhh riiight"), or a yes-word it lists as ``drawn_out`` that is
  written drawn out ("suuure", "okaaay"; an eager "yesss" stays a yes);
* the same yes-word said twice without an instruction to write ("sure, sure", "yeah yeah",
  "great, just great"); "yes yes, save it" is a yes, because "save it" is an ``instruction``;
* its tone: a trailing or inner ellipsis ("sure..."), scare quotes ('"sure"'), mocking case
  ("sUrE"). Emoji such as 🙄 or 🙃, "lol" or "/s" are unknown words, which no yes may contain.

Reading takes time linear in the length of the text: no pattern here can backtrack over more than
one run of characters, and the few per-character loops look words up in tables (see
``tests/plugin/test_reader_linear.py``). The limit keeps even that short.

A button press arrives as its payload (``/affirm``, ``/deny``) and is an exact answer; a payload
naming another intent or carrying entities is not a yes.

A question about several calls (a numbered list) is read by :meth:`ConfirmationReader.read_calls`:

* a plain yes or no, read exactly as above (the NLU agreeing to a yes), or the Yes / No button,
  answers every call alike; a :class:`Grant` is unclear here (a permission is given for one call),
  and so are a :class:`YesThisTime` and a pointing or go-ahead yes ("only this one", "that one",
  "add the note" do not say which of the calls);
* :class:`Choices`: a yes or no for each call, in words ("yes to 1, no to 2", "only the first",
  "all", "none", "both but not the task"; the grammar is :mod:`mcp_bridge.reading.choices`'s). The words
  decide alone: the NLU cannot express a per-call answer, and the grammar takes nothing it does not
  know. A call left without a decision, or given two, makes the answer unclear;
* :class:`EditCall`: "change 2 to: ..." replaces the text of that call only; an edit or an address
  that does not say which call is unclear.

The words live in a data file (``confirmation_words.yml`` beside this module, English); a bot adds
its own (other languages) with :func:`load_words`. An entry may be a phrase or a rule with choices
("(don't|do not) ask [me] again", :class:`Rule`), matched where it stands in linear time. A word
the reader does not know makes an answer unclear, so an unlisted language is asked again, never
written.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_bridge.config.yamlfile import load_yaml, schema_error
from mcp_bridge.contract import AFFIRM_INTENT, DENY_INTENT
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability import tracing
from mcp_bridge.reading import choices

DEFAULT_WORDS = Path(__file__).with_name("confirmation_words.yml")


# -- answers: a closed set -------------------------------------------------------------------


@dataclass(frozen=True)
class Yes:
    kind: Literal["yes"] = "yes"


@dataclass(frozen=True)
class Grant:
    """A plain yes that also says not to ask again (a remembered permission, if the skill allows one)."""

    kind: Literal["grant"] = "grant"


@dataclass(frozen=True)
class YesThisTime:
    """A plain yes to this call that refuses a standing permission ("yes, but ask me again next time",
    "yes, just this once"): the call runs as for a yes, nothing is remembered, and the person hears
    that they will be asked again."""

    kind: Literal["yes_this_time"] = "yes_this_time"


@dataclass(frozen=True)
class No:
    kind: Literal["no"] = "no"


@dataclass(frozen=True)
class Edit:
    text: str
    kind: Literal["edit"] = "edit"


@dataclass(frozen=True)
class Redirect:
    email: str
    kind: Literal["redirect"] = "redirect"


@dataclass(frozen=True)
class Other:
    kind: Literal["other"] = "other"


@dataclass(frozen=True)
class TooLong:
    """A message longer than the reader takes: refused unread, so nothing is written."""

    length: int
    limit: int
    kind: Literal["too_long"] = "too_long"

    @property
    def reason(self) -> str:
        return f"a message of {self.length} characters, over the limit of {self.limit}"


@dataclass(frozen=True)
class Unclear:
    # Why, in a few words, for the audit trail; never the person's text.
    reason: str
    kind: Literal["unclear"] = "unclear"


Answer = Yes | YesThisTime | Grant | No | Edit | Redirect | Other | Unclear | TooLong


@dataclass(frozen=True)
class Choices:
    """An answer to a question about several calls: yes (True) or no for each, in the list's order."""

    approved: tuple[bool, ...]
    kind: Literal["choices"] = "choices"


@dataclass(frozen=True)
class EditCall:
    """ "change 2 to: ...": the new text of one call of several (``place`` counts from 1)."""

    place: int
    text: str
    kind: Literal["edit_call"] = "edit_call"


# What an answer to a question about several calls can be.
CallsAnswer = Choices | EditCall | Other | Unclear | TooLong


@dataclass(frozen=True)
class NluOpinion:
    """What the NLU made of the message: the intent it chose and how sure it was."""

    intent: str | None
    confidence: float = 1.0
    ranking: Mapping[str, float] | None = None


# -- the word lists --------------------------------------------------------------------------


class _WordFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    yes: list[str] = Field(default_factory=list)
    no: list[str] = Field(default_factory=list)
    polite: list[str] = Field(default_factory=list)
    praise: list[str] = Field(default_factory=list)
    pointing: list[str] = Field(default_factory=list)
    go_ahead: list[str] = Field(default_factory=list)
    repeatable: list[str] = Field(default_factory=list)
    not_a_yes: list[str] = Field(default_factory=list)
    ironic: list[str] = Field(default_factory=list)
    drawn_out: list[str] = Field(default_factory=list)
    instruction: list[str] = Field(default_factory=list)
    remember: list[str] = Field(default_factory=list)
    this_time_only: list[str] = Field(default_factory=list)
    edit: list[str] = Field(default_factory=list)
    edit_with_colon: list[str] = Field(default_factory=list)
    edit_lead_in: list[str] = Field(default_factory=list)
    redirect: list[str] = Field(default_factory=list)
    redirect_also: list[str] = Field(default_factory=list)
    new_request: list[str] = Field(default_factory=list)
    cancel: list[str] = Field(default_factory=list)
    help: list[str] = Field(default_factory=list)


Phrase = tuple[str, ...]


@dataclass(frozen=True)
class Words:
    """The reader's vocabulary, each entry as a tuple of normalised tokens."""

    yes: frozenset[tuple[str, ...]]
    no: frozenset[tuple[str, ...]]
    polite: frozenset[tuple[str, ...]]
    not_a_yes: frozenset[tuple[str, ...]]
    ironic: frozenset[tuple[str, ...]]
    drawn_out: frozenset[str]
    instruction: frozenset[tuple[str, ...]]
    remember: frozenset[tuple[str, ...]]
    edit: tuple[str, ...]
    edit_with_colon: tuple[str, ...]
    edit_lead_in: frozenset[str]
    redirect: frozenset[tuple[str, ...]]
    redirect_also: frozenset[tuple[str, ...]]
    new_request: tuple[tuple[str, ...], ...]
    cancel: frozenset[tuple[str, ...]]
    help: frozenset[tuple[str, ...]]
    praise: frozenset[tuple[str, ...]] = frozenset()
    pointing: frozenset[tuple[str, ...]] = frozenset()
    go_ahead: frozenset[tuple[str, ...]] = frozenset()
    repeatable: frozenset[str] = frozenset()
    this_time_only: frozenset[tuple[str, ...]] = frozenset()
    # The entries written as rules ("(don't|do not) ask [me] again"), by the list that holds them.
    rules: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)

    def never_yes(self) -> tuple[frozenset[Phrase], tuple[Rule, ...]]:
        """What is never a yes (no, hedge, irony): its phrases and its rules."""
        return self.no | self.not_a_yes | self.ironic, self._rules("no", "not_a_yes", "ironic")

    def yes_like(self) -> tuple[frozenset[Phrase], tuple[Rule, ...]]:
        """What is read as a yes or may stand beside one: its phrases and its rules."""
        phrases = self.yes | self.polite | self.praise | self.pointing | self.go_ahead
        return phrases, self._rules("yes", "polite", "praise", "pointing", "go_ahead")

    def _rules(self, *keys: str) -> tuple[Rule, ...]:
        return tuple(rule for key in keys for rule in self.rules.get(key, ()))


# -- rules: word-file entries with choices ---------------------------------------------------
#
# An entry of the lists the reader matches phrase by phrase (below) may be written as a rule
# instead of a phrase: words, "(a|b c)" for exactly one of the choices, "[a|b c]" for one of them
# or nothing, "<key>" for any one entry of another list. "[but] (ask|check with) [me] again next
# time" reads "ask again next time", "but check with me again next time" and the six between.
# Groups do not nest; a referenced list's entries must be phrases, not rules. A rule is matched
# where it stands, token by token, keeping every place a prefix of it can end: the work at one
# place is bounded by the rule's size, never by the text's.

RULE_KEYS = (
    "yes",
    "instruction",
    "no",
    "polite",
    "praise",
    "pointing",
    "go_ahead",
    "not_a_yes",
    "ironic",
    "remember",
    "this_time_only",
)
_RULE_MARKS = frozenset("()[]<>")
_RULE_PIECE = re.compile(r"[()\[\]|]|<[^<>\s]*>|[^\s()\[\]|<>]+")
# Before its references are resolved: (optional, choices); a choice is a phrase or a "<key>".
_Parsed = list[tuple[bool, list["Phrase | str"]]]


def is_rule(entry: str) -> bool:
    return not _RULE_MARKS.isdisjoint(entry)


class Rule:
    """One word-file entry written as a rule: a sequence of parts, each a set of choices (phrases),
    required or optional. :meth:`end` says where its longest match from a place ends."""

    def __init__(self, text: str, parts: Sequence[tuple[bool, Iterable[Phrase]]]) -> None:
        self.text = text
        self._parts: list[tuple[bool, dict[str, list[Phrase]]]] = []
        for optional, choices_ in parts:
            by_first: dict[str, list[Phrase]] = {}
            for choice in choices_:
                by_first.setdefault(choice[0], []).append(choice)
            self._parts.append((optional, by_first))

    def __repr__(self) -> str:
        return f"Rule({self.text!r})"

    def starts(self) -> frozenset[str]:
        """Every word a match can start with."""
        words: set[str] = set()
        for optional, by_first in self._parts:
            words |= set(by_first)
            if not optional:
                break
        return frozenset(words)

    def end(self, tokens: Sequence[str], start: int) -> int:
        """Where the longest match of this rule from ``start`` ends, or -1 (no match, or only an
        empty one). The places a match can have reached are at most the rule's length apart, so each
        part costs a few look-ups."""
        ends = {start}
        for optional, by_first in self._parts:
            reached = set(ends) if optional else set()
            for at in ends:
                for choice in by_first.get(tokens[at], ()) if at < len(tokens) else ():
                    if tuple(tokens[at : at + len(choice)]) == choice:
                        reached.add(at + len(choice))
            if not reached:
                return -1
            ends = reached
        best = max(ends)
        return best if best > start else -1

    def matches(self, phrase: Phrase) -> bool:
        """Does this rule match all of ``phrase``?"""
        return self.end(list(phrase), 0) == len(phrase)

    def words(self) -> set[str]:
        return {word for _, by_first in self._parts for cs in by_first.values() for c in cs for word in c}


def _parse_rule(text: str) -> _Parsed:
    """The parts of a rule, its references not yet resolved; ValueError says what is wrong."""
    parts: _Parsed = []
    group: list[list[str]] | None = None
    closing = ""
    loose: list[str] = []  # words outside any group, read as one required phrase

    def flush() -> None:
        if loose:
            parts.append((False, [tuple(_tokens(" ".join(loose)))]))
            loose.clear()

    for piece in _RULE_PIECE.findall(text):
        if piece in ("(", "["):
            if group is not None:
                raise ValueError("groups do not nest")
            flush()
            group, closing = [[]], ")" if piece == "(" else "]"
        elif piece in (")", "]"):
            if group is None or piece != closing:
                raise ValueError(f"a {piece!r} that closes no group")
            optional = piece == "]"
            parts.append((optional, [_choice(words, optional) for words in group if words or not optional]))
            group = None
        elif piece == "|":
            if group is None:
                raise ValueError("a '|' outside a group")
            group.append([])
        elif group is not None:
            group[-1].append(piece)
        elif piece.startswith("<"):
            flush()
            parts.append((False, [_choice([piece], False)]))
        else:
            loose.append(piece)
    if group is not None:
        raise ValueError(f"a group that is not closed with {closing!r}")
    flush()
    if not parts or all(optional for optional, _ in parts):
        raise ValueError("a rule with nothing it requires matches any text")
    return parts


def _choice(words: list[str], optional: bool) -> Phrase | str:
    refs = [word for word in words if word.startswith("<")]
    if refs:
        if len(words) != 1 or len(refs[0]) < 3:
            raise ValueError(f"a reference stands alone as a choice: {' '.join(words)!r}")
        return refs[0][1:-1]
    phrase = tuple(_tokens(" ".join(words)))
    if not phrase:
        raise ValueError("an empty choice in a (...) group; write [...] for an optional part")
    return phrase


def load_words(*extra: str | Path) -> Words:
    """The default words plus each file in ``extra``; :class:`ConfigError` names file, place, reason."""
    merged: dict[str, list[str]] = {}
    for path in (DEFAULT_WORDS, *extra):
        parsed = _default_word_file() if path == DEFAULT_WORDS else _read_word_file(Path(path))
        for key, values in parsed.model_dump().items():
            merged.setdefault(key, []).extend(values)
    sources = ", ".join(str(p) for p in (DEFAULT_WORDS, *extra))
    words = _compile(merged, sources)
    clash = _clash(words.yes_like(), words.never_yes())
    if clash:
        raise ConfigError(
            f"{sources}: listed both as a yes (or polite) and as a no, hedge or irony: {', '.join(clash)}"
        )
    rules = words.rules
    clash = _clash(
        (words.remember, rules.get("remember", ())), (words.this_time_only, rules.get("this_time_only", ()))
    )
    if clash:
        raise ConfigError(
            f"{sources}: listed both as a permission (remember) and as a refusal of one "
            f"(this_time_only): {', '.join(clash)}"
        )
    return words


def _clash(
    one: tuple[frozenset[Phrase], Sequence[Rule]], other: tuple[frozenset[Phrase], Sequence[Rule]]
) -> list[str]:
    """The phrases both sides read: listed in both, or a phrase of one that a rule of the other matches
    whole (two rules are not compared with each other)."""
    (phrases, rules), (other_phrases, other_rules) = one, other
    both = {" ".join(p) for p in phrases & other_phrases}
    both |= {" ".join(p) for p in other_phrases if any(rule.matches(p) for rule in rules)}
    both |= {" ".join(p) for p in phrases if any(rule.matches(p) for rule in other_rules)}
    return sorted(both)


@functools.cache
def _default_word_file() -> _WordFile:
    """The shipped word file, read once per process (every reader starts from it)."""
    return _read_word_file(DEFAULT_WORDS)


def _read_word_file(path: Path) -> _WordFile:
    document = load_yaml(path) or {}
    if isinstance(document, dict):
        # YAML 1.1 reads an unquoted `yes:` / `no:` key as a boolean; mean what the author meant.
        booleans = {True: "yes", False: "no"}
        document = {booleans[k] if isinstance(k, bool) else k: v for k, v in document.items()}
    try:
        parsed = _WordFile.model_validate(document)
    except ValidationError as exc:
        raise schema_error(path, exc) from None
    for key, values in parsed.model_dump().items():
        for index, value in enumerate(values):
            if not _tokens(value):
                raise ConfigError(f"{path}: {key}[{index}]: an empty entry matches nothing")
            if is_rule(value):
                if key not in RULE_KEYS:
                    raise ConfigError(
                        f"{path}: {key}[{index}]: a rule ((...), [...], <...>) is read only in "
                        f"{', '.join(RULE_KEYS)}"
                    )
                try:
                    _parse_rule(value)
                except ValueError as exc:
                    raise ConfigError(f"{path}: {key}[{index}]: {exc}") from None
    return parsed


def _compile(lists: Mapping[str, list[str]], sources: str = "") -> Words:
    def phrases(key: str) -> frozenset[tuple[str, ...]]:
        return frozenset(tuple(_tokens(value)) for value in lists.get(key, []) if not is_rule(value))

    def expand(choice: Phrase | str) -> Iterable[Phrase]:
        if isinstance(choice, tuple):
            return (choice,)
        if choice not in _WordFile.model_fields:
            raise ConfigError(f"{sources}: a rule names <{choice}>, which is no list of the word file")
        if any(is_rule(value) for value in lists.get(choice, [])):
            raise ConfigError(f"{sources}: a rule names <{choice}>, a list that holds rules itself")
        return phrases(choice)

    def rules(*keys: str) -> tuple[Rule, ...]:
        return tuple(
            Rule(
                value,
                [(optional, [p for c in cs for p in expand(c)]) for optional, cs in _parse_rule(value)],
            )
            for key in keys
            for value in lists.get(key, [])
            if is_rule(value)
        )

    def longest_first(key: str) -> tuple[str, ...]:
        return tuple(sorted({" ".join(_tokens(v)) for v in lists.get(key, [])}, key=len, reverse=True))

    return Words(
        # An instruction ("save it") is a yes that also overrules a doubled yes ("yes yes, save it").
        yes=phrases("yes") | phrases("instruction"),
        no=phrases("no"),
        polite=phrases("polite"),
        not_a_yes=phrases("not_a_yes"),
        ironic=phrases("ironic"),
        drawn_out=frozenset(" ".join(_tokens(v)) for v in lists.get("drawn_out", [])),
        instruction=phrases("instruction"),
        remember=phrases("remember"),
        edit=longest_first("edit"),
        edit_with_colon=longest_first("edit_with_colon"),
        edit_lead_in=frozenset(" ".join(_tokens(v)) for v in lists.get("edit_lead_in", [])),
        redirect=phrases("redirect"),
        redirect_also=phrases("redirect_also"),
        new_request=tuple(sorted(phrases("new_request"), key=len, reverse=True)),
        cancel=phrases("cancel"),
        help=phrases("help"),
        praise=phrases("praise"),
        pointing=phrases("pointing"),
        go_ahead=phrases("go_ahead"),
        repeatable=frozenset(" ".join(_tokens(v)) for v in lists.get("repeatable", [])),
        this_time_only=phrases("this_time_only"),
        rules={
            key: found
            for key, found in (
                ("yes", rules("yes", "instruction")),
                ("instruction", rules("instruction")),
                *((key, rules(key)) for key in RULE_KEYS if key not in ("yes", "instruction")),
            )
            if found
        },
    )


# -- normalising text ------------------------------------------------------------------------
#
# Every pattern below is linear in the text it reads: each is a character class, a run of one
# class with nothing after it that could fail and make it give characters back, or a literal.
# tests/plugin/test_reader_linear.py holds them to it.

# Emoji modifiers that do not change meaning: variation selectors, skin tones, joiners.
_MODIFIERS = re.compile("[\ufe0e\ufe0f\u200d\U0001f3fb-\U0001f3ff]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_TOKEN = re.compile(r"\w+(?:'\w+)*|\?|[^\w\s]", re.UNICODE)
# Punctuation that separates words and means nothing on its own; "?" is kept (a question).
_SEPARATORS = set(".,!;:-–—…\"'()[]«»“”*~") | {"¡", "¿"}
_QUESTION = {"?", "？", "¿"}
# A run of characters that may belong to an email address: anything but spaces and the
# punctuation around addresses in running text. An address is a run shaped x@y.z.
_ADDRESS_RUN = re.compile(r"[^\s<>(),;:\"'\[\]]+")
# Quote marks around words (scare quotes); an apostrophe inside a word ("that's") is not one.
_QUOTE_MARK = re.compile(r"[\"“”«»„‟]|(?<!\w)'|'(?!\w)")
_LETTERS = re.compile(r"[^\W\d_]{4,}")
_DIGITS = re.compile(r"\d+")
# A letter three times in a row: a word drawn out ("suuure"), not a slip of the finger ("suree").
_DRAWN_OUT = re.compile(r"([^\W\d_])\1\1")


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    return _MODIFIERS.sub("", text).casefold()


def _tokens(text: str) -> list[str]:
    out = []
    for token in _TOKEN.findall(_normalise(text)):
        if token in _QUESTION:
            out.append("?")
        elif token not in _SEPARATORS:
            out.append(token)
    return out


def address_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds something shaped like an email address (``x@y.z``), in order.

    A run of address characters is one when it has an "@" after its first character and a "."
    at least two characters after that "@" and before its last character. One pass over the text,
    with ``str.find`` inside each run: no backtracking, so a megabyte of "@" or of dots costs what
    a megabyte of letters does.
    """
    spans = []
    for run in _ADDRESS_RUN.finditer(text):
        word = run.group()
        at = word.find("@", 1)
        if at != -1 and word.find(".", at + 2, len(word) - 1) != -1:
            spans.append(run.span())
    return spans


def _squeeze(word: str) -> str:
    """Runs of one letter to one letter: "yesss" -> "yes", "okkk" -> "ok"."""
    return re.sub(r"(.)\1+", r"\1", word)


def _swaps(word: str) -> Iterable[str]:
    """Every spelling with two neighbouring letters swapped: "yse" -> "yes"."""
    for i in range(len(word) - 1):
        yield word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def _tone(text: str) -> str | None:
    """What in the way a yes is written makes it doubtful ("sure...", '"sure"', "sUrE"), or None."""
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)  # "…" becomes "..."
    if ".." in text:
        return "an ellipsis beside the yes"
    if _QUOTE_MARK.search(text):
        return "a yes in quotes"
    for word in _LETTERS.findall(text):
        # "sUrE", "YeAh RiGhT": case flipping letter to letter mocks the word.
        if sum(a.isupper() != b.isupper() for a, b in zip(word, word[1:], strict=False)) >= 3:
            return "a yes in mocking case"
    return None


class _PhraseIndex:
    """Phrases by their first word, longest first, so finding the phrase at a position costs a
    dictionary look-up and a few comparisons, however many phrases there are; and rules (word-file
    entries with choices) by the words they can start with, each tried where it can start."""

    def __init__(
        self,
        labelled: Iterable[tuple[str, Iterable[Phrase]]],
        rules: Mapping[str, Sequence[Rule]] | None = None,
    ) -> None:
        by_first: dict[str, list[tuple[int, int, str, Phrase]]] = {}
        orders: dict[str, int] = {}
        for order, (label, phrases) in enumerate(labelled):
            orders.setdefault(label, order)
            for phrase in phrases:
                by_first.setdefault(phrase[0], []).append((-len(phrase), order, label, phrase))
        # Longest first; at equal length the label given first wins.
        self._by_first = {
            word: [(order, label, p) for _, order, label, p in sorted(entries)]
            for word, entries in by_first.items()
        }
        self._rules_by_first: dict[str, list[tuple[int, str, Rule]]] = {}
        for label, found in (rules or {}).items():
            for rule in found:
                for word in rule.starts():
                    self._rules_by_first.setdefault(word, []).append((orders[label], label, rule))

    def at(self, tokens: list[str], i: int) -> tuple[str, Phrase] | None:
        best: tuple[int, int, str] | None = None  # (length, order, label)
        for order, label, phrase in self._by_first.get(tokens[i], ()):
            if tuple(tokens[i : i + len(phrase)]) == phrase:
                best = (len(phrase), order, label)
                break
        for order, label, rule in self._rules_by_first.get(tokens[i], ()):
            length = rule.end(tokens, i) - i
            if length > 0 and (best is None or (length, -order) > (best[0], -best[1])):
                best = (length, order, label)
        return None if best is None else (best[2], tuple(tokens[i : i + best[0]]))


# -- the reader ------------------------------------------------------------------------------

DEFAULT_MAX_CHARS = 5000


class ConfirmationReader:
    """Reads one answer to a pending question. Pure: no I/O, no state."""

    def __init__(
        self,
        words: Words | None = None,
        *,
        affirm_intent: str = AFFIRM_INTENT,
        deny_intent: str = DENY_INTENT,
        fallback_intents: Iterable[str] = ("nlu_fallback",),
        min_confidence: float = 0.6,
        deny_margin: float = 0.25,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        if max_chars < 1:
            raise ValueError("max_chars must be at least 1")
        self.words = words or load_words()
        self.affirm_intent = affirm_intent
        self.deny_intent = deny_intent
        self._fallback = frozenset(fallback_intents)
        self.min_confidence = min_confidence
        self.deny_margin = deny_margin
        self.max_chars = max_chars
        self._single_yes = {entry[0] for entry in self.words.yes if len(entry) == 1}
        self._single_no = {entry[0] for entry in self.words.no if len(entry) == 1}
        self._squeezed_yes = {_squeeze(word): word for word in self._single_yes}
        self._squeezed_no = {_squeeze(word): word for word in self._single_no}
        self._longest_single = max(map(len, self._single_yes | self._single_no), default=0)
        # Words of the lists that decide yes and no: never "corrected" into another word.
        # The lists the answer is read with, each under the label its phrases get; at equal length
        # the label given first wins.
        lists = [
            ("remember", "remember", self.words.remember),
            ("once", "this_time_only", self.words.this_time_only),
            ("no", "no", self.words.no),
            ("not_a_yes", "not_a_yes", self.words.not_a_yes),
            ("ironic", "ironic", self.words.ironic),
            ("yes", "yes", self.words.yes),
            ("pointing", "pointing", self.words.pointing),
            ("go_ahead", "go_ahead", self.words.go_ahead),
            ("praise", "praise", self.words.praise),
            ("polite", "polite", self.words.polite),
        ]
        rules = {label: self.words.rules[key] for label, key, _ in lists if key in self.words.rules}
        self._instruction_rules = self.words.rules.get("instruction", ())
        # Words of the lists that decide yes and no: never "corrected" into another word.
        self._vocabulary = {token for _, _, phrases in lists for phrase in phrases for token in phrase}
        self._vocabulary |= {word for found in rules.values() for rule in found for word in rule.words()}
        self._phrases = _PhraseIndex([(label, phrases) for label, _, phrases in lists], rules)
        self._cancel = _PhraseIndex([("hit", self.words.cancel), ("polite", self.words.polite)])
        self._help = _PhraseIndex([("hit", self.words.help), ("polite", self.words.polite)])
        redirect_words = self.words.redirect | self.words.redirect_also | self.words.yes | self.words.no
        self._redirect_words = _PhraseIndex([("hit", redirect_words), ("polite", self.words.polite)])
        # "change it to: <new text>" and the like, one pattern per marker, in the word lists' order.
        self._edit_patterns = tuple(
            _edit_pattern(marker, needs_colon)
            for marker, needs_colon in [(m, False) for m in self.words.edit]
            + [(m, True) for m in self.words.edit_with_colon]
        )

        # The per-call grammar's words (mcp_bridge.reading.choices); at equal length the first label wins.
        def listed(*entries: str) -> frozenset[Phrase]:
            return frozenset(tuple(_choice_tokens(entry)) for entry in entries)

        self._choice_words = _PhraseIndex(
            [
                ("except", listed(*choices.EXCEPT_WORDS)),
                ("sep", listed(*choices.SEPARATORS)),
                ("and", listed(*choices.AND_WORDS)),
                ("only", listed(*choices.ONLY_WORDS)),
                ("all", listed(*choices.ALL_WORDS)),
                ("both", listed(*choices.BOTH_WORDS)),
                ("none", listed(*choices.NONE_WORDS)),
                ("neither", listed(*choices.NEITHER_WORDS)),
                ("rest", listed(*choices.REST_WORDS)),
                ("no", self.words.no | listed(*choices.EXTRA_NO)),
                ("yes", self.words.yes | listed(*choices.EXTRA_YES)),
                ("filler", listed(*choices.FILLERS) | self.words.polite),
            ]
        )
        self._range_words = frozenset(choices.RANGE_WORDS)

    def too_long(self, text: str) -> TooLong | None:
        """``text`` is over the limit: a bot's own question (a form) refuses it unread too."""
        return TooLong(len(text), self.max_chars) if len(text) > self.max_chars else None

    def asks_or_requests(self, text: str) -> bool:
        """``text`` is a question ("?", in any script the reader knows) or starts a new request
        ("log a call ..."): what a reply that is plainly not an answer looks like."""
        tokens = _tokens(text[: self.max_chars])
        return "?" in tokens or self._starts_with(tokens, self.words.new_request)

    def read(self, text: str, nlu: NluOpinion | None = None, call: Mapping[str, Any] | None = None) -> Answer:
        """Read ``text``, the answer to a question about ``call`` (the pending call's arguments).

        ``nlu`` is the NLU's reading of the same message. Without it (offline) the text decides
        alone; with it, a yes needs the NLU's affirm as well. The answer's kind (never its text) is
        a span when tracing is on.
        """
        with tracing.span("mcp-bridge answer") as span:
            answer = self._read(text, nlu, call)
            tracing.note(span, answer=answer.kind)
            return answer

    def _read(
        self, text: str, nlu: NluOpinion | None = None, call: Mapping[str, Any] | None = None
    ) -> Answer:
        too_long = self.too_long(text)
        if too_long is not None:
            return too_long
        stripped = text.strip()
        if stripped.startswith("/"):
            return self._payload(stripped)
        text_answer = self._read_text(stripped, nlu, call or {})
        if (
            isinstance(text_answer, Yes | YesThisTime | Grant)
            and nlu is not None
            and not self._nlu_says_yes(nlu)
        ):
            return Unclear("the NLU did not read it as a yes")
        return text_answer

    def read_calls(
        self,
        text: str,
        nlu: NluOpinion | None,
        calls: Sequence[Mapping[str, Any]],
        names: Sequence[str] = (),
    ) -> CallsAnswer:
        """Read ``text``, the answer to a question about several ``calls`` (their arguments, in the
        list's order); ``names`` are the words naming each call (its tool's last word, "note").

        A plain yes or no answers every call (a yes with the NLU agreeing, as :meth:`read`); else the
        answer must decide each call in the per-call grammar (:mod:`mcp_bridge.reading.choices`).
        """
        with tracing.span("mcp-bridge answer", calls=len(calls)) as span:
            answer = self._read_calls(text, nlu, calls, names)
            tracing.note(span, answer=answer.kind)
            return answer

    def _read_calls(
        self,
        text: str,
        nlu: NluOpinion | None,
        calls: Sequence[Mapping[str, Any]],
        names: Sequence[str] = (),
    ) -> CallsAnswer:
        count = len(calls)
        too_long = self.too_long(text)
        if too_long is not None:
            return too_long
        stripped = text.strip()
        if stripped.startswith("/"):
            whole = self._payload(stripped)
            if isinstance(whole, Yes | No):
                return Choices((isinstance(whole, Yes),) * count)
            return Unclear("a payload that is not a plain yes or no button")
        edit = self._edit_call(stripped, count)
        if edit is not None:
            return edit
        # As one answer to all of them. No call's numbers count as known: "yes 1" names a call.
        whole = self._read(stripped, nlu, {})
        if isinstance(whole, Grant):
            return Unclear("a permission for several calls at once")
        if isinstance(whole, YesThisTime):
            return Unclear("a yes for this time only, to several calls")  # "only this one" picks one
        if isinstance(whole, Yes) and any(
            label in ("pointing", "go_ahead") for label, _ in self._label(_tokens(stripped), {})
        ):
            return Unclear("a yes that points at one call, to several")  # "that one", "add the note"
        if isinstance(whole, Yes | No):
            return Choices((isinstance(whole, Yes),) * count)
        if isinstance(whole, TooLong):
            return whole
        if isinstance(whole, Edit | Redirect):
            return Unclear(f"an {whole.kind} that does not say which call")
        # "all", "only 2": no yes- or no-word, so the NLU's other intent ("goodbye") would hand them
        # back; the per-call reading comes first. A message it cannot read stays handed back.
        per_call = self._choices(stripped, count, names)
        if isinstance(per_call, Choices) or not isinstance(whole, Other):
            return per_call or whole
        return whole

    def _choices(self, text: str, count: int, names: Sequence[str]) -> Choices | Unclear | None:
        """The per-call reading of ``text``; None when it holds no per-call answer at all."""
        tokens = _choice_tokens(text)
        if "?" in tokens:
            return Unclear("a question")
        found = self._label([t for t in _tokens(text)], {})
        if any(label == "ironic" for label, _ in found):
            return Unclear("yes-words that sound ironic")
        doubt = _tone(text)
        if doubt:
            return Unclear(doubt)
        # "the task" names the one call whose tool ends in "task"; "the notes" every note. A singular
        # that fits several calls ("the note" of two notes) names none, so the answer is unclear.
        by_name: dict[str, frozenset[int]] = {}
        for place, name in enumerate(names, start=1):
            by_name[f"{name}s"] = by_name.get(f"{name}s", frozenset()) | {place}
        for name in set(names):
            if names.count(name) == 1:
                by_name[name] = frozenset({names.index(name) + 1})
        symbols: list[choices.Symbol] = []
        # The kind of the last symbol that is not a separator, kept as symbols are added: a list of
        # them rebuilt per word made a long answer quadratic.
        last_said: str | None = None
        i = 0
        while i < len(tokens):
            word = tokens[i]
            previous = symbols[-1] if symbols else None
            after_target = previous is not None and previous.kind == "target"
            if after_target and word in self._range_words and i + 1 < len(tokens):
                upto = choices.read_targets(tokens[i + 1], False, lambda _: frozenset(), count)
                if previous is not None and upto is not None and len(previous.targets) == 1:
                    low, high = min(previous.targets), min(upto.targets)
                    if not 1 <= low <= high <= count:
                        return Unclear("a range that is not on the list")
                    symbols[-1] = choices.Symbol("target", frozenset(range(low, high + 1)))
                    i += 2
                    continue
            target = choices.read_targets(word, after_target, lambda w: by_name.get(w, frozenset()), count)
            if target is not None:
                symbols.append(target)
                last_said = target.kind
                i += 1
                continue
            hit = self._choice_words.at(tokens, i)
            if hit is None:
                return Unclear("words that are not a plain yes or no to each call")
            label, phrase = hit
            i += len(phrase)
            if label == "filler":
                continue
            if label == "sep" and previous is not None and previous.kind == "target":
                nxt = (
                    choices.read_targets(tokens[i], False, lambda w: by_name.get(w, frozenset()), count)
                    if i < len(tokens)
                    else None
                )
                if nxt is not None:
                    label = "and"  # "1, 2 and 3"
            if (
                label == "sep"
                and phrase == ("but",)
                and previous is not None
                and previous.kind in ("all", "both")
            ):
                label = "except"  # "all but 2"
            if label == "yes" and last_said == "yes":
                return Unclear("a yes said twice, which sounds ironic")  # "sure, sure, both"
            symbols.append(choices.Symbol(label))
            if label not in ("sep", "and"):
                last_said = label
        try:
            decisions = choices.symbols_to_decisions(symbols, count)
            return Choices(choices.per_call(decisions, count))
        except choices.NotAnAnswer as exc:
            return Unclear(str(exc))

    def _edit_call(self, text: str, count: int) -> EditCall | Unclear | None:
        """ "change 2 to: <new text>", "change the second to ...": one call's new text."""
        match = _EDIT_CALL.match(text)
        if match is None:
            return None
        which = _choice_tokens(match.group("which"))
        target = choices.read_targets(which[-1], False, lambda _: frozenset(), count) if which else None
        if target is None or len(target.targets) != 1:
            return Unclear("an edit that does not say which call")
        (place,) = target.targets
        if not 1 <= place <= count:
            return Unclear("an edit of a call that is not on the list")
        new = match.group("text").strip()
        if len(new) >= 2 and new[0] in "\"'“‘" and new[-1] in "\"'”’":
            new = new[1:-1].strip()
        return EditCall(place, new) if new else Unclear("an edit without the new text")

    def way_out(self, text: str) -> Literal["cancel", "help"] | None:
        """For a bot's own questions (a form): is the whole answer a "cancel" or a "help"?"""
        if self.too_long(text):
            return None
        tokens = _tokens(text)
        if tokens and _covered(tokens, self._cancel):
            return "cancel"
        if tokens and _covered(tokens, self._help):
            return "help"
        return None

    # -- pieces ---------------------------------------------------------------------------

    def _payload(self, payload: str) -> Answer:
        """A button's payload: exactly ``/affirm`` or ``/deny``, nothing else, is an answer."""
        if payload == f"/{self.affirm_intent}":
            return Yes()
        if payload == f"/{self.deny_intent}":
            return No()
        return Unclear("a payload that is not a plain yes or no button")

    def _nlu_says_yes(self, nlu: NluOpinion) -> bool:
        if nlu.intent != self.affirm_intent or nlu.confidence < self.min_confidence:
            return False
        deny = (nlu.ranking or {}).get(self.deny_intent, 0.0)
        return nlu.confidence - deny >= self.deny_margin

    def _nlu_says_other(self, nlu: NluOpinion | None) -> bool:
        if nlu is None or nlu.intent is None:
            return False
        if nlu.intent in {self.affirm_intent, self.deny_intent} | self._fallback:
            return False
        return nlu.confidence >= self.min_confidence

    def _read_text(self, text: str, nlu: NluOpinion | None, call: Mapping[str, Any]) -> Answer:
        if not text:
            return Unclear("empty")
        tokens = _tokens(text)
        if self._starts_with(tokens, self.words.new_request):
            # A new request takes all of its own values; it never edits or moves this one.
            return Other() if self._nlu_says_other(nlu) else Unclear("looks like a new request")
        edit = self._edit(text, set(tokens))
        if edit is not None:
            return edit
        addresses = address_spans(text)
        if addresses:
            return self._with_email(text, addresses, nlu)
        found = self._label(tokens, call)
        # Praise stands beside a yes like a polite word ("yes, brilliant"), but alone it is no yes; a
        # phrase that points at the question ("that's the one") or names its action ("add it") is one.
        kinds = {_YES_LIKE.get(label, label) for label, _ in found} - {"polite", "praise"}
        if kinds in ({"yes"}, {"yes", "remember"}, {"yes", "once"}):
            doubt = self._irony(found) or _tone(text)
            if doubt:
                return Unclear(doubt)
            return Grant() if "remember" in kinds else YesThisTime() if "once" in kinds else Yes()
        if "no" in kinds and kinds <= {"no", "not_a_yes", "ironic", "remember"}:
            # "no", "actually no", "no, not now", "no, and don't ask again": a no, hedged or not
            return No()
        if {"remember", "once"} <= kinds:
            return Unclear("a permission and a refusal of one, together")
        if kinds == {"remember"}:
            return Unclear("not to ask again, without a yes")
        if kinds == {"once"}:
            return Unclear("this time only, without a yes")
        if not kinds & {"yes", "no", "not_a_yes", "ironic"} and self._nlu_says_other(nlu):
            return Other()
        return Unclear(_why(kinds))

    def _irony(self, found: list[tuple[str, Phrase]]) -> str | None:
        """Yes-words that together mean doubt: one said twice with no instruction to write
        ("sure, sure", "great, just great", "brilliant, brilliant"; but "yes yes, save it"). A word
        listed as ``repeatable`` may be said again and again ("yup yup")."""
        said = [
            phrase
            for label, phrase in found
            if label in ("yes", "pointing", "praise", "go_ahead") and phrase[0][:1].isalpha()
        ]
        repeated = [phrase for phrase, times in Counter(said).items() if times > 1]
        if any(len(p) > 1 or p[0] not in self.words.repeatable for p in repeated) and not any(
            self._is_instruction(label, phrase) for label, phrase in found
        ):
            return "a yes said twice, which sounds ironic"
        return None

    def _is_instruction(self, label: str, phrase: Phrase) -> bool:
        """An instruction to write ("save it", "add it to the record")."""
        if label == "go_ahead":
            return True
        if label != "yes":
            return False
        return phrase in self.words.instruction or any(
            rule.matches(phrase) for rule in self._instruction_rules
        )

    def _with_email(self, text: str, spans: list[tuple[int, int]], nlu: NluOpinion | None) -> Answer:
        addresses = {text[start:end].rstrip(".!?").casefold() for start, end in spans}
        if len(addresses) != 1:
            return Unclear("more than one email address")
        pieces, last = [], 0
        for start, end in spans:
            pieces.append(text[last:start])
            last = end
        pieces.append(text[last:])
        rest = _tokens(" ".join(pieces))
        if "?" not in rest and self._is_redirect(rest):
            return Redirect(next(iter(addresses)))
        if self._nlu_says_other(nlu):
            return Other()
        return Unclear("an email address without a plain request to move the note")

    def _is_redirect(self, tokens: list[str]) -> bool:
        """A redirecting word, and nothing but the few words a redirect is made of."""
        if not any(_contains(tokens, phrase) for phrase in self.words.redirect):
            return False
        return _covered(tokens, self._redirect_words, need_hit=False)

    def _edit(self, text: str, words: set[str]) -> Edit | Unclear | None:
        """ "change it to: <new text>" and the like; the new text exactly as typed."""
        for marker, pattern in self._edit_patterns:
            if marker[0] not in words:
                continue  # the marker's first word is nowhere in the text: no need to look for it
            match = pattern.search(text)
            if match is None:
                continue
            if any(t not in self.words.edit_lead_in for t in _tokens(text[: match.start()])):
                continue
            new = text[match.end() :].strip()
            if len(new) >= 2 and new[0] in "\"'“‘" and new[-1] in "\"'”’":
                new = new[1:-1].strip()
            if not new:
                return Unclear("an edit without the new text")
            return Edit(new)
        return None

    def _label(self, tokens: list[str], call: Mapping[str, Any]) -> list[tuple[str, Phrase]]:
        """One (label, phrase) per phrase found, longest phrases first, left to right.

        A word none of the lists knows is first read as the yes or no it may be a slip of
        ("yse", "yeahhh", "riiight"), so a phrase is found also when one of its words is misspelt.
        """
        known_numbers = set(_DIGITS.findall(" ".join(str(v) for v in call.values())))
        slips: dict[str, str] = {}  # each distinct unknown word is looked at once
        for word in set(tokens) - self._vocabulary:
            slips[word] = self._slip_of(word) or word
        words = [slips.get(word, word) for word in tokens]
        found: list[tuple[str, Phrase]] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word == "?":
                found.append(("question", (word,)))
                i += 1
                continue
            phrase = self._phrases.at(words, i)
            if phrase is not None:
                label, matched = phrase
                end = i + len(matched)
                if label in _YES_LIKE and any(self._drawn_out(tokens[j], words[j]) for j in range(i, end)):
                    label = "ironic"  # "suuure", "that's riiight": drawn out, the yes doubts
                found.append((label, matched))
                i = end
                continue
            if word.endswith("n't"):
                found.append(("not_a_yes", (word,)))
            elif word.isdigit() and word in known_numbers:
                found.append(("polite", (word,)))  # a number from the call itself says nothing new
            else:
                found.append(("unknown", (word,)))
            i += 1
        return found

    def _drawn_out(self, typed: str, word: str) -> bool:
        return word in self.words.drawn_out and _DRAWN_OUT.search(typed) is not None

    def _slip_of(self, word: str) -> str | None:
        """The one-word no or yes that ``word`` is a common slip of ("nooo", "yess", "yse"), or None."""
        if len(word) < 3 or not word.isalpha():
            return None
        squeezed = _squeeze(word)
        if len(squeezed) > self._longest_single:
            return None  # longer than any one-word yes or no, even squeezed: not a slip of one
        swaps = set(_swaps(word)) if len(word) <= self._longest_single else set()
        for singles, squeezed_singles in (
            (self._single_no, self._squeezed_no),
            (self._single_yes, self._squeezed_yes),
        ):
            if squeezed in singles:
                return squeezed
            hit = swaps & singles
            if hit:
                return min(hit)
            if squeezed in squeezed_singles:
                return squeezed_singles[squeezed]
        return None

    @staticmethod
    def _starts_with(tokens: list[str], phrases: Iterable[Phrase]) -> bool:
        return any(tuple(tokens[: len(p)]) == p for p in phrases)


# Labels of phrases that are a yes, or stand beside one, and the kind of answer each counts as.
_YES_LIKE = {"yes": "yes", "pointing": "yes", "go_ahead": "yes", "praise": "praise"}


# Tokens of a per-call answer: like _tokens, but commas, semicolons, full stops, dashes and "#" are
# kept (they separate decisions, make ranges, mark numbers), and "2nd" stays one word.
_CHOICE_TOKEN = re.compile(r"\w+(?:'\w+)*|[^\w\s]", re.UNICODE)
_CHOICE_DROPPED = set("\"'()[]«»“”*~…¡¿") | {"!"}


def _choice_tokens(text: str) -> list[str]:
    out = []
    for token in _CHOICE_TOKEN.findall(_normalise(text)):
        if token in _QUESTION:
            out.append("?")
        elif token == "!":
            out.append(".")
        elif token not in _CHOICE_DROPPED:
            out.append(token)
    return out


# "change 2 to: <text>", "edit the second one to <text>", "change note 2 to say <text>": a marker,
# the call, and everything after "to" / "to say" / ":" as the new text. Each part is a literal or a
# run of one class followed by a literal, so nothing backtracks over more than one run.
_EDIT_CALL = re.compile(
    r"\s*(?:change|edit|make|update|reword)\s+(?P<which>(?:the\s+|number\s+|no\.\s*|#\s*|item\s+|call\s+|note\s+|task\s+)?"
    r"[\w]+)(?:\s+one)?\s*(?:to\s+say\b|to\b|say\b|:)\s*:?(?P<text>.*)\Z",
    re.IGNORECASE | re.DOTALL,
)


def _covered(tokens: list[str], index: _PhraseIndex, need_hit: bool = True) -> bool:
    """Every token belongs to a phrase of ``index``, and (with ``need_hit``) one is not polite."""
    i, hit = 0, False
    while i < len(tokens):
        found = index.at(tokens, i)
        if found is None:
            return False
        hit = hit or found[0] != "polite"
        i += len(found[1])
    return hit or not need_hit


def _edit_pattern(marker: str, needs_colon: bool) -> tuple[Phrase, re.Pattern[str]]:
    words = r"\s+".join(re.escape(part) for part in marker.split())
    tail = r"\s*:\s*" if needs_colon else r"\s*:?\s*"
    return tuple(marker.split()), re.compile(rf"\b{words}{tail}", re.IGNORECASE)


def _contains(tokens: list[str], phrase: Phrase) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))


def _why(kinds: set[str]) -> str:
    for label, reason in (
        ("question", "a question"),
        ("once", "this time only, without a plain yes"),
        ("not_a_yes", "a negation, hedge or change"),
        ("ironic", "yes-words that sound ironic"),
        ("unknown", "words that are not a plain yes or no"),
    ):
        if label in kinds:
            return reason
    return "both yes and no" if {"yes", "no"} <= kinds else "neither yes nor no"
