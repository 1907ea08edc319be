"""scripts/chat_page.py: serves the page's files and nothing else, under a policy that lets the page
load scripts from itself only and open a socket to its Rasa only; and gives the browser session
that loaded the page, and only it, a short-lived token for its own conversation."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.cookies import SimpleCookie

import jwt
import pytest

from scripts.chat_page import COOKIE, SESSION_SECONDS, BrowserSessions
from tests.support import procs

RASA = "http://127.0.0.1:5999"  # only named, never contacted: the page's settings point there
KEY = "a test key for the chat page's tokens, 32+ chars"


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    with procs.chat_page(rasa_url=RASA, chat_key=KEY) as service:
        yield service.url


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def session_cookie(page_url: str) -> tuple[str, str]:
    """Load the page as a new browser session would: its Set-Cookie header, and the cookie's value."""
    status, headers, _ = get(page_url)
    assert status == 200
    header = headers["Set-Cookie"]
    cookie = SimpleCookie(header)
    return header, cookie["chat_session"].value


def token_claims(page_url: str, cookie: str) -> dict[str, object]:
    status, _, body = get(
        page_url + "token", {"Cookie": f"chat_session={cookie}", "Sec-Fetch-Site": "same-origin"}
    )
    assert status == 200, body
    token = json.loads(body)["token"]
    return dict(jwt.decode(token, KEY, algorithms=["HS256"], options={"require": ["sub", "exp"]}))


def test_the_page_its_script_and_socket_io_client_are_served(page_url: str) -> None:
    status, headers, body = get(page_url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="vendor/socket.io.min.js">' in body
    status, headers, body = get(page_url + "vendor/socket.io.min.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert b"Socket.IO v4" in body[:200]  # the npm package's own build, as installed
    status, _, body = get(page_url + "chat.js")
    assert status == 200 and b"session_request" in body
    assert b"session_id" not in body  # the page never names a conversation itself


def test_the_settings_name_the_rasa_server(page_url: str) -> None:
    status, _, body = get(page_url + "config.json")
    assert status == 200
    assert json.loads(body) == {
        "socketUrl": RASA,
        "socketPath": "/socket.io/",
        "tokenPath": "token",
        "noAnswerSeconds": 20.0,
    }


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


def test_the_page_comes_with_a_session_cookie_no_script_can_read_or_another_site_send(page_url: str) -> None:
    header, value = session_cookie(page_url)
    attributes = {part.strip().split("=")[0].lower() for part in header.split(";")}
    assert {"httponly", "samesite", "path"} <= attributes and "SameSite=Strict" in header
    assert "expires" not in attributes and "max-age" not in attributes  # ends with the browser session
    nonce, issued, mac = value.split(".")
    assert (
        len(nonce) == 43 and abs(int(issued) - time.time()) < 60 and len(mac) == 64
    )  # 32 random bytes, signed
    assert session_cookie(page_url)[1] != value  # every new browser session gets its own


def test_a_browser_session_gets_a_short_lived_token_for_its_own_conversation(page_url: str) -> None:
    _, cookie = session_cookie(page_url)
    claims = token_claims(page_url, cookie)
    assert set(claims) == {"sub", "iat", "exp"}  # no user: no login in front of this page
    assert isinstance(claims["exp"], int) and 0 < claims["exp"] - time.time() <= 121
    # A reload (the same cookie) is the same conversation; another browser session another one.
    assert token_claims(page_url, cookie)["sub"] == claims["sub"]
    _, other = session_cookie(page_url)
    assert token_claims(page_url, other)["sub"] != claims["sub"]
    # The conversation id is derived from the cookie, not the cookie itself.
    assert cookie not in str(claims["sub"])
    # A page that already has a valid cookie keeps it.
    _, headers, _ = get(page_url, {"Cookie": f"chat_session={cookie}"})
    assert "Set-Cookie" not in headers


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no session: the page was never loaded in this browser session
        {"Cookie": "chat_session=made-up"},
        {"Cookie": "chat_session=" + "A" * 43, "Sec-Fetch-Site": "cross-site"},
        {"Cookie": "chat_session=" + "A" * 43, "Origin": "http://evil.example"},
    ],
)
def test_no_token_without_the_session_or_for_another_site(page_url: str, headers: dict[str, str]) -> None:
    status, response_headers, body = get(page_url + "token", headers)
    assert status in (401, 403), body
    assert b"token" not in body.replace(b"no token", b"")
    assert "Access-Control-Allow-Origin" not in response_headers


def test_a_short_key_is_refused_at_start() -> None:
    page = procs.chat_page(rasa_url=RASA, chat_key="short")
    with pytest.raises(RuntimeError, match="CHAT_JWT_KEY must be at least 32"):
        page.start()
    page.close()


def _forged_cookies(cookie: str) -> dict[str, str]:
    """Session cookie values this server did not issue, beside one it did (``cookie``)."""
    nonce, issued, mac = cookie.split(".")
    other = BrowserSessions(b"another page's key, 32+ characters long")
    stale = BrowserSessions(KEY.encode(), clock=lambda: time.time() - SESSION_SECONDS - 5).issue()
    return {
        "unsigned, as this server once issued": nonce,
        "a random value of the right shape": f"{'B' * 43}.{issued}.{'0' * 64}",
        "signed with another key": other.issue(),
        "altered": f"{'C' * 43}.{issued}.{mac}",
        "another time": f"{nonce}.{int(issued) + 1}.{mac}",
        "issued too long ago": stale,
    }


def test_the_page_replaces_a_session_cookie_it_did_not_issue_and_gives_it_no_token(page_url: str) -> None:
    _, cookie = session_cookie(page_url)
    for name, forged in _forged_cookies(cookie).items():
        status, headers, _ = get(page_url, {"Cookie": f"chat_session={forged}"})
        assert status == 200
        issued = SimpleCookie(headers.get("Set-Cookie", ""))
        assert COOKIE in issued and issued[COOKIE].value != forged, name  # replaced ...
        assert BrowserSessions(KEY.encode()).issued(issued[COOKIE].value), name  # ... by one it issued
        status, _, body = get(
            page_url + "token", {"Cookie": f"chat_session={forged}", "Sec-Fetch-Site": "same-origin"}
        )
        assert status == 401 and b"token" not in body.replace(b"no token", b""), name
    # The one it issued is kept, and has its token.
    assert "Set-Cookie" not in get(page_url, {"Cookie": f"chat_session={cookie}"})[1]
    assert token_claims(page_url, cookie)["sub"]
