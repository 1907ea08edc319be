"""The executor against the example CRM, with its tools local and over MCP.

Every test reads the CRM's SQLite store to see what was really written. The same rules without
the example (fixture tools, local and on a fixture MCP server) are tests/plugin/test_executor.py.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from crm.tools import TOOLS

from mcp_bridge.audit import AuditLog
from mcp_bridge.config import MCPServerConfig
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.executor import ConfirmationPolicy, Executor, Turn
from mcp_bridge.runtime import MCPRuntime
from mcp_bridge.skills import domain_responses, load_skills
from mcp_bridge.tools import ToolBox
from tests.support import procs
from tests.support.conversation import Conversation, notes_for, skills_with_source
from tests.support.procs import EXAMPLE_BOT

BOT = EXAMPLE_BOT
DANA = "dana@example.com"


@pytest.fixture(params=["local", "mcp:crm"])
async def make_executor(
    request: pytest.FixtureRequest, crm_mcp: str, crm_tools: object, tmp_path: Path
) -> AsyncIterator[Callable[..., Executor]]:
    source = request.param
    made: list[Executor] = []

    def make(
        policy: ConfirmationPolicy | None = None,
        clock: Callable[[], float] | None = None,
        audit: AuditLog | None = None,
    ) -> Executor:
        servers = {
            "crm": MCPServerConfig(name="crm", url=crm_mcp, trusted=True, honours_idempotency_key=True)
        }
        directory = tmp_path / f"executor-{len(made)}"
        directory.mkdir()
        skills = load_skills(
            skills_with_source(directory, source),
            local_tools=TOOLS,
            mcp_servers=servers,
            responses=domain_responses(BOT / "domain.yml"),
        )
        kwargs: dict[str, Any] = {"policy": policy, "audit": audit}
        if clock is not None:
            kwargs["clock"] = clock
        executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(servers)), **kwargs)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.aclose()


async def test_constrained_write_asks_first_and_writes_nothing(make_executor: Any, crm_db: Path) -> None:
    note = "Dana called about the VAT rate on invoice 4471."
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text=note)
    decision = await chat.start()
    assert decision.outcome == "pending"
    assert [s.response for s in decision.say] == ["utter_confirm_note"]
    assert decision.say[0].variables["arg_text"] == note
    assert decision.say[0].variables["contact_name"] == "Dana Whitfield"
    pending = chat.slots[PENDING_SLOT]
    assert pending["tool"] == "add_timeline_note" and pending["arguments"]["text"] == note
    assert notes_for(crm_db, DANA) == before


async def test_yes_writes_exactly_the_confirmed_note_once(make_executor: Any, crm_db: Path) -> None:
    note = 'Follow-up on the Q3 renewal { braces } ${HOME} and "quotes" ✓'
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text=note)
    await chat.start()
    decision = await chat.yes()
    assert decision.outcome == "done"
    assert [s.response for s in decision.say] == ["utter_note_saved"]
    assert notes_for(crm_db, DANA) == [*before, note]
    assert chat.slots[PENDING_SLOT] is None
    assert chat.slots["note_text"] is None and chat.slots["contact_email"] is None
    again = await chat.yes()  # single use: a second "yes" finds nothing pending
    assert again.outcome == "nothing_pending"
    assert notes_for(crm_db, DANA) == [*before, note]


async def test_no_writes_nothing(make_executor: Any, crm_db: Path) -> None:
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="Please do not keep this.")
    await chat.start()
    decision = await chat.no()
    assert decision.outcome == "cancelled"
    assert [s.response for s in decision.say] == ["utter_note_cancelled"]
    assert chat.slots[PENDING_SLOT] is None
    assert (await chat.yes()).outcome == "nothing_pending"
    assert notes_for(crm_db, DANA) == before


async def test_absent_contact_is_answered_as_not_found(make_executor: Any, crm_db: Path) -> None:
    chat = Conversation(make_executor(), contact_email="ghost@example.com", note_text="Hello")
    decision = await chat.start()
    assert decision.outcome == "not_found"
    assert [s.response for s in decision.say] == ["utter_contact_not_found"]
    assert PENDING_SLOT not in chat.slots or chat.slots[PENDING_SLOT] is None
    assert notes_for(crm_db, "ghost@example.com") == []


async def test_yes_or_no_with_nothing_pending(make_executor: Any, crm_db: Path) -> None:
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="never asked")
    assert (await chat.yes()).say[0].response == "utter_nothing_pending"
    assert (await chat.no()).say[0].response == "utter_nothing_pending"
    assert notes_for(crm_db, DANA) == before


async def test_yes_after_another_message_asks_again(make_executor: Any, crm_db: Path) -> None:
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="asked, then a detour")
    first = (await chat.start()).say[0]
    chat.user_turn += 1  # the person asked something else in between
    decision = await chat.yes()
    assert decision.outcome == "pending"
    assert [s.response for s in decision.say] == ["utter_confirm_again", "utter_confirm_note"]
    assert decision.say[1].variables["arg_text"] == first.variables["arg_text"]
    assert notes_for(crm_db, DANA) == before
    assert (await chat.yes()).outcome == "done"
    assert notes_for(crm_db, DANA) == [*before, "asked, then a detour"]


async def test_late_yes_asks_again(make_executor: Any, crm_db: Path) -> None:
    now = [1000.0]
    executor = make_executor(ConfirmationPolicy(ttl_seconds=60), clock=lambda: now[0])
    before = notes_for(crm_db, DANA)
    chat = Conversation(executor, contact_email=DANA, note_text="too late")
    await chat.start()
    now[0] += 61
    assert (await chat.yes()).outcome == "pending"
    assert notes_for(crm_db, DANA) == before


async def test_unsure_yes_asks_again(make_executor: Any, crm_db: Path) -> None:
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="mumbled")
    await chat.start()
    assert (await chat.yes(confidence=0.4)).outcome == "pending"
    assert notes_for(crm_db, DANA) == before


async def test_changed_slot_or_tampered_pending_writes_nothing(make_executor: Any, crm_db: Path) -> None:
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="the original")
    await chat.start()
    chat.slots["note_text"] = "something else"
    decision = await chat.yes()
    assert decision.outcome == "rejected"
    assert decision.say[0].response == "utter_confirmation_invalid"

    chat = Conversation(make_executor(), contact_email=DANA, note_text="the original")
    await chat.start()
    forged = dict(chat.slots[PENDING_SLOT])
    forged["arguments"] = {**forged["arguments"], "text": "forged text"}
    chat.slots[PENDING_SLOT] = forged
    chat.slots["note_text"] = "forged text"
    assert (await chat.yes()).outcome == "rejected"
    chat.slots[PENDING_SLOT] = {"tool": "add_timeline_note"}  # malformed
    assert (await chat.yes()).outcome == "nothing_pending"
    assert notes_for(crm_db, DANA) == before


async def test_a_genuine_question_copied_into_another_conversation_writes_nothing(
    make_executor: Any, crm_db: Path
) -> None:
    executor = make_executor()
    before = notes_for(crm_db, DANA)
    asked = Conversation(executor, "the-asking-one", contact_email=DANA, note_text="asked elsewhere")
    await asked.start()
    # Same slots, same turn count, the seal untouched: only the conversation differs.
    other = Conversation(executor, "another-one", **asked.slots)
    other.user_turn = asked.user_turn
    decision = await other.yes()
    assert decision.outcome == "rejected"
    assert [say.response for say in decision.say] == ["utter_confirmation_invalid"]
    assert notes_for(crm_db, DANA) == before
    # The same value in its own conversation still confirms: the refusal was the conversation's.
    assert (await asked.yes()).outcome == "done"
    assert len(notes_for(crm_db, DANA)) == len(before) + 1


async def test_an_answer_from_anyone_but_the_person_asked_writes_nothing_and_is_audited(
    make_executor: Any, crm_db: Path, tmp_path: Path
) -> None:
    """The seal names who was asked; a yes, a no or a "stop" from another name is refused, and the
    question waits for its person, whose yes then writes once."""
    audit = AuditLog(tmp_path / "audit.jsonl")
    before = notes_for(crm_db, DANA)
    chat = Conversation(
        make_executor(audit=audit), user="socketio:alice", contact_email=DANA, note_text="hers"
    )
    await chat.start()
    asked = dict(chat.slots[PENDING_SLOT])
    assert asked["user"] == "socketio:alice"

    for intruder in ("rest:operator", "socketio:mallory", None):
        chat.user = intruder
        for answer in (chat.yes, chat.no, chat.drop):
            decision = await answer()
            assert decision.outcome == "refused", (intruder, answer)
            assert [say.response for say in decision.say] == ["utter_confirmation_invalid"]
            assert decision.waiting and chat.slots[PENDING_SLOT] == asked  # the question stays as it was
    assert notes_for(crm_db, DANA) == before
    refusals = [entry for entry in audit.entries() if entry["decision"] == "refused"]
    assert len(refusals) == 9 and {entry["user"] for entry in refusals} == {"socketio:alice"}
    assert {entry["answered_by"] for entry in refusals} == {"rest:operator", "socketio:mallory", None}
    assert all(entry["confirmation"] == asked["id"] for entry in refusals)

    chat.user = "socketio:alice"
    again = await chat.yes()  # other messages came in between: asked again, of her again
    assert again.outcome == "pending" and chat.slots[PENDING_SLOT]["user"] == "socketio:alice"
    assert (await chat.yes()).outcome == "done"
    assert notes_for(crm_db, DANA) == [*before, "hers"]


async def test_who_was_asked_is_sealed(make_executor: Any, crm_db: Path) -> None:
    """Rewriting the name in the tracker (to answer as someone else) breaks the seal; a question asked
    of nobody named (Rasa's own channels) cannot be answered by a named user, nor the other way."""
    before = notes_for(crm_db, DANA)
    chat = Conversation(make_executor(), user="socketio:alice", contact_email=DANA, note_text="hers")
    await chat.start()
    chat.slots[PENDING_SLOT] = {**chat.slots[PENDING_SLOT], "user": "rest:operator"}
    chat.user = "rest:operator"
    assert (await chat.yes()).outcome == "rejected"

    unnamed = Conversation(make_executor(), contact_email=DANA, note_text="nobody's")
    await unnamed.start()
    assert "user" in unnamed.slots[PENDING_SLOT] and unnamed.slots[PENDING_SLOT]["user"] is None
    unnamed.user = "socketio:alice"
    assert (await unnamed.yes()).outcome == "refused"
    assert notes_for(crm_db, DANA) == before


async def test_name_resolving_to_nothing_fails_loudly_on_yes(
    crm_db: Path, tmp_path: Path, crm_tools: object, caplog: pytest.LogCaptureFixture
) -> None:
    # The lookup is local; the write names an MCP server, but this executor has no MCP runtime,
    # so at dispatch add_timeline_note resolves to neither a local function nor an MCP tool.
    skill = (BOT / "skills" / "log_interaction.yml").read_text()
    skill = skill.replace("find_contact_by_email: mcp:crm", "find_contact_by_email: local")
    (tmp_path / "log_interaction.yml").write_text(skill)
    skills = load_skills(tmp_path, local_tools=TOOLS, mcp_servers={"crm"}, responses=None)
    executor = Executor(skills, ToolBox(TOOLS, None))
    before = notes_for(crm_db, DANA)
    chat = Conversation(executor, contact_email=DANA, note_text="must never land")
    # The constraint is found by the tool's name, so the question still comes first ...
    assert (await chat.start()).outcome == "pending"
    # ... and the "yes" is refused loudly instead of falling through to anything.
    with caplog.at_level(logging.ERROR):
        decision = await chat.yes()
    assert decision.outcome == "not_configured"
    assert [s.response for s in decision.say] == ["utter_tool_not_configured"]
    refusals = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("add_timeline_note" in m and "log_interaction" in m and "REFUSED" in m for m in refusals)
    assert chat.slots[PENDING_SLOT] is None
    assert notes_for(crm_db, DANA) == before


async def test_unreachable_mcp_server_tells_the_person_and_writes_nothing(
    crm_db: Path, tmp_path: Path, crm_tools: object
) -> None:
    dead = {"crm": MCPServerConfig(name="crm", url=f"http://127.0.0.1:{procs.free_port()}/mcp")}
    skills = load_skills(
        skills_with_source(tmp_path, "mcp:crm"), local_tools=TOOLS, mcp_servers=dead, responses=None
    )
    executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(dead, connect_timeout=2.0)))
    before = notes_for(crm_db, DANA)
    try:
        decision = await executor.start(
            "log_interaction", Turn("t", {"contact_email": DANA, "note_text": "x"}, 1)
        )
    finally:
        await executor.aclose()
    assert decision.outcome == "unavailable"
    assert [s.response for s in decision.say] == ["utter_tool_unavailable"]
    assert notes_for(crm_db, DANA) == before


