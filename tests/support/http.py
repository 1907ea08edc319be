"""A tiny synchronous JSON-over-HTTP client for tests (stdlib only, so it hides nothing)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

_NO_BODY = object()


def request_json(
    method: str,
    url: str,
    body: Any = _NO_BODY,
    *,
    raw: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """Send a request; returns (status, decoded JSON body or None when not JSON). Never raises for 4xx/5xx.

    `body` is sent as JSON; `raw` is sent as is (for malformed-JSON tests).
    """
    data = raw if raw is not None else (None if body is _NO_BODY else json.dumps(body).encode())
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, None
