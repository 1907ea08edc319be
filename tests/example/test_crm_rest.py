"""The CRM REST API, against a real `python -m crm rest`, checking the SQLite file directly."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from devstack.services import crm_api_token
from tests.support import crm_db as sqlite_check
from tests.support import procs
from tests.support.crm_api import crm_json
from tests.support.http import request_json

DANA = {"email": "dana@example.com", "name": "Dana Whitfield", "company": "Whitfield Logistics"}


def assert_error(status: int, body: Any, expected_status: int) -> None:
    assert status == expected_status, body
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert isinstance(body["error"], str) and body["error"].strip(), body


def test_health(crm_rest: str) -> None:
    assert crm_json("GET", f"{crm_rest}/health") == (200, {"ok": True})


def test_lookup_found(crm_rest: str, crm_db: Path) -> None:
    status, body = crm_json("GET", f"{crm_rest}/contacts?email=dana@example.com")
    assert status == 200
    assert body == {"contact_id": sqlite_check.contact_id(crm_db, "dana@example.com"), **DANA}


@pytest.mark.parametrize("email", ["DANA@Example.COM", "Dana@example.com", "%20dana@example.com%20"])
def test_lookup_ignores_case_and_surrounding_space(crm_rest: str, email: str) -> None:
    status, body = crm_json("GET", f"{crm_rest}/contacts?email={email}")
    assert status == 200, body
    assert body["email"] == "dana@example.com"


def test_lookup_absent_is_404_json(crm_rest: str) -> None:
    status, body = crm_json("GET", f"{crm_rest}/contacts?email=nobody@example.com")
    assert_error(status, body, 404)


@pytest.mark.parametrize(
    "query",
    [
        "email=not-an-email",
        "email=dana@",
        "email=@example.com",
        "email=dana@example",
        "email=dana@@example.com",
        "email=dana@-example.com",
        "email=",
        "email=" + "a" * 64 + "@" + ".".join(["b" * 63, "c" * 63, "d" * 63]) + ".com",  # 259 characters
        "",
    ],
)
def test_lookup_invalid_email_is_400_and_writes_nothing(crm_rest: str, crm_db: Path, query: str) -> None:
    before = sqlite_check.count_notes(crm_db)
    status, body = crm_json("GET", f"{crm_rest}/contacts?{query}")
    assert_error(status, body, 400)
    assert sqlite_check.count_notes(crm_db) == before


def test_get_contact_by_id(crm_rest: str, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "dana@example.com")
    assert crm_json("GET", f"{crm_rest}/contacts/{contact_id}") == (
        200,
        {"contact_id": contact_id, **DANA},
    )


@pytest.mark.parametrize("path", ["/contacts/999999", "/contacts/99999999999999999999999", "/contacts/abc"])
def test_unknown_contact_is_404_json(crm_rest: str, path: str) -> None:
    status, body = crm_json("GET", f"{crm_rest}{path}")
    assert_error(status, body, 404)


def test_add_note_then_list_shows_it_verbatim_and_newest_first(crm_rest: str, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "priya@example.com")
    before = sqlite_check.count_notes(crm_db, contact_id)
    first_text = f"first {uuid.uuid4()}"
    # Stored verbatim: surrounding whitespace, newlines and markup-like text are not touched.
    second_text = f"  Dana called about the VAT rate on invoice 4471\n<b>{{{{slot}}}}</b> {uuid.uuid4()}  "

    status, first = crm_json("POST", f"{crm_rest}/contacts/{contact_id}/notes", {"text": first_text})
    assert status == 201, first
    status, second = crm_json("POST", f"{crm_rest}/contacts/{contact_id}/notes", {"text": second_text})
    assert status == 201, second

    assert set(second) == {"note_id", "contact_id", "text", "created_at", "author"}
    assert second["author"] is None  # nobody named
    assert second["contact_id"] == contact_id and second["text"] == second_text
    created_at = datetime.fromisoformat(second["created_at"])
    assert created_at.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - created_at) < timedelta(minutes=1)
    assert sqlite_check.count_notes(crm_db, contact_id) == before + 2
    assert sqlite_check.note_text(crm_db, second["note_id"]) == second_text

    status, listing = crm_json("GET", f"{crm_rest}/contacts/{contact_id}/notes")
    assert status == 200
    assert listing["contact_id"] == contact_id
    assert listing["notes"][:2] == [second, first]


def test_the_caller_names_the_author_in_a_header_and_a_bad_one_writes_nothing(
    crm_rest: str, crm_db: Path
) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "tom@example.org")
    url = f"{crm_rest}/contacts/{contact_id}"
    text = f"as Dana {uuid.uuid4()}"
    status, note = crm_json("POST", f"{url}/notes", {"text": text}, headers={"X-CRM-Author": "dana-agent"})
    assert status == 201 and note["author"] == "dana-agent", note
    status, task = crm_json(
        "POST",
        f"{url}/tasks",
        {"title": "Call back", "due_date": "2026-12-01"},
        headers={"X-CRM-Author": "lee"},
    )
    assert status == 201 and task["author"] == "lee", task
    status, listing = crm_json("GET", f"{url}/notes")
    assert listing["notes"][0] == note
    before = sqlite_check.count_notes(crm_db, contact_id)
    status, body = crm_json("POST", f"{url}/notes", {"text": "never"}, headers={"X-CRM-Author": "x" * 201})
    assert_error(status, body, 400)
    assert "author" in body["error"]
    assert sqlite_check.count_notes(crm_db, contact_id) == before


def test_list_notes_limit(fresh_crm_db: Path, services: procs.Services) -> None:
    # A database of its own, so the notes listed are exactly the ones this test added.
    rest = services.start(procs.crm_rest(fresh_crm_db)).url
    contact_id = sqlite_check.contact_id(fresh_crm_db, "tom@example.org")
    texts = [f"note {i}" for i in range(7)]
    for text in texts:
        assert crm_json("POST", f"{rest}/contacts/{contact_id}/notes", {"text": text})[0] == 201

    status, default = crm_json("GET", f"{rest}/contacts/{contact_id}/notes")
    assert status == 200
    assert [note["text"] for note in default["notes"]] == texts[::-1][:5]
    status, two = crm_json("GET", f"{rest}/contacts/{contact_id}/notes?limit=2")
    assert [note["text"] for note in two["notes"]] == ["note 6", "note 5"]
    status, all_notes = crm_json("GET", f"{rest}/contacts/{contact_id}/notes?limit=100")
    assert len(all_notes["notes"]) == 7

    for bad in ("0", "101", "-1", "abc", "2.5", ""):
        status, body = crm_json("GET", f"{rest}/contacts/{contact_id}/notes?limit={bad}")
        assert_error(status, body, 400)


def test_list_notes_of_unknown_contact_is_404(crm_rest: str) -> None:
    status, body = crm_json("GET", f"{crm_rest}/contacts/999999/notes")
    assert_error(status, body, 404)


BAD_NOTE_REQUESTS = [
    pytest.param(404, {"text": "hello"}, None, "unknown-contact", id="unknown contact"),
    pytest.param(400, {"text": ""}, None, None, id="empty note"),
    pytest.param(400, {"text": "  \n\t "}, None, None, id="whitespace note"),
    pytest.param(400, {"text": "x" * 4001}, None, None, id="4001 characters"),
    pytest.param(400, {"text": " " + "x" * 4000}, None, None, id="4001 with the space"),
    pytest.param(400, None, b'{"text": "unterminated', None, id="malformed JSON"),
    pytest.param(400, None, b"", None, id="empty body"),
    pytest.param(400, None, b"\xff\xfe", None, id="not UTF-8"),
    pytest.param(400, ["hello"], None, None, id="body not an object"),
    pytest.param(400, {}, None, None, id="text missing"),
    pytest.param(400, {"text": 123}, None, None, id="text a number"),
    pytest.param(400, {"text": None}, None, None, id="text null"),
    pytest.param(400, {"text": ["a"]}, None, None, id="text a list"),
    pytest.param(400, {"text": "ok", "idempotency_key": 5}, None, None, id="key not a string"),
    pytest.param(400, {"text": "ok", "idempotency_key": ""}, None, None, id="key empty"),
    pytest.param(400, {"text": "ok", "idempotencyKey": "k"}, None, None, id="misspelt field"),
]


@pytest.mark.parametrize(("expected_status", "body", "raw", "target"), BAD_NOTE_REQUESTS)
def test_bad_note_is_refused_with_json_and_writes_nothing(
    crm_rest: str, crm_db: Path, expected_status: int, body: Any, raw: bytes | None, target: str | None
) -> None:
    contact_id = (
        999999 if target == "unknown-contact" else sqlite_check.contact_id(crm_db, "dana@example.com")
    )
    before = sqlite_check.count_notes(crm_db)
    url = f"{crm_rest}/contacts/{contact_id}/notes"
    status, reply = crm_json("POST", url, body, raw=raw)
    assert_error(status, reply, expected_status)
    assert sqlite_check.count_notes(crm_db) == before


def test_note_on_non_numeric_contact_is_404_json(crm_rest: str, crm_db: Path) -> None:
    before = sqlite_check.count_notes(crm_db)
    status, body = crm_json("POST", f"{crm_rest}/contacts/dana/notes", {"text": "hello"})
    assert_error(status, body, 404)
    assert sqlite_check.count_notes(crm_db) == before


def test_note_of_exactly_4000_characters_is_accepted(crm_rest: str, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "lena.fischer@example.net")
    status, note = crm_json("POST", f"{crm_rest}/contacts/{contact_id}/notes", {"text": "y" * 4000})
    assert status == 201, note
    assert sqlite_check.note_text(crm_db, note["note_id"]) == "y" * 4000


def test_idempotency_key_twice_stores_one_note(crm_rest: str, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "dana@example.com")
    key = f"retry-{uuid.uuid4()}"
    before = sqlite_check.count_notes(crm_db)
    url = f"{crm_rest}/contacts/{contact_id}/notes"

    first_status, first = crm_json("POST", url, {"text": "Dana called", "idempotency_key": key})
    again_status, again = crm_json("POST", url, {"text": "Dana called", "idempotency_key": key})

    assert (first_status, again_status) == (201, 200)
    assert again == first
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1
    assert sqlite_check.count_notes(crm_db) == before + 1


@pytest.mark.parametrize(
    ("email", "text"),
    [
        pytest.param("priya@example.com", "Dana called", id="another contact"),
        pytest.param("dana@example.com", "Dana called (retry)", id="another text"),
    ],
)
def test_a_key_reused_for_another_note_is_refused_with_409_and_writes_nothing(
    crm_rest: str, crm_db: Path, email: str, text: str
) -> None:
    dana = sqlite_check.contact_id(crm_db, "dana@example.com")
    other = sqlite_check.contact_id(crm_db, email)
    key = f"reused-{uuid.uuid4()}"
    status, first = crm_json(
        "POST", f"{crm_rest}/contacts/{dana}/notes", {"text": "Dana called", "idempotency_key": key}
    )
    assert status == 201
    before = sqlite_check.count_notes(crm_db)

    status, body = crm_json(
        "POST", f"{crm_rest}/contacts/{other}/notes", {"text": text, "idempotency_key": key}
    )

    assert_error(status, body, 409)  # not another note, and not the first note with success
    assert "idempotency key" in body["error"] and "nothing was written" in body["error"]
    assert sqlite_check.count_notes(crm_db) == before
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1
    assert sqlite_check.note_text(crm_db, first["note_id"]) == "Dana called"


def test_concurrent_requests_with_one_key_store_one_note(crm_rest: str, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "dana@example.com")
    key = f"race-{uuid.uuid4()}"
    url = f"{crm_rest}/contacts/{contact_id}/notes"
    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = list(
            pool.map(
                lambda i: crm_json("POST", url, {"text": "the same retry", "idempotency_key": key}),
                range(16),
            )
        )
    assert sorted(status for status, _ in replies) == [200] * 15 + [201]
    assert len({reply["note_id"] for _, reply in replies}) == 1
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1


def test_unknown_route_and_method_answer_json(crm_rest: str) -> None:
    status, body = crm_json("GET", f"{crm_rest}/nope")
    assert_error(status, body, 404)
    status, body = crm_json("DELETE", f"{crm_rest}/contacts/1")
    assert_error(status, body, 405)


def _post(url: str, data: bytes, headers: dict[str, str]) -> int:
    """A POST exactly as given (no header added), as a page's form or fetch() would send it."""
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Content-Type": "text/plain"}, id="cross-site text/plain, no token"),
        pytest.param({"Content-Type": "application/json"}, id="JSON without the token"),
        pytest.param(
            {"Content-Type": "application/json", "Authorization": "Bearer wrong"}, id="a wrong token"
        ),
        pytest.param(
            {"Content-Type": "text/plain", "Authorization": f"Bearer {crm_api_token()}"},
            id="the token, text/plain",
        ),
        pytest.param(
            {
                "Content-Type": "application/x-www-form-urlencoded",
                "Authorization": f"Bearer {crm_api_token()}",
            },
            id="the token, a form",
        ),
    ],
)
def test_a_write_without_the_token_or_as_other_than_json_writes_nothing(
    crm_rest: str, crm_db: Path, headers: dict[str, str]
) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "dana@example.com")
    before = sqlite_check.count_notes(crm_db)
    body = json.dumps({"text": "written by a page the user visited"}).encode()
    status = _post(f"{crm_rest}/contacts/{contact_id}/notes", body, headers)
    assert status == (415 if "Authorization" in headers and "wrong" not in headers["Authorization"] else 401)
    assert sqlite_check.count_notes(crm_db) == before


def test_reads_need_the_token_and_health_does_not(crm_rest: str) -> None:
    assert request_json("GET", f"{crm_rest}/contacts?email=dana@example.com")[0] == 401
    assert crm_json("GET", f"{crm_rest}/contacts?email=dana@example.com")[0] == 200
    assert request_json("GET", f"{crm_rest}/health")[0] == 200


def test_the_api_does_not_start_without_its_token(tmp_path: Path) -> None:
    env = {key: value for key, value in procs.child_env().items() if key != "CRM_API_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "crm", "rest", "--port", str(procs.free_port())],
        env={**env, "CRM_DB": str(tmp_path / "crm.sqlite3")},
        cwd=procs.EXAMPLE_BOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "CRM_API_TOKEN is not set" in done.stderr
