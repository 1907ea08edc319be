"""The reader's answers: a closed set of plain data, what :mod:`mcp_bridge.reading.reader` reads a
message as.

An answer to a question about one call (:data:`Answer`): :class:`Yes`, :class:`YesThisTime` (a yes that
refuses a standing permission), :class:`Grant` (a yes that also gives one), :class:`No`, :class:`Edit`,
:class:`Redirect`, :class:`Other` (a message for the bot's own handling), :class:`Unclear` and
:class:`TooLong` (over the reader's limit, never read). An answer to a numbered list of calls
(:data:`CallsAnswer`): :class:`Choices` (a yes or no for each call), :class:`EditCall`, or
:class:`Other`, :class:`Unclear`, :class:`TooLong`. :class:`NluOpinion` is the NLU's reading of the same
message, a second opinion the reader may use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Answer",
    "CallsAnswer",
    "Choices",
    "Edit",
    "EditCall",
    "Grant",
    "NluOpinion",
    "No",
    "Other",
    "Redirect",
    "TooLong",
    "Unclear",
    "Yes",
    "YesThisTime",
]


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
