"""The CRM tools, written once: registered as local tools in the action server and served by
`crm.mcp_server` over MCP, with the same names, arguments and result keys.

Each tool reaches the CRM only through its REST API at `CRM_URL` (read on every call) and never
raises for a failure it can name: the result says `ok: false` and `error` says what happened in
words a person can read. Results are pydantic models so the MCP server publishes an output
schema and clients get `structuredContent`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from crm import config
from crm.errors import CRMError, ValidationError
from crm.rest import AUTHOR_HEADER
from crm.validation import (
    NOTE_MAX_CHARS,
    NOTES_LIMIT_DEFAULT,
    NOTES_LIMIT_MAX,
    validate_due_date,
    validate_email,
    validate_idempotency_key,
    validate_limit,
    validate_note_text,
    validate_task_title,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

CRM_UNREACHABLE = "The CRM could not be reached, so nothing was saved."
# Used only when a write was sent but no answer came back: the CRM may have stored it.
CRM_NO_ANSWER = "The CRM did not answer, so it is not known whether the note was saved."

_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=3.0, sock_read=10.0)


class ToolResult(BaseModel):
    """What every tool returns: `ok`, and `error` (a message for a person) when not ok."""

    model_config = ConfigDict(extra="allow")

    ok: bool = Field(description="True when the tool did its job (an absent contact is still ok).")
    error: str | None = Field(default=None, description="What went wrong, for a person; null when ok.")


class ContactResult(ToolResult):
    found: bool = Field(default=False, description="True when a contact has this email address.")
    contact_id: int | None = None
    email: str | None = None
    name: str | None = None
    company: str | None = None


_AUTHOR = "Who wrote it, as the CRM recorded it (the signed-in person or the service); null if unknown."


class NoteResult(ToolResult):
    note_id: int | None = None
    contact_id: int | None = None
    text: str | None = None
    created_at: str | None = Field(default=None, description="When the note was stored (ISO 8601, UTC).")
    author: str | None = Field(default=None, description=_AUTHOR)


class TaskResult(ToolResult):
    task_id: int | None = None
    contact_id: int | None = None
    title: str | None = None
    due_date: str | None = Field(default=None, description="When the task is due (YYYY-MM-DD).")
    created_at: str | None = Field(default=None, description="When the task was stored (ISO 8601, UTC).")
    author: str | None = Field(default=None, description=_AUTHOR)


UNKNOWN_AUTHOR = "unknown"


class NoteItem(BaseModel):
    note_id: int
    text: str
    created_at: str
    author: str = Field(
        description=f"Who wrote it, as the CRM recorded it; {UNKNOWN_AUTHOR!r} when it recorded nobody."
    )


class NotesResult(ToolResult):
    contact_id: int | None = None
    notes: list[NoteItem] = Field(default_factory=list, description="Newest first.")


class _Client:
    """One aiohttp session for all tool calls, bound to the event loop it was made in.

    An aiohttp session cannot be used from another loop, and tests (or a restarted server) run
    tools in more than one loop, so a session is replaced when the running loop changes.
    """

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self.session is None or self.session.closed or self.loop is not loop:
            if self.session is not None and not self.session.closed:
                # Made in another loop, so it cannot be closed from this one; detaching marks it
                # closed without touching that loop.
                self.session.detach()
            self.session = aiohttp.ClientSession(timeout=_TIMEOUT)
            self.loop = loop
        return self.session

    async def close(self) -> None:
        session, loop = self.session, self.loop
        self.session, self.loop = None, None
        if session is None or session.closed:
            return
        if loop is asyncio.get_running_loop():
            await session.close()
        else:
            session.detach()


_client = _Client()


async def close_client() -> None:
    """Close the shared HTTP session (call on shutdown); the next tool call opens a new one."""
    await _client.close()


class _Refused(CRMError):
    """The call did not get a usable answer from the CRM; the message says why."""


async def _call(
    method: str,
    path: str,
    *,
    params: dict[str, str] | None = None,
    body: Any = None,
    author: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Send one request to the CRM REST API, on behalf of ``author`` if named; returns (status,
    decoded JSON body)."""
    url = config.crm_url() + path
    writes = method != "GET"
    headers = {AUTHOR_HEADER: author} if author is not None else {}
    token = config.api_token()
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with _client.get().request(method, url, params=params, json=body, headers=headers) as response:
            status = response.status
            try:
                payload = await response.json(content_type=None)
            except ValueError:
                payload = None
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, aiohttp.InvalidURL) as exc:
        log.warning("CRM at %s unreachable: %s", config.crm_url(), type(exc).__name__)
        raise _Refused(CRM_UNREACHABLE) from exc
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        log.warning(
            "CRM at %s gave no answer to %s %s: %s", config.crm_url(), method, path, type(exc).__name__
        )
        raise _Refused(CRM_NO_ANSWER if writes else CRM_UNREACHABLE) from exc
    if status >= 500 or not isinstance(payload, dict):
        raise _Refused(f"The CRM gave an answer that could not be used (HTTP {status}).")
    return status, payload


def _error_message(payload: Any, status: int) -> str:
    message = payload.get("error") if isinstance(payload, dict) else None
    return (
        message if isinstance(message, str) and message else f"The CRM refused the request (HTTP {status})."
    )


_INT = TypeAdapter(int)
_STR = TypeAdapter(str)


def _coerce(adapter: TypeAdapter[_T], value: object, message: str) -> _T:
    """Convert an argument the way the MCP server's pydantic validation does ("3" and 3.0 are 3)."""
    try:
        return adapter.validate_python(value)
    except PydanticValidationError:
        raise ValidationError(message) from None


