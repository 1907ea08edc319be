"""The gate's table (test_gate.py) fails when any of the gate's rules is changed: each case below changes
one rule in a copy of mcp_bridge/confirmation/gate.py, loads the copy as a module of its own, and asks it
every cell of the table; some cell must disagree. The real module is never touched."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_bridge.confirmation import gate as the_gate
from tests.plugin.confirmation.test_gate import differences, verdicts

SOURCE = Path(the_gate.__file__).read_text()

# rule -> (what it says in gate.py, what the copy says instead)
MUTANTS = {
    "declared: a switched-off confirmation still asks": (
        "return rule if rule is not None and rule.enabled else None",
        "return rule if rule is not None else None",
    ),
    "local_unconstrained: the bot's own tools asked about like remote ones": (
        'if source is None or source.kind == "local":',
        "if source is None:",
    ),
    "remote_asks: a read-only claim believed from any server": (
        "if facts.vouched and facts.read_only:",
        "if facts.read_only:",
    ),
    "remote_asks: a server that cannot be reached runs unasked": (
        "pass  # unknown or unreachable: ask, and let dispatch say what is wrong",
        'return "trusted_read_only"',
    ),
    "second_approver: a yes runs what waits for an approver": (
        "if isinstance(consent, Confirmed) and approver is not None:",
        "if isinstance(consent, Confirmed) and approver is None and False:",
    ),
    "second_approver: a release runs what no approver holds": (
        "if isinstance(consent, Released) and approver is None:",
        "if False:",
    ),
    "second_approver: released calls not told apart": (
        "released=isinstance(consent, Released)",
        "released=False",
    ),
    "remembered: a permission replaces a second approver": (
        "return None  # a second approver is never replaced",
        "pass",
    ),
    "remembered: a tool whose annotations cannot be read taken as harmless": (
        "destructive = True  # unknown: taken at its worst",
        "destructive = False",
    ),
    "remembered: a destructive tool remembered without even_if_destructive": (
        "        if destructive:\n            return None",
        "        if False:\n            return None",
    ),
    "remembered: a permission runs the new request's _meta": (
        "call = replace(consent.question.first, meta=dict(permission.meta))",
        "call = consent.question.first",
    ),
    "remembered: a plan's question offers to remember": (
        "if isinstance(consent, Reached) and not consent.remembering:",
        "if False:",
    ),
    "still_asked: a yes runs a call the skill no longer asks about": (
        '            return Reject("the skill no longer asks about this call")  # still_asked',
        "            pass",
    ),
}


@pytest.fixture
def mutant(request: pytest.FixtureRequest) -> Iterator[types.ModuleType]:
    was, becomes = MUTANTS[request.param]
    assert SOURCE.count(was) == 1, f"the rule's text is no longer in gate.py: {was!r}"
    name = "mcp_bridge.confirmation._gate_mutant"
    module = types.ModuleType(name)
    module.__file__ = f"<{request.param}>"
    sys.modules[name] = module  # dataclasses look their module up
    try:
        exec(compile(SOURCE.replace(was, becomes), module.__file__, "exec"), module.__dict__)
        yield module
    finally:
        del sys.modules[name]


@pytest.mark.parametrize("mutant", list(MUTANTS), indirect=True)
async def test_the_table_goes_red_when_a_rule_changes(mutant: types.ModuleType) -> None:
    try:
        found = await verdicts(mutant)
    except AssertionError:
        return  # a cell's other checks (which question, what runs) already fail
    assert differences(found), "no cell of the table saw the rule change"
