"""devstack/chat_page.py: serves the page's files and nothing else, under a policy that lets the page
load scripts from itself only and open a socket to its Rasa only; starts browser sessions for the
page's own script only (a `__Host-` cookie named for the page's port, and a proof the script keeps),
and gives a browser session, and only it, a short-lived token for its own conversation. A POST
without the page's Origin is refused. The fixation attack in a browser: tests/live/browser/
test_chat_page.py."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

import jwt
import pytest

from devstack.chat_page import COOKIE, SESSION_SECONDS, TOKEN_AUDIENCE, BrowserSessions
from tests.support import procs

RASA = "http://127.0.0.1:5999"  # only named, never contacted: the page's settings point there
KEY = "a test key for the chat page's tokens, 32+ chars"


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    with procs.chat_page(rasa_url=RASA, chat_key=KEY) as service:
        yield service.url


def request(
    url: str, headers: dict[str, str] | None = None, body: dict[str, object] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A GET, or with ``body`` a POST of it as JSON."""
    data = None if body is None else json.dumps(body).encode()
    sent = urllib.request.Request(
        url, data=data, headers=headers or {}, method="GET" if data is None else "POST"
    )
    if data is not None:
        sent.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(sent, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return request(url, headers)


def origin_of(page_url: str) -> str:
    return page_url.rstrip("/")


def cookie_name(page_url: str) -> str:
    port = urlsplit(page_url).port
    return f"__Host-{COOKIE}-{port}"


def session(page_url: str) -> tuple[str, str, str]:
    """A session as the page's script starts one: the Set-Cookie header, the cookie's value, its proof."""
    status, headers, body = request(page_url + "session", {"Origin": origin_of(page_url)}, {})
    assert status == 200, body
    header = headers["Set-Cookie"]
    return header, SimpleCookie(header)[cookie_name(page_url)].value, json.loads(body)["proof"]


def token_answer(page_url: str, cookie: str, proof: str, origin: str | None = None) -> tuple[int, bytes]:
    headers = {"Cookie": f"{cookie_name(page_url)}={cookie}", "Origin": origin or origin_of(page_url)}
    status, _, body = request(page_url + "token", headers, {"proof": proof})
    return status, body


def token_claims(page_url: str, cookie: str, proof: str) -> dict[str, object]:
    status, body = token_answer(page_url, cookie, proof)
    assert status == 200, body
    token = json.loads(body)["token"]
    return dict(
        jwt.decode(
            token,
            KEY,
            algorithms=["HS256"],
            audience=TOKEN_AUDIENCE,
            options={"require": ["sub", "exp", "iss", "aud"]},
        )
    )


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
        "sessionPath": "session",
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


def test_a_session_is_a_host_cookie_of_this_page_and_port_no_script_can_read_or_another_site_send(
    page_url: str,
) -> None:
    status, headers, _ = get(page_url)
    assert status == 200 and "Set-Cookie" not in headers  # the page itself starts no session
    header, value, proof = session(page_url)
    name = cookie_name(page_url)
    assert name.startswith("__Host-chat_session-") and name.endswith(str(urlsplit(page_url).port))
    attributes = [part.strip() for part in header.split(";")[1:]]
    assert sorted(attributes) == ["HttpOnly", "Path=/", "SameSite=Strict", "Secure"], header
    nonce, issued, mac = value.split(".")
    assert (
        len(nonce) == 43 and abs(int(issued) - time.time()) < 60 and len(mac) == 64
    )  # 32 random bytes, signed
    assert len(proof) == 64 and proof not in value and value not in proof
    assert session(page_url)[1] != value  # every new browser session gets its own


def test_a_browser_session_gets_a_short_lived_token_for_its_own_conversation(page_url: str) -> None:
    _, cookie, proof = session(page_url)
    claims = token_claims(page_url, cookie, proof)
    assert set(claims) == {"sub", "iat", "exp", "iss", "aud"}  # no user: no login in front of this page
    assert claims["iss"] == origin_of(page_url) and claims["aud"] == TOKEN_AUDIENCE
    assert isinstance(claims["exp"], int) and 0 < claims["exp"] - time.time() <= 121
    # A reload (the same cookie and proof) is the same conversation; another browser session another one.
    assert token_claims(page_url, cookie, proof)["sub"] == claims["sub"]
    _, other, other_proof = session(page_url)
    assert token_claims(page_url, other, other_proof)["sub"] != claims["sub"]
    # The conversation id is derived from the cookie, not the cookie itself.
    assert cookie not in str(claims["sub"])
    # Asked from the page under another of its loopback names, the token names that origin.
    localhost = origin_of(page_url).replace("127.0.0.1", "localhost")
    status, body = token_answer(page_url, cookie, proof, origin=localhost)
    assert status == 200
    assert jwt.decode(json.loads(body)["token"], options={"verify_signature": False})["iss"] == localhost


def test_a_session_cookie_without_its_proof_gets_no_token(page_url: str) -> None:
    """A cookie someone had issued for themselves and planted in the person's browser (fixation): the
    page's script there has no proof for it, or another session's, and gets no token with it."""
    _, planted, planted_proof = session(page_url)
    _, _, persons_proof = session(page_url)
    for proof in ("", persons_proof, "0" * 64, planted_proof.upper(), planted_proof[:-1]):
        status, body = token_answer(page_url, planted, proof)
        assert status == 401 and b"token" not in body.replace(b"no token", b""), proof


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no Origin: no page's request
        {"Sec-Fetch-Site": "same-origin"},  # a browser's header, but no Origin
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "{page}", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "http://rebound.example:{port}"},  # a name rebound to 127.0.0.1
    ],
)
def test_a_post_that_is_not_the_pages_own_is_refused(page_url: str, headers: dict[str, str]) -> None:
    _, cookie, proof = session(page_url)
    port = str(urlsplit(page_url).port)
    sent = {name: value.format(page=origin_of(page_url), port=port) for name, value in headers.items()}
    status, response_headers, body = request(page_url + "session", sent, {})
    assert status == 403 and "Set-Cookie" not in response_headers, body
    status, response_headers, body = request(
        page_url + "token", {**sent, "Cookie": f"{cookie_name(page_url)}={cookie}"}, {"proof": proof}
    )
    assert status == 403 and b"token" not in body.replace(b"no token", b""), body
    assert "Access-Control-Allow-Origin" not in response_headers


