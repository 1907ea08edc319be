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

The words live in a data file (``confirmation_words.yml``, English); a bot adds its own (other
languages) with :func:`~mcp_bridge.reading.words.load_words`. An entry may be a phrase or a rule with
choices ("(don't|do not) ask [me] again", :class:`~mcp_bridge.reading.words.Rule`), matched where it
stands in linear time. A word the reader does not know makes an answer unclear, so an unlisted language
is asked again, never written.

The answers are plain data (:mod:`mcp_bridge.reading.answers`); the words and their rules are
:mod:`mcp_bridge.reading.words`'s, normalising text :mod:`mcp_bridge.reading.text`'s, and the grammar of a
numbered list's answers :mod:`mcp_bridge.reading.choices`'s.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from mcp_bridge.contract import AFFIRM_INTENT, DENY_INTENT
from mcp_bridge.observability import tracing
from mcp_bridge.reading.answers import (
    Answer,
    CallsAnswer,
    Choices,
    Edit,
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
from mcp_bridge.reading.choices import PerCall
from mcp_bridge.reading.text import (
    DIGITS,
    DRAWN_OUT,
    Phrase,
    address_spans,
    contains,
    squeeze,
    swapped,
    tokenise,
    tokenise_choices,
    tone,
)
from mcp_bridge.reading.words import PhraseIndex, Words, covered, load_words

__all__ = ["DEFAULT_MAX_CHARS", "ConfirmationReader"]

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
        self._squeezed_yes = {squeeze(word): word for word in self._single_yes}
        self._squeezed_no = {squeeze(word): word for word in self._single_no}
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
        self._phrases = PhraseIndex([(label, phrases) for label, _, phrases in lists], rules)
        self._cancel = PhraseIndex([("hit", self.words.cancel), ("polite", self.words.polite)])
        self._help = PhraseIndex([("hit", self.words.help), ("polite", self.words.polite)])
        redirect_words = self.words.redirect | self.words.redirect_also | self.words.yes | self.words.no
        self._redirect_words = PhraseIndex([("hit", redirect_words), ("polite", self.words.polite)])
        # "change it to: <new text>" and the like, one pattern per marker, in the word lists' order.
        self._edit_patterns = tuple(
            _edit_pattern(marker, needs_colon)
            for marker, needs_colon in [(m, False) for m in self.words.edit]
            + [(m, True) for m in self.words.edit_with_colon]
        )

        # The per-call grammar (a numbered list's answers), with these words.
        self._per_call = PerCall(self.words)

    def too_long(self, text: str) -> TooLong | None:
        """``text`` is over the limit: a bot's own question (a form) refuses it unread too."""
        return TooLong(len(text), self.max_chars) if len(text) > self.max_chars else None

    def asks_or_requests(self, text: str) -> bool:
        """``text`` is a question ("?", in any script the reader knows) or starts a new request
        ("log a call ..."): what a reply that is plainly not an answer looks like."""
        tokens = tokenise(text[: self.max_chars])
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
        edit = self._per_call.edit_call(stripped, count)
        if edit is not None:
            return edit
        # As one answer to all of them. No call's numbers count as known: "yes 1" names a call.
        whole = self._read(stripped, nlu, {})
        if isinstance(whole, Grant):
            return Unclear("a permission for several calls at once")
        if isinstance(whole, YesThisTime):
            return Unclear("a yes for this time only, to several calls")  # "only this one" picks one
        if isinstance(whole, Yes) and any(
            label in ("pointing", "go_ahead") for label, _ in self._label(tokenise(stripped), {})
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
            return per_call
        return whole

    def _choices(self, text: str, count: int, names: Sequence[str]) -> Choices | Unclear:
        """The per-call reading of ``text`` (:mod:`mcp_bridge.reading.choices`), unless it asks, or its
        yes-words or their tone sound ironic."""
        if "?" in tokenise_choices(text):
            return Unclear("a question")
        found = self._label(tokenise(text), {})
        if any(label == "ironic" for label, _ in found):
            return Unclear("yes-words that sound ironic")
        doubt = tone(text)
        if doubt:
            return Unclear(doubt)
        return self._per_call.read(text, count, names)

    def way_out(self, text: str) -> Literal["cancel", "help"] | None:
        """For a bot's own questions (a form): is the whole answer a "cancel" or a "help"?"""
        if self.too_long(text):
            return None
        tokens = tokenise(text)
        if tokens and covered(tokens, self._cancel):
            return "cancel"
        if tokens and covered(tokens, self._help):
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
        tokens = tokenise(text)
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
            doubt = self._irony(found) or tone(text)
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
        rest = tokenise(" ".join(pieces))
        if "?" not in rest and self._is_redirect(rest):
            return Redirect(next(iter(addresses)))
        if self._nlu_says_other(nlu):
            return Other()
        return Unclear("an email address without a plain request to move the note")

    def _is_redirect(self, tokens: list[str]) -> bool:
        """A redirecting word, and nothing but the few words a redirect is made of."""
        if not any(contains(tokens, phrase) for phrase in self.words.redirect):
            return False
        return covered(tokens, self._redirect_words, need_hit=False)

    def _edit(self, text: str, words: set[str]) -> Edit | Unclear | None:
        """ "change it to: <new text>" and the like; the new text exactly as typed."""
        for marker, pattern in self._edit_patterns:
            if marker[0] not in words:
                continue  # the marker's first word is nowhere in the text: no need to look for it
            match = pattern.search(text)
            if match is None:
                continue
            if any(t not in self.words.edit_lead_in for t in tokenise(text[: match.start()])):
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
        known_numbers = set(DIGITS.findall(" ".join(str(v) for v in call.values())))
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
        return word in self.words.drawn_out and DRAWN_OUT.search(typed) is not None

    def _slip_of(self, word: str) -> str | None:
        """The one-word no or yes that ``word`` is a common slip of ("nooo", "yess", "yse"), or None."""
        if len(word) < 3 or not word.isalpha():
            return None
        squeezed = squeeze(word)
        if len(squeezed) > self._longest_single:
            return None  # longer than any one-word yes or no, even squeezed: not a slip of one
        swaps = set(swapped(word)) if len(word) <= self._longest_single else set()
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


def _edit_pattern(marker: str, needs_colon: bool) -> tuple[Phrase, re.Pattern[str]]:
    words = r"\s+".join(re.escape(part) for part in marker.split())
    tail = r"\s*:\s*" if needs_colon else r"\s*:?\s*"
    return tuple(marker.split()), re.compile(rf"\b{words}{tail}", re.IGNORECASE)


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
