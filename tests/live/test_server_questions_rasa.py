"""A server's questions asked in the chat, end to end: a real Rasa server (the example bot's model),
the real action server, and an MCP server that asks (tests/fixtures/era_server.py, 2025-11-25), driven
by `mcp-bridge test e2e`'s runner with the cases in tests/fixtures/e2e/server_questions.yml.

The bot variant swaps the skill behind "who is ...?" (action_lookup_contact, in the example domain)
for one that books a visit: the server's form is asked field by field in the chat while the call is
held open in the action server (one worker), and the call completes with the answers; a decline
writes nothing, and a /back after a completed form brings back no question that runs the call again.

The record issue's cases 5 and 9, in the same stack. Case 5: whoever holds Rasa's API token puts the
person's own earlier signed messages after the server's question and runs the loop; nothing is sent to
the server as the reply, nothing is written, the refusal is audited with its reason, and the person's
own reply works.
Case 9 (no example bot's MCP server has a ``meta_map``; this stack takes one): a reminders server
(tests/fixtures/reminder_server.py, which records each call's ``_meta``) sends the ``contact_email``
slot as ``_meta.user``; the tracker writer changes the slot between the question and the yes, and the
write carries the value sealed with the question.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import yaml

from mcp_bridge.cli.e2e.cases import load_paths
from mcp_bridge.cli.e2e.report import text_report
from mcp_bridge.cli.e2e.runner import Target, run_cases
from tests.live.e2e.e2e_stack import E2EStack, Variant
from tests.support import procs

CASES = procs.REPO_ROOT / "tests" / "fixtures" / "e2e" / "server_questions.yml"

SKILL = """
skill: lookup_contact
action: action_lookup_contact
description: Book a visit with a contact (the server asks for its details).
tools:
  book_visit: mcp:items
tool_constraints:
  - book_visit:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_tool_call
        utter_on_user_denial: utter_tool_call_cancelled
steps:
  - execute_tool: book_visit
    arguments:
      contact: {slot: lookup_email}
    on_error: utter_tool_failed
"""

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def items() -> Iterator[procs.ServiceProcess]:
    with procs.era_mcp("legacy") as server:
        yield server


@pytest.fixture(scope="module")
def reminders() -> Iterator[procs.ServiceProcess]:
    with procs.reminders_mcp() as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, items: procs.ServiceProcess, reminders: procs.ServiceProcess
) -> Iterator[E2EStack]:
    stack = E2EStack(tmp_path_factory.mktemp("questions"))
    try:
        stack.start()
        # The action server reads mcp_servers from the same endpoints.yml (Rasa ignores the key).
        document = yaml.safe_load(stack.endpoints.read_text())
        document["mcp_servers"].append({"name": "items", "url": items.url, "type": "http"})
        document["mcp_servers"].append(
            {
                "name": "reminders",
                "url": reminders.url,
                "type": "http",
                "meta_map": {"from_slots": [{"slot": "contact_email", "param": "user"}]},
            }
        )
        replacement = stack.endpoints.with_name(".endpoints.yml.tmp")
        replacement.write_text(yaml.safe_dump(document, default_style='"', sort_keys=False))
        os.replace(replacement, stack.endpoints)
        skills = stack.mcp_tools().skills
        (skills / "lookup_contact.yml").write_text(SKILL)
        stack.use(Variant("questions", skills))
        stack.wait_for_rasa()
        yield stack
    finally:
        stack.close()


def writes(server: procs.ServiceProcess) -> list[str]:
    texts: list[str] = httpx2.get(procs.base_url(server.url) + "/writes", timeout=5.0).json()["texts"]
    return texts


def test_the_servers_form_is_answered_in_the_chat_and_a_decline_writes_nothing(
    stack: E2EStack, items: procs.ServiceProcess
) -> None:
    assert stack.variant is not None
    target = Target(
        rasa_url=stack.rasa_url,
        rasa_token=stack.access.api_token,
        rest_token=stack.access.rest_token,
        audit_log=stack.audit_log(stack.variant),
        timeout=60.0,
    )
    results = asyncio.run(run_cases(load_paths([CASES]), target, concurrency=1))
    report = text_report(results)
    assert len(results) == 3 and all(result.passed for result in results), report
    # Written once by each answered form (a /back after the second runs it not again); the declined
    # one wrote nothing.
    assert writes(items) == [
        "visit dana@example.com 2026-12-04 x3 parking=True ",
        "visit dana@example.com 2026-12-05 x2 parking=False ",
    ]


# -- the record's case 5: a server's question answered by an old signed message --------------------

INVALID = "That confirmation no longer matches what I asked about"


def say(stack: E2EStack, conversation: str, text: str) -> list[str]:
    """The person (``rest:operator``, the REST channel signs each message) says ``text``."""
    answer = httpx2.post(
        f"{stack.rasa_url}/webhooks/rest/webhook",
        json={"sender": conversation, "message": text},
        headers=stack.access.rest_headers(),
        timeout=60.0,
    )
    assert answer.status_code == 200, answer.text
    return [str(message.get("text", "")) for message in answer.json()]


def rasa_api(stack: E2EStack, method: str, conversation: str, path: str, body: Any = None) -> Any:
    """Rasa's HTTP API with its token: what a tracker writer holds."""
    query = urllib.parse.urlencode({"token": stack.access.api_token})
    where = f"{stack.rasa_url}/conversations/{urllib.parse.quote(conversation)}/{path}?{query}"
    answer = httpx2.request(method, where, json=body, timeout=60.0)
    assert answer.status_code == 200, answer.text
    return answer.json()


