"""What a server's question may not ask for in the chat: a password, a card number or a token.

The MCP specification says servers must not ask for sensitive information with a form (a URL, opened
in the person's browser, is the way for that), and a chat keeps every reply in its history, Rasa's
tracker and logs. So a form field that looks like one of these is refused unasked, with a reason,
and the whole question is declined: nothing the person could type for it is ever asked for.

The rules, applied to every field a person would type into (text and numbers; a yes/no or a choice
among the server's own values cannot carry a secret):

* its ``format`` is ``password``, or it is ``writeOnly`` (JSON Schema's mark for a value that is sent
  and never shown back);
* its name, title or description, or the question's message, read as words (``cardNumber``,
  ``card_number`` and ``card-number`` are "card number"; case ignored), contains
  - a password: ``password``, ``passwd``, ``passphrase``, ``passcode`` (also inside a word:
    ``newPassword``), the words ``pwd``, ``pin``, ``otp``, ``totp``, or "one time", "verification code",
    "security code";
  - a card number: "card number", "card no", "credit card", "debit card", "card digits", ``pan``
    next to "card", ``cvv``, ``cvc``, ``cvv2``, ``cvc2``, ``ccnumber``, ``cardnumber``, ``creditcard``;
  - a token: ``token`` (also inside a word: ``accessToken``), ``apikey``, "api key", "access key",
    "secret key", "private key", the word ``secret``, ``credential``, ``credentials``,
    ``bearer``.

The words are looked for as words (``pin`` is not in "shipping", ``secret`` is not "secretary"),
except where a rule says "inside a word". In a description or the message, a mention that the same
sentence tells the person *not* to give is not a request: a negation (``not``, ``never``, ``n't``)
followed within two words by give, enter, share, include, type, send, provide, put, use or write,
before the mention ("Your favourite number (do not give us your phone number, pin, ...)", as the MCP
project's reference server asks). The rules lean towards refusing: a harmless field named "token
count" is refused too, which costs a declined question; asking for a password costs more. They are
heuristics for servers that ask carelessly: a server that disguises what it asks for is not stopped
by any rule of words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["refusal"]

# Inside a word: these never occur in an ordinary word.
_INSIDE = ("password", "passwd", "passphrase", "passcode", "token", "apikey", "cardnumber", "creditcard")
_WORDS = frozenset(
    {
        "pwd",
        "pin",
        "otp",
        "totp",
        "cvv",
        "cvc",
        "cvv2",
        "cvc2",
        "ccnumber",
        "secret",
        "credential",
        "credentials",
        "bearer",
    }
)
_PAIRS = frozenset(
    {
        ("one", "time"),
        ("verification", "code"),
        ("security", "code"),
        ("card", "number"),
        ("card", "no"),
        ("card", "digits"),
        ("credit", "card"),
        ("debit", "card"),
        ("card", "pan"),
        ("pan", "card"),
        ("api", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("private", "key"),
    }
)
# What each rule asks for, for the reason given.
_WHAT = {
    **dict.fromkeys(
        ("password", "passwd", "passphrase", "passcode", "pwd", "pin", "otp", "totp"), "a password"
    ),
    **dict.fromkeys(("one time", "verification code", "security code"), "a password"),
    **dict.fromkeys(("cardnumber", "creditcard", "cvv", "cvc", "cvv2", "cvc2", "ccnumber"), "a card number"),
    **dict.fromkeys(("card number", "card no", "card digits", "credit card", "debit card"), "a card number"),
    **dict.fromkeys(("card pan", "pan card"), "a card number"),
}
# A text read for words at most this long: a description is cut there (the rules need no more).
MAX_READ = 2000
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
_SENTENCE = re.compile(r"[.!?;()\[\]]")
_NEGATIVE = re.compile(r"n[\'\u2019]t\b", re.IGNORECASE)
_NEGATIONS = frozenset({"not", "never"})
_GIVING = frozenset({"give", "enter", "share", "include", "type", "send", "provide", "put", "use", "write"})


def _words(text: str) -> list[str]:
    spaced = _CAMEL.sub(r"\1 \2", _NEGATIVE.sub(" not", text))
    return [word for word in _NOT_WORD.split(spaced.lower()) if word]


def _found(text: str, *, prose: bool = False) -> str | None:
    """The first sensitive thing ``text`` names, as its rule spells it, or None. ``prose`` (a
    description, a message): sentence by sentence, a mention after "do not give" is no request."""
    for sentence in _SENTENCE.split(text[:MAX_READ]) if prose else [text[:MAX_READ]]:
        words = _words(sentence)
        for index, word in enumerate(words):
            found = _term(word, words[index + 1] if index + 1 < len(words) else "")
            if found is not None and not (prose and _told_not_to(words[:index])):
                return found
    return None


def _term(word: str, following: str) -> str | None:
    for inside in _INSIDE:
        if inside in word:
            return inside
    if word in _WORDS:
        return word
    if (word, following) in _PAIRS:
        return f"{word} {following}"
    return None


def _told_not_to(before: list[str]) -> bool:
    """A negation followed within two words by a verb of giving: "do not give", "never share"."""
    return any(
        word in _NEGATIONS and any(later in _GIVING for later in before[index + 1 : index + 3])
        for index, word in enumerate(before)
    )


def _what(found: str) -> str:
    return _WHAT.get(found, "a token or other secret")


def refusal(message: str, fields: Iterable[tuple[str, Mapping[str, Any]]]) -> str | None:
    """Why a form of these ``(name, schema)`` fields, asked with ``message``, may not be asked in the
    chat; None when it may. The reason names the field and the rule, never a value."""
    typed = [(name, schema) for name, schema in fields if _typed_in(schema)]
    for name, schema in typed:
        if schema.get("format") == "password":
            return f"the field {name!r} is a password field (format: password)"
        if schema.get("writeOnly") is True:
            return f"the field {name!r} is marked writeOnly (a value sent and never shown: a secret)"
        for place, text in (
            ("name", name),
            ("title", schema.get("title")),
            ("description", schema.get("description")),
        ):
            found = _found(text, prose=place == "description") if isinstance(text, str) else None
            if found is not None:
                return f"the field {name!r} asks for {_what(found)} (its {place} says {found!r})"
    found = _found(message, prose=True) if typed else None
    if found is not None:
        return f"the question asks for {_what(found)} (its message says {found!r})"
    return None


def _typed_in(schema: Mapping[str, Any]) -> bool:
    """A field the person types into: text or a number, not yes/no nor a choice among given values."""
    if "enum" in schema or "oneOf" in schema or "anyOf" in schema or "const" in schema:
        return False
    return schema.get("type", "string") in ("string", "integer", "number")
