"""Only the person's own yes: answers that did not come through the person's channel write nothing.

The chat page's stack (a real Rasa server with the plugin's channels, the action server behind its
token, the MCP server, the CRM). The person asks on the signed socket.io channel; then, while the
question waits, someone who holds the action server's token or Rasa's API token tries to answer it:

* a tracker posted straight to the action server's ``/webhook`` (the conversation's real tracker,
  read from Rasa's API, with "/affirm" appended and the person's name in the metadata; once
  with no signature, once with the signature of the person's own earlier message), with the action
  server's token and without it;
* a user event appended through Rasa's HTTP API, and the confirmation loop run there (``execute``);
* the person's own signed yes to an earlier question, copied into the later question's tracker.

Nothing is written, the audit trail says why, and the person's own yes through the channel then
writes the note once.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mcp_bridge.channels import USER_KEY
from mcp_bridge.channels.proof import PROOF_KEY
from tests.live.browser.conftest import ChatStack, tracker
from tests.live.browser.test_channel_identity import ASKED_AGAIN, DANA, SAVED, Socket, question_for, token
from tests.live.proof.store import StoredNote

NOT_VOUCHED = "it didn't come through a channel that vouches for who sent it"


@pytest.fixture
async def person(chat_stack: ChatStack) -> AsyncIterator[Callable[[str], Any]]:
    made: list[Socket] = []

    async def connect(conversation: str) -> Socket:
        socket = Socket(chat_stack)
        made.append(socket)
        await socket.connect({"token": token(chat_stack, conversation)})
        await socket.session()
        return socket

    yield connect
    for socket in made:
        await socket.close()


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def rasa_api(chat_stack: ChatStack, conversation: str, path: str, body: Any) -> tuple[int, Any]:
    query = urllib.parse.urlencode({"token": chat_stack.access.api_token})
    where = f"{chat_stack.rasa_url}/conversations/{urllib.parse.quote(conversation)}/{path}?{query}"
    return post(where, body)


def audited(chat_stack: ChatStack, conversation: str, decision: str) -> list[dict[str, Any]]:
    entries = map(json.loads, chat_stack.audit_log.read_text().splitlines())
    return [e for e in entries if e["conversation"] == conversation and e["decision"] == decision]


def affirm_event(metadata: dict[str, Any]) -> dict[str, Any]:
    parse = {"text": "/affirm", "intent": {"name": "affirm", "confidence": 1.0}, "entities": []}
    return {"event": "user", "text": "/affirm", "parse_data": parse, "metadata": metadata}


def forged_webhook(state: dict[str, Any], conversation: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """What Rasa would post to run the confirmation loop on a new "/affirm" with ``metadata``."""
    forged = copy.deepcopy(state)
    event = affirm_event(metadata)
    forged["events"] = [*forged["events"], event]
    forged["latest_message"] = {**event["parse_data"], "metadata": metadata}
    forged["latest_action_name"] = "action_listen"
    return {"next_action": "action_confirm_tool", "sender_id": conversation, "tracker": forged, "domain": {}}


def asked_state(chat_stack: ChatStack, conversation: str) -> dict[str, Any]:
    """The tracker once Rasa has stored the question (the bot's words reach the socket first)."""
    deadline = time.monotonic() + 20
    while True:
        state = tracker(chat_stack, conversation)
        if state["slots"].get("pending_confirmation") is not None or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def listening(chat_stack: ChatStack, conversation: str) -> None:
    """Rasa's (deprecated) ``execute`` leaves no ``action_listen`` after the action it ran, so Rasa
    would swallow the person's next message; put it back, as Rasa does after a normal turn."""
    status, _ = rasa_api(
        chat_stack, conversation, "tracker/events", [{"event": "action", "name": "action_listen"}]
    )
    assert status == 200


async def ask(socket: Socket, note: str) -> None:
    await socket.say(f"log a call with {DANA}")
    await socket.expect("What should the note say?")
    await socket.say(note)
    await socket.expect(question_for(note))


async def confirm(socket: Socket) -> None:
    """The person's own yes, asked again first when forged messages came in between."""
    await socket.say("/affirm")
    reply = await socket.expect("")
    if ASKED_AGAIN in str(reply.get("text")):
        await socket.expect("Save this")
        await socket.say("/affirm")
        reply = await socket.expect("")
    assert SAVED in str(reply.get("text")), reply


async def test_a_forged_webhook_or_an_event_through_rasas_api_answers_nothing(
    chat_stack: ChatStack, person: Callable[[str], Any]
) -> None:
    conversation = f"forged-{uuid.uuid4().hex[:12]}"
    mark = chat_stack.store.mark()
    socket = await person(conversation)
    note = f"Only the person may confirm this ({conversation})."
    await ask(socket, note)
    state = asked_state(chat_stack, conversation)
    own = [e for e in state["events"] if e["event"] == "user"][-1]["metadata"]  # the note's message
    assert own[PROOF_KEY] and own[USER_KEY] == f"socketio:{conversation}"
    bearer = {"Authorization": f"Bearer {chat_stack.action_token}"}

    # Posted to the action server: without its token refused at the door, with it refused as unvouched.
    for metadata in ({USER_KEY: own[USER_KEY]}, dict(own)):  # no signature; the note's signature
        body = forged_webhook(state, conversation, metadata)
        status, _ = post(chat_stack.action_url, body)
        assert status == 401
        status, answer = post(chat_stack.action_url, body, bearer)
        assert status == 200, answer
        said = [r.get("response") for r in answer["responses"]]
        assert said == ["utter_not_vouched"], answer
        assert not any(e.get("event") == "active_loop" and e.get("name") is None for e in answer["events"])
    # Through Rasa's HTTP API: a user event with the person's name, and the loop run on it.
    status, _ = rasa_api(
        chat_stack, conversation, "tracker/events", [affirm_event({USER_KEY: own[USER_KEY]})]
    )
    assert status == 200
    status, answer = rasa_api(chat_stack, conversation, "execute", {"name": "action_confirm_tool"})
    assert status == 200, answer
    assert [m.get("text") for m in answer["messages"]] and NOT_VOUCHED in answer["messages"][0]["text"]
    assert chat_stack.store.notes_after(mark) == []

    refused = audited(chat_stack, conversation, "refused")
    assert len(refused) == 3, refused
    assert all("no channel vouches for the answer" in e["result"] for e in refused)
    assert ["no channel signature", "of another text", "no channel signature"] == [
        next(reason for reason in ("no channel signature", "of another text") if reason in e["result"])
        for e in refused
    ]
    assert audited(chat_stack, conversation, "confirmed") == []

    listening(chat_stack, conversation)
    await confirm(socket)  # the person's own yes, through the channel: written once
    contact = chat_stack.store.contact(DANA)
    assert contact is not None
    assert chat_stack.store.notes_after(mark) == [StoredNote(contact.contact_id, note)]


async def test_the_persons_earlier_signed_yes_replayed_into_a_later_question_writes_nothing(
    chat_stack: ChatStack, person: Callable[[str], Any]
) -> None:
    conversation = f"replay-{uuid.uuid4().hex[:12]}"
    mark = chat_stack.store.mark()
    socket = await person(conversation)
    first, second = (f"{which} note of the replay test ({conversation})." for which in ("First", "Second"))
    await ask(socket, first)
    await confirm(socket)
    yes = [e for e in tracker(chat_stack, conversation)["events"] if e["event"] == "user"][-1]
    assert yes["text"] == "/affirm" and yes["metadata"][PROOF_KEY]
    await ask(socket, second)
    asked_state(chat_stack, conversation)

    # The signed yes, copied into the tracker as it is (Rasa's API), and the loop run on it.
    copied = affirm_event(yes["metadata"])
    status, _ = rasa_api(chat_stack, conversation, "tracker/events", [copied])
    assert status == 200
    status, answer = rasa_api(chat_stack, conversation, "execute", {"name": "action_confirm_tool"})
    assert status == 200, answer
    contact = chat_stack.store.contact(DANA)
    assert contact is not None
    assert chat_stack.store.notes_after(mark) == [StoredNote(contact.contact_id, first)]
    refused = audited(chat_stack, conversation, "refused")
    assert [e["result"] for e in refused] == ["a message the channel received before the question was asked"]

    listening(chat_stack, conversation)
    await confirm(socket)
    assert chat_stack.store.notes_after(mark) == [
        StoredNote(contact.contact_id, first),
        StoredNote(contact.contact_id, second),
    ]
