"""A server's questions asked through the executor, against the real test server in both eras
(tests/fixtures/era_server.py): the confirmation first, then the server's form or URL over the next
turns, then the call completed with the answers, written once. A 2026-07-28 server's call is sent
again with the answers (input-required); a 2025-11-25 server's call is kept open in this process
while the person answers (mcp_bridge.server_questions.waiting_calls), and an answer that comes after
the wait ran out, or to a process that does not hold the call, is told so (the server heard cancel)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.confirmation.decisions import Decision
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.record.database import open_database
from mcp_bridge.record.store import Record
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
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


@pytest.fixture(params=["modern", "legacy"])
def era(request: pytest.FixtureRequest) -> procs.ServiceProcess:
    """The test server in each era (2026-07-28, then 2025-11-25)."""
    server: procs.ServiceProcess = request.getfixturevalue(request.param)
    return server


def writes(server: procs.ServiceProcess) -> list[str]:
    texts: list[str] = httpx2.get(procs.base_url(server.url) + "/writes", timeout=5.0).json()["texts"]
    return texts


def calls(server: procs.ServiceProcess) -> int:
    methods: list[str] = httpx2.get(procs.base_url(server.url) + "/methods", timeout=5.0).json()
    return methods.count("tools/call")


@pytest.fixture
async def chat_with(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Executor] = []

    def make(
        server: procs.ServiceProcess, tool: str, *, user: str | None = "rest:dana", wait: float | None = None
    ) -> Conversation:
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
            # Every executor of a test one deployment's: one record (a database file they share).
            record=Record(open_database(str(tmp_path / "record.sqlite3"))),
        )
        if wait is not None:
            executor.tools.runtime.waiting.wait_seconds = wait
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
    era: procs.ServiceProcess, chat_with: Any
) -> None:
    modern = era
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
    era: procs.ServiceProcess, chat_with: Any, how: str
) -> None:
    modern = era
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
    era: procs.ServiceProcess, chat_with: Any, reply: str, written: list[str]
) -> None:
    modern = era
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
    era: procs.ServiceProcess, chat_with: Any
) -> None:
    modern = era
    chat = chat_with(modern, "book_visit")
    await chat.start("book_visit")
    asked(await chat.yes())
    sent = calls(modern)
    # Someone else answering is refused; the question stays for the person asked.
    chat.user = "rest:mallory"
    refused = await chat.say("2026-12-03")
    assert refused.outcome == "refused" and chat.slots[ELICITATION_SLOT] is not None
    chat.user = "rest:dana"
    # A copy edited in the tracker (other arguments) changes nothing: the action server's record holds the
    # question. Another message came between (mallory's), so it is asked again before a reply counts.
    chat.slots[ELICITATION_SLOT] = {**chat.slots[ELICITATION_SLOT], "arguments": {"contact": "eve"}}
    again = await chat.say("2026-12-03")
    assert again.outcome == "pending" and asked(again)["field"] == "Day"
    assert calls(modern) == sent
    before = writes(modern)
    for reply in ("2026-12-03", "3", "no"):
        await chat.say(reply)
    done = await chat.say("skip")
    assert responses(done) == ["utter_item_saved"], done
    assert writes(modern)[len(before) :] == ["visit dana 2026-12-03 x3 parking=False "]  # never eve


async def test_on_a_2025_11_25_server_the_call_stays_open_while_the_person_answers(
    legacy: procs.ServiceProcess, chat_with: Any
) -> None:
    chat = chat_with(legacy, "book_visit")
    runtime = chat.executor.tools.runtime
    before, sent = writes(legacy), calls(legacy)
    await chat.start("book_visit")
    assert asked(await chat.yes())["field"] == "Day"
    # One tools/call, open at the server and kept open here, and nothing written yet.
    assert calls(legacy) == sent + 1 and len(runtime.waiting) == 1
    handle = chat.slots[ELICITATION_SLOT]["handle"]
    assert handle and chat.slots[ELICITATION_SLOT]["request_state"] is None
    for answer in ("2026-12-03", "3", "yes"):
        await chat.say(answer)
    assert writes(legacy) == before
    done = await chat.say("skip")
    assert responses(done) == ["utter_item_saved"], done
    assert calls(legacy) == sent + 1  # the same call, never sent twice
    assert writes(legacy)[len(before) :] == ["visit dana 2026-12-03 x3 parking=True "]
    assert len(runtime.waiting) == 0


async def test_an_answer_after_the_wait_ran_out_is_told_the_server_heard_cancel(
    legacy: procs.ServiceProcess, chat_with: Any, tmp_path: Path
) -> None:
    chat = chat_with(legacy, "book_visit", wait=0.5)
    runtime = chat.executor.tools.runtime
    before = writes(legacy)
    await chat.start("book_visit")
    asked(await chat.yes())
    await asyncio.sleep(1.5)  # the callback gave up: the server heard cancel, the tool decided
    assert len(runtime.waiting) == 0
    for answer in ("2026-12-03", "3", "yes"):
        await chat.say(answer)
    late = await chat.say("skip")
    assert late.outcome == "unavailable"
    assert responses(late) == ["utter_elicitation_lapsed"]
    assert late.say[0].variables["tool_name"] == "book_visit"
    assert chat.slots[ELICITATION_SLOT] is None
    assert writes(legacy) == before  # this tool writes nothing on cancel (its choice)
    audit = (tmp_path / "audit.jsonl").read_text()
    assert "the server stopped waiting for the answer (told cancel)" in audit


async def test_an_answer_that_reaches_another_process_is_told_the_server_stopped_waiting(
    legacy: procs.ServiceProcess, chat_with: Any
) -> None:
    asking = chat_with(legacy, "book_visit")
    await asking.start("book_visit")
    asked(await asking.yes())
    # Another action-server process (same seal key, no waiting call) gets the answer turn.
    other = chat_with(legacy, "book_visit")
    other.slots = dict(asking.slots)
    other.user_turn = asking.user_turn
    for answer in ("2026-12-03", "3", "yes"):
        await other.say(answer)
    late = await other.say("skip")
    assert responses(late) == ["utter_elicitation_lapsed"]
    assert len(asking.executor.tools.runtime.waiting) == 1  # still waiting where it was asked ...
    await asking.executor.aclose()  # ... until that process closes: the call ends, nothing leaks
    assert len(asking.executor.tools.runtime.waiting) == 0


async def test_no_more_calls_are_held_than_the_limit(legacy: procs.ServiceProcess, chat_with: Any) -> None:
    first = chat_with(legacy, "book_visit")
    first.executor.tools.runtime.waiting.limit = 1
    await first.start("book_visit")
    asked(await first.yes())
    # A second conversation on the same process: its question is answered cancel at once.
    second = Conversation(first.executor, "second", user="rest:dana", contact="dana")
    await second.start("book_visit")
    refused = await second.yes()
    assert responses(refused) == ["utter_tool_failed"]
    assert refused.say[0].variables["error"] == "no visit booked: the person chose cancel"
    assert len(first.executor.tools.runtime.waiting) == 1


async def test_a_message_that_is_plainly_not_an_answer_is_handed_back_and_the_question_asked_again(
    era: procs.ServiceProcess, chat_with: Any
) -> None:
    chat = chat_with(era, "book_visit")
    before = writes(era)
    await chat.start("book_visit")
    asked(await chat.yes())
    held = dict(chat.slots[ELICITATION_SLOT])
    # Does not fit a date, and the NLU is sure it is another request: the bot's to handle.
    other = await chat.say("who is dana@example.com?", "lookup_contact", 0.95)
    assert other.outcome == "handed_back" and other.say == [] and other.slots == {}
    assert chat.slots[ELICITATION_SLOT] == held
    back = await chat.resume()  # Rasa runs the loop again once the bot has answered
    assert responses(back) == ["utter_elicitation_field"] and asked(back)["field"] == "Day"
    # Without a confident other intent, a reply that does not fit is refused with the reason ...
    unclear = await chat.say("next friday?")
    assert responses(unclear) == ["utter_elicitation_invalid", "utter_elicitation_field"]
    # ... and so is one that is no question or request, however sure the NLU is of another intent.
    wrong = await chat.say("next friday", "goodbye", 0.97)
    assert responses(wrong) == ["utter_elicitation_invalid", "utter_elicitation_field"]
    # ... and a reply that fits is the answer, whatever the NLU thought of it.
    assert asked(await chat.say("2026-12-03", "lookup_contact", 0.95))["field"] == "Attendees"
    for answer in ("2", "no"):
        await chat.say(answer)
    assert responses(await chat.say("skip")) == ["utter_item_saved"]
    assert writes(era)[len(before) :] == ["visit dana 2026-12-03 x2 parking=False "]


LIST_SKILL = """
skill: visits
action: action_visits
description: One visit per contact, asked about in one list.
tools:
  book_visit: mcp:items
