"""The note form's slot validation. Plain checks; the CRM's own rules decide what is valid.

A way out everywhere: "cancel", "stop", "never mind", "forget it" or "quit" as the whole answer to
either question ends the form, clears what it collected and says that nothing was saved; "help"
answers with help and asks the same question again. A message over the reader's limit is refused
before anything here reads it: the question is asked again, or, if it was the request that started
the form, the form ends with nothing collected. Which words count is the plugin's confirmation
reader's (its word file), so one list serves the form and the confirmation.

Several contacts in one request ("log a call with dana@example.com and priya@example.com: ...")
fill ``contact_emails`` with all of them (the skill then writes one note per contact, asked about
in one question); a note that names a date written YYYY-MM-DD fills ``follow_up_date`` (the skill
then offers a follow-up task on that date). Only a date in that form counts: "on Friday" needs a
calendar and a time zone to mean a day, and the skill must quote exactly the date it would write.
"""

import re
from collections.abc import Iterator
from datetime import date
from typing import Any

from crm.errors import ValidationError
from crm.validation import NOTE_MAX_CHARS, validate_email
from rasa_sdk import FormValidationAction, Tracker
from rasa_sdk.events import ActiveLoop, EventType, FollowupAction, SlotSet
from rasa_sdk.executor import CollectingDispatcher
from rasa_sdk.types import DomainDict

from mcp_bridge import confirmation_reader

# A run of characters that may belong to an address: anything but spaces and the punctuation
# around addresses in running text. A run with an "@" inside it is a candidate ("it's
# dana@example.com, thanks"). Found in one pass: no pattern here backtracks, so a long message
# of "@", dots or letters costs time in proportion to its length.
_ADDRESS_RUN = re.compile(r"[^\s<>(),;:\"'\[\]]+")
# A note given with the request: "log a call with x@y.com: <note>" (or " - <note>", or quoted).
_NOTE_AFTER_EMAIL = re.compile(
    r"^\s*(?::|-|–|—|saying\b|note\b:?)\s*(?P<note>\S.*)$", re.IGNORECASE | re.DOTALL
)
_QUOTES = "\"'“”‘’"
# Between two addresses of one list: "x@y.com and z@y.com", "x@y.com, z@y.com", "x@y.com & z@y.com".
_JOINER = re.compile(r"\s*(?:,\s*and|,|and|&)\s*", re.IGNORECASE)
# A date written YYYY-MM-DD, not inside a longer run of digits.
_ISO_DATE = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
# Everything one log collects; a cancelled or new log starts with none of it.
FORM_SLOTS = (
    "contact_email",
    "contact_emails",
    "note_text",
    "follow_up_date",
    "contact_id",
    "contact_name",
    "contact_company",
)


def email_candidates(text: str) -> Iterator[re.Match[str]]:
    """Every run of address characters in ``text`` with an "@" that has a character either side."""
    for run in _ADDRESS_RUN.finditer(text):
        if run.group().find("@", 1, len(run.group()) - 1) != -1:
            yield run


def find_email(text: str) -> str | None:
    """The first valid address in ``text``, or None."""
    for candidate in email_candidates(text):
        try:
            return validate_email(candidate.group().rstrip(".!?"))
        except ValidationError:
            continue
    return None


def _leading_addresses(text: str) -> list[re.Match[str]]:
    """The first address of ``text`` and those joined to it ("x@y.com and z@y.com"), in order."""
    candidates = list(email_candidates(text))
    leading = candidates[:1]
    for candidate in candidates[1:]:
        if _JOINER.fullmatch(text[leading[-1].end() : candidate.start()]) is None:
            break
        leading.append(candidate)
    return leading


def emails_of_request(text: str) -> list[str]:
    """Every valid address of the request's list of contacts, each once, in order."""
    found: list[str] = []
    for candidate in _leading_addresses(text):
        try:
            email = validate_email(candidate.group().rstrip(".!?"))
        except ValidationError:
            continue
        if email.casefold() not in {seen.casefold() for seen in found}:
            found.append(email)
    return found


