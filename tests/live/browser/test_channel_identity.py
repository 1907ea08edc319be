"""Who may speak in a conversation, and whose yes counts: the chat page's channels, attacked directly.

The same stack as the browser tests (a real Rasa server with the channels of credentials.yml, the
action server, the MCP server, the CRM), reached without a browser: python-socketio's client plays a
page, or a script pretending to be one, and plain HTTP plays an operator of the REST channel.

What must hold (docs/concepts/who-may-answer.md):

* the REST channel refuses a request without its bearer token (or with the token in the URL);
* a socket without a valid token (none, another key, expired, unsigned, for another audience, from
  another issuer than its page) is refused, and so is one from a web page of another origin, even
  with a valid token; a socket is closed when its token expires, unless renewed on the socket;
* a socket whose token names conversation B cannot reach conversation A: not by asking for A's
  session, not by naming A in a message;
* a Yes button payload for A's pending question, sent by anyone but the person asked (the REST
  channel's holder naming A as sender and forging the metadata, a socket whose token is A's but
  another user's), writes nothing and is audited; the person's own yes then writes once.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import jwt
import pytest
import socketio

from mcp_bridge.channels import USER_KEY
from tests.live.browser.conftest import (
    CLOCK_SKEW_SECONDS,
    DEFAULT_AUDIENCE,
    RENEW_EVENT,
    ChatStack,
    user_texts,
)
from tests.live.proof.store import StoredNote

DANA = "dana@example.com"
SAVED = "Saved to Dana Whitfield's record."
NOT_YOURS = (
    "That confirmation no longer matches what I asked about, so nothing was saved. Please start again."
)
ASKED_AGAIN = "Just to be sure, before I write anything:"
REPLY_SECONDS = 30.0


def question_for(note: str) -> str:
    return f'Save this to Dana Whitfield\'s record? "{note}"'


def token(chat_stack: ChatStack, conversation: str, *, key: str | None = None, **claims: Any) -> str:
    """A token as the chat page's server signs one (or with another `key`, or other claims; a claim
    given as None is left out)."""
    body = {
        "sub": conversation,
        "exp": int(time.time()) + 120,
        "iss": page_origin(chat_stack),
        "aud": DEFAULT_AUDIENCE,
        **claims,
    }
    body = {name: value for name, value in body.items() if value is not None}
    return jwt.encode(body, key or chat_stack.access.chat_key, algorithm="HS256")


def page_origin(chat_stack: ChatStack) -> str:
    parts = urlsplit(chat_stack.page_url)
    return f"{parts.scheme}://{parts.netloc}"


class Socket:
    """A socket.io client on the chat page's channel; what the assistant says arrives in `heard`."""

    def __init__(self, chat_stack: ChatStack) -> None:
        self.chat_stack = chat_stack
        self.client = socketio.AsyncClient(reconnection=False)
        self.heard: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.confirmed: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.client.on("bot_uttered", self.heard.put_nowait)
        self.client.on("session_confirm", self.confirmed.put_nowait)
        self.client.on("disconnect", lambda *reason: self.closed.set())

    async def connect(self, auth: dict[str, Any] | None, origin: str | None = None) -> None:
        headers = {"Origin": origin if origin is not None else page_origin(self.chat_stack)}
        await self.client.connect(
            self.chat_stack.rasa_url,
            socketio_path="/socket.io",
            transports=["websocket"],
            auth=auth,
            headers=headers,
            wait_timeout=10,
        )

    async def session(self, asked_for: str | None = None) -> str:
        await self.client.emit("session_request", {"session_id": asked_for} if asked_for else {})
        return str(await asyncio.wait_for(self.confirmed.get(), REPLY_SECONDS))

    async def say(self, message: str, **extra: Any) -> None:
        await self.client.emit("user_uttered", {"message": message, **extra})

    async def expect(self, text: str) -> dict[str, Any]:
        """Waits for an assistant's message that contains `text` (skipping others); returns it."""
        deadline = time.monotonic() + REPLY_SECONDS
        seen: list[str] = []
        while True:
            try:
                message = await asyncio.wait_for(self.heard.get(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                raise AssertionError(f"never heard {text!r}; heard {seen}") from None
            seen.append(str(message.get("text")))
            if text in str(message.get("text")):
                return message

    async def renew(self, token: str) -> bool:
        return bool(await self.client.call(RENEW_EVENT, {"token": token}, timeout=REPLY_SECONDS))

    async def silent_for(self, seconds: float) -> list[dict[str, Any]]:
        """Whatever the assistant says within `seconds` (expected: nothing)."""
        await asyncio.sleep(seconds)
        return [self.heard.get_nowait() for _ in range(self.heard.qsize())]

    async def close(self) -> None:
        if self.client.connected:
            await self.client.disconnect()


@pytest.fixture
async def sockets(chat_stack: ChatStack) -> AsyncIterator[Callable[[], Socket]]:
    made: list[Socket] = []

    def make() -> Socket:
        made.append(Socket(chat_stack))
        return made[-1]

    yield make
    for socket in made:
        await socket.close()


def rest(
    chat_stack: ChatStack, body: dict[str, Any], headers: dict[str, str], query: str = ""
) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{chat_stack.rasa_url}/webhooks/rest/webhook{query}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def conversation_id() -> str:
    return f"identity-{uuid.uuid4().hex[:12]}"


# -- the REST channel ---------------------------------------------------------------------------


def test_the_rest_channel_refuses_a_request_without_its_bearer_token(chat_stack: ChatStack) -> None:
    sender = conversation_id()
    body = {"sender": sender, "message": "help"}
    good = chat_stack.access.rest_token
    for headers, query in [
        ({}, ""),
        ({"Authorization": "Bearer not-the-token"}, ""),
        ({"Authorization": f"Basic {good}"}, ""),
        ({"Authorization": f"Bearer {good[:-1]}"}, ""),
        ({}, "?" + urllib.parse.urlencode({"token": good})),  # never from the URL
    ]:
        status, answer = rest(chat_stack, body, headers, query)
        assert status == 401, (headers, query, answer)
    assert user_texts(chat_stack, sender) == []  # nothing reached the conversation

    status, answer = rest(chat_stack, body, chat_stack.access.rest_headers())
    assert status == 200 and any("Here's what I can do" in str(m.get("text")) for m in answer), answer
    assert user_texts(chat_stack, sender) == ["help"]


def test_a_one_megabyte_message_is_refused_while_others_keep_their_latency(
    chat_stack: ChatStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1 MB message never reaches Rasa's NLU or the action server (413 at the channel), and other
    conversations are answered as fast while such messages arrive. The figures are printed."""
    headers = chat_stack.access.rest_headers()
    huge_sender = conversation_id()
    huge = {"sender": huge_sender, "message": "yes " * 262_144}  # 1 MiB of words

    def help_latencies(count: int) -> list[float]:
        taken = []
        for _ in range(count):
            started = time.monotonic()
            status, answer = rest(chat_stack, {"sender": conversation_id(), "message": "help"}, headers)
            assert status == 200 and answer, answer
            taken.append(time.monotonic() - started)
        return taken

    def median_ms(values: list[float]) -> float:
        return sorted(values)[len(values) // 2] * 1000

    quiet = help_latencies(8)
    refusals: list[tuple[int, float]] = []

    def flood() -> None:
        for _ in range(6):
            started = time.monotonic()
            status, _ = rest(chat_stack, huge, headers)
            refusals.append((status, time.monotonic() - started))

    async def both() -> list[float]:
        flooding = asyncio.to_thread(flood)
        measuring = asyncio.to_thread(help_latencies, 8)
        _, during = await asyncio.gather(flooding, measuring)
        return during

    during = asyncio.run(both())
    assert [status for status, _ in refusals] == [413] * 6
    assert user_texts(chat_stack, huge_sender) == []  # nothing of it reached the conversation
    with capsys.disabled():  # the figure is part of the run's output, as the issue asks
        print(
            f"\n1 MB messages refused (413) in {median_ms([t for _, t in refusals]):.1f} ms (median of 6); "
            f"other conversations' turn: {median_ms(quiet):.0f} ms median before, {median_ms(during):.0f} ms "
            "while the 1 MB messages arrived"
        )


# -- the socket.io channel ------------------------------------------------------------------------


async def test_a_socket_without_a_valid_token_is_refused(
    chat_stack: ChatStack, sockets: Callable[[], Socket]
) -> None:
    conversation = conversation_id()
    refused = {
        "no token": None,
        "an empty token": {"token": ""},
        "another key": {"token": token(chat_stack, conversation, key="another key, also 32 chars long....")},
        "expired": {"token": token(chat_stack, conversation, exp=int(time.time()) - 30)},
        "no expiry": {
            "token": jwt.encode({"sub": conversation}, chat_stack.access.chat_key, algorithm="HS256")
        },
        "unsigned": {
            "token": jwt.encode({"sub": conversation, "exp": int(time.time()) + 60}, None, algorithm="none")
        },
        "no subject": {"token": token(chat_stack, None)},  # type: ignore[arg-type]
        # Signed with the right key, but not for this channel or not by the page.
        "no audience": {"token": token(chat_stack, conversation, aud=None)},
        "another audience": {"token": token(chat_stack, conversation, aud="rasa-http-api")},
        "no issuer": {"token": token(chat_stack, conversation, iss=None)},
        "an issuer not allowed": {"token": token(chat_stack, conversation, iss="http://evil.example")},
        # An allowed page's, but not the one that connects (the chat page's spare port is allowed).
        "another page's": {
            "token": token(chat_stack, conversation, iss=f"http://127.0.0.1:{chat_stack.spare_page_port}")
        },
    }
    for what, auth in refused.items():
        with pytest.raises(socketio.exceptions.ConnectionError):
            await sockets().connect(auth)
            pytest.fail(f"a socket with {what} was let in")
    assert user_texts(chat_stack, conversation) == []

    page = sockets()
    await page.connect({"token": token(chat_stack, conversation)})
    assert await page.session() == conversation


async def test_a_socket_from_another_origin_is_refused_even_with_a_valid_token(
    chat_stack: ChatStack, sockets: Callable[[], Socket]
) -> None:
    conversation = conversation_id()
    auth = {"token": token(chat_stack, conversation)}
    rasa_port = urlsplit(chat_stack.rasa_url).port
    for origin in (
        "http://evil.example",
        f"http://127.0.0.1:{rasa_port}",
        "null",
        page_origin(chat_stack) + "/",
    ):
        with pytest.raises(socketio.exceptions.ConnectionError):
            await sockets().connect(auth, origin=origin)
            pytest.fail(f"a socket from {origin} was let in")
    page = sockets()
    await page.connect(auth)
    assert await page.session() == conversation


async def test_a_socket_is_closed_when_its_token_expires_unless_the_page_renews_it(
    chat_stack: ChatStack, sockets: Callable[[], Socket]
) -> None:
    """A token that expired 7 s ago still opens a socket (10 s of clock skew are allowed), and the
    channel closes it 3 s later. Renewed on the open socket, with a
    token for the same conversation and user, it stays open; a renewal for another conversation or
    user, or an unusable token, is refused and changes nothing."""
    conversation = conversation_id()
    almost = int(time.time()) + 3 - CLOCK_SKEW_SECONDS  # good for 3 more seconds
    ending, renewed = sockets(), sockets()
    await ending.connect({"token": token(chat_stack, conversation, exp=almost)})
    await renewed.connect({"token": token(chat_stack, conversation, exp=almost + 1)})
    assert await ending.session() == conversation and await renewed.session() == conversation
    assert not await renewed.renew(token(chat_stack, conversation_id()))  # another conversation
    assert not await renewed.renew(token(chat_stack, conversation, user="mallory"))  # another user
    assert not await renewed.renew(token(chat_stack, conversation, aud="rasa-http-api"))
    assert await renewed.renew(token(chat_stack, conversation))

    await asyncio.wait_for(ending.closed.wait(), REPLY_SECONDS)  # closed by the channel
    assert not ending.client.connected
    await asyncio.sleep(max(0.0, almost + 1 + CLOCK_SKEW_SECONDS + 1 - time.time()))  # past the first expiry
    assert renewed.client.connected and not renewed.closed.is_set()
    await renewed.say("help")
    await renewed.expect("Here's what I can do")
    assert user_texts(chat_stack, conversation) == ["help"]


async def test_a_socket_cannot_reach_a_conversation_its_token_does_not_name(
    chat_stack: ChatStack, sockets: Callable[[], Socket]
) -> None:
    theirs, mine = conversation_id(), conversation_id()
    victim = sockets()
    await victim.connect({"token": token(chat_stack, theirs)})
    await victim.session()
    await victim.say("help")
    await victim.expect("Here's what I can do")

    intruder = sockets()
    await intruder.connect({"token": token(chat_stack, mine)})
    # Rasa's own channel would confirm any session id asked for; this one answers with the token's.
    assert await intruder.session(asked_for=theirs) == mine
    await intruder.say("/affirm", session_id=theirs)  # naming the other conversation: dropped
    await intruder.say("who is dana@example.com?", session_id=theirs)
    assert await intruder.silent_for(3.0) == []
    assert await victim.silent_for(0.1) == []  # nothing reached the other conversation's room
    assert user_texts(chat_stack, theirs) == ["help"]
    assert user_texts(chat_stack, mine) == []


# -- whose yes counts ---------------------------------------------------------------------------------


async def test_a_yes_from_anyone_but_the_person_asked_writes_nothing(
    chat_stack: ChatStack, sockets: Callable[[], Socket]
) -> None:
    conversation = conversation_id()
    mark = chat_stack.store.mark()
    person = sockets()
    await person.connect({"token": token(chat_stack, conversation)})
    await person.session()
    note = f"Asked about the invoice (identity test {conversation})."
    await person.say(f"log a call with {DANA}")
    await person.expect("What should the note say?")
    await person.say(note)
    question = await person.expect(question_for(note))
    payloads = [reply["payload"] for reply in question["quick_replies"]]
    assert payloads == ["/deny", "/affirm", "yes, and don't ask again today"]  # the skill allows remembering

    # The REST channel's holder answers for the conversation, pretending in the metadata to be the page.
    forged = {USER_KEY: f"socketio:{conversation}"}
    body = {"sender": conversation, "message": "/affirm", "metadata": forged}
    status, answer = rest(chat_stack, body, chat_stack.access.rest_headers())
    assert status == 200 and [m.get("text") for m in answer] == [NOT_YOURS], answer
    # A socket with the conversation's token but another user's name (another login) is no better.
    other_user = sockets()
    await other_user.connect({"token": token(chat_stack, conversation, user="mallory")})
    await other_user.session()
    await other_user.say("/affirm")
    await other_user.expect(NOT_YOURS)
    await other_user.say(payloads[2])  # nor can they give the person's permission to skip asking
    await other_user.expect(NOT_YOURS)
    assert chat_stack.store.notes_after(mark) == []  # nothing written

    refused = [
        entry
        for entry in map(json.loads, chat_stack.audit_log.read_text().splitlines())
        if entry["conversation"] == conversation and entry["decision"] == "refused"
    ]
    assert [(e["user"], e["answered_by"]) for e in refused] == [
        (f"socketio:{conversation}", "rest:operator"),
        (f"socketio:{conversation}", "socketio:mallory"),
        (f"socketio:{conversation}", "socketio:mallory"),
    ]
    assert not [
        e
        for e in map(json.loads, chat_stack.audit_log.read_text().splitlines())
        if e["conversation"] == conversation and e["decision"] == "permission_granted"
    ]

    # The person's own yes: asked again (other messages came in between), then saved once.
    await person.say("/affirm")
    await person.expect(ASKED_AGAIN)
    await person.expect(question_for(note))
    await person.say("/affirm")
    await person.expect(SAVED)
    contact = chat_stack.store.contact(DANA)
    assert contact is not None
    assert chat_stack.store.notes_after(mark) == [StoredNote(contact.contact_id, note)]
