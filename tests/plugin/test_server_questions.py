"""A server's questions asked through the executor, against the real test server (2026-07-28 and
2025-11-25): the confirmation first, then the server's form or URL over the next turns, then the
same call resumed with the answers, written once (tests/fixtures/era_server.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_bridge.audit import AuditLog
from mcp_bridge.config import MCPServerConfig
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.executor import Decision, Executor
from mcp_bridge.runtime import MCPRuntime
from mcp_bridge.sealing import Seal
from mcp_bridge.skills import load_skills
from mcp_bridge.tools import ToolBox
from tests.support import procs
from tests.support.conversation import Conversation, responses

SKILL = """
skill: {skill}
action: action_{skill}
description: A tool that asks the person something.
tools:
  {tool}: mcp:items
tool_constraints:
  - {tool}:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_item
        utter_on_user_denial: utter_item_cancelled
steps:
  - execute_tool: {tool}
    arguments: {arguments}
    on_success: utter_item_saved
    on_error: utter_tool_failed
"""


@pytest.fixture(scope="module")
def modern() -> Iterator[procs.ServiceProcess]:
    with procs.era_mcp("modern") as server:
        yield server


@pytest.fixture(scope="module")
def legacy() -> Iterator[procs.ServiceProcess]:
    with procs.era_mcp("legacy") as server:
        yield server


def writes(server: procs.ServiceProcess) -> list[str]:
    texts: list[str] = httpx2.get(procs.base_url(server.url) + "/writes", timeout=5.0).json()["texts"]
    return texts


def calls(server: procs.ServiceProcess) -> int:
    methods: list[str] = httpx2.get(procs.base_url(server.url) + "/methods", timeout=5.0).json()
    return methods.count("tools/call")


@pytest.fixture
async def chat_with(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Executor] = []

    def make(server: procs.ServiceProcess, tool: str, *, user: str | None = "rest:dana") -> Conversation:
        skills_dir = tmp_path / f"skills-{len(made)}"
        skills_dir.mkdir()
        arguments = "{contact: {slot: contact}}" if tool == "book_visit" else "{}"
        (skills_dir / "s.yml").write_text(SKILL.format(skill=tool, tool=tool, arguments=arguments))
        servers = {"items": MCPServerConfig(name="items", url=server.url)}
        skills = load_skills(skills_dir, local_tools={}, mcp_servers=servers, responses=None)
        executor = Executor(
            skills,
            ToolBox({}, MCPRuntime(servers, connect_timeout=5.0)),
            audit=AuditLog(tmp_path / "audit.jsonl"),
            seal=Seal(b"k" * 32),
        )
        made.append(executor)
        return Conversation(executor, user=user, contact="dana")

    yield make
    for executor in made:
        await executor.aclose()


def asked(decision: Decision) -> dict[str, Any]:
    """The variables of the server's question the decision ends on."""
    assert decision.outcome == "pending", decision
    return dict(decision.say[-1].variables)


async def test_a_confirmed_call_asks_the_servers_form_over_turns_then_writes_once(
    modern: procs.ServiceProcess, chat_with: Any
) -> None:
    chat = chat_with(modern, "book_visit")
    before, sent = writes(modern), calls(modern)
    assert responses(await chat.start("book_visit")) == ["utter_confirm_item"]
    assert calls(modern) == sent  # nothing sent before the yes
    decision = await chat.yes()
    # The yes confirmed the call; the server's question is a new one, and the yes did not answer it.
    assert responses(decision) == ["utter_elicitation_field"]
    question = asked(decision)
    assert question["server"] == "items" and question["field"] == "Day"
    assert chat.slots[PENDING_SLOT] is None and chat.slots[ELICITATION_SLOT] is not None
    assert writes(modern) == before
    wrong = await chat.say("yes")
    assert responses(wrong) == ["utter_elicitation_invalid", "utter_elicitation_field"]
    assert asked(wrong)["field"] == "Day"
    assert asked(await chat.say("2026-12-03"))["field"] == "Attendees"
    assert asked(await chat.say("3"))["field"] == "Parking"
    assert asked(await chat.say("no"))["field"] == "Note"
    assert writes(modern) == before  # nothing written while asking
    done = await chat.say("skip")
    assert responses(done) == ["utter_item_saved"], done
    assert chat.slots[ELICITATION_SLOT] is None
    assert writes(modern)[len(before) :] == ["visit dana 2026-12-03 x3 parking=False "]


@pytest.mark.parametrize("how", ["decline", "cancel", "stop rule"])
async def test_a_declined_or_cancelled_form_goes_back_to_the_server_and_writes_nothing(
    modern: procs.ServiceProcess, chat_with: Any, how: str
) -> None:
    chat = chat_with(modern, "book_visit")
    before = writes(modern)
    await chat.start("book_visit")
    asked(await chat.yes())
    decision = await (chat.drop() if how == "stop rule" else chat.say(how))
    action = "decline" if how == "decline" else "cancel"
    assert responses(decision) == ["utter_tool_failed"], decision
    assert decision.say[0].variables["error"] == f"no visit booked: the person chose {action}"
    assert chat.slots[ELICITATION_SLOT] is None
    assert writes(modern) == before


@pytest.mark.parametrize(("reply", "written"), [("yes", ["connected"]), ("no", [])])
async def test_a_url_is_shown_with_its_domain_and_opened_only_on_consent(
    modern: procs.ServiceProcess, chat_with: Any, reply: str, written: list[str]
) -> None:
    chat = chat_with(modern, "connect_account")
    before = writes(modern)
    await chat.start("connect_account")
    decision = await chat.yes()
    assert responses(decision) == ["utter_elicitation_url"]
    assert asked(decision)["domain"] == "accounts.example.com"
    assert asked(decision)["url"] == "https://accounts.example.com/connect?session=abc"
    unclear = await chat.say("hm?")
    assert responses(unclear) == ["utter_elicitation_invalid", "utter_elicitation_url"]
    result = await chat.say(reply)
    assert responses(result) == (["utter_item_saved"] if written else ["utter_tool_failed"])
    assert writes(modern)[len(before) :] == written


async def test_a_tampered_question_or_another_person_sends_nothing(
    modern: procs.ServiceProcess, chat_with: Any
) -> None:
    chat = chat_with(modern, "book_visit")
    await chat.start("book_visit")
    asked(await chat.yes())
    sent = calls(modern)
    # Someone else answering is refused; the question stays for the person asked.
    chat.user = "rest:mallory"
    refused = await chat.say("2026-12-03")
    assert refused.outcome == "refused" and chat.slots[ELICITATION_SLOT] is not None
    chat.user = "rest:dana"
    # A state edited outside the action server (other arguments) does not verify.
    chat.slots[ELICITATION_SLOT] = {**chat.slots[ELICITATION_SLOT], "arguments": {"contact": "eve"}}
    rejected = await chat.say("2026-12-03")
    assert rejected.outcome == "rejected" and responses(rejected) == ["utter_confirmation_invalid"]
    assert chat.slots[ELICITATION_SLOT] is None
    assert calls(modern) == sent


async def test_on_a_2025_11_25_server_the_question_is_answered_cancel_and_nothing_is_written(
    legacy: procs.ServiceProcess, chat_with: Any
) -> None:
    chat = chat_with(legacy, "book_visit")
    before = writes(legacy)
    await chat.start("book_visit")
    decision = await chat.yes()
    assert responses(decision) == ["utter_tool_failed"]
    assert decision.say[0].variables["error"] == "no visit booked: the person chose cancel"
    assert chat.slots.get(ELICITATION_SLOT) is None
    assert writes(legacy) == before
