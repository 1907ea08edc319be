"""The resume after a sign-in (mcp_bridge/action_server/sign_in.py, person_actions.py): the one path that
starts a skill as a named person from a message no channel signed (Rasa's API triggers it). So its entity
opens only as what it is, a resume (never a sign-in ticket, state or confirmation sealed with the same key),
and starts at most one question or run: replayed, it starts nothing.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_bridge.action_server.sign_in import open_resume, resume_entity
from mcp_bridge.auth.person import SignedIn
from mcp_bridge.auth.token_store import Keys
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation, responses
from tests.support.fixture_tools import Notebook, local_tools, write_skills

KEYS = Keys.from_secret(b"a token key of at least 32 random bytes for the tests")
PERSON: Any = SimpleNamespace(store=SimpleNamespace(keys=KEYS))
SIGNED = SignedIn("conversation-1", "socketio:dana", "crm", "log_interaction")


def test_a_resume_opens_as_a_resume_in_its_own_conversation_only() -> None:
    entity = resume_entity(PERSON, SIGNED)
    opened = open_resume(PERSON, entity, "conversation-1")
    assert opened is not None and opened.signed == SIGNED and opened.nonce
    assert open_resume(PERSON, entity, "conversation-2") is None
    assert open_resume(PERSON, resume_entity(PERSON, SIGNED), "conversation-1").nonce != opened.nonce  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["start", "state", "confirm", None])
def test_a_sign_in_ticket_state_or_confirmation_never_opens_as_a_resume(kind: str | None) -> None:
    """Sealed with the same key as a resume, for the same conversation and person: another purpose."""
    fields = {"c": "conversation-1", "p": "socketio:dana", "s": "crm", "n": "a-nonce", "k": "log_interaction"}
    if kind is not None:
        fields["t"] = kind
    sealed = KEYS.states.encrypt(json.dumps(fields).encode()).decode()
    assert open_resume(PERSON, sealed, "conversation-1") is None


async def test_a_resume_starts_one_question_and_replayed_starts_nothing(tmp_path: Path) -> None:
    tools = local_tools(Notebook())
    skills = load_skills(write_skills(tmp_path, "local"), local_tools=tools, mcp_servers={}, responses=None)
    executor = Executor(skills, ToolBox(tools, None))
    chat = Conversation(executor, "conversation-1", contact_email="dana@example.com", note_text="hers")
    resumed = replace(
        chat.turn("mcp_signed_in", loop_active=False),
        user="socketio:dana",
        new_message=False,
        message_id="resume:a-nonce",
    )
    first = await chat.executor.start("log_interaction", resumed)
    assert responses(first) == ["utter_confirm_note"]
    again = await chat.executor.start("log_interaction", resumed)  # the same entity triggered again
    assert responses(again) == ["utter_message_used"] and again.outcome == "rejected"
    await executor.aclose()