async def test_lookup_and_notes_skills(
    make_executor: Any, crm_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    executor = make_executor()
    chat = Conversation(executor, lookup_email="PRIYA@example.com")
    found = await chat.start("lookup_contact")
    assert [s.response for s in found.say] == ["utter_contact_found"]
    assert found.say[0].variables["result_name"] == "Priya Raman"
    chat = Conversation(executor, lookup_email="priya@example.com")
    with caplog.at_level(logging.INFO):
        empty = await chat.start("show_notes")
    assert [s.response for s in empty.say] in (["utter_no_notes"], ["utter_recent_notes"])
    missing = await Conversation(executor).start("lookup_contact")
    assert [s.response for s in missing.say] == ["utter_ask_email_for_lookup"]


async def test_unconstrained_mcp_tool_is_confirmed_unless_trusted_and_read_only(
    crm_mcp: str, crm_db: Path, tmp_path: Path
) -> None:
    """Read-only annotations count only from a server marked trusted; a skill may opt out explicitly."""
    skills_dir = skills_with_source(tmp_path, "mcp:crm")
    untrusted = {"crm": MCPServerConfig(name="crm", url=crm_mcp, trusted=False)}
    skills = load_skills(skills_dir, local_tools=TOOLS, mcp_servers=untrusted, responses=None)
    executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(untrusted)))
    try:
        lookup = await Conversation(executor, lookup_email=DANA).start("lookup_contact")
        assert lookup.outcome == "pending"
        assert [s.response for s in lookup.say] == ["utter_confirm_tool_call"]
        assert lookup.say[0].variables["tool_name"] == "find_contact_by_email"
    finally:
        await executor.aclose()

    opted_out = (skills_dir / "lookup_contact.yml").read_text() + (
        "tool_constraints:\n"
        "  - find_contact_by_email:\n"
        "      requires_confirmation:\n"
        "        enabled: false\n"
    )
    (skills_dir / "lookup_contact.yml").write_text(opted_out)
    skills = load_skills(skills_dir, local_tools=TOOLS, mcp_servers=untrusted, responses=None)
    executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(untrusted)))
    try:
        lookup = await Conversation(executor, lookup_email=DANA).start("lookup_contact")
        assert [s.response for s in lookup.say] == ["utter_contact_found"]
    finally:
        await executor.aclose()


