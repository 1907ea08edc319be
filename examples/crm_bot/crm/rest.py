"""The CRM's REST API (aiohttp) over a CRMStore (SQLite or PostgreSQL).

Every refusal is a 4xx JSON body `{"error": "<human message>"}` and writes nothing: 400 for bad
input, 404 for an unknown contact, 409 for an idempotency key reused with another contact or text.
The app opens the store when it starts and closes it when it stops.

Every route but `/health` requires the API's bearer token (`Authorization: Bearer <CRM_API_TOKEN>`;
401 without it), and every write a `Content-Type: application/json` body (415 otherwise), both
checked before the body is read: a web page cannot send a header such as Authorization, or a JSON
content type, across sites without the API's consent (a preflight it never grants), so a cross-site
`text/plain` POST from a page the CRM's user visits writes nothing.

A caller that writes on someone's behalf names them in the `X-CRM-Author` header (the CRM's MCP
server sends the verified access token's subject); the note or task keeps it as its author. The
token says which program calls (the MCP server, the local tools), not for whom: the header is the
caller's word, the way its other fields are.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from crm.errors import ConflictError, NotFoundError, ValidationError
from crm.store import CRMStore
from crm.validation import NOTES_LIMIT_DEFAULT, validate_limit

log = logging.getLogger(__name__)

STORE_KEY = web.AppKey("store", CRMStore)
TOKEN_KEY = web.AppKey("token", str)
_NOTE_FIELDS = frozenset({"text", "idempotency_key"})
_TASK_FIELDS = frozenset({"title", "due_date", "idempotency_key"})
AUTHOR_HEADER = "X-CRM-Author"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn aiohttp's own refusals (unknown route, wrong method, body too large) into JSON."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason)
    except ValidationError as exc:
        return _error(400, str(exc))
    except NotFoundError as exc:
        return _error(404, str(exc))
    except ConflictError as exc:
        return _error(409, str(exc))
    except Exception:
        # A bug, not a caller's mistake: log it here and keep internals out of the response.
        log.exception("unexpected error in %s %s", request.method, request.path)
        return _error(500, "The CRM failed unexpectedly.")


_OPEN_PATHS = frozenset({"/health"})
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@web.middleware
async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The API's token on every route but /health, and a JSON body on every write, before any
    handler reads anything."""
    if request.path not in _OPEN_PATHS:
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {request.app[TOKEN_KEY]}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            response = _error(401, "The CRM API requires its bearer token (Authorization: Bearer ...).")
            response.headers["WWW-Authenticate"] = 'Bearer realm="crm"'
            return response
    if request.method in _WRITES and request.content_type != "application/json":
        return _error(415, "The CRM API takes writes only as JSON (Content-Type: application/json).")
    return await handler(request)


_MAX_ID = 2**63 - 1  # SQLite's INTEGER and PostgreSQL's BIGINT alike


def _contact_id(request: web.Request) -> int:
    # The route pattern only admits digits, so int() cannot fail; the database can still overflow.
    contact_id = int(request.match_info["contact_id"])
    if contact_id > _MAX_ID:
        raise NotFoundError(f"There is no contact with id {contact_id}.")
    return contact_id


def _author(request: web.Request) -> str | None:
    """Who the caller writes for (`X-CRM-Author`), if it names anyone; the store validates it."""
    return request.headers.get(AUTHOR_HEADER)


def _store(request: web.Request) -> CRMStore:
    return request.app[STORE_KEY]


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def find_contact(request: web.Request) -> web.Response:
    email = request.query.get("email")
    if email is None:
        raise ValidationError("Give the email address to look up as ?email=...")
    contact = await _store(request).find_contact_by_email(email)
    if contact is None:
        return _error(404, f"No contact has the email address {email.strip()!r}.")
    return web.json_response(contact.as_dict())


async def get_contact(request: web.Request) -> web.Response:
    contact = await _store(request).get_contact(_contact_id(request))
    if contact is None:
        raise NotFoundError(f"There is no contact with id {_contact_id(request)}.")
    return web.json_response(contact.as_dict())


async def list_notes(request: web.Request) -> web.Response:
    contact_id = _contact_id(request)
    raw_limit = request.query.get("limit")
    limit: Any = NOTES_LIMIT_DEFAULT
    if raw_limit is not None:
        try:
            limit = int(raw_limit)
        except ValueError:
            limit = raw_limit  # validate_limit refuses it with the usual message
    limit = validate_limit(limit)
    store = _store(request)
    if await store.get_contact(contact_id) is None:
        raise NotFoundError(f"There is no contact with id {contact_id}.")
    notes = await store.list_notes(contact_id, limit)
    return web.json_response({"contact_id": contact_id, "notes": [note.as_dict() for note in notes]})


async def add_note(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValidationError("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ValidationError('The request body must be a JSON object such as {"text": "..."}.')
    unknown = sorted(set(body) - _NOTE_FIELDS)
    if unknown:
        # Refused rather than ignored: a misspelt "idempotency_key" would silently lose the
        # protection against writing twice.
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}. Expected text and idempotency_key.")
    if "text" not in body:
        raise ValidationError("The note text is missing.")
    note, created = await _store(request).add_note(
        _contact_id(request), body["text"], body.get("idempotency_key"), author=_author(request)
    )
    return web.json_response(note.as_dict(), status=201 if created else 200)


async def _json_object(request: web.Request, fields: frozenset[str]) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValidationError("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ValidationError("The request body must be a JSON object.")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise ValidationError(
            f"Unknown field(s): {', '.join(unknown)}. Expected {', '.join(sorted(fields))}."
        )
    return body


async def add_task(request: web.Request) -> web.Response:
    body = await _json_object(request, _TASK_FIELDS)
    for name in ("title", "due_date"):
        if name not in body:
            raise ValidationError(f"The task's {name} is missing.")
    task, created = await _store(request).add_task(
        _contact_id(request),
        body["title"],
        body["due_date"],
        body.get("idempotency_key"),
        author=_author(request),
    )
    return web.json_response(task.as_dict(), status=201 if created else 200)


async def list_tasks(request: web.Request) -> web.Response:
    contact_id = _contact_id(request)
    store = _store(request)
    if await store.get_contact(contact_id) is None:
        raise NotFoundError(f"There is no contact with id {contact_id}.")
    tasks = await store.list_tasks(contact_id)
    return web.json_response({"contact_id": contact_id, "tasks": [task.as_dict() for task in tasks]})


def create_app(store: CRMStore, token: str) -> web.Application:
    """The API over ``store``, requiring ``token`` (not empty) from every caller."""
    if not token:
        raise ValueError("the CRM API needs a token")
    app = web.Application(middlewares=[_errors_as_json, _guarded])
    app[STORE_KEY] = store
    app[TOKEN_KEY] = token

    async def open_store(app: web.Application) -> None:
        await store.open()

    async def close_store(app: web.Application) -> None:
        await store.close()

    app.on_startup.append(open_store)
    app.on_cleanup.append(close_store)
    app.router.add_get("/health", health)
    app.router.add_get("/contacts", find_contact)
    app.router.add_get(r"/contacts/{contact_id:\d+}", get_contact)
    app.router.add_get(r"/contacts/{contact_id:\d+}/notes", list_notes)
    app.router.add_post(r"/contacts/{contact_id:\d+}/notes", add_note)
    app.router.add_get(r"/contacts/{contact_id:\d+}/tasks", list_tasks)
    app.router.add_post(r"/contacts/{contact_id:\d+}/tasks", add_task)
    return app
