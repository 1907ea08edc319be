"""Questions from a server nobody here wrote, asked in the chat: @modelcontextprotocol/server-everything
(the MCP project's TypeScript reference server, a 2025-11-25 server) asks inside the running call, and
the bridge holds that call open while the person answers over turns
(mcp_bridge.server_questions.waiting_calls).

Its tools: ``trigger-elicitation-request`` (a form of 13 fields of every kind, only ``name``
required; its result echoes what it got, or that the person declined or cancelled) and
``trigger-url-elicitation`` (a URL the person is asked to open). Each runs only after the skill's
confirmation; an answer to the server's question is never that confirmation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.confirmation.decisions import Decision
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support import procs
from tests.support.conversation import Conversation, responses

SKILL = """
skill: {skill}
action: action_{skill}
description: A tool of the reference server that asks the person something.
tools:
  {tool}: mcp:everything
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

FORM = "trigger-elicitation-request"
URL = "trigger-url-elicitation"
CONSENT_URL = "https://consent.example.org/start?flow=1"


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    with procs.everything_mcp() as server:
        yield server.url


@pytest.fixture
async def chat(everything: str, tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Executor] = []

    def make(tool: str) -> Conversation:
        skills_dir = tmp_path / f"skills-{len(made)}"
        skills_dir.mkdir()
        arguments = f"{{url: '{CONSENT_URL}', message: Confirm your account}}" if tool == URL else "{}"
        skill = tool.replace("-", "_")
        (skills_dir / "s.yml").write_text(SKILL.format(skill=skill, tool=tool, arguments=arguments))
        servers = {"everything": MCPServerConfig(name="everything", url=everything)}
        skills = load_skills(skills_dir, local_tools={}, mcp_servers=servers, responses=None)
        executor = Executor(
            skills,
            ToolBox({}, MCPRuntime(servers, connect_timeout=10.0)),
            audit=AuditLog(tmp_path / "audit.jsonl"),
            seal=Seal(b"k" * 32),
        )
        made.append(executor)
        return Conversation(executor, user="rest:dana")

    yield make
    for executor in made:
        await executor.aclose()


def field(decision: Decision) -> str:
    assert decision.outcome == "pending", decision
    assert responses(decision)[-1] == "utter_elicitation_field", decision
    variables = decision.say[-1].variables
    assert variables["server"] == "everything"
    return str(variables["field"])


def result_text(decision: Decision) -> str:
    assert responses(decision) == ["utter_item_saved"], decision
    return str(decision.say[0].variables["result_text"])


async def confirmed(conversation: Conversation, skill: str) -> Decision:
    """Start the skill: its confirmation comes first, and nothing asks the server before the yes."""
    start = await conversation.start(skill)
    assert responses(start) == ["utter_confirm_item"]
    assert conversation.slots.get(ELICITATION_SLOT) is None
    return await conversation.yes()


async def test_its_form_is_asked_field_by_field_and_the_call_completes_with_the_answers(chat: Any) -> None:
    conversation = chat(FORM)
    first = await confirmed(conversation, "trigger_elicitation_request")
    # The yes confirmed the call; the server's question is a new one, and the yes did not answer it.
    assert field(first) == "String"
    assert conversation.slots[PENDING_SLOT] is None and conversation.slots[ELICITATION_SLOT]["handle"]
    assert field(await conversation.say("skip")) == "String"  # name is required: asked again
    replies = {
        "Dana Scully": "Boolean",
        "yes": "String with default",
        "skip": "String with email format",
        "not an email": "String with email format",  # refused with the reason, asked again
        "dana@example.org": "String with uri format",
        "https://dana.example.org": "String with date format",
        "1990-02-23": "Integer",
        "700": "Integer",  # over its maximum of 100
        "7": "Number in range 1-1000",
    }
    for reply, asked_next in replies.items():
        assert field(await conversation.say(reply)) == asked_next, reply
    for reply in ("2.5", "Joey", "Piano, Drums", "hero-3", "skip"):
        await conversation.say(reply)
    text = result_text(await conversation.say("pet-2"))
    assert "User provided the requested information" in text
    for line in ("- Name: Dana Scully", "- Agreed to terms: true", "- Email: dana@example.org"):
        assert line in text
    assert "- Favorite Integer: 7" in text and "- Birthdate: 1990-02-23" in text
    assert '"untitledMultipleSelectEnum": [\n      "Piano",\n      "Drums"\n    ]' in text
    assert conversation.slots[ELICITATION_SLOT] is None
    assert len(conversation.executor.tools.runtime.waiting) == 0


@pytest.mark.parametrize(
    ("how", "heard"), [("decline", "declined"), ("cancel", "cancelled"), ("stop", "cancelled")]
)
async def test_a_decline_or_a_cancel_reaches_it_and_the_call_completes(
    chat: Any, how: str, heard: str
) -> None:
    conversation = chat(FORM)
    field(await confirmed(conversation, "trigger_elicitation_request"))
    answer = await (conversation.drop() if how == "stop" else conversation.say(how))
    text = result_text(answer)
    assert f"User {heard}" in text and f'"action": "{"decline" if how == "decline" else "cancel"}"' in text
    assert "User inputs" not in text  # nothing the person typed went with it
    assert conversation.slots[ELICITATION_SLOT] is None


@pytest.mark.parametrize(("reply", "heard"), [("yes", "accept"), ("no", "decline")])
async def test_its_url_is_shown_with_its_domain_and_accepted_only_on_a_plain_yes(
    chat: Any, reply: str, heard: str
) -> None:
    conversation = chat(URL)
    asked = await confirmed(conversation, "trigger_url_elicitation")
    assert responses(asked) == ["utter_elicitation_url"]
    assert asked.say[0].variables["domain"] == "consent.example.org"
    assert asked.say[0].variables["url"] == CONSENT_URL
    unclear = await conversation.say("what is this?")
    assert responses(unclear) == ["utter_elicitation_invalid", "utter_elicitation_url"]
    text = result_text(await conversation.say(reply))
    assert f'"action": "{heard}"' in text
    assert ("completed the URL elicitation flow" in text) == (heard == "accept")


async def test_nothing_reaches_it_without_the_confirmation(chat: Any) -> None:
    conversation = chat(FORM)
    runtime = conversation.executor.tools.runtime
    invoked: list[str] = []
    invoke = runtime.invoke

    async def counted(server: str, tool: str, *args: Any, **kwargs: Any) -> Any:
        invoked.append(tool)
        return await invoke(server, tool, *args, **kwargs)

    runtime.invoke = counted
    await conversation.start("trigger_elicitation_request")
    # The form's own words are no yes: the confirmation is still pending, nothing was called.
    unclear = await conversation.say("Dana Scully")
    assert unclear.outcome in ("pending", "handed_back") and conversation.slots[PENDING_SLOT] is not None
    denied = await conversation.no()
    assert responses(denied) == ["utter_item_cancelled"]
    assert conversation.slots.get(ELICITATION_SLOT) is None
    assert invoked == [] and len(runtime.waiting) == 0
