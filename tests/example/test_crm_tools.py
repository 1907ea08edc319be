"""The tool functions as local tools, calling a real CRM REST API (and one that is down)."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import uuid
import warnings
from contextlib import closing
from pathlib import Path
from types import ModuleType

import pytest
from crm import tools
from crm.tools import CRM_UNREACHABLE, ContactResult, NoteResult, NotesResult

from tests.support import crm_db as sqlite_check
from tests.support import procs


async def test_found(crm_tools: ModuleType, crm_db: Path) -> None:
    result = await crm_tools.find_contact_by_email("Dana@Example.com")
    assert result == ContactResult(
        ok=True,
        found=True,
        contact_id=sqlite_check.contact_id(crm_db, "dana@example.com"),
        email="dana@example.com",
        name="Dana Whitfield",
        company="Whitfield Logistics",
    )


async def test_absent_is_ok_and_not_found(crm_tools: ModuleType) -> None:
    result = await crm_tools.find_contact_by_email("nobody@example.com")
    assert result.model_dump() == {
        "ok": True,
        "error": None,
        "found": False,
        "contact_id": None,
        "email": None,
        "name": None,
        "company": None,
    }


@pytest.mark.parametrize("email", ["not-an-email", "", "dana@example"])
async def test_invalid_email_is_an_error(crm_tools: ModuleType, email: str) -> None:
    result = await crm_tools.find_contact_by_email(email)
    assert result.ok is False and result.found is False
    assert result.error and "email" in result.error.lower()


async def test_add_then_list(crm_tools: ModuleType, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "tom@example.org")
    text = f"Tom asked for a callback {uuid.uuid4()}"
    before = sqlite_check.count_notes(crm_db, contact_id)

    added = await crm_tools.add_timeline_note(contact_id, text)
    assert isinstance(added, NoteResult)
    assert added.ok is True and added.error is None
    assert added.contact_id == contact_id and added.text == text and added.note_id is not None
    assert sqlite_check.count_notes(crm_db, contact_id) == before + 1

    listed = await crm_tools.list_timeline_notes(contact_id, limit=1)
    assert isinstance(listed, NotesResult)
    assert listed.ok is True and listed.contact_id == contact_id
    assert [(n.note_id, n.text, n.created_at) for n in listed.notes] == [
        (added.note_id, text, added.created_at)
    ]


async def test_idempotency_key_stores_one_note(crm_tools: ModuleType, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "tom@example.org")
    key = f"tool-{uuid.uuid4()}"
    first = await crm_tools.add_timeline_note(contact_id, "once", idempotency_key=key)
    again = await crm_tools.add_timeline_note(contact_id, "once", idempotency_key=key)
    assert first.ok and again == first
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1
    # The key with another text is the CRM's refusal, as a result a person can read.
    other = await crm_tools.add_timeline_note(contact_id, "twice", idempotency_key=key)
    assert other.ok is False and other.note_id is None
    assert other.error and "idempotency key" in other.error
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1


def _tasks(db: Path, key: str) -> list[tuple[int, str, str]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT contact_id, title, due_date FROM tasks WHERE idempotency_key = ?", (key,)
        ).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


async def test_a_follow_up_task_is_stored_once_under_its_key(crm_tools: ModuleType, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "tom@example.org")
    key = f"task-{uuid.uuid4()}"
    first = await crm_tools.create_follow_up_task(contact_id, "Call back", "2026-12-04", idempotency_key=key)
    assert first.ok and first.task_id is not None and first.due_date == "2026-12-04"
    again = await crm_tools.create_follow_up_task(contact_id, "Call back", "2026-12-04", idempotency_key=key)
    assert again == first
    assert _tasks(crm_db, key) == [(contact_id, "Call back", "2026-12-04")]
    other = await crm_tools.create_follow_up_task(contact_id, "Call back", "2026-12-05", idempotency_key=key)
    assert other.ok is False and other.error and "idempotency key" in other.error
    assert _tasks(crm_db, key) == [(contact_id, "Call back", "2026-12-04")]


@pytest.mark.parametrize(
    ("due", "title", "error_part"),
    [("2026-02-30", "x", "not a date"), ("4 Dec", "x", "YYYY-MM-DD"), ("2026-12-04", " ", "empty")],
)
async def test_a_task_the_crm_refuses_is_an_error_and_writes_nothing(
    crm_tools: ModuleType, crm_db: Path, due: str, title: str, error_part: str
) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "tom@example.org")
    key = f"task-{uuid.uuid4()}"
    result = await crm_tools.create_follow_up_task(contact_id, title, due, idempotency_key=key)
    assert result.ok is False and result.error and error_part in result.error
    assert _tasks(crm_db, key) == []


@pytest.mark.parametrize(
    ("contact", "text", "error_part"),
    [
        (999999, "hello", "999999"),
        (0, "hello", "contact id"),
        (-3, "hello", "contact id"),
        ("dana@example.com", "   ", "empty"),
        ("dana@example.com", "z" * 4001, "4000"),
    ],
)
async def test_refused_note_is_an_error_and_writes_nothing(
    crm_tools: ModuleType, crm_db: Path, contact: int | str, text: str, error_part: str
) -> None:
    contact_id = sqlite_check.contact_id(crm_db, contact) if isinstance(contact, str) else contact
    before = sqlite_check.count_notes(crm_db)
    result = await crm_tools.add_timeline_note(contact_id, text)
    assert result.ok is False
    assert result.error and error_part in result.error
    assert result.note_id is None
    assert sqlite_check.count_notes(crm_db) == before


@pytest.mark.parametrize(("contact_id", "limit"), [(999999, 5), (1, 0), (1, 101)])
async def test_refused_listing_is_an_error(crm_tools: ModuleType, contact_id: int, limit: int) -> None:
    result = await crm_tools.list_timeline_notes(contact_id, limit=limit)
    assert result.ok is False and result.error and result.notes == []


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("find_contact_by_email", {"email": None}),
        ("find_contact_by_email", {"email": 42}),
        ("add_timeline_note", {"contact_id": None, "text": "hello"}),
        ("add_timeline_note", {"contact_id": "abc", "text": "hello"}),
        ("add_timeline_note", {"contact_id": 2.5, "text": "hello"}),
        ("add_timeline_note", {"contact_id": 1, "text": None}),
        ("add_timeline_note", {"contact_id": 1, "text": "hello", "idempotency_key": 7}),
        ("list_timeline_notes", {"contact_id": 1, "limit": "many"}),
    ],
)
async def test_wrong_argument_types_give_an_error_result(
    crm_tools: ModuleType, crm_db: Path, name: str, arguments: dict[str, object]
) -> None:
    # Slots can be empty or of another type; a tool must answer, not raise.
    before = sqlite_check.count_notes(crm_db)
    result = await crm_tools.TOOLS[name](**arguments)
    assert result.ok is False and result.error
    assert sqlite_check.count_notes(crm_db) == before


async def test_numeric_strings_are_accepted_like_over_mcp(crm_tools: ModuleType, crm_db: Path) -> None:
    # Rasa slots often hold "3" or 3.0; MCP (pydantic) accepts both, so the local tool must too.
    contact_id = sqlite_check.contact_id(crm_db, "dana@example.com")
    listed = await crm_tools.list_timeline_notes(str(contact_id), limit="2")
    assert listed.ok is True and listed.contact_id == contact_id
    added = await crm_tools.add_timeline_note(
        float(contact_id), "from a float slot", idempotency_key=f"f-{uuid.uuid4()}"
    )
    assert added.ok is True and added.contact_id == contact_id


async def test_crm_down_gives_a_result_not_an_exception(
    monkeypatch: pytest.MonkeyPatch, crm_db: Path
) -> None:
    monkeypatch.setenv("CRM_URL", f"http://127.0.0.1:{procs.free_port()}")
    before = sqlite_check.count_notes(crm_db)
    try:
        results = [
            await tools.find_contact_by_email("dana@example.com"),
            await tools.add_timeline_note(1, "nobody will see this"),
            await tools.list_timeline_notes(1),
        ]
    finally:
        await tools.close_client()
    for result in results:
        assert result.ok is False
        assert result.error == CRM_UNREACHABLE
    assert sqlite_check.count_notes(crm_db) == before


async def test_crm_url_is_read_at_call_time(crm_tools: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (await crm_tools.find_contact_by_email("dana@example.com")).found is True
    monkeypatch.setenv("CRM_URL", f"http://127.0.0.1:{procs.free_port()}")
    assert (await crm_tools.find_contact_by_email("dana@example.com")).error == CRM_UNREACHABLE


async def test_one_http_session_is_reused(crm_tools: ModuleType) -> None:
    await crm_tools.find_contact_by_email("dana@example.com")
    session = tools._client.session
    await crm_tools.list_timeline_notes(1)
    assert tools._client.session is session and session is not None and not session.closed
    await crm_tools.close_client()
    assert session.closed


def test_tools_work_across_event_loops(crm_rest: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # An aiohttp session is bound to its loop; a second loop must get a new one, not an error.
    monkeypatch.setenv("CRM_URL", crm_rest)
    # The first loop's session cannot be closed once that loop is gone, so its socket is reported
    # as unclosed when collected; that is the price of the edge case, not what is tested here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            for _ in range(2):
                assert asyncio.run(tools.find_contact_by_email("dana@example.com")).found is True
        finally:
            asyncio.run(tools.close_client())
            gc.collect()


def test_registry_names_the_four_tools() -> None:
    assert tools.TOOLS == {
        "find_contact_by_email": tools.find_contact_by_email,
        "add_timeline_note": tools.add_timeline_note,
        "list_timeline_notes": tools.list_timeline_notes,
        "create_follow_up_task": tools.create_follow_up_task,
    }
    assert tools.READ_ONLY_TOOLS == {"find_contact_by_email", "list_timeline_notes"}
