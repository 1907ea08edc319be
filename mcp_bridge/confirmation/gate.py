"""Does this call need a "yes"? Answered here, and only here.

The rules, in order:

1. What the skill declares for the tool's *name* wins: ``requires_confirmation: {enabled: true}``
   asks with the skill's own question; ``enabled: false`` never asks. The name is enough, so this
   holds before the name is resolved, whether the tool turns out local, remote or missing.
2. A local tool the skill does not constrain runs unasked: it is the bot's own code, confirmed
   only when a skill says so.
3. An MCP tool the skill does not constrain is asked about with the executor's generic question
   (``utter_confirm_tool_call``), unless its server is marked ``trusted`` *and* the server annotates
   the tool read-only. A tool that cannot be resolved or whose server cannot be reached is asked
   about too: dispatch then says what is wrong, and nothing runs unasked.

The executor asks this before it seals a question, when it checks a sealed question still holds,
and when it says a denial.
"""

from __future__ import annotations

from mcp_bridge.errors import ToolArgumentsError, ToolCallError, ToolNotFoundError
from mcp_bridge.skills.files import RequiresConfirmation, Skill
from mcp_bridge.tools.sources import Tool

__all__ = ["declared", "needs_confirmation"]


def declared(skill: Skill, tool_name: str) -> RequiresConfirmation | None:
    """The confirmation ``skill`` declares and enables for ``tool_name`` (rule 1), or None."""
    constraint = skill.constraints.get(tool_name)
    rule = constraint.requires_confirmation if constraint else None
    return rule if rule is not None and rule.enabled else None


async def needs_confirmation(
    skill: Skill, tool_name: str, tool: Tool | None, *, default: RequiresConfirmation
) -> RequiresConfirmation | None:
    """The confirmation a call of ``tool_name`` by ``skill`` needs, or None when it runs unasked.

    ``tool`` is what the name resolved to (None: nothing); ``default`` is the generic question for an
    MCP tool the skill does not constrain (rule 3).
    """
    constraint = skill.constraints.get(tool_name)
    if constraint is not None and constraint.requires_confirmation is not None:
        return declared(skill, tool_name)  # rule 1, either way
    source = skill.tools.get(tool_name)
    if source is None or source.kind == "local":
        return None  # rule 2
    if tool is not None:
        try:
            facts = await tool.annotations()
        except (ToolCallError, ToolArgumentsError, ToolNotFoundError):
            pass  # unknown or unreachable: ask, and let dispatch say what is wrong
        else:
            if facts.vouched and facts.read_only:
                return None  # rule 3's exception
    return default
