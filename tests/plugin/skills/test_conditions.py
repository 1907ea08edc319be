"""A step's ``requires``: Rasa Pro Mantle's condition grammar over the slots
(mcp_bridge/skills/conditions.py), refused when a skill is read unless it is one; a call that it does
not allow never runs."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.errors import ConfigError
from mcp_bridge.skills.conditions import MAX_CONDITION_CHARS, check_condition, holds, parameter_reference
from mcp_bridge.skills.files import SlotArgument, Step, load_skills, step_arguments
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation
from tests.support.fixture_tools import Notebook, local_tools

DANA = "dana@example.com"


@pytest.mark.parametrize(
    ("condition", "slots", "expected"),
    [
        ("session.pay.amount <= 1000", {"amount": 500}, True),
        ("session.pay.amount <= 1000", {"amount": 5000}, False),
        ("session.project.authenticated", {"authenticated": True}, True),
        ("session.project.authenticated", {}, False),
        ("not session.pay.declined", {}, True),
        ("session.pay.reason == 'stolen' and not session.pay.locked", {"reason": "stolen"}, True),
        ("session.pay.reason == 'stolen' or session.pay.amount > 10", {"reason": "lost", "amount": 11}, True),
        ("0 < session.pay.amount < 10", {"amount": 10}, False),
        ("(session.pay.a or session.pay.b) and session.pay.c", {"b": 1, "c": "x"}, True),
        ("session.pay.kind != None", {"kind": "card"}, True),
        # a comparison Python cannot make is false, as in Mantle, so the call does not run
        ("session.pay.amount < 5", {}, False),
        ("session.pay.amount < 5", {"amount": "four"}, False),
    ],
)
def test_conditions_hold_over_slots_as_mantle_reads_them(
    condition: str, slots: dict[str, object], expected: bool
) -> None:
    check_condition(condition, "pay")
    assert holds(condition, slots) is expected


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("amount > 5", "unknown name 'amount'"),
        ("session.amount > 5", "invalid reference"),
        ("session.pay.amount.cents > 5", "invalid reference"),
        ("len(session.pay.notes) > 1", "Call is not allowed"),
        ("session.pay.kind in ['a', 'b']", "only ==, !=, <, <=, > and >= compare"),
        ("session.pay.amount + 1 > 5", "BinOp is not allowed"),
        ("session.pay.amount >", "not a condition"),
        ("__import__('os').system('true')", "Call is not allowed"),
        ("(" * 300 + "session.pay.a" + ")" * 300, "not a condition"),
        ("session.pay.a == " + "1" * MAX_CONDITION_CHARS, f"at most {MAX_CONDITION_CHARS} characters"),
    ],
)
def test_anything_else_is_refused_when_read(condition: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        check_condition(condition, "pay")
    assert holds(condition, {"a": 1, "amount": 10}) is False  # never evaluated as anything but false


@pytest.mark.parametrize("namespace", ["other_skill", "system"])
def test_a_skill_reads_no_memory_but_its_own_and_the_projects(namespace: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"session.{namespace}.amount is another skill's memory")):
        check_condition(f"session.{namespace}.amount > 5", "pay")
    assert check_condition("session.pay.amount > session.project.limit", "pay") == ["amount", "limit"]


def test_a_parameter_is_a_reference_only_when_it_is_exactly_one() -> None:
    assert parameter_reference("session.pay.amount") == ("pay", "amount")
    assert parameter_reference(" session.project.user ") == ("project", "user")
    assert parameter_reference("session.pay") is None
    assert parameter_reference("session.pay.amount + 1") is None
    assert parameter_reference("full") is None


def test_a_requires_that_does_not_hold_stops_the_step_naming_what_is_empty() -> None:
    payee = SlotArgument(slot="payee")
    step = Step(execute_tool="pay", arguments={"to": payee}, requires="session.pay.amount <= 100")
    assert step_arguments(step, {"payee": "Dana", "amount": 50}) == ({"to": "Dana"}, [])
    assert step_arguments(step, {"payee": "Dana"}) == ({"to": "Dana"}, ["amount"])
    assert step_arguments(step, {"payee": "Dana", "amount": 500}) == (
        {"to": "Dana"},
        ["requires session.pay.amount <= 100"],
    )


SKILL = textwrap.dedent(
    """\
    skill: log_interaction
    tools: {find_contact_by_email: local, add_timeline_note: local}
    tool_constraints:
      - add_timeline_note:
          requires_confirmation:
            enabled: true
            utter_for_confirmation: utter_confirm_note
            utter_on_user_denial: utter_note_cancelled
    steps:
      - execute_tool: find_contact_by_email
        arguments: {email: {slot: contact_email}}
        fills: {contact_id: contact_id}
      - execute_tool: add_timeline_note
        arguments: {contact_id: {slot: contact_id}, text: {slot: note_text}}
        requires: "session.log_interaction.consent == 'given'"
        on_missing_argument: utter_ask_consent
        on_success: utter_note_saved
    """
)


def write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "log_interaction.yml").write_text(text, encoding="utf-8")
    return directory


async def test_a_call_its_condition_does_not_allow_is_never_asked_about_nor_run(tmp_path: Path) -> None:
    book = Notebook()
    tools = local_tools(book)
    skills = load_skills(write(tmp_path, SKILL), local_tools=tools, mcp_servers=(), responses=None)
    executor = Executor(skills, ToolBox(tools, None))
    try:
        refused = Conversation(executor, contact_email=DANA, note_text="Called.")
        decision = await refused.start()
        assert decision.outcome == "missing_argument"
        assert [say.response for say in decision.say] == ["utter_ask_consent"]
        assert decision.say[0].variables["error"] == "missing consent"
        assert book.calls == [("find_contact_by_email", None)]

        allowed = Conversation(executor, contact_email=DANA, note_text="Called.", consent="given")
        assert (await allowed.start()).outcome == "pending"
        assert (await allowed.yes()).outcome == "done"
        assert book.notes_for(DANA) == ["Called."]
    finally:
        await executor.aclose()


@pytest.mark.parametrize(
    ("requires", "reason"),
    [
        ("session.other.consent", "steps[1].requires: session.other.consent is another skill's memory"),
        ("consent", "steps[1].requires: not a condition: unknown name 'consent'"),
        (
            "session.log_interaction.contact_id > 0",
            "steps[1].requires: reads 'contact_id', which steps[0] fills: the condition is judged when the "
            "run reaches this step",
        ),
    ],
)
def test_a_requires_is_checked_when_the_skill_is_read(tmp_path: Path, requires: str, reason: str) -> None:
    text = SKILL.replace("\"session.log_interaction.consent == 'given'\"", repr(requires))
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_skills(path, local_tools=local_tools(Notebook()), mcp_servers=(), responses=None)
    assert str(info.value).startswith(f"{path / 'log_interaction.yml'}: {reason}")
