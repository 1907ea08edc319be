"""The reader's words: the word file, its entries compiled (phrases, and rules with choices), and the
index the reader looks phrases up in.

The words live in a data file (``confirmation_words.yml`` beside this module, English); a bot adds its
own (other languages) with :func:`load_words`, which names file, place and reason for an entry it cannot
read. An entry may be a phrase or a rule with choices ("(don't|do not) ask [me] again",
:class:`Rule`), matched where it stands in linear time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_bridge.config.yamlfile import load_yaml, schema_error
from mcp_bridge.errors import ConfigError
from mcp_bridge.reading.text import Phrase, tokenise

__all__ = ["DEFAULT_WORDS", "RULE_KEYS", "PhraseIndex", "Rule", "Words", "covered", "is_rule", "load_words"]

DEFAULT_WORDS = Path(__file__).with_name("confirmation_words.yml")


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
            parts.append((False, [tuple(tokenise(" ".join(loose)))]))
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
    phrase = tuple(tokenise(" ".join(words)))
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
            if not tokenise(value):
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
        return frozenset(tuple(tokenise(value)) for value in lists.get(key, []) if not is_rule(value))

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
        return tuple(sorted({" ".join(tokenise(v)) for v in lists.get(key, [])}, key=len, reverse=True))

    return Words(
        # An instruction ("save it") is a yes that also overrules a doubled yes ("yes yes, save it").
        yes=phrases("yes") | phrases("instruction"),
        no=phrases("no"),
        polite=phrases("polite"),
        not_a_yes=phrases("not_a_yes"),
        ironic=phrases("ironic"),
        drawn_out=frozenset(" ".join(tokenise(v)) for v in lists.get("drawn_out", [])),
        instruction=phrases("instruction"),
        remember=phrases("remember"),
        edit=longest_first("edit"),
        edit_with_colon=longest_first("edit_with_colon"),
        edit_lead_in=frozenset(" ".join(tokenise(v)) for v in lists.get("edit_lead_in", [])),
        redirect=phrases("redirect"),
        redirect_also=phrases("redirect_also"),
        new_request=tuple(sorted(phrases("new_request"), key=len, reverse=True)),
        cancel=phrases("cancel"),
        help=phrases("help"),
        praise=phrases("praise"),
        pointing=phrases("pointing"),
        go_ahead=phrases("go_ahead"),
        repeatable=frozenset(" ".join(tokenise(v)) for v in lists.get("repeatable", [])),
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


class PhraseIndex:
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


def covered(tokens: list[str], index: PhraseIndex, need_hit: bool = True) -> bool:
    """Every token belongs to a phrase of ``index``, and (with ``need_hit``) one is not polite."""
    i, hit = 0, False
    while i < len(tokens):
        found = index.at(tokens, i)
        if found is None:
            return False
        hit = hit or found[0] != "polite"
        i += len(found[1])
    return hit or not need_hit
