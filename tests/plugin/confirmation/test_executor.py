"""The executor's rules, with fixture tools: local, and on a fixture MCP server on a loopback port.

The tools are an in-memory notebook (tests/support/fixture_tools.py), served both ways, so these
tests need nothing of the example bot; every test reads the notebook to see what was really
written. The same rules against the example CRM are tests/example/test_executor_crm.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.confirmation.decisions import ConfirmationPolicy, Turn
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.errors import ToolNotFoundError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.local import ToolFunction
from tests.support import procs
from tests.support.conversation import Conversation, asked_call, forged
from tests.support.fixture_tools import (
    SERVER,
    Notebook,
    NotebookServer,
    NoteResult,
    local_tools,
    servers,
    write_skills,
)

DANA = "dana@example.com"


@pytest.fixture(scope="module")
def book() -> Notebook:
    return Notebook()


@pytest.fixture(scope="module")
def notebook_url(book: Notebook) -> Iterator[str]:
    with NotebookServer(book) as server:
        yield server.url


@pytest.fixture(params=["local", f"mcp:{SERVER}"])
async def make_executor(
    request: pytest.FixtureRequest, notebook_url: str, book: Notebook, tmp_path: Path
) -> AsyncIterator[Callable[..., Executor]]:
    source = request.param
    made: list[Executor] = []

    def make(
        policy: ConfirmationPolicy | None = None,
        clock: Callable[[], float] | None = None,
        audit: AuditLog | None = None,
        tools: dict[str, ToolFunction] | None = None,
    ) -> Executor:
        configured = servers(notebook_url, trusted=True, honours_idempotency_key=True)
        tools = tools or local_tools(book)
        directory = write_skills(tmp_path / f"executor-{len(made)}", source)
        skills = load_skills(directory, local_tools=tools, mcp_servers=configured, responses=None)
        kwargs: dict[str, Any] = {"policy": policy, "audit": audit}
        if clock is not None:
            kwargs["clock"] = clock
        executor = Executor(skills, ToolBox(tools, MCPRuntime(configured)), **kwargs)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.aclose()


async def test_constrained_write_asks_first_and_writes_nothing(make_executor: Any, book: Notebook) -> None:
    note = "Dana called about the VAT rate on invoice 4471."
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text=note)
    decision = await chat.start()
    assert decision.outcome == "pending"
    assert [s.response for s in decision.say] == ["utter_confirm_note"]
    assert decision.say[0].variables["arg_text"] == note
    assert decision.say[0].variables["contact_name"] == "Dana Whitfield"
    pending = asked_call(chat.slots[PENDING_SLOT])
    assert pending["tool"] == "add_timeline_note" and pending["arguments"]["text"] == note
    assert book.notes_for(DANA) == before


async def test_yes_writes_exactly_the_confirmed_note_once(make_executor: Any, book: Notebook) -> None:
    note = 'Follow-up on the Q3 renewal { braces } ${HOME} and "quotes" ✓'
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text=note)
    await chat.start()
    decision = await chat.yes()
    assert decision.outcome == "done"
    assert [s.response for s in decision.say] == ["utter_note_saved"]
    assert book.notes_for(DANA) == [*before, note]
    assert chat.slots[PENDING_SLOT] is None
    assert chat.slots["note_text"] is None and chat.slots["contact_email"] is None
    again = await chat.yes()  # single use: a second "yes" finds nothing pending
    assert again.outcome == "nothing_pending"
    assert book.notes_for(DANA) == [*before, note]


async def test_no_writes_nothing(make_executor: Any, book: Notebook) -> None:
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="Please do not keep this.")
    await chat.start()
    decision = await chat.no()
    assert decision.outcome == "cancelled"
    assert [s.response for s in decision.say] == ["utter_note_cancelled"]
    assert chat.slots[PENDING_SLOT] is None
    assert (await chat.yes()).outcome == "nothing_pending"
    assert book.notes_for(DANA) == before


async def test_absent_contact_is_answered_as_not_found(make_executor: Any, book: Notebook) -> None:
    chat = Conversation(make_executor(), contact_email="ghost@example.com", note_text="Hello")
    decision = await chat.start()
    assert decision.outcome == "not_found"
    assert [s.response for s in decision.say] == ["utter_contact_not_found"]
    assert PENDING_SLOT not in chat.slots or chat.slots[PENDING_SLOT] is None
    assert book.notes_for("ghost@example.com") == []


async def test_yes_or_no_with_nothing_pending(make_executor: Any, book: Notebook) -> None:
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="never asked")
    assert (await chat.yes()).say[0].response == "utter_nothing_pending"
    assert (await chat.no()).say[0].response == "utter_nothing_pending"
    assert book.notes_for(DANA) == before


async def test_yes_after_another_message_asks_again(make_executor: Any, book: Notebook) -> None:
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="asked, then a detour")
    first = (await chat.start()).say[0]
    chat.user_turn += 1  # the person asked something else in between
    decision = await chat.yes()
    assert decision.outcome == "pending"
    assert [s.response for s in decision.say] == ["utter_confirm_again", "utter_confirm_note"]
    assert decision.say[1].variables["arg_text"] == first.variables["arg_text"]
    assert book.notes_for(DANA) == before
    assert (await chat.yes()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "asked, then a detour"]


async def test_late_yes_is_told_it_expired_and_asked_again(
    make_executor: Any, book: Notebook, tmp_path: Path
) -> None:
    """An answer after the question expired writes nothing, says so, is audited as expired, and the
    same call is asked again (with its key): a yes to that writes it once."""
    now = [1000.0]
    audit = AuditLog(tmp_path / "audit.jsonl")
    executor = make_executor(ConfirmationPolicy(ttl_seconds=60), clock=lambda: now[0], audit=audit)
    before = book.notes_for(DANA)
    chat = Conversation(executor, contact_email=DANA, note_text="too late")
    first = (await chat.start()).say[0]
    key = asked_call(chat.slots[PENDING_SLOT])["key"]
    now[0] += 61
    late = await chat.yes()
    assert late.outcome == "pending"
    assert [s.response for s in late.say] == ["utter_confirmation_expired", "utter_confirm_note"]
    assert late.say[1].variables["arg_text"] == first.variables["arg_text"]
    assert asked_call(chat.slots[PENDING_SLOT])["key"] == key
    assert book.notes_for(DANA) == before
    assert [entry["decision"] for entry in audit.entries()][-2:] == ["expired", "asked"]

    now[0] += 61  # an unclear answer after expiry hears the same
    unclear = await chat.say("hmm, maybe", None, 0.3)
    assert [s.response for s in unclear.say] == ["utter_confirmation_expired", "utter_confirm_note"]
    assert (await chat.yes()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "too late"]


async def test_late_no_cancels_without_an_expiry_notice(make_executor: Any, book: Notebook) -> None:
    now = [1000.0]
    executor = make_executor(ConfirmationPolicy(ttl_seconds=60), clock=lambda: now[0])
    before = book.notes_for(DANA)
    chat = Conversation(executor, contact_email=DANA, note_text="late and unwanted")
    await chat.start()
    now[0] += 61
    assert (await chat.no()).outcome == "cancelled"
    assert book.notes_for(DANA) == before


async def test_unsure_yes_asks_again(make_executor: Any, book: Notebook) -> None:
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="mumbled")
    await chat.start()
    assert (await chat.yes(confidence=0.4)).outcome == "pending"
    assert book.notes_for(DANA) == before


async def test_a_tracker_edited_after_the_question_changes_nothing_that_is_written(
    make_executor: Any, book: Notebook
) -> None:
    """The action server's record holds the question: a slot changed after it, or its sealed copy forged
    or broken in the tracker, never changes what a yes writes: exactly the call asked about, once."""
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="the original")
    await chat.start()
    chat.slots["note_text"] = "something else"
    decision = await chat.yes()
    assert decision.outcome == "done" and book.notes_for(DANA) == [*before, "the original"]

    chat = Conversation(make_executor(), contact_email=DANA, note_text="the second")
    await chat.start()
    arguments = asked_call(chat.slots[PENDING_SLOT])["arguments"]
    chat.slots[PENDING_SLOT] = forged(
        chat.slots[PENDING_SLOT], arguments={**arguments, "text": "forged text"}
    )
    chat.slots["note_text"] = "forged text"
    assert (await chat.yes()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "the original", "the second"]
    chat.slots[PENDING_SLOT] = {"tool": "add_timeline_note"}  # a copy of nothing the record holds open
    assert (await chat.yes()).outcome == "rejected"
    assert book.notes_for(DANA) == [*before, "the original", "the second"]


async def test_a_genuine_question_copied_into_another_conversation_writes_nothing(
    make_executor: Any, book: Notebook
) -> None:
    executor = make_executor()
    before = book.notes_for(DANA)
    asked = Conversation(executor, "the-asking-one", contact_email=DANA, note_text="asked elsewhere")
    await asked.start()
    # Same slots, same turn count, the seal untouched: only the conversation differs.
    other = Conversation(executor, "another-one", **asked.slots)
    other.user_turn = asked.user_turn
    decision = await other.yes()
    assert decision.outcome == "rejected"
    assert [say.response for say in decision.say] == ["utter_confirmation_invalid"]
    assert book.notes_for(DANA) == before
    # The same value in its own conversation still confirms: the refusal was the conversation's.
    assert (await asked.yes()).outcome == "done"
    assert len(book.notes_for(DANA)) == len(before) + 1


async def test_an_answer_from_anyone_but_the_person_asked_writes_nothing_and_is_audited(
    make_executor: Any, book: Notebook, tmp_path: Path
) -> None:
    """The seal names who was asked; a yes, a no or a "stop" from another name is refused, and the
    question waits for its person, whose yes then writes once."""
    audit = AuditLog(tmp_path / "audit.jsonl")
    before = book.notes_for(DANA)
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
    assert book.notes_for(DANA) == before
    refusals = [entry for entry in audit.entries() if entry["decision"] == "refused"]
    assert len(refusals) == 9 and {entry["user"] for entry in refusals} == {"socketio:alice"}
    assert {entry["answered_by"] for entry in refusals} == {"rest:operator", "socketio:mallory", None}
    assert all(entry["confirmation"] == asked_call(asked)["id"] for entry in refusals)

    chat.user = "socketio:alice"
    again = await chat.yes()  # other messages came in between: asked again, of her again
    assert again.outcome == "pending" and chat.slots[PENDING_SLOT]["user"] == "socketio:alice"
    assert (await chat.yes()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "hers"]


async def test_who_was_asked_is_sealed(make_executor: Any, book: Notebook) -> None:
    """Rewriting the name in the tracker's copy (to answer as someone else) changes nothing: the record
    holds who was asked; a question asked of nobody named (Rasa's own channels) cannot be answered by a
    named user, nor the other way."""
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), user="socketio:alice", contact_email=DANA, note_text="hers")
    await chat.start()
    chat.slots[PENDING_SLOT] = {**chat.slots[PENDING_SLOT], "user": "rest:operator"}
    chat.user = "rest:operator"
    assert (await chat.yes()).outcome == "refused"

    unnamed = Conversation(make_executor(), contact_email=DANA, note_text="nobody's")
    await unnamed.start()
    assert "user" in unnamed.slots[PENDING_SLOT] and unnamed.slots[PENDING_SLOT]["user"] is None
    unnamed.user = "socketio:alice"
    assert (await unnamed.yes()).outcome == "refused"
    assert book.notes_for(DANA) == before


async def test_name_resolving_to_nothing_fails_loudly_on_yes(
    book: Notebook, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The lookup is local; the write names an MCP server, but this executor has no MCP runtime,
    # so at dispatch add_timeline_note resolves to neither a local function nor an MCP tool.
    directory = write_skills(tmp_path, "local")
    skill = (directory / "log_interaction.yml").read_text()
    (directory / "log_interaction.yml").write_text(
        skill.replace("add_timeline_note: local", "add_timeline_note: mcp:notebook")
    )
    tools = local_tools(book)
    skills = load_skills(directory, local_tools=tools, mcp_servers={SERVER}, responses=None)
    executor = Executor(skills, ToolBox(tools, None))
    before = book.notes_for(DANA)
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
    assert book.notes_for(DANA) == before


async def test_a_server_that_does_not_serve_the_tool_is_asked_about_then_refused_loudly(
    book: Notebook, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The write names a configured, reachable MCP server that serves other tools only: the question
    # is still asked (the constraint is found by name), and the "yes" is refused, naming the tool.
    from mcp_bridge.config.servers import MCPServerConfig

    with procs.reminders_mcp() as other:
        configured = {"archive": MCPServerConfig(name="archive", url=other.url, trusted=True)}
        directory = write_skills(tmp_path, "local")
        skill = (directory / "log_interaction.yml").read_text()
        (directory / "log_interaction.yml").write_text(
            skill.replace("add_timeline_note: local", "add_timeline_note: mcp:archive")
        )
        tools = local_tools(book)
        skills = load_skills(directory, local_tools=tools, mcp_servers=configured, responses=None)
        executor = Executor(skills, ToolBox(tools, MCPRuntime(configured)))
        try:
            before = book.notes_for(DANA)
            chat = Conversation(executor, contact_email=DANA, note_text="must never land either")
            assert (await chat.start()).outcome == "pending"
            with caplog.at_level(logging.ERROR):
                decision = await chat.yes()
        finally:
            await executor.aclose()
    assert decision.outcome == "not_configured"
    assert [s.response for s in decision.say] == ["utter_tool_not_configured"]
    refusals = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("does not serve a tool named 'add_timeline_note'" in m and "REFUSED" in m for m in refusals)
    assert book.notes_for(DANA) == before


async def test_unreachable_mcp_server_tells_the_person_and_writes_nothing(
    book: Notebook, tmp_path: Path
) -> None:
    dead = servers(f"http://127.0.0.1:{procs.free_port()}/mcp")
    tools = local_tools(book)
    skills = load_skills(
        write_skills(tmp_path, f"mcp:{SERVER}"), local_tools=tools, mcp_servers=dead, responses=None
    )
    executor = Executor(skills, ToolBox(tools, MCPRuntime(dead, connect_timeout=2.0)))
    before = book.notes_for(DANA)
    try:
        decision = await executor.start(
            "log_interaction", Turn("t", {"contact_email": DANA, "note_text": "x"}, 1)
        )
    finally:
        await executor.aclose()
    assert decision.outcome == "unavailable"
    assert [s.response for s in decision.say] == ["utter_tool_unavailable"]
    assert book.notes_for(DANA) == before


async def test_lookup_and_notes_skills(
    make_executor: Any, book: Notebook, caplog: pytest.LogCaptureFixture
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


@pytest.mark.parametrize("trusted", [False, True])
async def test_unconstrained_mcp_tool_is_confirmed_unless_trusted_and_read_only(
    notebook_url: str, book: Notebook, tmp_path: Path, trusted: bool
) -> None:
    """Read-only annotations count only from a server marked trusted; a skill may opt out explicitly."""
    configured = servers(notebook_url, trusted=trusted)
    tools = local_tools(book)
    skills_dir = write_skills(tmp_path, f"mcp:{SERVER}")
    skills = load_skills(skills_dir, local_tools=tools, mcp_servers=configured, responses=None)
    executor = Executor(skills, ToolBox(tools, MCPRuntime(configured)))
    try:
        lookup = await Conversation(executor, lookup_email=DANA).start("lookup_contact")
        if trusted:  # the server is vouched for and annotates the lookup read-only
            assert [s.response for s in lookup.say] == ["utter_contact_found"]
        else:
            assert lookup.outcome == "pending"
            assert [s.response for s in lookup.say] == ["utter_confirm_tool_call"]
            assert lookup.say[0].variables["tool_name"] == "find_contact_by_email"
    finally:
        await executor.aclose()

    opted_out = {
        "lookup_contact": (
            "tool_constraints:\n"
            "  - find_contact_by_email:\n"
            "      requires_confirmation:\n"
            "        enabled: false\n"
        )
    }
    skills_dir = write_skills(tmp_path / "opted_out", f"mcp:{SERVER}", opted_out)
    skills = load_skills(skills_dir, local_tools=tools, mcp_servers=configured, responses=None)
    executor = Executor(skills, ToolBox(tools, MCPRuntime(configured)))
    try:
        lookup = await Conversation(executor, lookup_email=DANA).start("lookup_contact")
        assert [s.response for s in lookup.say] == ["utter_contact_found"]
    finally:
        await executor.aclose()


async def test_a_trusted_server_cannot_make_a_write_read_only(
    notebook_url: str, book: Notebook, tmp_path: Path
) -> None:
    """Without a constraint, a tool the trusted server does not annotate read-only is still asked about."""
    configured = servers(notebook_url, trusted=True)
    tools = local_tools(book)
    skills_dir = write_skills(tmp_path, f"mcp:{SERVER}")
    text = (skills_dir / "note_by_id.yml").read_text()
    (skills_dir / "note_by_id.yml").write_text(
        text[: text.index("tool_constraints:")] + text[text.index("steps:") :]
    )
    skills = load_skills(skills_dir, local_tools=tools, mcp_servers=configured, responses=None)
    executor = Executor(skills, ToolBox(tools, MCPRuntime(configured)))
    before = book.notes_for(DANA)
    try:
        chat = Conversation(executor, contact_id=1, note_text="asked about, generically")
        asked = await chat.start("note_by_id")
        assert [s.response for s in asked.say] == ["utter_confirm_tool_call"]
        assert book.notes_for(DANA) == before
        assert (await chat.no()).say[0].response == "utter_tool_call_cancelled"
    finally:
        await executor.aclose()
    assert book.notes_for(DANA) == before


async def test_arguments_the_tool_refuses_are_refused_before_asking(
    make_executor: Any, book: Notebook
) -> None:
    before = book.notes_for(DANA)
    # The write alone: its contact id is the slot as the person's slots carry it.
    chat = Conversation(make_executor(), note_text="fine", contact_id="not a number")
    decision = await chat.start("note_by_id")
    assert decision.outcome == "failed"
    assert [s.response for s in decision.say] == ["utter_tool_failed"]
    assert "contact_id" in decision.say[0].variables["error"]
    assert "not a number" not in decision.say[0].variables["error"]  # the rule, never the value
    assert PENDING_SLOT not in decision.slots or decision.slots[PENDING_SLOT] is None
    assert book.notes_for(DANA) == before


async def test_an_answer_over_the_limit_is_refused_unread_and_nothing_is_written(
    make_executor: Any, book: Notebook
) -> None:
    note = "asked, then a very long answer"
    before = book.notes_for(DANA)
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
    assert book.notes_for(DANA) == before
    # At the limit it is read: the yes writes, once.
    done = await chat.say("yes" + " " * (limit - 3), "affirm")
    assert done.outcome == "done"
    assert book.notes_for(DANA) == [*before, note]


async def test_a_request_over_the_limit_starts_nothing(make_executor: Any, book: Notebook) -> None:
    before = book.notes_for(DANA)
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
    assert book.notes_for(DANA) == before


def answer_lost_once(book: Notebook, *, honours_key: bool) -> dict[str, ToolFunction]:
    """The notebook's local tools with a write whose first answer is lost after it landed: its outcome
    is unknown to the caller. With ``honours_key`` the function takes the idempotency key."""
    tools = local_tools(book)
    lost: list[bool] = []

    def land(contact_id: int, text: str, key: str | None) -> NoteResult:
        result = book.add(contact_id, text, key)
        if not lost:
            lost.append(True)
            raise ConnectionError("the answer was lost on the way back")
        return result

    async def with_key(contact_id: int, text: str, idempotency_key: str | None = None) -> NoteResult:
        return land(contact_id, text, idempotency_key)

    async def without_key(contact_id: int, text: str) -> NoteResult:
        return land(contact_id, text, None)

    tools["add_timeline_note"] = with_key if honours_key else without_key
    return tools


@pytest.mark.parametrize("honours_key", [True, False])
async def test_an_unknown_outcome_is_repeated_once_only_when_the_key_is_honoured(
    book: Notebook, tmp_path: Path, honours_key: bool
) -> None:
    """A repeat under the same key cannot write twice, so it is made; without the key it could, so the
    person hears that the outcome is unknown, and the write that landed stays the only one."""
    tools = answer_lost_once(book, honours_key=honours_key)
    skills = load_skills(write_skills(tmp_path, "local"), local_tools=tools, mcp_servers={}, responses=None)
    executor = Executor(skills, ToolBox(tools, None))
    note = f"answer lost once, key honoured: {honours_key}"
    chat = Conversation(executor, contact_email=DANA, note_text=note)
    await chat.start()
    calls = len(book.calls)
    decision = await chat.yes()
    writes = [call for call in book.calls[calls:] if call[0] == "add_timeline_note"]
    assert book.notes_for(DANA).count(note) == 1
    if honours_key:
        assert decision.outcome == "done"
        assert [s.response for s in decision.say] == ["utter_note_saved"]
        assert len(writes) == 2 and writes[0][1] is not None and writes[0][1] == writes[1][1]
    else:
        assert decision.outcome == "unavailable"
        assert [s.response for s in decision.say] == ["utter_tool_outcome_unknown"]
        assert len(writes) == 1


async def test_a_skill_reaches_only_the_tools_its_source_lines_name(
    notebook_url: str, book: Notebook, tmp_path: Path
) -> None:
    """The runtime serves every tool of the server; a skill resolves only the names it lists."""
    configured = servers(notebook_url, trusted=True)
    tools = local_tools(book)
    skills = load_skills(
        write_skills(tmp_path, f"mcp:{SERVER}"), local_tools=tools, mcp_servers=configured, responses=None
    )
    toolbox = ToolBox(tools, MCPRuntime(configured))
    try:
        lookup = skills["lookup_contact"]
        assert toolbox.resolve(lookup, "find_contact_by_email").source == f"mcp:{SERVER}"
        with pytest.raises(ToolNotFoundError, match="lookup_contact"):
            toolbox.resolve(lookup, "add_timeline_note")
    finally:
        await toolbox.aclose()


# -- who sent the answer: the channel's signature (mcp_bridge.channels.proof) ----------------------


async def test_a_request_no_channel_vouches_for_starts_nothing(make_executor: Any, book: Notebook) -> None:
    """A tracker posted to the action server, or a user event appended through Rasa's API, carries no
    signature that holds: not even the lookup runs, and no question is asked."""
    before = book.notes_for(DANA)
    chat = Conversation(make_executor(), contact_email=DANA, note_text="forged request")
    chat.unvouched = "no channel signature"
    decision = await chat.start()
    assert decision.outcome == "unvouched"
    assert [s.response for s in decision.say] == ["utter_not_vouched"]
    assert chat.slots.get(PENDING_SLOT) is None
    assert book.notes_for(DANA) == before


async def test_a_yes_no_channel_vouches_for_is_refused_and_audited(
    make_executor: Any, book: Notebook, tmp_path: Path
) -> None:
    """The person's question, answered "yes" in a message without a valid signature (a forged
    /webhook call): refused and audited, nothing written; the person's own signed yes then writes once."""
    audit = AuditLog(tmp_path / "audit.jsonl")
    before = book.notes_for(DANA)
    T = time.time()  # the channel's clock (a message older than the record's start window starts nothing)
    chat = Conversation(
        make_executor(audit=audit), contact_email=DANA, note_text="only mine", user="rest:dana"
    )
    chat.said_at = T + 0
    assert (await chat.start()).outcome == "pending"
    for reason in ("no channel signature", "a channel signature of another text"):
        chat.user, chat.said_at, chat.unvouched = None, None, reason
        refused = await chat.yes()
        assert refused.outcome == "refused"
        assert [s.response for s in refused.say] == ["utter_not_vouched"]
        assert book.notes_for(DANA) == before
        entry = audit.entries()[-1]
        assert entry["decision"] == "refused" and reason in entry["result"]
        chat.user_turn -= 1  # the forged message was never the person's
    chat.user, chat.said_at, chat.unvouched = "rest:dana", T + 1, None
    assert (await chat.yes()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "only mine"]


