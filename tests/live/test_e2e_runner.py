"""`mcp-bridge test e2e` against the real CRM bot: a real Rasa server, action server, MCP server and CRM.

* The bot's own cases (tests/e2e) pass over MCP tools, with the MCP server down, with approvals that
  expire in seconds, and over local tools; approval steps log in to the real approval page.
* The mutation check: the same cases FAIL, naming the case and the step, against a copy of the bot
  whose confirmation is switched off, and against one whose deny action writes the note while it
  says it did not.
* Cases that must fail (tests/fixtures/e2e/should_fail.yml) fail with the step, what was expected
  and what came instead, for every kind of step; the command's report and JUnit XML say the same.

One Rasa server serves every test (it is the slow part); the action server is restarted on the same
port with another variant of the bot between tests.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from mcp_bridge.cli.e2e.cases import load_paths
from mcp_bridge.cli.e2e.report import describe, text_report
from mcp_bridge.cli.e2e.runner import CaseResult, Target, run_cases
from tests.live.e2e import mutants
from tests.live.e2e.e2e_stack import E2EStack, Variant
from tests.support import procs

E2E = procs.EXAMPLE_BOT / "tests" / "e2e"
FIXTURES = procs.REPO_ROOT / "tests" / "fixtures" / "e2e"
# The command of the venv running this (each end of the supported range has its own).
MCP_BRIDGE = Path(sys.executable).parent / "mcp-bridge"

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2EStack]:
    stack = E2EStack(tmp_path_factory.mktemp("e2e"))
    try:
        stack.start()
        stack.use(stack.mcp_tools())
        stack.wait_for_rasa()
        yield stack
    finally:
        stack.close()


def run(stack: E2EStack, variant: Variant, *paths: Path) -> list[CaseResult]:
    if stack.variant != variant:
        stack.use(variant)
    target = Target(
        rasa_url=stack.rasa_url,
        rasa_token=stack.access.api_token,
        rest_token=stack.access.rest_token,
        audit_log=stack.audit_log(variant),
        timeout=60.0,
        approval_page=stack.approval_page_url,
        approver_passwords=stack.passwords,
    )
    return asyncio.run(run_cases(load_paths(paths), target, concurrency=4))


def authors(db: Path) -> list[str | None]:
    """Who each note in the CRM was stored as written by."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return [row[0] for row in conn.execute("SELECT author FROM notes")]


def failures(results: list[CaseResult]) -> dict[str, CaseResult]:
    return {result.case.name: result for result in results if not result.passed}


# -- the bot's own cases --------------------------------------------------------------------------


def test_the_bots_cases_pass_over_mcp_tools_with_mcp_down_and_over_local_tools(stack: E2EStack) -> None:
    mcp = stack.mcp_tools()
    over_mcp = run(stack, mcp, E2E / "cases")
    assert not failures(over_mcp), text_report(over_mcp)
    stack.stop_mcp()
    try:
        mcp_down = run(stack, mcp, E2E / "mcp_down")
    finally:
        stack.start_mcp()
    assert not failures(mcp_down), text_report(mcp_down)
    # Over MCP the bridge holds an OAuth client-credentials token, and the CRM stores its notes as
    # written by that client; the local tools name nobody.
    assert set(authors(stack.db)) == {"crm-bridge"}
    expiring = run(stack, stack.short_approvals(), E2E / "approval_expiry")
    assert not failures(expiring) and len(expiring) == 1, text_report(expiring)
    over_local = run(stack, stack.local_tools(), E2E / "cases")
    assert not failures(over_local), text_report(over_local)
    assert len(over_mcp) == len(over_local) >= 14
    assert set(authors(stack.db)) == {"crm-bridge", None}


# -- the mutation check ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["mcp:crm", "local"])
def test_the_cases_catch_a_switched_off_confirmation(stack: E2EStack, source: str, tmp_path: Path) -> None:
    skills = mutants.confirmation_switched_off(tmp_path / "skills", source)
    results = run(stack, Variant(f"no-confirmation-{source}", skills), E2E / "cases")
    failed = failures(results)
    report = text_report(results)
    # Every case that reaches the question fails at it: the note was saved instead of asked about
    # (alone, or in a list of several calls).
    questions = ("utter: utter_confirm_note", "utter: utter_confirm_calls")
    asking = {
        result.case.name for result in results if any(step.text in questions for step in result.case.steps)
    }
    assert len(asking) >= 11 and set(failed) == asking, report
    for result in failed.values():
        assert result.failure is not None, report
        assert result.failure.step.text in questions, report
        assert result.failure.got.startswith("the bot said utter_note_saved"), report
    assert "user confirms the note  (" in report and "step 5 (line 14): utter: utter_confirm_note" in report
    assert report.rstrip().endswith(f"{len(results) - len(asking)} passed, {len(asking)} failed")


