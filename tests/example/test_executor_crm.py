"""The executor against the example CRM, with its tools local and over MCP.

Every test reads the CRM's SQLite store to see what was really written. The executor's rules are
tested in tests/plugin/confirmation/test_executor.py on fixture tools; here, only what the real CRM
adds: its store keeps one note per confirmed call, its lookups and note lists fill the skills' slots
and responses, and its MCP server's annotations decide which of its tools run unasked.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from crm.tools import TOOLS

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.skills.files import domain_responses, load_skills
from mcp_bridge.skills.toolbox import ToolBox
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

    def make() -> Executor:
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
        executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(servers)))
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.aclose()


async def test_yes_writes_exactly_the_confirmed_note_once(make_executor: Any, crm_db: Path) -> None:
    # Characters the example's supervisor rule reads (a check mark or an emoji would wait for the
    # supervisor: tests/plugin/approvals/test_textmatch.py; tests/plugin/confirmation/test_bad_input.py
    # stores those).
    note = 'Follow-up on the Q3 renewal { braces } ${HOME} and "quotes" – “€40” …'
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