async def test_an_earlier_signed_yes_replayed_into_a_new_question_is_refused(
    make_executor: Any, book: Notebook, tmp_path: Path
) -> None:
    """The person's own signed "yes" to one question, copied into the tracker of a later question:
    its signature holds, but the channel received it before the later question was asked."""
    audit = AuditLog(tmp_path / "audit.jsonl")
    executor = make_executor(audit=audit)
    before = book.notes_for(DANA)
    T = time.time()  # the channel's clock
    first = Conversation(executor, contact_email=DANA, note_text="the first note", user="rest:dana")
    first.said_at = T + 0
    await first.start()
    first.said_at = T + 1  # the yes that is replayed below
    assert (await first.yes()).outcome == "done"
    second = Conversation(executor, contact_email=DANA, note_text="the second note", user="rest:dana")
    second.said_at = T + 100
    assert (await second.start()).outcome == "pending"
    second.said_at = T + 1  # the replay: the same signature, the same text "yes"
    replayed = await second.yes()
    assert replayed.outcome == "refused"
    assert book.notes_for(DANA) == [*before, "the first note"]
    assert "before the question was asked" in audit.entries()[-1]["result"]
    second.user_turn -= 1
    second.said_at = T + 100  # not newer than the message the question was asked in, either
    assert (await second.yes()).outcome == "refused"
    second.user_turn -= 1
    second.said_at = T + 101
    assert (await second.yes()).outcome == "done"
    assert book.notes_for(DANA) == [*before, "the first note", "the second note"]