def date_in_note(text: str) -> str | None:
    """The first real calendar date the note names as YYYY-MM-DD, or None."""
    for match in _ISO_DATE.finditer(text):
        try:
            return date.fromisoformat(match.group(1)).isoformat()
        except ValueError:
            continue
    return None


def note_from_request(text: str) -> str | None:
    """The note a person gave in the same message as the request, exactly as typed, or None."""
    leading = _leading_addresses(text)
    if not leading:
        return None
    rest = _NOTE_AFTER_EMAIL.match(text[leading[-1].end() :])
    if rest is None:
        return None
    note = rest.group("note").strip()
    if len(note) >= 2 and note[0] in _QUOTES and note[-1] in _QUOTES:
        note = note[1:-1]
    return note or None


def _end_form() -> list[EventType]:
    """Clear what the form collected, end it and listen: its "complete" rule must not run the skill."""
    cleared = [SlotSet(slot, None) for slot in (*FORM_SLOTS, "pending_confirmation")]
    return [*cleared, SlotSet("requested_slot", None), ActiveLoop(None), FollowupAction("action_listen")]


class ValidateLogNoteForm(FormValidationAction):
    def name(self) -> str:
        return "validate_log_note_form"

    async def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> list[EventType]:
        asked = tracker.get_slot("requested_slot")
        text = (tracker.latest_message or {}).get("text") or ""
        reader = confirmation_reader()
        too_long = reader.too_long(text)
        if too_long is not None:
            # Refused unread (the reader's limit, MESSAGE_MAX_CHARS): nothing is taken from it. Asked
            # for one slot, the form asks again; a request that starts the form starts nothing.
            dispatcher.utter_message(response="utter_message_too_long", limit=too_long.limit)
            return [SlotSet(asked, None)] if asked else _end_form()
        way_out = reader.way_out(text) if asked else None
        if way_out == "cancel":
            dispatcher.utter_message(response="utter_log_cancelled")
            return _end_form()
        if way_out == "help":
            dispatcher.utter_message(response="utter_help")
            return [SlotSet(asked, None)]  # the form asks the same question again
        events: list[EventType] = await super().run(dispatcher, tracker, domain)
        return events

    def _starting(self, tracker: Tracker) -> bool:
        """This message starts the form: a new request takes all of its own values."""
        latest = tracker.latest_message or {}
        return (
            tracker.get_slot("requested_slot") is None
            and (latest.get("intent") or {}).get("name") == "log_interaction"
        )

    async def extract_contact_email(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        if not self._starting(tracker):
            return {}
        # Never an address left from an earlier, abandoned log.
        return {"contact_email": find_email((tracker.latest_message or {}).get("text") or "")}

    async def extract_note_text(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        if not self._starting(tracker):
            return {}
        # Never a note left from an earlier, abandoned log.
        return {"note_text": note_from_request((tracker.latest_message or {}).get("text") or "")}

    def validate_contact_email(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        if value is None:
            return {"contact_email": None}  # not given yet: the form asks
        email = find_email(value) if isinstance(value, str) else None
        if email is None:
            dispatcher.utter_message(response="utter_invalid_email")
            return {"contact_email": None}
        if self._starting(tracker):
            # A request naming several contacts: one note each (the skill's for_each over them).
            emails = emails_of_request((tracker.latest_message or {}).get("text") or "")
            return {"contact_email": email, "contact_emails": emails if len(emails) > 1 else None}
        return {"contact_email": email}

    def validate_note_text(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> dict[str, Any]:
        if value is None:
            return {"note_text": None}  # not given yet: the form asks
        if not isinstance(value, str) or not value.strip():
            dispatcher.utter_message(response="utter_note_empty")
            return {"note_text": None}
        if len(value) > NOTE_MAX_CHARS:
            dispatcher.utter_message(response="utter_note_too_long")
            return {"note_text": None}
        return {"note_text": value, "follow_up_date": date_in_note(value)}
