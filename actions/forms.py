"""The note form's slot validation. Plain checks; the CRM's own rules decide what is valid."""

import re
from typing import Any

from rasa_sdk import FormValidationAction, Tracker
from rasa_sdk.executor import CollectingDispatcher
from rasa_sdk.types import DomainDict

from crm.errors import ValidationError
from crm.validation import NOTE_MAX_CHARS, validate_email

# Anything shaped like an address inside a longer message ("it's dana@example.com, thanks").
_EMAIL_CANDIDATE = re.compile(r"[^\s<>(),;:\"'\[\]]+@[^\s<>(),;:\"'\[\]]+")
# A note given with the request: "log a call with x@y.com: <note>" (or " - <note>", or quoted).
_NOTE_AFTER_EMAIL = re.compile(
    r"^\s*(?::|-|–|—|saying\b|note\b:?)\s*(?P<note>\S.*)$", re.IGNORECASE | re.DOTALL
)
_QUOTES = "\"'“”‘’"


def find_email(text: str) -> str | None:
    """The first valid address in ``text``, or None."""
    for candidate in _EMAIL_CANDIDATE.findall(text):
        try:
            return validate_email(candidate.rstrip(".!?"))
        except ValidationError:
            continue
    return None


def note_from_request(text: str) -> str | None:
    """The note a person gave in the same message as the request, exactly as typed, or None."""
    match = _EMAIL_CANDIDATE.search(text)
    if match is None:
        return None
    rest = _NOTE_AFTER_EMAIL.match(text[match.end() :])
    if rest is None:
        return None
    note = rest.group("note").strip()
    if len(note) >= 2 and note[0] in _QUOTES and note[-1] in _QUOTES:
        note = note[1:-1]
    return note or None


class ValidateLogNoteForm(FormValidationAction):
    def name(self) -> str:
        return "validate_log_note_form"

    async def extract_note_text(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        latest = tracker.latest_message or {}
        if tracker.get_slot("note_text") or (latest.get("intent") or {}).get("name") != "log_interaction":
            return {}
        note = note_from_request(latest.get("text") or "")
        return {"note_text": note} if note else {}

    def validate_contact_email(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        email = find_email(value) if isinstance(value, str) else None
        if email is None:
            dispatcher.utter_message(response="utter_invalid_email")
        return {"contact_email": email}

    def validate_note_text(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        if not isinstance(value, str) or not value.strip():
            dispatcher.utter_message(response="utter_note_empty")
            return {"note_text": None}
        if len(value) > NOTE_MAX_CHARS:
            dispatcher.utter_message(response="utter_note_too_long")
            return {"note_text": None}
        return {"note_text": value}