def rejected(stack: E2EStack, conversation: str) -> list[str]:
    """The audit trail's reasons for what was rejected in the conversation."""
    assert stack.variant is not None
    lines = stack.audit_log(stack.variant).read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    return [e["result"] for e in entries if e["conversation"] == conversation and e["decision"] == "rejected"]


def test_5_an_old_signed_message_answers_no_servers_question(
    stack: E2EStack, items: procs.ServiceProcess
) -> None:
    conversation = f"record-5-{uuid.uuid4().hex[:10]}"
    before = writes(items)
    asked = say(stack, conversation, "who is dana@example.com?")
    say(stack, conversation, "yes")  # the person's yes: the call runs, and the server asks its form
    say(stack, conversation, "2026-12-06")
    say(stack, conversation, "4")
    asked = say(stack, conversation, "no")
    assert any("Note" in text for text in asked), asked  # the form's last field: any text answers it
    asking = rasa_api(stack, "GET", conversation, "tracker")["events"]
    users = [e for e in asking if e["event"] == "user"]
    request, yes = users[0], users[1]
    assert (request["text"], yes["text"]) == ("who is dana@example.com?", "yes")

    # The person's earlier signed messages, each put right after the server's question (Rasa's API), and
    # the loop run on it: the yes (which answered our question already) and the request (which answered
    # nothing; it started the question).
    for old in (yes, request):
        rasa_api(stack, "PUT", conversation, "tracker/events", [*asking, old])
        said = rasa_api(stack, "POST", conversation, "execute", {"name": "action_confirm_tool"})
        assert [INVALID in str(m.get("text")) for m in said["messages"]] == [True], said["messages"]
    assert writes(items) == before  # nothing was sent to the server as the reply
    assert (
        rejected(stack, conversation) == ["a message the channel received before the question was asked"] * 2
    )

    # The person's own reply (Rasa's execute leaves no action_listen: put back, as after a normal turn):
    # the form's question asked again (a message came between), then answered; the call completes
    # once, with what the person said.
    rasa_api(stack, "POST", conversation, "tracker/events", [{"event": "action", "name": "action_listen"}])
    asked = say(stack, conversation, "skip")
    assert any("Note" in text for text in asked) and writes(items) == before, asked
    say(stack, conversation, "skip")
    assert writes(items) == [*before, "visit dana@example.com 2026-12-06 x4 parking=False "]
    say(stack, conversation, "skip")
    assert writes(items) == [*before, "visit dana@example.com 2026-12-06 x4 parking=False "]


# -- the record's case 9: meta_map.from_slots changed between the question and the yes ---------------

REMINDER_SKILL = """
skill: lookup_contact
action: action_lookup_contact
description: Save a reminder about a contact.
tools:
  create_reminder: mcp:reminders
tool_constraints:
  - create_reminder:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_tool_call
        utter_on_user_denial: utter_tool_call_cancelled
steps:
  - execute_tool: create_reminder
    arguments:
      text: {slot: lookup_email}
    on_error: utter_tool_failed
"""


def calls(server: procs.ServiceProcess) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = httpx2.get(procs.base_url(server.url) + "/calls", timeout=5.0).json()
    return received


def test_9_meta_from_slots_carries_what_was_sealed_with_the_question(
    stack: E2EStack, reminders: procs.ServiceProcess
) -> None:
    skills = stack.mcp_tools().skills
    (skills / "lookup_contact.yml").write_text(REMINDER_SKILL)
    stack.use(Variant("meta", skills))
    conversation = f"record-9-{uuid.uuid4().hex[:10]}"
    said = say(stack, conversation, "who is priya@example.com?")
    assert len(said) == 1 and "priya@example.com" in said[0], said  # asked
    # The slot as the person was asked under (the example domain fills it from the message's email).
    asked_under = rasa_api(stack, "GET", conversation, "tracker")["slots"]["contact_email"]
    assert asked_under == "priya@example.com"
    before = len(calls(reminders))

    # Between the question and the yes, the slot meta_map sends is changed through Rasa's API.
    forged = [{"event": "slot", "name": "contact_email", "value": "admin@example.com"}]
    rasa_api(stack, "POST", conversation, "tracker/events", forged)
    say(stack, conversation, "yes")
    made = [c for c in calls(reminders)[before:] if c["tool"] == "create_reminder"]
    assert [c["meta"].get("user") for c in made] == [asked_under], made
    texts = httpx2.get(procs.base_url(reminders.url) + "/writes", timeout=5.0).json()["texts"]
    assert texts.count("priya@example.com") == 1
    say(stack, conversation, "yes")  # a second yes writes nothing more
    assert len([c for c in calls(reminders)[before:] if c["tool"] == "create_reminder"]) == 1