def _contact_id(value: object) -> int:
    contact_id = _coerce(_INT, value, "The contact id must be a positive whole number.")
    if contact_id < 1:
        raise ValidationError("The contact id must be a positive whole number.")
    return contact_id


# Argument types, shared with crm.mcp_server so both publish the same input schema.
EmailArg = Annotated[str, Field(description="The contact's email address; case does not matter.")]
ContactIdArg = Annotated[int, Field(description="The contact's id, as found by find_contact_by_email.")]
NoteTextArg = Annotated[
    str,
    Field(
        description=f"The note, stored verbatim; not blank, at most {NOTE_MAX_CHARS} characters.",
        max_length=NOTE_MAX_CHARS,
    ),
]
IdempotencyKeyArg = Annotated[
    str | None,
    Field(
        description=(
            "Optional. A retried call with the same key and arguments returns the first note, never a"
            " second; the key with another contact or text is refused."
        )
    ),
]
TaskTitleArg = Annotated[
    str,
    Field(
        description=f"What to follow up on, stored verbatim; at most {NOTE_MAX_CHARS} characters.",
        max_length=NOTE_MAX_CHARS,
    ),
]
DueDateArg = Annotated[str, Field(description="When the task is due, written YYYY-MM-DD.")]
LimitArg = Annotated[
    int, Field(description=f"How many notes to return, newest first (1 to {NOTES_LIMIT_MAX}).")
]


async def find_contact_by_email(email: EmailArg) -> ContactResult:
    """Look up a CRM contact by email. No such contact is ok (found false); an invalid address is an error."""
    # Arguments are checked here with the rules the CRM applies (crm.validation), so a wrong
    # value from a caller (None from an empty slot, say) is an error result, never an exception.
    try:
        address = validate_email(_coerce(_STR, email, "The email address must be text."))
        status, payload = await _call("GET", "/contacts", params={"email": address})
    except CRMError as refused:
        return ContactResult(ok=False, error=str(refused))
    if status == 200:
        return ContactResult(ok=True, found=True, **payload)
    if status == 404:
        return ContactResult(ok=True, found=False)
    return ContactResult(ok=False, error=_error_message(payload, status))


async def add_timeline_note(
    contact_id: ContactIdArg, text: NoteTextArg, idempotency_key: IdempotencyKeyArg = None
) -> NoteResult:
    """Add a note to a contact's timeline in the CRM. This writes to the system of record."""
    return await write_note(contact_id, text, idempotency_key)


async def write_note(
    contact_id: object, text: object, idempotency_key: object = None, *, author: str | None = None
) -> NoteResult:
    """add_timeline_note on behalf of ``author``: not a tool, since who writes is never an argument a
    caller chooses (crm.mcp_server passes the verified access token's subject)."""
    try:
        target = _contact_id(contact_id)
        body: dict[str, Any] = {"text": validate_note_text(text)}
        if (key := validate_idempotency_key(idempotency_key)) is not None:
            body["idempotency_key"] = key
        status, payload = await _call("POST", f"/contacts/{target}/notes", body=body, author=author)
    except CRMError as refused:
        return NoteResult(ok=False, error=str(refused))
    if status in (200, 201):
        return NoteResult(ok=True, **payload)
    return NoteResult(ok=False, error=_error_message(payload, status))


async def create_follow_up_task(
    contact_id: ContactIdArg,
    title: TaskTitleArg,
    due_date: DueDateArg,
    idempotency_key: IdempotencyKeyArg = None,
) -> TaskResult:
    """Create a follow-up task on a contact, due on a date. This writes to the system of record."""
    return await write_task(contact_id, title, due_date, idempotency_key)


async def write_task(
    contact_id: object,
    title: object,
    due_date: object,
    idempotency_key: object = None,
    *,
    author: str | None = None,
) -> TaskResult:
    """create_follow_up_task on behalf of ``author`` (as :func:`write_note`)."""
    try:
        target = _contact_id(contact_id)
        body: dict[str, Any] = {"title": validate_task_title(title), "due_date": validate_due_date(due_date)}
        if (key := validate_idempotency_key(idempotency_key)) is not None:
            body["idempotency_key"] = key
        status, payload = await _call("POST", f"/contacts/{target}/tasks", body=body, author=author)
    except CRMError as refused:
        return TaskResult(ok=False, error=str(refused))
    if status in (200, 201):
        return TaskResult(ok=True, **payload)
    return TaskResult(ok=False, error=_error_message(payload, status))


async def list_timeline_notes(contact_id: ContactIdArg, limit: LimitArg = NOTES_LIMIT_DEFAULT) -> NotesResult:
    """List the most recent notes on a contact's timeline, newest first."""
    try:
        target = _contact_id(contact_id)
        count = validate_limit(_coerce(_INT, limit, "The limit must be a whole number."))
        status, payload = await _call("GET", f"/contacts/{target}/notes", params={"limit": str(count)})
    except CRMError as refused:
        return NotesResult(ok=False, error=str(refused))
    if status == 200:
        notes = [
            NoteItem(
                note_id=n["note_id"],
                text=n["text"],
                created_at=n["created_at"],
                author=n.get("author") or UNKNOWN_AUTHOR,
            )
            for n in payload["notes"]
        ]
        return NotesResult(ok=True, contact_id=payload["contact_id"], notes=notes)
    return NotesResult(ok=False, error=_error_message(payload, status))


TOOLS: dict[str, Callable[..., Awaitable[ToolResult]]] = {
    "find_contact_by_email": find_contact_by_email,
    "add_timeline_note": add_timeline_note,
    "list_timeline_notes": list_timeline_notes,
    "create_follow_up_task": create_follow_up_task,
}
READ_ONLY_TOOLS = frozenset({"find_contact_by_email", "list_timeline_notes"})