def test_the_cases_catch_a_deny_action_that_writes(stack: E2EStack, tmp_path: Path) -> None:
    skills = stack.mcp_tools().skills
    variant = Variant("deny-that-writes", skills, mutants.deny_that_writes(tmp_path / "mutant"))
    results = run(stack, variant, E2E / "cases")
    failed = failures(results)
    report = text_report(results)
    # The bot still says "Nothing was written": only the check of what was called sees the write.
    assert set(failed) == {
        "user denies the note",
        "unclear answer, asked again, nothing written",
        "an answer over the limit is refused, the question asked again, nothing written",
        "a no with don't ask again grants nothing",
        "an answer that does not decide each call writes nothing and is asked again",  # ends in "none"
    }, report
    for result in failed.values():
        failure = result.failure
        assert failure is not None, report
        assert failure.step.text == "no_tool_called: add_timeline_note", report
        assert failure.got.startswith("add_timeline_note was called: add_timeline_note (mcp:crm, ok"), report
    deny = failed["user denies the note"].failure
    assert deny is not None and deny.step.number == 10, report
    assert 'in answer to step 7 (user: "no")' in report
    assert 'utter_note_cancelled "OK, I won\'t save it. Nothing was written."' in report


# -- the runner's own checks ----------------------------------------------------------------------

# case -> (failing step number, step text, part of "expected", part of "got")
SHOULD_FAIL = {
    "wrong response name": (
        2,
        "utter: utter_ask_contact_email",
        "a message with the response utter_ask_contact_email",
        'the bot said utter_ask_note_text "What should the note say?"',
    ),
    "wrong text": (2, 'bot: "Saved."', 'the text "Saved."', "the bot said utter_nothing_pending"),
    "a message that never came": (
        3,
        "utter: utter_note_saved",
        "a message with the response utter_note_saved",
        "no further message from the bot",
    ),
    "a message no step describes": (
        2,
        "no_tool_called: add_timeline_note",
        "no message (no utter or bot step describes one)",
        "the bot also said utter_nothing_pending",
    ),
    "slot never set": (3, "slot_was_set: [contact_name]", "contact_name set", "contact_name was not set"),
    "slot set to another value": (
        3,
        'slot_was_set: [contact_email: "priya@example.com"]',
        'contact_email: "priya@example.com" set',
        'contact_email was set to "dana@example.com"',
    ),
    "slot set that should not be": (
        3,
        "slot_was_not_set: [contact_email]",
        "contact_email not set",
        'contact_email was set to "dana@example.com"',
    ),
    "tool never called": (
        3,
        "tool_called: add_timeline_note",
        "a call of add_timeline_note",
        "no tool was called",
    ),
    "tool called with another text": (
        5,
        'tool_called: {tool: "add_timeline_note", arguments: {contact_id: 1, text: '
        '"Called about the VAT rate on invoice 4472."}}',
        'a call of add_timeline_note with contact_id=1, text="Called about the VAT rate on invoice 4472."',
        "add_timeline_note (mcp:crm, ok, confirmation ",
    ),
    "tool called that should not be": (
        5,
        "no_tool_called: add_timeline_note",
        "no call of add_timeline_note",
        "add_timeline_note was called: add_timeline_note (mcp:crm, ok",
    ),
    "tool called another number of times": (
        5,
        'tool_called: {tool: "add_timeline_note", times: 2}',
        "exactly 2 call(s) of add_timeline_note",
        "1: add_timeline_note (mcp:crm, ok",
    ),
}


