"""Rewinds end to end: a real Rasa server (the example bot's model), the real action server and CRM,
driven by `mcp-bridge test e2e`'s runner with the cases in tests/fixtures/e2e/rewinds.yml. Rasa's
/back brings back a question already answered and a permission already withdrawn, in the tracker's
slots; the plugin (its record, mcp_bridge/record/) counts neither: nothing is written again, and a revoked
permission covers nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from mcp_bridge.cli.e2e.cases import load_paths
from mcp_bridge.cli.e2e.report import text_report
from mcp_bridge.cli.e2e.runner import Target, run_cases
from tests.live.e2e.e2e_stack import E2EStack
from tests.support import procs

CASES = procs.REPO_ROOT / "tests" / "fixtures" / "e2e" / "rewinds.yml"

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2EStack]:
    stack = E2EStack(tmp_path_factory.mktemp("rewinds"))
    try:
        stack.start()
        stack.use(stack.mcp_tools())
        stack.wait_for_rasa()
        yield stack
    finally:
        stack.close()


def test_back_brings_back_no_answered_question_and_no_revoked_permission(stack: E2EStack) -> None:
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
    print(report)
    assert len(results) == 2 and all(result.passed for result in results), report
