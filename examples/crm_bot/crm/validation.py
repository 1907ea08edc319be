"""The input rules of the CRM, in one place so the REST API and the store agree on them."""

from __future__ import annotations

import re
from datetime import date

from crm.errors import ValidationError

EMAIL_MAX_CHARS = 254  # RFC 5321 limit on a forward path
NOTE_MAX_CHARS = 4000
IDEMPOTENCY_KEY_MAX_CHARS = 200
AUTHOR_MAX_CHARS = 200
NOTES_LIMIT_DEFAULT = 5
NOTES_LIMIT_MAX = 100

# Deliberately plain: an ASCII local part, then a dotted host name whose labels neither start nor
# end with a hyphen. It refuses what cannot be an address without pretending to implement RFC 5322.
_EMAIL_RE = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+"
)


def validate_email(email: object) -> str:
    """Return the address without surrounding whitespace, or raise ValidationError."""
    if not isinstance(email, str):
        raise ValidationError("The email address must be text.")
    candidate = email.strip()
    if not candidate:
        raise ValidationError("The email address is empty.")
    if len(candidate) > EMAIL_MAX_CHARS:
        raise ValidationError(f"The email address is longer than {EMAIL_MAX_CHARS} characters.")
    if _EMAIL_RE.fullmatch(candidate) is None:
        raise ValidationError(f"{candidate!r} is not a valid email address.")
    return candidate


def validate_note_text(text: object) -> str:
    """Return the note text unchanged (it is stored verbatim), or raise ValidationError.

    The length limit applies to the text as stored, surrounding whitespace included.
    """
    if not isinstance(text, str):
        raise ValidationError("The note text must be a string.")
    if not text.strip():
        raise ValidationError("The note is empty; write what should go on the timeline.")
    if len(text) > NOTE_MAX_CHARS:
        raise ValidationError(f"The note has {len(text)} characters; the limit is {NOTE_MAX_CHARS}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            "The note contains a character that cannot be stored (an unpaired surrogate)."
        ) from None
    if "\x00" in text:
        # PostgreSQL's text type cannot hold it; refused on every engine so both keep the same notes.
        raise ValidationError("The note contains a NUL character, which cannot be stored.")
    return text


def validate_idempotency_key(key: object) -> str | None:
    """Return the key unchanged (None when absent), or raise ValidationError."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise ValidationError("The idempotency key must be a string.")
    if not key.strip():
        raise ValidationError("The idempotency key is empty.")
    if "\x00" in key:
        raise ValidationError("The idempotency key contains a NUL character.")
    if len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise ValidationError(f"The idempotency key is longer than {IDEMPOTENCY_KEY_MAX_CHARS} characters.")
    return key


# Printable characters only: an author is shown in a chat line and written to logs.
_AUTHOR_RE = re.compile(r"[^\x00-\x1f\x7f]+")


def validate_author(author: object) -> str | None:
    """Who writes (an access token's subject, say): None, or printable text of at most
    AUTHOR_MAX_CHARS characters without surrounding whitespace; else ValidationError."""
    if author is None:
        return None
    if not isinstance(author, str):
        raise ValidationError("The author must be text.")
    name = author.strip()
    if not name:
        return None
    if len(name) > AUTHOR_MAX_CHARS:
        raise ValidationError(f"The author is longer than {AUTHOR_MAX_CHARS} characters.")
    if _AUTHOR_RE.fullmatch(name) is None:
        raise ValidationError("The author contains a control character.")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("The author contains a character that cannot be stored.") from None
    return name


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def validate_due_date(due: object) -> str:
    """Return a calendar date written YYYY-MM-DD, unchanged, or raise ValidationError."""
    if not isinstance(due, str) or _ISO_DATE.fullmatch(due) is None:
        raise ValidationError("The due date must be a date written YYYY-MM-DD.")
    try:
        date.fromisoformat(due)
    except ValueError:
        raise ValidationError(f"{due} is not a date in the calendar.") from None
    return due


def validate_task_title(title: object) -> str:
    """Return the task's title unchanged (stored verbatim, like a note), or raise ValidationError."""
    try:
        return validate_note_text(title)
    except ValidationError as exc:
        raise ValidationError(str(exc).replace("note", "task title")) from None


def validate_limit(limit: object) -> int:
    """Return how many notes to list, or raise ValidationError."""
    # bool is an int in Python, but `limit=True` is a caller's mistake, not "1".
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValidationError("The limit must be a whole number.")
    if not 1 <= limit <= NOTES_LIMIT_MAX:
        raise ValidationError(f"The limit must be between 1 and {NOTES_LIMIT_MAX}.")
    return limit