def test_each_kind_of_step_fails_with_the_step_the_expectation_and_what_came(stack: E2EStack) -> None:
    results = run(stack, stack.mcp_tools(), FIXTURES / "should_fail.yml")
    report = text_report(results)
    assert {result.case.name for result in results} == set(SHOULD_FAIL)
    for result in results:
        number, text, expected, got = SHOULD_FAIL[result.case.name]
        assert result.error is None and result.failure is not None, report
        failure = result.failure
        assert (failure.step.number, failure.step.text) == (number, text), report
        assert expected in failure.expected, report
        assert got in failure.got, report
        lines = describe(result)
        assert lines[0].startswith(f"FAIL  {result.case.name}  ({FIXTURES / 'should_fail.yml'}:"), lines
        assert lines[1].startswith(f"  step {number} (line {failure.step.line}): {text}"), lines
    # The wrong argument is named, its value never guessed at: the audit trail holds digests only.
    other_text = next(r for r in results if r.case.name == "tool called with another text")
    assert other_text.failure is not None and "with a different text (other value)" in other_text.failure.got
    assert "contact_id" not in other_text.failure.got
    assert report.rstrip().endswith(f"0 passed, {len(SHOULD_FAIL)} failed")


def test_fixtures_fill_slots_and_metadata_travels_with_the_message(stack: E2EStack) -> None:
    (result,) = run(stack, stack.mcp_tools(), FIXTURES / "fixtures_and_metadata.yml")
    assert result.passed, text_report([result])
    tracker = (
        f"{stack.rasa_url}/conversations/{result.conversation_id}/tracker?token={stack.access.api_token}"
    )
    with urllib.request.urlopen(tracker) as reply:
        events = json.load(reply)["events"]
    first_user = next(index for index, event in enumerate(events) if event["event"] == "user")
    assert events[first_user]["metadata"]["e2e_marker"] == "set-by-test"
    fixture = [(e.get("name"), e.get("value")) for e in events[:first_user] if e["event"] == "slot"]
    assert ("contact_company", "set-by-fixture") in fixture, events[: first_user + 1]


def test_the_command_reports_in_text_and_junit(stack: E2EStack, tmp_path: Path) -> None:
    mcp = stack.mcp_tools()
    if stack.variant != mcp:
        stack.use(mcp)
    junit = tmp_path / "report.xml"
    command = [str(MCP_BRIDGE), "test", "e2e", str(FIXTURES / "should_fail.yml"), str(E2E / "cases")]
    command += ["--rasa-url", stack.rasa_url, "--audit", str(stack.audit_log(mcp)), "--junit", str(junit)]
    command += ["--approval-page", stack.approval_page_url]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False, env=stack.command_env()
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.rstrip().splitlines()
    bot_cases = len(load_paths([E2E / "cases"]))
    assert lines[-1] == f"{bot_cases} passed, {len(SHOULD_FAIL)} failed", done.stdout
    assert "FAIL  wrong text" in done.stdout and "PASS  user denies the note" in done.stdout
    root = ET.parse(junit).getroot()
    expected = (str(bot_cases + len(SHOULD_FAIL)), str(len(SHOULD_FAIL)), "0")
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == expected
    wrong_text = root.find(".//testcase[@name='wrong text']/failure")
    assert wrong_text is not None
    assert wrong_text.get("message", "").startswith('step 2: bot: "Saved.": expected the text "Saved."')


def test_a_wrong_audit_trail_is_pointed_out(stack: E2EStack, tmp_path: Path) -> None:
    mcp = stack.mcp_tools()
    if stack.variant != mcp:
        stack.use(mcp)
    command = [str(MCP_BRIDGE), "test", "e2e", str(E2E / "cases"), "--rasa-url", stack.rasa_url]
    command += ["--approval-page", stack.approval_page_url]
    done = subprocess.run(
        [*command, "--audit", str(tmp_path / "elsewhere.jsonl")],
        capture_output=True,
        text=True,
        timeout=300,
        env=stack.command_env(),
    )
    lines = done.stdout.rstrip().splitlines()
    assert lines[-2].startswith(f"warning: the audit trail {tmp_path / 'elsewhere.jsonl'} holds nothing"), (
        done.stdout
    )
    right = subprocess.run(
        [*command, "--audit", str(stack.audit_log(mcp))],
        capture_output=True,
        text=True,
        env=stack.command_env(),
    )
    assert right.returncode == 0 and "warning" not in right.stdout, right.stdout


def test_an_unreachable_rasa_is_an_error_never_a_pass(tmp_path: Path) -> None:
    nowhere = f"http://{procs.HOST}:{procs.free_port()}"
    target = Target(rasa_url=nowhere, audit_log=tmp_path / "a.jsonl", approval_page=nowhere)
    results = asyncio.run(run_cases(load_paths([E2E / "cases"]), target))
    assert results and all(not r.passed and r.error and "Connect" in r.error for r in results)
    assert text_report(results).rstrip().endswith(f"0 passed, {len(results)} failed")
