"""The scripted conversations: phrasings from conversations.yml, expected replies from domain.yml.

A :class:`Script` is what a person types, turn by turn, with the exact reply the assistant must
give to each. The opening ends with the confirmation question (or the "not found" answer); the
answer is the "yes" or "no" that follows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.live.proof.store import Contact

HERE = Path(__file__).resolve().parent
CONVERSATIONS = HERE / "conversations.yml"
DOMAIN = HERE.parents[2] / "examples" / "crm_bot" / "domain.yml"


@dataclass(frozen=True)
class Phrasings:
    contacts: tuple[str, ...]
    absent_contacts: tuple[str, ...]
    requests: tuple[str, ...]
    email_replies: tuple[str, ...]
    notes: tuple[str, ...]
    yes: tuple[str, ...]
    no: tuple[str, ...]


def load_phrasings(path: Path = CONVERSATIONS) -> Phrasings:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a mapping")

    def strings(key: str) -> tuple[str, ...]:
        values = document.get(key)
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise ValueError(f"{path}: {key!r} must be a non-empty list of strings")
        return tuple(values)

    phrasings = Phrasings(
        contacts=strings("contacts"),
        absent_contacts=strings("absent_contacts"),
        requests=strings("requests"),
        email_replies=strings("email_replies"),
        notes=strings("notes"),
        yes=strings("yes"),
        no=strings("no"),
    )
    for request in phrasings.requests:
        if "{note}" in request and (
            "{email}" not in request or request.index("{note}") < request.index("{email}")
        ):
            raise ValueError(
                f"{path}: {request!r}: the assistant takes a note in the request only after the email"
            )
    for note in phrasings.notes:
        if "{" in note or "}" in note:
            raise ValueError(f"{path}: {note!r}: notes must not contain braces (response templates use them)")
    for reply in phrasings.email_replies:
        if "{email}" not in reply:
            raise ValueError(f"{path}: email reply {reply!r} has no {{email}}")
    return phrasings


class Responses:
    """The domain's response texts, filled the way Rasa fills them (`{name}` placeholders)."""

    def __init__(self, domain: Path = DOMAIN) -> None:
        document = yaml.safe_load(domain.read_text(encoding="utf-8"))
        self._texts: dict[str, str] = {
            name: str(variants[0]["text"]) for name, variants in document["responses"].items()
        }

    def text(self, name: str, **values: Any) -> str:
        text = self._texts[name]
        for key, value in values.items():
            text = text.replace("{" + key + "}", str(value))
        return text


@dataclass(frozen=True)
class Turn:
    says: str
    expect: str
    # False for text a form takes as it is (the note, the address): its intent is beside the point.
    by_intent: bool = True


@dataclass(frozen=True)
class Script:
    label: str
    email: str
    note: str
    # None when the address has no contact: the opening then ends with "not found".
    contact: Contact | None
    opening: tuple[Turn, ...]
    answer: Turn | None
    # True when the answer is a "yes", False for a "no"; meaningless without an answer.
    confirms: bool = False


def _fill(template: str, email: str, note: str) -> str:
    return template.replace("{email}", email).replace("{note}", note)


