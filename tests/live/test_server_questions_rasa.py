"""A server's questions asked in the chat, end to end: a real Rasa server (the example bot's model),
the real action server, and an MCP server that asks (tests/fixtures/era_server.py, 2025-11-25), driven
by `mcp-bridge test e2e`'s runner with the cases in tests/fixtures/e2e/server_questions.yml.

The bot variant swaps the skill behind "who is ...?" (action_lookup_contact, in the example domain)
for one that books a visit: the server's form is asked field by field in the chat while the call is
held open in the action server (one worker), and the call completes with the answers; a decline
writes nothing, and a /back after a completed form brings back no question that runs the call again.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import httpx2
import pytest
import yaml

from mcp_bridge.cli.e2e import Target, load_paths, run_cases, text_report
from tests.live.e2e.e2e_stack import E2EStack, Variant
from tests.support import procs

CASES = procs.REPO_ROOT / "tests" / "fixtures" / "e2e" / "server_questions.yml"

SKILL = """
skill: lookup_contact
action: action_lookup_contact
description: Book a visit with a contact (the server asks for its details).
tools:
  book_visit: mcp:items
tool_constraints:
  - book_visit:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_tool_call
        utter_on_user_denial: utter_tool_call_cancelled
steps:
  - execute_tool: book_visit
    arguments:
      contact: {slot: lookup_email}
    on_error: utter_tool_failed
"""

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def items() -> Iterator[procs.ServiceProcess]:
    with procs.era_mcp("legacy") as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, items: procs.ServiceProcess) -> Iterator[E2EStack]:
    stack = E2EStack(tmp_path_factory.mktemp("questions"))
    try:
        stack.start()
        # The action server reads mcp_servers from the same endpoints.yml (Rasa ignores the key).
        document = yaml.safe_load(stack.endpoints.read_text())
        document["mcp_servers"].append({"name": "items", "url": items.url, "type": "http"})
        replacement = stack.endpoints.with_name(".endpoints.yml.tmp")
        replacement.write_text(yaml.safe_dump(document, default_style='"', sort_keys=False))
        os.replace(replacement, stack.endpoints)
        skills = stack.mcp_tools().skills
        (skills / "lookup_contact.yml").write_text(SKILL)
        stack.use(Variant("questions", skills))
        stack.wait_for_rasa()
        yield stack
    finally:
        stack.close()


def writes(server: procs.ServiceProcess) -> list[str]:
    texts: list[str] = httpx2.get(procs.base_url(server.url) + "/writes", timeout=5.0).json()["texts"]
    return texts


def test_the_servers_form_is_answered_in_the_chat_and_a_decline_writes_nothing(
    stack: E2EStack, items: procs.ServiceProcess
) -> None:
    assert stack.variant is not None
    target = Target(
        rasa_url=stack.rasa_url,
        rasa_token=stack.access.api_token,
        rest_token=stack.access.rest_token,
        audit_log=stack.audit_log(stack.variant),
        timeout=60.0,
    )
    results = asyncio.run(run_cases(load_paths([CASES]), target, concurrency=1))
    report = text_report(results)
    assert len(results) == 3 and all(result.passed for result in results), report
    # Written once by each answered form (a /back after the second runs it not again); the declined
    # one wrote nothing.
    assert writes(items) == [
        "visit dana@example.com 2026-12-04 x3 parking=True ",
        "visit dana@example.com 2026-12-05 x2 parking=False ",
    ]
