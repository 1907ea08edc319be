"""Loading e2e test-case files: Rasa Pro's format is read as written, and every mistake is named
with its file, test case, step and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.cli.e2e.cases import CaseFileError, SlotExpectation, load_paths
from tests.support.procs import EXAMPLE_BOT

BOT = EXAMPLE_BOT


def write(tmp_path: Path, text: str, name: str = "cases.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_bots_case_files_load() -> None:
    cases = load_paths([BOT / "tests" / "e2e"])
    names = {case.name for case in cases}
    assert {
        "user confirms the note",
        "user denies the note",
        "contact not found, nothing is written",
    } <= names
    assert all(case.steps[0].kind == "user" for case in cases)


def test_rasa_pro_format_with_fixtures_metadata_and_tool_steps(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
fixtures:
  - known_contact:
      contact_email: dana@example.com
  - named:
      contact_name: Dana
metadata:
  - web: {channel: web, locale: en}
  - de: {locale: de}
test_cases:
  - test_case: everything
    fixtures: [known_contact, named]
    metadata: web
    steps:
      - user: "log a call"
      - utter: utter_ask_note_text
      - user: "hallo"
        metadata: de
      - bot: "Save this?"
      - slot_was_set:
          - note_text: hallo
          - requested_slot
      - slot_was_not_set: [contact_id]
      - tool_called: find_contact_by_email
      - tool_called: {tool: add_timeline_note, arguments: {contact_id: 1, text: hallo}}
      - no_tool_called: add_timeline_note
""",
    )
    (case,) = load_paths([path])
    assert case.name == "everything"
    assert case.fixtures == {"contact_email": "dana@example.com", "contact_name": "Dana"}
    kinds = [step.kind for step in case.steps]
    assert kinds == [
        "user",
        "utter",
        "user",
        "bot",
        "slot_was_set",
        "slot_was_not_set",
        "tool_called",
        "tool_called",
        "no_tool_called",
    ]
    first, _, second = case.steps[:3]
    assert first.metadata == {"channel": "web", "locale": "en"}
    assert second.metadata == {"channel": "web", "locale": "de"}  # the step's entry wins
    assert case.steps[4].slots == (
        SlotExpectation("note_text", "hallo", True),
        SlotExpectation("requested_slot"),
    )
    assert case.steps[6].value == "find_contact_by_email" and case.steps[6].arguments == {}
    assert case.steps[7].arguments == {"contact_id": 1, "text": "hallo"}
    assert [step.number for step in case.steps] == list(range(1, 10))
    assert case.steps[3].line == 19 and case.steps[3].text == 'bot: "Save this?"'


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("      - uter: utter_x\n", "step 2 (line 5): unknown step 'uter'"),
        ("      - utter: [a, b]\n", "step 2 (line 5): utter: Input should be a valid string"),
        ("      - utter: a\n        bot: b\n", "step 2 (line 5): a step is exactly one of"),
        ("      - tool_called: {tool: x, args: {}}\n", "step 2 (line 5): tool_called.args: unknown key"),
        ("      - slot_was_set: [{a: 1, b: 2}]\n", "step 2 (line 5): each slot is 'name' or 'name: value'"),
        ("      - user: hi\n        metadata: nope\n", "step 2 (line 5): unknown metadata 'nope'"),
        (
            "      - approval: {by: sam, decides: maybe}\n",
            "step 2 (line 5): approval.decides: Input should be 'approve' or 'refuse'",
        ),
        ("      - approval: {decides: approve}\n", "step 2 (line 5): approval.by: Field required"),
        ("      - approval: {by: 'sam smith', decides: approve}\n", "approval.by: String should match"),
        (
            "      - approval: {by: sam, decides: approve, page_answers: ok}\n",
            "approval.page_answers: Input should be 'decided', 'own_request', 'not_allowed', "
            "'unknown_person' or",
        ),
        (
            "      - approval_expires: {within: 0}\n",
            "approval_expires.within: Input should be greater than 0",
        ),
        ("      - approval_expires: {within: 3600}\n", "approval_expires.within: Input should be less than"),
    ],
)
def test_a_bad_step_is_named_with_file_case_step_and_line(tmp_path: Path, body: str, reason: str) -> None:
    path = write(tmp_path, f"test_cases:\n  - test_case: broken\n    steps:\n      - user: hi\n{body}")
    with pytest.raises(CaseFileError) as caught:
        load_paths([path])
    message = str(caught.value)
    assert message.startswith(f"{path}, test case 'broken' (line 2), "), message
    assert reason in message, message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("test_cases:\n  - test_case: a\n    steps:\n      - utter: x\n", "a case starts with a user step"),
        (
            "test_cases:\n  - test_case: a\n    fixtures: [f]\n    steps: [{user: hi}]\n",
            "unknown fixture 'f'",
        ),
        ("test_cases:\n  - steps: [{user: hi}]\n", "test_case: Field required"),
        (
            "test_cases:\n  - test_case: a\n    steps: [{user: hi}]\n"
            "  - test_case: a\n    steps: [{user: hi}]\n",
            "the name is used twice",
        ),
        ("stories: []\n", "test_cases: Field required"),
        ("test_cases: [\n", "not valid YAML"),
    ],
)
def test_a_bad_case_or_file_is_named(tmp_path: Path, text: str, reason: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(CaseFileError) as caught:
        load_paths([path])
    assert str(caught.value).startswith(str(path)), caught.value
    assert reason in str(caught.value), caught.value


def test_missing_paths_are_named(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="no such file or folder"):
        load_paths([tmp_path / "absent.yml"])
    with pytest.raises(CaseFileError, match="no test-case files"):
        load_paths([tmp_path])


def test_the_runner_imports_nothing_of_the_bot_nor_rasa_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, mcp_bridge.cli, mcp_bridge.cli.e2e.runner, mcp_bridge.cli.e2e.report; "
        "roots = {m.split('.')[0] for m in sys.modules}; "
        "print(sorted(roots & {'crm', 'actions', 'tests', 'rasa_sdk', 'rasa'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# -- how utter / bot steps are matched to a turn's messages (no Rasa needed) ----------------------


def _turn_steps(tmp_path: Path, checks: str) -> list[Any]:
    path = write(tmp_path, f"test_cases:\n  - test_case: t\n    steps:\n      - user: hi\n{checks}")
    (case,) = load_paths([path])
    return list(case.steps)


@pytest.mark.parametrize(
    ("checks", "failing_step"),
    [
        # an utter and a bot step side by side describe one message, in either order
        ('      - utter: utter_a\n      - bot: "A"\n      - utter: utter_b\n', None),
        ('      - bot: "A"\n      - utter: utter_a\n      - bot: "B"\n      - utter: utter_b\n', None),
        # two steps of one kind are two messages
        ("      - utter: utter_a\n      - utter: utter_b\n", None),
        ("      - utter: utter_a\n      - utter: utter_a\n", 3),
        # order matters
        ("      - utter: utter_b\n      - utter: utter_a\n", 2),
        # every message must be described
        ("      - utter: utter_a\n", 2),
        ('      - utter: utter_a\n      - bot: "A"\n', 3),
        # a bot step next to an utter step may describe the following message instead
        ('      - utter: utter_a\n      - bot: "B"\n      - utter: utter_b\n', None),
        ('      - bot: "B"\n      - utter: utter_a\n', 2),
    ],
)
def test_messages_are_described_in_order_and_all_of_them(
    tmp_path: Path, checks: str, failing_step: int | None
) -> None:
    from mcp_bridge.cli.e2e.runner import Message, _check_turn, _Turn

    user, *rest = _turn_steps(tmp_path, checks)
    turn = _Turn(user, messages=[Message("utter_a", "A"), Message("utter_b", "B")])
    failure = _check_turn(turn, rest)
    assert (failure.step.number if failure else None) == failing_step, failure


def test_approval_steps_act_and_name_the_approver_the_decision_and_the_pages_answer(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
test_cases:
  - test_case: approvals
    steps:
      - user: "log a refund"
      - utter: utter_awaiting_approval
      - approval: {by: operator, decides: approve, page_answers: own_request}
      - approval: {by: sam, decides: refuse}
      - utter: utter_approval_refused
      - approval_expires: {within: 20}
""",
    )
    (case,) = load_paths([path])
    own, refuse, wait = case.steps[2], case.steps[3], case.steps[5]
    assert (own.kind, own.value, own.approve, own.page_answers) == (
        "approval",
        "operator",
        True,
        "own_request",
    )
    assert (refuse.value, refuse.approve, refuse.page_answers) == ("sam", False, "decided")
    assert (wait.kind, wait.within) == ("approval_expires", 20.0)
    assert refuse.text == 'approval: {by: "sam", decides: "refuse"}'


def test_approval_steps_need_the_audit_trail_and_the_page(tmp_path: Path) -> None:
    import asyncio

    from mcp_bridge.cli.e2e.runner import RunnerError, Target, run_cases

    path = write(
        tmp_path,
        "test_cases:\n  - test_case: a\n    steps:\n      - user: hi\n"
        "      - approval: {by: sam, decides: approve}\n",
    )
    cases = load_paths([path])
    with pytest.raises(RunnerError, match="audit trail"):
        asyncio.run(run_cases(cases, Target("http://127.0.0.1:9")))
    with pytest.raises(RunnerError, match="--approval-page"):
        asyncio.run(run_cases(cases, Target("http://127.0.0.1:9", audit_log=tmp_path / "a.jsonl")))


def test_an_approvers_password_comes_from_the_environment_or_a_file_never_elsewhere(tmp_path: Path) -> None:
    from mcp_bridge.cli.e2e.approvals import ApproverError, password_for

    assert password_for("sam", tmp_path, {"APPROVER_SAM_PASSWORD": "from-env"}) == "from-env"
    (tmp_path / "approver_sam_password").write_text("from-file\n")
    assert password_for("sam", tmp_path, {}) == "from-file"
    with pytest.raises(ApproverError, match="APPROVER_CAROL_PASSWORD or the file .*approver_carol_password"):
        password_for("carol", tmp_path, {})
