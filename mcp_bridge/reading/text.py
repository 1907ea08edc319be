"""Text as the reader reads it: normalised, split into tokens, and the few shapes it looks for.

Every pattern here is linear in the text it reads: each is a character class, a run of one class with
nothing after it that could fail and make it give characters back, or a literal.
tests/plugin/test_reader_linear.py holds them to it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "DIGITS",
    "DRAWN_OUT",
    "QUESTION",
    "Phrase",
    "address_spans",
    "tokenise_choices",
    "contains",
    "normalise",
    "squeeze",
    "swapped",
    "tokenise",
    "tone",
]

# A phrase of the word file, as normalised tokens.
Phrase = tuple[str, ...]

# Emoji modifiers that do not change meaning: variation selectors, skin tones, joiners.
_MODIFIERS = re.compile("[\ufe0e\ufe0f\u200d\U0001f3fb-\U0001f3ff]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_TOKEN = re.compile(r"\w+(?:'\w+)*|\?|[^\w\s]", re.UNICODE)
# Punctuation that separates words and means nothing on its own; "?" is kept (a question).
_SEPARATORS = set(".,!;:-–—…\"'()[]«»“”*~") | {"¡", "¿"}
QUESTION = {"?", "？", "¿"}
# A run of characters that may belong to an email address: anything but spaces and the
# punctuation around addresses in running text. An address is a run shaped x@y.z.
_ADDRESS_RUN = re.compile(r"[^\s<>(),;:\"'\[\]]+")
# Quote marks around words (scare quotes); an apostrophe inside a word ("that's") is not one.
_QUOTE_MARK = re.compile(r"[\"“”«»„‟]|(?<!\w)'|'(?!\w)")
_LETTERS = re.compile(r"[^\W\d_]{4,}")
DIGITS = re.compile(r"\d+")
# A letter three times in a row: a word drawn out ("suuure"), not a slip of the finger ("suree").
DRAWN_OUT = re.compile(r"([^\W\d_])\1\1")


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    return _MODIFIERS.sub("", text).casefold()


def tokenise(text: str) -> list[str]:
    out = []
    for token in _TOKEN.findall(normalise(text)):
        if token in QUESTION:
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


def squeeze(word: str) -> str:
    """Runs of one letter to one letter: "yesss" -> "yes", "okkk" -> "ok"."""
    return re.sub(r"(.)\1+", r"\1", word)


def swapped(word: str) -> Iterable[str]:
    """Every spelling with two neighbouring letters swapped: "yse" -> "yes"."""
    for i in range(len(word) - 1):
        yield word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def tone(text: str) -> str | None:
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


# Tokens of a per-call answer: like tokens, but commas, semicolons, full stops, dashes and "#" are
# kept (they separate decisions, make ranges, mark numbers), and "2nd" stays one word.
_CHOICE_TOKEN = re.compile(r"\w+(?:'\w+)*|[^\w\s]", re.UNICODE)
_CHOICE_DROPPED = set("\"'()[]«»“”*~…¡¿") | {"!"}


def tokenise_choices(text: str) -> list[str]:
    out = []
    for token in _CHOICE_TOKEN.findall(normalise(text)):
        if token in QUESTION:
            out.append("?")
        elif token == "!":
            out.append(".")
        elif token not in _CHOICE_DROPPED:
            out.append(token)
    return out


def contains(tokens: list[str], phrase: Phrase) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))
