"""Requests to the CRM REST API as its callers make them: with the API's bearer token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devstack.services import crm_api_token
from tests.support.http import request_json

_NO_BODY: Any = object()


def crm_json(
    method: str,
    url: str,
    body: Any = _NO_BODY,
    *,
    raw: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """:func:`~tests.support.http.request_json` with ``Authorization: Bearer <the API's token>``
    (the one every service the tests start gets: :func:`devstack.services.crm_api_token`)."""
    all_headers = {"Authorization": f"Bearer {crm_api_token()}", **(headers or {})}
    if body is _NO_BODY:
        return request_json(method, url, raw=raw, headers=all_headers)
    return request_json(method, url, body, raw=raw, headers=all_headers)
