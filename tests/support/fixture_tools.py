"""Fixture tools for the plugin's own tests: a small in-memory notebook, served both ways.

The same store is reached as local tools (:func:`local_tools`) and through a real MCP server on a
free loopback port (:class:`NotebookServer`, the mcp SDK's MCPServer under uvicorn in a thread of
the test process), so a test reads what was really written without the example CRM. Like the CRM,
a write under an idempotency key already seen writes nothing and answers as the first call did;
over MCP the key arrives in the call's ``_meta``, locally as the ``idempotency_key`` argument.

:data:`SKILLS` are skill files for these tools (``{source}`` is ``local`` or ``mcp:notebook``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from pydantic import BaseModel, ConfigDict, Field

from mcp_bridge.tools.local import ToolFunction
from tests.support import procs

# The server side of the SDK the test process has: mcp 2.3's MCPServer, or at mcp 1.30 (Rasa Pro's
# environment, `make pytest-pro`) its FastMCP, which takes the same tools.
try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp_types import ToolAnnotations

    def _annotations(read_only: bool) -> Any:
        return ToolAnnotations(read_only_hint=read_only)

    def _meta(ctx: Any) -> Mapping[str, Any]:
        return ctx.request_context.meta or {}

    def _new_server() -> Any:
        return MCPServer(SERVER)

    def _app(server: Any) -> Any:
        return server.streamable_http_app(host="127.0.0.1")

except ImportError:  # mcp 1.30
    from mcp.server.fastmcp import Context, FastMCP  # type: ignore[no-redef]
    from mcp.types import ToolAnnotations as ToolAnnotations130

    def _annotations(read_only: bool) -> Any:
        return ToolAnnotations130(readOnlyHint=read_only)

    def _meta(ctx: Any) -> Mapping[str, Any]:
        meta = ctx.request_context.meta
        return meta.model_dump() if meta is not None else {}

    def _new_server() -> Any:
        return FastMCP(SERVER, host="127.0.0.1")

    def _app(server: Any) -> Any:
        return server.streamable_http_app()


SERVER = "notebook"
NOTE_MAX_CHARS = 2000

Email = Annotated[str, Field(description="The contact's email address.")]
ContactId = Annotated[int, Field(description="The contact's id, as found by find_contact_by_email.")]
NoteText = Annotated[str, Field(min_length=1, max_length=NOTE_MAX_CHARS, description="The note.")]


class Result(BaseModel):
    model_config = ConfigDict(extra="allow")

    ok: bool
    error: str | None = None


class ContactResult(Result):
    found: bool = False
    contact_id: int | None = None
    name: str | None = None
    company: str | None = None


class NoteResult(Result):
    note_id: int | None = None


class NotesResult(Result):
    notes: list[dict[str, str]] = Field(default_factory=list)


@dataclass
class Notebook:
    """Contacts and their notes, in memory; every write is kept with its idempotency key."""

    contacts: dict[str, tuple[int, str, str]] = field(
        default_factory=lambda: {
            "dana@example.com": (1, "Dana Whitfield", "Northwind"),
            "priya@example.com": (2, "Priya Raman", "Contoso"),
        }
    )
    notes: list[tuple[int, str, str | None]] = field(default_factory=list)
    # Every call as received: (tool, idempotency key).
    calls: list[tuple[str, str | None]] = field(default_factory=list)
    # The _meta of every write received over MCP (trace context and idempotency key among it).
    metas: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def notes_for(self, email: str) -> list[str]:
        contact = self.contacts.get(email.lower())
        with self._lock:
            return [text for owner, text, _ in self.notes if contact and owner == contact[0]]

    def find(self, email: str) -> ContactResult:
        self.calls.append(("find_contact_by_email", None))
        contact = self.contacts.get(email.lower())
        if contact is None:
            return ContactResult(ok=True, found=False)
        contact_id, name, company = contact
        return ContactResult(ok=True, found=True, contact_id=contact_id, name=name, company=company)

    def add(self, contact_id: int, text: str, key: str | None) -> NoteResult:
        self.calls.append(("add_timeline_note", key))
        if contact_id not in {contact[0] for contact in self.contacts.values()}:
            return NoteResult(ok=False, error=f"no contact with id {contact_id}")
        with self._lock:
            for index, (_, _, seen) in enumerate(self.notes):
                if key is not None and seen == key:
                    return NoteResult(ok=True, note_id=index + 1)  # the first write, not a second
            self.notes.append((contact_id, text, key))
            return NoteResult(ok=True, note_id=len(self.notes))

    def listed(self, contact_id: int) -> NotesResult:
        self.calls.append(("list_timeline_notes", None))
        with self._lock:
            texts = [text for owner, text, _ in self.notes if owner == contact_id]
        return NotesResult(ok=True, notes=[{"text": text} for text in reversed(texts)])


def local_tools(book: Notebook) -> dict[str, ToolFunction]:
    """The notebook's tools as the bot's own async functions."""

    async def find_contact_by_email(email: Email) -> ContactResult:
        return book.find(email)

    async def add_timeline_note(
        contact_id: ContactId, text: NoteText, idempotency_key: str | None = None
    ) -> NoteResult:
        return book.add(contact_id, text, idempotency_key)

    async def list_timeline_notes(contact_id: ContactId) -> NotesResult:
        return book.listed(contact_id)

    return {
        "find_contact_by_email": find_contact_by_email,
        "add_timeline_note": add_timeline_note,
        "list_timeline_notes": list_timeline_notes,
    }


def mcp_server(book: Notebook) -> Any:
    """The notebook's tools on an MCP server; the lookups are annotated read-only."""
    server = _new_server()

    async def find_contact_by_email(email: Email) -> ContactResult:
        """Look a contact up by email."""
        return book.find(email)

    async def add_timeline_note(ctx: Context, contact_id: ContactId, text: NoteText) -> NoteResult:
        """Add a note to a contact's timeline."""
        meta = _meta(ctx)
        book.metas.append(dict(meta))
        key = meta.get("idempotency_key")
        return book.add(contact_id, text, key if isinstance(key, str) else None)

    async def list_timeline_notes(contact_id: ContactId) -> NotesResult:
        """A contact's notes, newest first."""
        return book.listed(contact_id)

    read_only = _annotations(True)
    server.add_tool(find_contact_by_email, annotations=read_only)
    server.add_tool(add_timeline_note, annotations=_annotations(False))
    server.add_tool(list_timeline_notes, annotations=read_only)
    return server


