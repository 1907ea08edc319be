"""Every call of a tool the ToolBox resolved is an audit entry of the conversation its context names,
with a digest per argument and never the note text (what `tool_called` / `no_tool_called` read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crm.tools import TOOLS

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import CALLED, AuditLog, argument_digest
from mcp_bridge.skills.files import domain_responses, load_skills
from mcp_bridge.skills.toolbox import ToolBox
from mcp_bridge.tools.context import NOBODY
from tests.support import procs
from tests.support.conversation import Conversation, skills_with_source
from tests.support.procs import EXAMPLE_BOT

BOT = EXAMPLE_BOT


@pytest.mark.parametrize("source", ["local", "mcp:crm"])
async def test_each_dispatched_call_is_recorded_under_its_conversation(
    source: str, crm_mcp: str, crm_tools: Any, tmp_path: Path
) -> None:
    servers = {"crm": MCPServerConfig(name="crm", url=crm_mcp, trusted=True, honours_idempotency_key=True)}
    skills = load_skills(
        skills_with_source(tmp_path / "skills", source),
        local_tools=TOOLS,
        mcp_servers=servers,
        responses=domain_responses(BOT / "domain.yml"),
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(servers), audit=audit), audit=audit)
    note = f"Called about invoice 4471 ({source}, audit test)"
    chat = Conversation(executor, "conv-a", contact_email="dana@example.com", note_text=note)
    try:
        await chat.start()  # looks Dana up, asks about the note
        asked = [e for e in audit.entries() if e["decision"] == CALLED]
        await chat.yes()
        # A call made outside any conversation is recorded as such, not given to the last one.
        lookup = executor.tools.resolve(skills["lookup_contact"], "find_contact_by_email")
        await lookup.call({"email": "x@example.com"}, NOBODY)
    finally:
        await executor.aclose()

    # The question is not a call: only the lookup ran before the "yes".
    assert [e["tool"] for e in asked] == ["find_contact_by_email"]
    calls = [e for e in audit.entries() if e["decision"] == CALLED]
    assert [(e["conversation"], e["tool"], e["source"], e["sent"]) for e in calls] == [
        ("conv-a", "find_contact_by_email", source, True),
        ("conv-a", "add_timeline_note", source, True),
        (None, "find_contact_by_email", source, True),
    ]
    write = calls[1]
    assert write["result"] == "ok"
    assert write["confirmation"]  # the confirmed call carries its confirmation id
    assert write["arguments"]["text"] == argument_digest("text", note)
    assert write["arguments"]["text"] != argument_digest("text", note + " ")
    assert set(write["arguments"]) == {"contact_id", "text"}
    assert note not in (tmp_path / "audit.jsonl").read_text()


async def test_a_call_that_never_reached_the_tool_says_so(crm_rest: str, tmp_path: Path) -> None:
    mcp = procs.crm_mcp(crm_rest).start()
    servers = {"crm": MCPServerConfig(name="crm", url=mcp.url, trusted=True, honours_idempotency_key=True)}
    skills = load_skills(
        skills_with_source(tmp_path / "skills", "mcp:crm"),
        local_tools=TOOLS,
        mcp_servers=servers,
        responses=domain_responses(BOT / "domain.yml"),
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    executor = Executor(skills, ToolBox(TOOLS, MCPRuntime(servers), audit=audit), audit=audit)
    chat = Conversation(executor, "conv-b", contact_email="dana@example.com", note_text="a note")
    try:
        await chat.start()  # the catalogue is known now; the question is pending
        mcp.close()  # the server goes away before the "yes"
        decision = await chat.yes()
    finally:
        mcp.close()
        await executor.aclose()
    assert [say.response for say in decision.say] == ["utter_tool_unavailable"]
    calls = [e for e in audit.entries() if e["decision"] == CALLED]
    assert [(e["tool"], e["sent"], e["result"]) for e in calls] == [
        ("find_contact_by_email", True, "ok"),
        ("add_timeline_note", False, "failed: ServerUnavailableError"),
    ]