async def test_an_answer_over_the_limit_is_refused_unread_and_nothing_is_written(
    make_executor: Any, crm_db: Path
) -> None:
    note = "asked, then a very long answer"
    before = notes_for(crm_db, DANA)
    executor = make_executor()
    limit = executor.reader.max_chars
    chat = Conversation(executor, contact_email=DANA, note_text=note)
    question = (await chat.start()).say[0].response
    # A yes and spaces, one character over: a yes if it were read, so refusing it is the reader's limit.
    refused = await chat.say("yes" + " " * (limit - 2), "affirm")
    assert refused.outcome == "pending"
    assert [s.response for s in refused.say] == ["utter_message_too_long", question]
    assert refused.say[0].variables == {"limit": limit}
    assert chat.slots[PENDING_SLOT] is not None
    assert notes_for(crm_db, DANA) == before
    # At the limit it is read: the yes writes, once.
    done = await chat.say("yes" + " " * (limit - 3), "affirm")
    assert done.outcome == "done"
    assert notes_for(crm_db, DANA) == [*before, note]


async def test_a_request_over_the_limit_starts_nothing(make_executor: Any, crm_db: Path) -> None:
    before = notes_for(crm_db, DANA)
    executor = make_executor()
    chat = Conversation(executor, contact_email=DANA, note_text="taken from a message too long to read")
    chat.user_turn += 1
    long_request = "log a call with dana@example.com: " + "x" * executor.reader.max_chars
    decision = await executor.start("log_interaction", chat.turn("log_interaction", text=long_request))
    assert decision.outcome == "too_long"
    assert [s.response for s in decision.say] == ["utter_message_too_long"]
    assert PENDING_SLOT not in decision.slots  # nothing asked
    # With nothing pending, the confirmation loop refuses it the same way.
    decision = await executor.answer(chat.turn("affirm", text=long_request, loop_active=True))
    assert (decision.outcome, [s.response for s in decision.say]) == ("too_long", ["utter_message_too_long"])
    assert notes_for(crm_db, DANA) == before
