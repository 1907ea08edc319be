"""Answers to a question about several calls: which of the numbered calls get a yes.

The reader (:mod:`mcp_bridge.reading.reader`) asks this module (:class:`PerCall`) when an answer to a
numbered list is not a plain yes or no to all of it, nor asks, nor sounds ironic. The answer must give
every call exactly one decision, in a small grammar, or it is unclear and asked again:

* a decision is a yes- or no-word with the calls it is about, either way round: "yes to 1",
  "no to the second", "1 yes, 2 no", "skip 2", "approve 1 and 3", "2 and 3: no", "1-3 yes";
* calls are named by number ("1", "#2", "number 3", "1st", "two"), ordinal ("the first", "the
  last", "the second one"), range ("1-3", "1 to 3", "1 through 3"), or by the last word of their
  tool's name ("the note", "the tasks"); a number that is not on the list makes the answer unclear;
* "all", "both" (two calls only), "everything", "none", "neither" (two calls only), "the rest"
  decide every call not named otherwise: "yes to all, no to 2", "no to 1, yes to the rest",
  "both but not the task", "all except 2";
* "only" / "just" say yes to the calls named and no to the others: "only the first", "just 1 and 3".

Anything else makes the whole answer unclear: a word outside the grammar ("1 and 2 no wait just 1":
a change of mind is asked again), a question mark, a call decided both ways, a call left without a
decision ("yes to 1" of two), a yes-word alone beside named calls of the other answer ("yes to 1
and 2 no"), irony (as the reader finds it). The words are English; yes- and no-words come from
the reader's word lists, so a bot's own words work here too.

"change 2 to: <new text>" edits one call (:meth:`PerCall.edit_call`).

Reading is one pass over the tokens with dictionary look-ups (:class:`~mcp_bridge.reading.words.PhraseIndex`):
linear in the length of the answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mcp_bridge.reading.answers import Choices, EditCall, Unclear
from mcp_bridge.reading.text import Phrase, tokenise_choices
from mcp_bridge.reading.words import PhraseIndex, Words

__all__ = ["NotAnAnswer", "PerCall", "Symbol", "per_call", "read_targets", "symbols_to_decisions"]

# Number words and ordinals (English); digits are read as they are.
ORDINALS: dict[str, int] = {
    "first": 1,
    "1st": 1,
    "second": 2,
    "2nd": 2,
    "third": 3,
    "3rd": 3,
    "fourth": 4,
    "4th": 4,
    "fifth": 5,
    "5th": 5,
    "sixth": 6,
    "6th": 6,
    "seventh": 7,
    "7th": 7,
    "eighth": 8,
    "8th": 8,
    "ninth": 9,
    "9th": 9,
    "tenth": 10,
    "10th": 10,
}
NUMBER_WORDS: dict[str, int] = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}

# The grammar's own words, by what they do. Yes- and no-words are the reader's lists plus these.
EXTRA_YES = ("do", "approve", "accept", "keep", "take", "include", "yes for", "yes to", "go with")
EXTRA_NO = (
    "not",
    "skip",
    "drop",
    "leave out",
    "remove",
    "reject",
    "deny",
    "refuse",
    "without",
    "don't do",
    "do not do",
    "dont do",
    "no to",
    "no for",
)
ALL_WORDS = ("all", "all of them", "everything", "every one", "each", "each of them", "all of it")
BOTH_WORDS = ("both", "both of them", "the two", "the two of them")
NONE_WORDS = ("none", "none of them", "nothing")
NEITHER_WORDS = ("neither", "neither of them", "neither one")
REST_WORDS = (
    "the rest",
    "rest",
    "the others",
    "others",
    "the other",
    "the other one",
    "the remaining",
    "the remaining ones",
    "the remaining one",
)
ONLY_WORDS = ("only", "just", "solely", "only the", "just the")
EXCEPT_WORDS = ("except", "except for", "apart from", "other than", "excluding", "but not", "save for")
AND_WORDS = ("and", "&", "+", "plus", "as well as", "also")
SEPARATORS = (",", ";", ".", "!", "but", "then")
RANGE_WORDS = ("-", "–", "to", "through", "thru", "till", "until")
FILLERS = (
    "to",
    "for",
    "on",
    "the",
    "number",
    "no.",
    "#",
    "item",
    "items",
    "call",
    "calls",
    "of",
    "them",
    "it",
    ":",
    "=",
    "from",
    "please",
    "pls",
    "thanks",
    "thank you",
    "one",
    "ones",
    "a",
)


@dataclass(frozen=True)
class Symbol:
    """One word or phrase of an answer, as the grammar sees it."""

    kind: str  # yes, no, all, both, none, neither, rest, only, except, and, sep, range, target
    targets: frozenset[int] = frozenset()


@dataclass
class _Decision:
    says: str | None = None  # "yes" / "no"
    targets: set[int] = field(default_factory=set)
    quantifier: str | None = None  # "all" (every call not named otherwise) or "rest"
    only: bool = False

    @property
    def empty(self) -> bool:
        return self.says is None and not self.targets and self.quantifier is None and not self.only


class NotAnAnswer(Exception):
    """The answer does not give every call exactly one decision; the message says why."""


def symbols_to_decisions(symbols: Sequence[Symbol], count: int) -> list[_Decision]:
    """Group the symbols into decisions, in one pass; :class:`NotAnAnswer` when they do not fit."""
    decisions: list[_Decision] = []
    current = _Decision()

    def close() -> None:
        nonlocal current
        if not current.empty:
            decisions.append(current)
        current = _Decision()

    def say(word: str) -> None:
        if current.says is not None and current.says != word:
            raise NotAnAnswer("a yes and a no with nothing between them")
        current.says = word

    for symbol in symbols:
        kind = symbol.kind
        if kind in ("yes", "no"):
            if current.says is not None and (current.targets or current.quantifier):
                close()  # "yes to 1 no to 2": a new decision
            elif current.says is None and (current.targets or current.quantifier or current.only):
                say(kind)  # "1 yes", "both no": the decision ends with its word
                close()
                continue
            say(kind)
        elif kind == "target":
            current.targets |= symbol.targets
        elif kind in ("all", "both", "none", "neither", "rest"):
            if kind in ("both", "neither") and count != 2:
                raise NotAnAnswer(f"'{kind}' of {count} calls")
            if kind in ("none", "neither"):
                say("no")
            current.quantifier = "rest" if kind == "rest" else "all"
        elif kind == "only":
            if current.says == "no":
                raise NotAnAnswer("'only' with a no")
            current.only = True
        elif kind == "except":
            opposite = "yes" if current.says == "no" else "no"
            if current.empty:
                raise NotAnAnswer("'except' with nothing before it")
            if current.says is None:
                current.says = "yes"  # "all except 2": all is a yes
            close()
            current.says = opposite
        elif kind == "and":
            continue  # joins targets, or decisions ("yes to 1 and no to 2")
        elif kind == "sep":
            close()
        else:  # pragma: no cover - the symbols are made by the reader
            raise NotAnAnswer(f"unexpected {kind}")
    close()
    return decisions


def per_call(decisions: Sequence[_Decision], count: int) -> tuple[bool, ...]:
    """Yes or no for each of ``count`` calls, in order; :class:`NotAnAnswer` unless each has exactly one."""
    if not decisions:
        raise NotAnAnswer("no decision")
    named: dict[int, str] = {}
    everything_else: set[str] = set()
    bare: set[str] = set()
    for decision in decisions:
        says = decision.says
        if decision.only:
            if not decision.targets:
                raise NotAnAnswer("'only' without the calls it keeps")
            says = "yes"
            everything_else.add("no")
        if says is None:
            if decision.quantifier == "all":
                says = "yes"  # "all", "both": a yes
            else:
                raise NotAnAnswer("calls named without a yes or a no")
        for place in decision.targets:
            if not 1 <= place <= count:
                raise NotAnAnswer("a number that is not on the list")
            if named.get(place, says) != says:
                raise NotAnAnswer("a call given both a yes and a no")
            named[place] = says
        if decision.quantifier is not None:
            everything_else.add(says)
        elif not decision.targets and not decision.only:
            bare.add(says)  # "no, none of them": a yes or no on its own, beside the rest
    if len(everything_else) > 1:
        raise NotAnAnswer("every call given both a yes and a no")
    if not named and not everything_else:
        raise NotAnAnswer("no call named")  # a yes or no alone is the reader's to read, not ours
    if bare:
        (word,) = bare if len(bare) == 1 else (None,)
        if word is None or everything_else - bare or any(said != word for said in named.values()):
            raise NotAnAnswer("a yes or a no on its own beside calls named otherwise")
    default = next(iter(everything_else | bare), None)
    answers = []
    for place in range(1, count + 1):
        says = named.get(place, default)
        if says is None:
            raise NotAnAnswer("a call without a decision")
        answers.append(says == "yes")
    return tuple(answers)


def read_targets(
    word: str, previous_was_target: bool, names: Callable[[str], frozenset[int]], count: int
) -> Symbol | None:
    """The calls a single word names (a number, an ordinal, "last", a tool's noun), or None."""
    if word == "last":
        return Symbol("target", frozenset({count}))
    if word.isdigit():
        return (
            Symbol("target", frozenset({int(word)})) if len(word) <= 4 else Symbol("target", frozenset({0}))
        )
    if word in ORDINALS:
        return Symbol("target", frozenset({ORDINALS[word]}))
    if word in NUMBER_WORDS and not (word == "one" and previous_was_target):
        return Symbol("target", frozenset({NUMBER_WORDS[word]}))
    named = names(word)
    return Symbol("target", named) if named else None


class PerCall:
    """The grammar's reading of a numbered list's answer, with the reader's yes-, no- and polite words
    (``words``) besides its own; at equal length the first label wins."""

    def __init__(self, words: Words) -> None:
        def listed(*entries: str) -> frozenset[Phrase]:
            return frozenset(tuple(tokenise_choices(entry)) for entry in entries)

        self._words = PhraseIndex(
            [
                ("except", listed(*EXCEPT_WORDS)),
                ("sep", listed(*SEPARATORS)),
                ("and", listed(*AND_WORDS)),
                ("only", listed(*ONLY_WORDS)),
                ("all", listed(*ALL_WORDS)),
                ("both", listed(*BOTH_WORDS)),
                ("none", listed(*NONE_WORDS)),
                ("neither", listed(*NEITHER_WORDS)),
                ("rest", listed(*REST_WORDS)),
                ("no", words.no | listed(*EXTRA_NO)),
                ("yes", words.yes | listed(*EXTRA_YES)),
                ("filler", listed(*FILLERS) | words.polite),
            ]
        )
        self._range_words = frozenset(RANGE_WORDS)

    def read(self, text: str, count: int, names: Sequence[str]) -> Choices | Unclear:
        """A yes or a no for each of ``count`` calls (``names``: the word naming each), or why not."""
        tokens = tokenise_choices(text)
        # "the task" names the one call whose tool ends in "task"; "the notes" every note. A singular
        # that fits several calls ("the note" of two notes) names none, so the answer is unclear.
        by_name: dict[str, frozenset[int]] = {}
        for place, name in enumerate(names, start=1):
            by_name[f"{name}s"] = by_name.get(f"{name}s", frozenset()) | {place}
        for name in set(names):
            if names.count(name) == 1:
                by_name[name] = frozenset({names.index(name) + 1})
        symbols: list[Symbol] = []
        # The kind of the last symbol that is not a separator, kept as symbols are added: a list of
        # them rebuilt per word made a long answer quadratic.
        last_said: str | None = None
        i = 0
        while i < len(tokens):
            word = tokens[i]
            previous = symbols[-1] if symbols else None
            after_target = previous is not None and previous.kind == "target"
            if after_target and word in self._range_words and i + 1 < len(tokens):
                upto = read_targets(tokens[i + 1], False, lambda _: frozenset(), count)
                if previous is not None and upto is not None and len(previous.targets) == 1:
                    low, high = min(previous.targets), min(upto.targets)
                    if not 1 <= low <= high <= count:
                        return Unclear("a range that is not on the list")
                    symbols[-1] = Symbol("target", frozenset(range(low, high + 1)))
                    i += 2
                    continue
            target = read_targets(word, after_target, lambda w: by_name.get(w, frozenset()), count)
            if target is not None:
                symbols.append(target)
                last_said = target.kind
                i += 1
                continue
            hit = self._words.at(tokens, i)
            if hit is None:
                return Unclear("words that are not a plain yes or no to each call")
            label, phrase = hit
            i += len(phrase)
            if label == "filler":
                continue
            if label == "sep" and previous is not None and previous.kind == "target":
                nxt = (
                    read_targets(tokens[i], False, lambda w: by_name.get(w, frozenset()), count)
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
            symbols.append(Symbol(label))
            if label not in ("sep", "and"):
                last_said = label
        try:
            decisions = symbols_to_decisions(symbols, count)
            return Choices(per_call(decisions, count))
        except NotAnAnswer as exc:
            return Unclear(str(exc))

    def edit_call(self, text: str, count: int) -> EditCall | Unclear | None:
        """ "change 2 to: <new text>", "change the second to ...": one call's new text."""
        match = _EDIT_CALL.match(text)
        if match is None:
            return None
        which = tokenise_choices(match.group("which"))
        target = read_targets(which[-1], False, lambda _: frozenset(), count) if which else None
        if target is None or len(target.targets) != 1:
            return Unclear("an edit that does not say which call")
        (place,) = target.targets
        if not 1 <= place <= count:
            return Unclear("an edit of a call that is not on the list")
        new = match.group("text").strip()
        if len(new) >= 2 and new[0] in "\"'“‘" and new[-1] in "\"'”’":
            new = new[1:-1].strip()
        return EditCall(place, new) if new else Unclear("an edit without the new text")


# "change 2 to: <text>", "edit the second one to <text>", "change note 2 to say <text>": a marker,
# the call, and everything after "to" / "to say" / ":" as the new text. Each part is a literal or a
# run of one class followed by a literal, so nothing backtracks over more than one run.
_EDIT_CALL = re.compile(
    r"\s*(?:change|edit|make|update|reword)\s+(?P<which>(?:the\s+|number\s+|no\.\s*|#\s*|item\s+|call\s+|note\s+|task\s+)?"
    r"[\w]+)(?:\s+one)?\s*(?:to\s+say\b|to\b|say\b|:)\s*:?(?P<text>.*)\Z",
    re.IGNORECASE | re.DOTALL,
)