tool_constraints:
  - book_visit:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_item
        utter_on_user_denial: utter_item_cancelled
        describe: "Visit {contact}"
steps:
  - execute_tool: book_visit
    for_each: {slot: contacts, as: contact}
    arguments: {contact: {slot: contact}}
    on_success: utter_item_saved
    on_error: utter_tool_failed
"""


async def test_a_call_of_a_list_that_the_server_stops_to_ask_about_keeps_its_question(
    modern: procs.ServiceProcess, tmp_path: Path
) -> None:
    """ "all" to a list of two visits: the server asks about the first; its question stays pending
    (the elicitation slot survives the list's answer), and answering it writes that visit once. The
    second call's own question is not asked over it: that call is not completed, and said so."""
    skills_dir = tmp_path / "skills"
    skills_dir.mkdir()
    (skills_dir / "visits.yml").write_text(LIST_SKILL)
    servers = {"items": MCPServerConfig(name="items", url=modern.url)}
    skills = load_skills(skills_dir, local_tools={}, mcp_servers=servers, responses=None)
    executor = Executor(
        skills,
        ToolBox({}, MCPRuntime(servers, connect_timeout=5.0)),
        audit=AuditLog(tmp_path / "audit.jsonl"),
        seal=Seal(b"k" * 32),
    )
    try:
        chat = Conversation(executor, user="rest:dana", contacts=["dana"], contact=None)
        chat.slots["contacts"] = ["dana", "lee"]
        before = writes(modern)
        assert (await chat.start("visits")).outcome == "pending"
        answered = await chat.say("all", None)
        assert chat.slots[ELICITATION_SLOT] is not None, answered
        assert asked(answered)["field"] == "Day"
        assert writes(modern) == before
        assert asked(await chat.say("2026-12-03"))["field"] == "Attendees"
        assert asked(await chat.say("3"))["field"] == "Parking"
        assert asked(await chat.say("no"))["field"] == "Note"
        done = await chat.say("skip")
        assert "utter_item_saved" in responses(done), done
        # One server question at a time: Lee's visit was not completed, and the person was told.
        assert responses(answered)[0] == "utter_tool_failed"
        assert writes(modern)[len(before) :] == ["visit dana 2026-12-03 x3 parking=False "]
    finally:
        await executor.aclose()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, (120.0, 16)),
        ({"ELICITATION_WAIT_SECONDS": "30", "ELICITATION_MAX_WAITING": "4"}, (30.0, 4)),
        ({"ELICITATION_MAX_HELD": "5"}, (120.0, 5)),  # the setting's name in release 0.2.0
        ({"ELICITATION_MAX_HELD": "5", "ELICITATION_MAX_WAITING": "6"}, (120.0, 6)),
        ({"ELICITATION_WAIT_SECONDS": "soon"}, "ELICITATION_WAIT_SECONDS: 'soon' is not a number"),
        ({"ELICITATION_MAX_WAITING": "0"}, "ELICITATION_MAX_WAITING: must be a positive whole number"),
    ],
)
def test_the_waiting_calls_limits_are_read_at_start_and_a_bad_one_stops_it(
    settings: dict[str, str], expected: tuple[float, int] | str
) -> None:
    from mcp_bridge.action_server.build import build_executor
    from mcp_bridge.config.settings import Settings
    from mcp_bridge.errors import ConfigError

    bot = procs.EXAMPLE_BOT
    env = {
        "ENDPOINTS": str(bot / "endpoints.yml"),
        "SKILLS_DIR": str(bot / "skills"),
        "DOMAIN": str(bot / "domain.yml"),
        "AUDIT_LOG": "",
        "CONFIRMATION_SECRET": "a test secret that is long enough to seal",
        "CRM_MCP_TOKEN": "offline",
        **settings,
    }
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            build_executor(Settings.from_env(env))
        return
    waiting = build_executor(Settings.from_env(env)).tools.runtime.waiting
    assert (waiting.wait_seconds, waiting.limit) == expected


