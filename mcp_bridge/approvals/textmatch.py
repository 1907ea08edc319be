"""Text conditions nobody can spell around: does a text name one of a rule's terms?

A second approver's ``when: {argument: text, contains_any: [refund, write-off, credit note]}``
(:mod:`mcp_bridge.skills.files`) is matched by :func:`names_any`, on a *skeleton* of the text and of each
term, never on the text as written. The skeleton, in this order:

1. Unicode NFKC (fullwidth ``ｒｅｆｕｎｄ``, mathematical and circled letters, ligatures become plain);
2. format characters (category Cf: soft hyphen, zero-width space and joiners, word joiner, BOM,
   bidi marks) removed;
3. look-alike letters mapped to the Latin letter they are read as (Cyrillic ``а е о р с``, Greek
   ``ο ρ ν``, the digits 0 and 1, ...: the table :file:`mcp_bridge/approvals/lookalikes.yml`, from Unicode's
   confusables data), then casefolded (``l`` and ``1`` read as ``i``), then accents and other
   combining marks removed;
4. everything that is not a letter or a digit (spaces, hyphens and dashes, underscores, dots,
   punctuation, line breaks) removed: ``write off``, ``write-off``, ``write_off``, ``write‐off``,
   ``w.r.i.t.e o.f.f`` and ``writeoff`` are one skeleton, ``writeoff``.

A term matches when its skeleton occurs anywhere in the text's skeleton, in one of its inflected
forms: a word's regular endings come from the skeleton itself (``refund`` occurs in ``refunds``,
``refunded``, ``non-refundable``); a word ending in ``e`` also matches without it (``note``:
``noting``), and a word that is not the term's last also matches in its ``-s``, ``-ed``, ``-ing``
and ``-en`` forms, with the last consonant doubled or not, and in the irregular forms listed
below (``write off``: ``writes off``, ``writing off``, ``written off``, ``wrote off``).

Matching is deliberately generous: when in doubt a call is held for a supervisor. It only
over-matches (``credit nothing`` holds for ``credit note``; a word inside another word holds), never
the other way round. It is linear in the text: one pass to make the skeleton, then a fixed number
of substring searches for needles of at most :data:`MAX_TERM_CHARS` characters; no patterns. A text
over :data:`MAX_TEXT_CHARS` characters is not read at all: it is held. A term with no letter or
digit (``€``) is looked for in the text after steps 1 to 3 instead.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from mcp_bridge.config.yamlfile import load_yaml

__all__ = ["MAX_TERM_CHARS", "MAX_TEXT_CHARS", "forms", "names_any", "skeleton"]

# A longer text is held unread (fail safe); far longer than any note a person types.
MAX_TEXT_CHARS = 100_000
# A term's skeleton is at most this long (skills.py limits what a skill author writes to 200 chars).
MAX_TERM_CHARS = 200
# Irregular forms of words a rule may use, by the word's skeleton.
IRREGULAR: dict[str, tuple[str, ...]] = {
    "write": ("wrote", "written", "writ"),
    "pay": ("paid",),
    "give": ("gave", "given"),
    "take": ("took", "taken"),
    "send": ("sent",),
    "make": ("made",),
}
_LOOKALIKES = Path(__file__).with_name("lookalikes.yml")
# Latin letters read alike, one for both after casefolding: "credlt" and "cred1t" are "credit".
_ALIKE = str.maketrans({"l": "i"})


@functools.cache
def _table() -> dict[int, str]:
    """Look-alike code point -> the Latin letter it is read as (lookalikes.yml)."""
    document = load_yaml(_LOOKALIKES)
    table: dict[int, str] = {}
    for latin, chars in document.items():
        for char in str(chars):
            table[ord(char)] = str(latin)
    return table


def _plain(text: str) -> str:
    """Steps 1 to 3 of the skeleton: NFKC, no format characters, look-alikes mapped, casefolded,
    no combining marks."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    text = text.translate(_table()).casefold().translate(_ALIKE)
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def skeleton(text: str) -> str:
    """The text's skeleton: :func:`_plain`, then only its letters and digits."""
    return "".join(c for c in _plain(text) if c.isalnum())


def _words(term: str) -> list[str]:
    """The term's words, each a skeleton: split where the plain term has no letter or digit."""
    words, current = [], []
    for c in _plain(term):
        if c.isalnum():
            current.append(c)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words


def _word_forms(word: str, last: bool) -> set[str]:
    """The needles one word of a term is found by (see the module's rule)."""
    stem = word[:-1] if word.endswith("e") and len(word) > 3 else word
    found = {word, stem}
    if last:  # anything after it is in the text already: refund -> refunds, refunded
        return found
    for base in {word, stem}:
        for ending in ("s", "es", "d", "ed", "ing", "en", "n"):
            found.add(base + ending)
    if stem and stem[-1] not in "aeiou":
        for ending in ("ed", "ing", "en"):
            found.add(stem + stem[-1] + ending)  # written, stopped
    found.update(IRREGULAR.get(word, ()))
    return found


@functools.lru_cache(maxsize=1024)
def forms(term: str) -> frozenset[str]:
    """Every skeleton that counts as ``term`` (its words' forms, joined); empty for a term with
    no letter or digit."""
    words = _words(term)[:4]  # skills.py keeps a term to 200 characters; four words is plenty
    if not words:
        return frozenset()
    joined = {""}
    for index, word in enumerate(words):
        word_forms = _word_forms(word, index == len(words) - 1)
        joined = {start + form for start in joined for form in word_forms}
    return frozenset(form[:MAX_TERM_CHARS] for form in joined if form)


def names_any(text: str, terms: Iterable[str]) -> bool:
    """True when ``text`` names one of ``terms`` by the module's rule, or is too long to read."""
    if len(text) > MAX_TEXT_CHARS:
        return True
    plain = _plain(text)
    body = "".join(c for c in plain if c.isalnum())
    for term in terms:
        found = forms(term)
        if found and any(form in body for form in found):
            return True
        # A term of symbols only ("€") has no skeleton: it is found in the plain text as it is.
        if not found and _plain(term).strip() and _plain(term).strip() in plain:
            return True
    return False
