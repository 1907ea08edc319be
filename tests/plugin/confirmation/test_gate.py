"""The gate as a table: constraint x source x annotations x consent -> verdict (confirmation/gate.py).

Each grid below is one consent. Its rows are what the skill declares for the tool's name, its columns
the tool the name resolves to (the bot's own function, or an MCP tool and what its server says about
it, or nothing); each cell is the verdict, written as:

    U:loc   RunUnasked, local_unconstrained     Ask    ask with the skill's question
    U:off   RunUnasked, switched off (declared)  Ask+   ... and a yes may also keep a permission
    U:ro    RunUnasked, trusted_read_only        Gen    ask with the generic question
    Perm    RunPermitted (remembered)           Yes    RunConfirmed (the person's yes)
    Hold    Hold for the second approver        Rel    RunConfirmed, released by the approver
    Rej     Reject (still_asked, second_approver)

The grids are the rules written out by hand: change a rule in gate.py and some cell disagrees
(test_gate_mutants.py changes each rule in a copy and watches this table go red).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mcp_bridge.confirmation import gate as the_gate
from mcp_bridge.confirmation.permissions import Permission
from mcp_bridge.errors import ToolCallError, ToolNotFoundError
from mcp_bridge.question import AskedCall, Question
from mcp_bridge.skills.files import RequiresConfirmation, Skill, ToolConstraint, ToolSourceRef
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.sources import Annotations

TOOL = "add_timeline_note"
ARGUMENTS = {"contact_id": 1, "text": "Agreed a refund of 40 EUR."}
NOW = 1_000_000.0
USER = "rest:alice"

ASK = {"enabled": True, "utter_for_confirmation": "utter_confirm_note"}
APPROVER = {"role": "supervisor"}
REMEMBER = {"any_arguments": True, "expires_after": "1h"}
CONSTRAINTS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "off": {"requires_confirmation": {"enabled": False}},
    "ask": {"requires_confirmation": ASK},
    "approver": {"requires_confirmation": ASK, "requires_approval_from": APPROVER},
    "remember": {"requires_confirmation": ASK, "allows_remembering": REMEMBER},
    "remember!": {
        "requires_confirmation": ASK,
        "allows_remembering": {**REMEMBER, "even_if_destructive": True},
    },
    "approver+remember": {
        "requires_confirmation": ASK,
        "requires_approval_from": APPROVER,
        "allows_remembering": REMEMBER,
    },
}


@dataclass(frozen=True)
class FakeTool:
    """A tool whose source says ``says`` about it (None: its server cannot be reached)."""

    source: str
    says: Annotations | None
    name: str = TOOL

    async def input_schema(self, context: CallContext) -> Mapping[str, Any]:
        return {"type": "object"}

    async def annotations(self, context: CallContext) -> Annotations:
        if self.says is None:
            raise ToolCallError(self.name, "the server cannot be reached")
        return self.says

    def honours_idempotency_key(self) -> bool:
        return True

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> Any:
        raise AssertionError("the gate never calls a tool")


MCP = "mcp:crm"
TOOLS: dict[str, tuple[str, FakeTool | ToolNotFoundError]] = {
    # The bot's own code: vouched, claims nothing (mcp_bridge.tools.local.LocalTool).
    "local": ("local", FakeTool("local", Annotations(read_only=False, vouched=True, destructive=False))),
    # A trusted server's read-only tool.
    "trusted-ro": (MCP, FakeTool(MCP, Annotations(read_only=True, vouched=True, destructive=False))),
    # A read-only claim from a server nobody marked trusted: taken at its worst.
    "claims-ro": (MCP, FakeTool(MCP, Annotations(read_only=True, vouched=False, destructive=True))),
    # A trusted server's tool that writes but destroys nothing.
    "trusted-w": (MCP, FakeTool(MCP, Annotations(read_only=False, vouched=True, destructive=False))),
    # A tool that may destroy.
    "destroys": (MCP, FakeTool(MCP, Annotations(read_only=False, vouched=True, destructive=True))),
    # Its server cannot be reached.
    "down": (MCP, FakeTool(MCP, None)),
    # The name resolves to nothing.
    "missing": (MCP, ToolNotFoundError(TOOL)),
}
COLUMNS = list(TOOLS)

GRIDS = {
    # The step loop reached the call, and would say what a yes may remember.
    "reached": """
        none               U:loc  U:ro   Gen    Gen    Gen    Gen    Gen
        off                U:off  U:off  U:off  U:off  U:off  U:off  U:off
        ask                Ask    Ask    Ask    Ask    Ask    Ask    Ask
        approver           Ask    Ask    Ask    Ask    Ask    Ask    Ask
        remember           Ask+   Ask+   Ask    Ask+   Ask    Ask    Ask
        remember!          Ask+   Ask+   Ask+   Ask+   Ask+   Ask+   Ask
        approver+remember  Ask    Ask    Ask    Ask    Ask    Ask    Ask
    """,
    # Only whether to ask matters (a list of calls, a plan): nothing about remembering.
    "reached-only-whether": """
        none               U:loc  U:ro   Gen    Gen    Gen    Gen    Gen
        off                U:off  U:off  U:off  U:off  U:off  U:off  U:off
        ask                Ask    Ask    Ask    Ask    Ask    Ask    Ask
        approver           Ask    Ask    Ask    Ask    Ask    Ask    Ask
        remember           Ask    Ask    Ask    Ask    Ask    Ask    Ask
        remember!          Ask    Ask    Ask    Ask    Ask    Ask    Ask
        approver+remember  Ask    Ask    Ask    Ask    Ask    Ask    Ask
    """,
    # A new request's one call, and the person's permission for this tool stands.
    "permission-stands": """
        none               U:loc  U:ro   Gen    Gen    Gen    Gen    Gen
        off                U:off  U:off  U:off  U:off  U:off  U:off  U:off
        ask                Ask    Ask    Ask    Ask    Ask    Ask    Ask
        approver           Ask    Ask    Ask    Ask    Ask    Ask    Ask
        remember           Perm   Perm   Ask    Perm   Ask    Ask    Ask
        remember!          Perm   Perm   Perm   Perm   Perm   Perm   Ask
        approver+remember  Ask    Ask    Ask    Ask    Ask    Ask    Ask
    """,
    # The same, but the permission standing is someone else's.
    "someone-elses-permission": """
        none               U:loc  U:ro   Gen    Gen    Gen    Gen    Gen
        off                U:off  U:off  U:off  U:off  U:off  U:off  U:off
        ask                Ask    Ask    Ask    Ask    Ask    Ask    Ask
        approver           Ask    Ask    Ask    Ask    Ask    Ask    Ask
        remember           Ask+   Ask+   Ask    Ask+   Ask    Ask    Ask
        remember!          Ask+   Ask+   Ask+   Ask+   Ask+   Ask+   Ask
        approver+remember  Ask    Ask    Ask    Ask    Ask    Ask    Ask
    """,
    # The person said yes to the sealed call.
    "yes": """
        none               Rej    Rej    Yes    Yes    Yes    Yes    Yes
        off                Rej    Rej    Rej    Rej    Rej    Rej    Rej
        ask                Yes    Yes    Yes    Yes    Yes    Yes    Yes
        approver           Hold   Hold   Hold   Hold   Hold   Hold   Hold
        remember           Yes    Yes    Yes    Yes    Yes    Yes    Yes
        remember!          Yes    Yes    Yes    Yes    Yes    Yes    Yes
        approver+remember  Hold   Hold   Hold   Hold   Hold   Hold   Hold
    """,
    # An approver released the call the person confirmed.
    "released": """
        none               Rej    Rej    Rej    Rej    Rej    Rej    Rej
        off                Rej    Rej    Rej    Rej    Rej    Rej    Rej
        ask                Rej    Rej    Rej    Rej    Rej    Rej    Rej
        approver           Rel    Rel    Rel    Rel    Rel    Rel    Rel
        remember           Rej    Rej    Rej    Rej    Rej    Rej    Rej
        remember!          Rej    Rej    Rej    Rej    Rej    Rej    Rej
        approver+remember  Rel    Rel    Rel    Rel    Rel    Rel    Rel
    """,
}


def table() -> list[tuple[str, str, str, str]]:
    """(consent, constraint, tool, cell) for every cell of every grid."""
    cells = []
    for consent, grid in GRIDS.items():
        for line in grid.strip().splitlines():
            constraint, *row = line.split()
            assert len(row) == len(COLUMNS), line
            cells.extend((consent, constraint, tool, cell) for tool, cell in zip(COLUMNS, row, strict=True))
    return cells


def test_the_grids_cover_every_constraint_tool_and_consent() -> None:
    cells = table()
    assert {(c, k, t) for c, k, t, _ in cells} == {
        (c, k, t) for c in GRIDS for k in CONSTRAINTS for t in TOOLS
    }


def skill_for(constraint: str, source: str) -> Skill:
    declared = CONSTRAINTS[constraint]
    return Skill(
        id="log_interaction",
        path=Path("log_interaction.yml"),
        action="action_log_interaction",
        tools={TOOL: ToolSourceRef("local") if source == "local" else ToolSourceRef("mcp", "crm")},
        constraints={} if declared is None else {TOOL: ToolConstraint.model_validate(declared)},
        steps=(),
        reset_slots=(),
    )


def question(source: str) -> Question:
    call = AskedCall(
        id="c-1",
        tool=TOOL,
        step=0,
        source=source,
        arguments=dict(ARGUMENTS),
        digest="d",
        key="k-1",
        meta={"asked": "then"},
    )
    return Question("q-1", "log_interaction", (call,), False, NOW - 5, 1, USER, NOW - 6)


def permission(source: str, user: str) -> Permission:
    return Permission(
        id="p-1",
        skill="log_interaction",
        tool=TOOL,
        source=source,
        scope=None,
        user=user,
        granted_at=NOW - 60,
        expires_at=NOW + 3600,
        label="notes",
        meta={"granted": "with"},
    )


def consent_for(module: ModuleType, consent: str, source: str) -> Any:
    asked = question(source)
    match consent:
        case "reached":
            return module.Reached()
        case "reached-only-whether":
            return module.Reached(remembering=False)
        case "permission-stands":
            return module.MayBePermitted([permission(source, USER)], USER, NOW, asked)
        case "someone-elses-permission":
            return module.MayBePermitted([permission(source, "rest:bob")], USER, NOW, asked)
        case "yes":
            return module.Confirmed(asked)
        case "released":
            return module.Released(asked)
    raise AssertionError(consent)


GENERIC = RequiresConfirmation(enabled=True, utter_for_confirmation="utter_confirm_tool_call")


def cell_of(verdict: Any, skill: Skill, consent: Any) -> str:
    """The grid's code for ``verdict``, checking what the code does not say: which question is asked,
    which question runs, what a permission runs."""
    kind = type(verdict).__name__
    declared = skill.constraints.get(TOOL)
    if kind == "Ask":
        if verdict.rule == GENERIC:
            assert verdict.remember is None
            return "Gen"
        assert declared is not None and verdict.rule == declared.requires_confirmation
        if verdict.remember is None:
            return "Ask"
        assert verdict.remember == declared.allows_remembering
        return "Ask+"
    if kind == "RunUnasked":
        return {"local_unconstrained": "U:loc", "switched_off": "U:off", "trusted_read_only": "U:ro"}[
            verdict.why
        ]
    if kind == "RunPermitted":
        # The call as the permission was given: its _meta the permission's, never the new request's.
        assert verdict.permission == consent.standing[0]
        assert verdict.question.first.meta == {"granted": "with"}
        assert verdict.question.first.arguments == ARGUMENTS
        return "Perm"
    if kind == "RunConfirmed":
        assert verdict.question == consent.question  # exactly the sealed call
        return "Rel" if verdict.released else "Yes"
    if kind == "Hold":
        assert declared is not None and verdict.approver == declared.requires_approval_from
        return "Hold"
    if kind == "Reject":
        assert verdict.reason
        return "Rej"
    raise AssertionError(f"not a verdict: {verdict!r}")


async def verdicts(module: ModuleType) -> dict[tuple[str, str, str], str]:
    """Every cell as ``module``'s gate decides it."""
    gate = module.Gate(GENERIC)
    found = {}
    for consent, constraint, tool, _ in table():
        source, resolved = TOOLS[tool]
        skill = skill_for(constraint, source)
        given = consent_for(module, consent, source)
        context = CallContext(conversation_id="c1", person=USER, skill=skill.id)
        verdict = await gate.verdict(skill, TOOL, resolved, ARGUMENTS, given, context)
        found[consent, constraint, tool] = cell_of(verdict, skill, given)
    return found