class ScriptBook:
    """Builds scripts from the phrasings; conversation i uses request i, note i, contact i, answer i."""

    def __init__(
        self, phrasings: Phrasings, responses: Responses, contacts: dict[str, Contact | None]
    ) -> None:
        unknown = [email for email in phrasings.contacts if contacts.get(email) is None]
        known = [email for email in phrasings.absent_contacts if contacts.get(email) is not None]
        if unknown or known:
            raise ValueError(
                f"{CONVERSATIONS}: 'contacts' must be seeded contacts and 'absent_contacts' must not be: "
                f"not in the store: {unknown or 'none'}; in the store: {known or 'none'}"
            )
        self.p = phrasings
        self.r = responses
        self.contacts = contacts

    def script(
        self, label: str, index: int, *, email: str, note: str, answer: str | None, confirms: bool = True
    ) -> Script:
        """One conversation: request phrasing ``index`` for ``email`` and ``note``, then ``answer``."""
        p, r = self.p, self.r
        request = p.requests[index % len(p.requests)]
        contact = self.contacts.get(email)
        if contact is not None:
            final = r.text("utter_confirm_note", contact_name=contact.name, arg_text=note)
        else:
            final = r.text("utter_contact_not_found", arg_email=email)
        turns: list[Turn] = []
        has_note = "{note}" in request
        if "{email}" not in request:
            turns.append(Turn(_fill(request, email, note), r.text("utter_ask_contact_email")))
            reply = p.email_replies[index % len(p.email_replies)]
            turns.append(Turn(_fill(reply, email, note), r.text("utter_ask_note_text"), by_intent=False))
        elif not has_note:
            turns.append(Turn(_fill(request, email, note), r.text("utter_ask_note_text")))
        if has_note:
            turns.append(Turn(_fill(request, email, note), final))
        else:
            turns.append(Turn(note, final, by_intent=False))
        answer_turn = None
        if answer is not None and contact is not None:
            expect = (
                r.text("utter_note_saved", contact_name=contact.name)
                if confirms
                else r.text("utter_note_cancelled")
            )
            answer_turn = Turn(answer, expect)
        return Script(label, email, note, contact, tuple(turns), answer_turn, confirms)

    def count(self, *lists: tuple[str, ...]) -> int:
        return max(len(items) for items in lists)

    def confirming(self) -> list[Script]:
        p = self.p
        n = self.count(p.requests, p.notes, p.yes)
        return [
            self.script(
                f"yes #{i + 1}",
                i,
                email=p.contacts[i % len(p.contacts)],
                note=p.notes[i % len(p.notes)],
                answer=p.yes[i % len(p.yes)],
                confirms=True,
            )
            for i in range(n)
        ]

    def denying(self) -> list[Script]:
        p = self.p
        n = self.count(p.requests, p.notes, p.no)
        return [
            self.script(
                f"no #{i + 1}",
                i,
                email=p.contacts[i % len(p.contacts)],
                note=p.notes[i % len(p.notes)],
                answer=p.no[i % len(p.no)],
                confirms=False,
            )
            for i in range(n)
        ]

    def absent(self) -> list[Script]:
        """One per absent address, spreading them over the request phrasings."""
        p = self.p
        step = max(1, len(p.requests) // len(p.absent_contacts))
        return [
            self.script(
                f"absent #{j + 1}",
                j * step,
                email=email,
                note=p.notes[(j * step) % len(p.notes)],
                answer=None,
            )
            for j, email in enumerate(p.absent_contacts)
        ]

    def asked_indexes(self) -> list[int]:
        """Request phrasings that make the assistant ask for the note (any note text is then safe)."""
        return [i for i, request in enumerate(self.p.requests) if "{note}" not in request]

    def parallel(self, count: int, tag: str) -> list[Script]:
        """``count`` conversations with notes unique to this run, alternately confirmed and denied.

        They use only request phrasings that ask for the note: a tagged note inside the request
        itself would be a different message for the NLU from the ones checked in sequence.
        """
        p, asked = self.p, self.asked_indexes()
        scripts = []
        for i in range(count):
            confirms, pair = i % 2 == 0, i // 2  # a "yes" and a "no" for each pair, on one contact
            answers = p.yes if confirms else p.no
            note = f"{p.notes[i % len(p.notes)]} (parallel {i + 1} of {count}, {tag})"
            scripts.append(
                self.script(
                    f"parallel #{i + 1}",
                    asked[i % len(asked)],
                    email=p.contacts[pair % len(p.contacts)],
                    note=note,
                    answer=answers[pair % len(answers)],
                    confirms=confirms,
                )
            )
        return scripts