def test_a_token_is_asked_for_with_a_post_only(page_url: str) -> None:
    _, cookie, _ = session(page_url)
    status, _, _ = get(page_url + "token", {"Cookie": f"{cookie_name(page_url)}={cookie}"})
    assert status == 405


def test_a_short_key_is_refused_at_start() -> None:
    page = procs.chat_page(rasa_url=RASA, chat_key="short")
    with pytest.raises(RuntimeError, match="CHAT_JWT_KEY must be at least 32"):
        page.start()
    page.close()


def _forged_cookies(cookie: str, name: str) -> dict[str, str]:
    """Session cookie values this server did not issue, beside one it did (``cookie``)."""
    nonce, issued, mac = cookie.split(".")
    other = BrowserSessions(b"another page's key, 32+ characters long", name)
    stale = BrowserSessions(KEY.encode(), name, clock=lambda: time.time() - SESSION_SECONDS - 5).issue()
    other_port = BrowserSessions(KEY.encode(), "__Host-chat_session-1").issue()
    return {
        "unsigned, as this server once issued": nonce,
        "a random value of the right shape": f"{'B' * 43}.{issued}.{'0' * 64}",
        "signed with another key": other.issue(),
        "altered": f"{'C' * 43}.{issued}.{mac}",
        "another time": f"{nonce}.{int(issued) + 1}.{mac}",
        "issued too long ago": stale,
        "issued for a page on another port, with the same key": other_port,
    }


def test_a_session_cookie_it_did_not_issue_gets_no_token_even_with_its_proof(page_url: str) -> None:
    name = cookie_name(page_url)
    _, cookie, proof = session(page_url)
    sessions = BrowserSessions(KEY.encode(), name)
    for what, forged in _forged_cookies(cookie, name).items():
        # Even with the proof this server would give for it (no attacker could make one).
        status, body = token_answer(page_url, forged, sessions.proof(forged))
        assert status == 401 and b"token" not in body.replace(b"no token", b""), what
    # The one it issued has its token.
    assert token_claims(page_url, cookie, proof)["sub"]