def differences(found: Mapping[tuple[str, str, str], str]) -> list[str]:
    wrong = []
    for consent, constraint, tool, cell in table():
        gave = found[consent, constraint, tool]
        if gave != cell:
            wrong.append(f"{consent} / {constraint} / {tool}: the table says {cell}, the gate {gave}")
    return wrong


async def test_the_gate_gives_the_verdict_of_every_cell() -> None:
    assert differences(await verdicts(the_gate)) == []


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("Agreed a refund of 40 EUR.", True),
        ("Agreed a R E F U N D of 40 EUR.", True),  # the skeleton: spaces and case do not hide it
        ("Called about the invoice.", False),
    ],
)
async def test_an_approver_rule_with_when_holds_only_the_calls_it_names(text: str, held: bool) -> None:
    rule = {**APPROVER, "when": {"argument": "text", "contains_any": ["refund"]}}
    skill = replace(
        skill_for("ask", "local"),
        constraints={
            TOOL: ToolConstraint.model_validate(
                {"requires_confirmation": ASK, "requires_approval_from": rule}
            )
        },
    )
    asked = question("local")
    asked = replace(asked, calls=(replace(asked.first, arguments={**ARGUMENTS, "text": text}),))
    _, resolved = TOOLS["local"]
    arguments = {**ARGUMENTS, "text": text}
    gate = the_gate.Gate(GENERIC)
    context = CallContext(conversation_id="c1", person=USER, skill=skill.id)
    yes = await gate.verdict(skill, TOOL, resolved, arguments, the_gate.Confirmed(asked), context)
    released = await gate.verdict(skill, TOOL, resolved, arguments, the_gate.Released(asked), context)
    if held:
        assert isinstance(yes, the_gate.Hold) and isinstance(released, the_gate.RunConfirmed)
        assert released.released
    else:
        assert isinstance(yes, the_gate.RunConfirmed) and not yes.released
        assert isinstance(released, the_gate.Reject)