# -- a server's question under the action server's record (the record's issue, case 5) -------------


async def test_a_reply_the_channel_received_before_the_servers_question_answers_nothing(
    modern: procs.ServiceProcess, chat_with: Any
) -> None:
    """The person's earlier signed message (an hour-old reply), copied in as the reply to "Which day?":
    received before the question was asked, it is refused and nothing is sent; the person's own reply,
    in its turn, is the answer."""
    chat = chat_with(modern, "book_visit")
    now = time.time()
    chat.said_at = now  # the request, signed now
    await chat.start("book_visit")
    chat.said_at = now + 1  # the yes, after which the server asks
    asked(await chat.yes())
    sent = calls(modern)
    chat.said_at = now - 3600  # a message the channel received an hour ago
    refused = await chat.say("2026-12-03")
    assert refused.outcome == "refused" and calls(modern) == sent
    chat.user_turn -= 1  # that message was never the person's reply
    chat.said_at = now + 2
    assert asked(await chat.say("2026-12-03"))["field"] == "Attendees"


async def test_a_reply_after_the_servers_question_expired_is_not_used_and_the_server_hears_cancel(
    modern: procs.ServiceProcess, chat_with: Any
) -> None:
    chat = chat_with(modern, "book_visit")
    before = writes(modern)
    await chat.start("book_visit")
    asked(await chat.yes())
    record = chat.executor.record
    stored = await record.open_question(chat.conversation_id)
    assert stored is not None and stored.kind == "server"
    # The question's lifetime (CONFIRMATION_TTL_SECONDS, 300 s by default) passes on the record's clock.
    await record.database.execute(
        "UPDATE record_questions SET asked_at = asked_at - 3600 WHERE id = ?", stored.id
    )
    late = await chat.say("2026-12-03")
    assert responses(late) == ["utter_tool_failed"], late
    assert late.say[0].variables["error"] == "no visit booked: the person chose cancel"
    assert writes(modern) == before and chat.slots[ELICITATION_SLOT] is None


async def test_a_reply_replayed_to_the_servers_next_question_answers_nothing(
    modern: procs.ServiceProcess, chat_with: Any
) -> None:
    """The person's reply to "Which day?" delivered again (a replayed tracker) while "How many?" waits:
    no reply to it (it came in the turn that asked it); asked again, nothing sent."""
    chat = chat_with(modern, "book_visit")
    await chat.start("book_visit")
    asked(await chat.yes())
    assert asked(await chat.say("2026-12-03"))["field"] == "Attendees"
    sent = calls(modern)
    replayed = await chat.executor.answer(chat.turn(None, text="2026-12-03"))  # its id, its turn again
    assert asked(replayed)["field"] == "Attendees" and calls(modern) == sent