class NotebookServer:
    """:func:`mcp_server` on a free loopback port, in a thread; ``url`` ends in /mcp."""

    def __init__(self, book: Notebook) -> None:
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        app = _app(mcp_server(book))
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, ws="none", log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="notebook-mcp", daemon=True)

    def __enter__(self) -> NotebookServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the notebook MCP server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


_LOOKUP_STEP = """\
  - execute_tool: find_contact_by_email
    arguments:
      email: {{{{slot: {slot}}}}}
    fills:
      contact_id: contact_id
      contact_name: name
    not_found_when_false: found
    on_not_found: utter_contact_not_found
    on_error: utter_tool_failed
    on_missing_argument: utter_ask_email_for_lookup
"""

_NOTE_STEP = """\
  - execute_tool: add_timeline_note
    arguments:
      contact_id: {{slot: contact_id}}
      text: {{slot: note_text}}
    on_success: utter_note_saved
    on_error: utter_tool_failed
"""

_CONSTRAINT = """\
tool_constraints:
  - add_timeline_note:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_note
        utter_on_user_denial: utter_note_cancelled
"""

SKILLS: Mapping[str, str] = {
    "log_interaction": (
        "skill: log_interaction\n"
        "tools:\n  find_contact_by_email: {source}\n  add_timeline_note: {source}\n"
        + _CONSTRAINT
        + "steps:\n"
        + _LOOKUP_STEP.format(slot="contact_email")
        + _NOTE_STEP
        + "reset_slots: [contact_email, note_text]\n"
        "edits:\n  text: note_text\n  email: contact_email\n"
    ),
    # The write alone, its contact id taken from a slot as the person's slots carry it.
    "note_by_id": (
        "skill: note_by_id\ntools:\n  add_timeline_note: {source}\n" + _CONSTRAINT + "steps:\n" + _NOTE_STEP
    ),
    "lookup_contact": (
        "skill: lookup_contact\ntools:\n  find_contact_by_email: {source}\n"
        "steps:\n"
        "  - execute_tool: find_contact_by_email\n"
        "    arguments:\n      email: {{slot: lookup_email}}\n"
        "    on_success: utter_contact_found\n"
        "    not_found_when_false: found\n"
        "    on_not_found: utter_contact_not_found\n"
        "    on_error: utter_tool_failed\n"
        "    on_missing_argument: utter_ask_email_for_lookup\n"
    ),
    "show_notes": (
        "skill: show_notes\n"
        "tools:\n  find_contact_by_email: {source}\n  list_timeline_notes: {source}\n"
        "steps:\n" + _LOOKUP_STEP.format(slot="lookup_email") + "  - execute_tool: list_timeline_notes\n"
        "    arguments:\n      contact_id: {{result: contact_id}}\n"
        "    not_found_when_empty: notes\n"
        '    list_format: "- {{text}}"\n'
        "    on_success: utter_recent_notes\n"
        "    on_not_found: utter_no_notes\n"
        "    on_error: utter_tool_failed\n"
    ),
}


def write_skills(directory: Path, source: str, extra: Mapping[str, str] | None = None) -> Path:
    """:data:`SKILLS` (and ``extra``, appended to the named skill) in ``directory``, every tool from
    ``source`` (``local`` or ``mcp:notebook``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for skill_id, text in SKILLS.items():
        body = text.format(source=source) + (extra or {}).get(skill_id, "")
        (directory / f"{skill_id}.yml").write_text(body)
    return directory


def servers(url: str, **keys: Any) -> dict[str, Any]:
    """``{"notebook": MCPServerConfig}`` for the server at ``url``; ``keys`` are the bridge's own
    (``trusted``, ``honours_idempotency_key``, ...)."""
    from mcp_bridge.config.servers import MCPServerConfig

    return {SERVER: MCPServerConfig(name=SERVER, url=url, **keys)}
