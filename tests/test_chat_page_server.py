"""scripts/chat_page.py: serves the page's files and nothing else, under a policy that lets the page
load scripts from itself only and open a socket to its Rasa only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support import procs

RASA = "http://127.0.0.1:5999"  # only named, never contacted: the page's settings point there


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    with procs.chat_page(rasa_url=RASA) as service:
        yield service.url


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_the_page_its_script_and_socket_io_client_are_served(page_url: str) -> None:
    status, headers, body = get(page_url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="vendor/socket.io.min.js">' in body
    status, headers, body = get(page_url + "vendor/socket.io.min.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert b"Socket.IO v4" in body[:200]  # the npm package's own build, as installed
    status, _, body = get(page_url + "chat.js")
    assert status == 200 and b"session_request" in body


def test_the_settings_name_the_rasa_server(page_url: str) -> None:
    status, _, body = get(page_url + "config.json")
    assert status == 200
    assert json.loads(body) == {"socketUrl": RASA, "socketPath": "/socket.io/", "noAnswerSeconds": 20.0}


def test_every_answer_carries_a_policy_that_allows_own_scripts_and_this_rasa_only(page_url: str) -> None:
    for path in ("", "chat.js", "config.json"):
        _, headers, _ = get(page_url + path)
        policy = {
            part.split()[0]: part.split()[1:] for part in headers["Content-Security-Policy"].split("; ")
        }
        assert policy["default-src"] == ["'none'"]
        assert policy["script-src"] == ["'self'"]  # no inline script, whatever a note contains
        assert policy["connect-src"] == ["'self'", "ws://127.0.0.1:5999"]
        assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    ["package.json", "node_modules/socket.io-client/package.json", "vendor/../package.json", "web/chat.js"],
)
def test_nothing_else_is_served(page_url: str, path: str) -> None:
    status, _, _ = get(page_url + path)
    assert status == 404
