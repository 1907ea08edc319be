"""The gate: may this call run now, and if not, what must happen first? Answered here, and only here.

Every call a skill's step makes passes this one gate, :meth:`Gate.verdict` (one :class:`Gate` per
executor), with what the call has so far (its :data:`Consent`): nothing yet, the person's remembered
permissions, the person's yes, or an approver's release. It answers with one :data:`Verdict`:

* :class:`Ask`: ask the person first, with the skill's question (or the generic one);
* :class:`RunUnasked`: run without asking (no rule asks about it);
* :class:`RunPermitted`: run without asking, under a permission the person gave;
* :class:`RunConfirmed`: run: the person said yes (and no approver is needed, or one approved);
* :class:`Hold`: the yes is not enough: wait for a second approver;
* :class:`Reject`: never run (the skill no longer asks about a call its question sealed).

A verdict that runs a sealed call (:data:`Authorised`: :class:`RunConfirmed`, :class:`RunPermitted`)
carries the question it runs, narrowed to the call: what runs it (:mod:`mcp_bridge.confirmation.running`)
takes a verdict, never a bare question, so a path that skips the gate does not type-check.

The rules it applies, by name (the docs' "the confirmation and its rules" page names them the same):

``declared``
    What the skill declares for the tool's *name* wins: ``requires_confirmation: {enabled: true}``
    asks with the skill's own question; ``enabled: false`` never asks. The name is enough, so this
    holds before the name is resolved, whether the tool turns out local, remote or missing.
``local_unconstrained``
    A local tool the skill does not constrain runs unasked: the bot's own code, confirmed only
    when a skill says so.
``remote_asks``
    An MCP tool the skill does not constrain is asked about with the generic question
    (``utter_confirm_tool_call``), unless its server is marked ``trusted`` *and* annotates the tool
    read-only. A tool that cannot be resolved, or whose server cannot be reached, is asked about
    too: dispatch then says what is wrong, and nothing runs unasked.
``second_approver``
    A yes to a call whose skill requires an approver for it (``requires_approval_from``, its
    ``when`` matched on the text's skeleton: :mod:`mcp_bridge.approvals.second_approver`) holds the
    call for the approver; only the approver's release runs it, and only while the skill still holds
    such a call for an approver.
``remembered``
    A call the skill lets the person remember (``allows_remembering``) may be given a permission
    with its yes: never one that needs a second approver, never a destructive tool's (its server's
    ``destructiveHint``; an MCP server nobody marked ``trusted`` is taken at its worst) unless the
    skill says ``even_if_destructive``. A new request's one call that a permission covers
    (:func:`mcp_bridge.confirmation.permissions.covering`) runs under it; a list of several calls
    is always asked about.
``still_asked``
    A yes or a release runs a sealed call only while the skill still asks about it: a call that
    would now run unasked was sealed under other rules, and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from mcp_bridge.approvals import second_approver
from mcp_bridge.confirmation.permissions import Permission, covering
from mcp_bridge.errors import ToolArgumentsError, ToolCallError, ToolNotFoundError
from mcp_bridge.observability import tracing
from mcp_bridge.question import Question
from mcp_bridge.skills.files import AllowsRemembering, RequiresApproval, RequiresConfirmation, Skill
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.sources import Tool

__all__ = [
    "Ask",
    "Authorised",
    "Confirmed",
    "Consent",
    "Gate",
    "Hold",
    "MayBePermitted",
    "Reached",
    "Reject",
    "Released",
    "RunConfirmed",
    "RunPermitted",
    "RunUnasked",
    "Runs",
    "Verdict",
    "declared",
]

_UNKNOWN = (ToolCallError, ToolArgumentsError, ToolNotFoundError)


# -- what a call has ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reached:
    """The step loop reached the call: it has nothing yet. ``remembering``: say what a yes may also
    keep as a permission (which asks the tool's annotations); False when only whether to ask matters."""

    remembering: bool = True


@dataclass(frozen=True)
class MayBePermitted:
    """A new request's one call (``question``, not asked): one of the person's remembered permissions
    (``standing``) may cover it."""

    standing: Sequence[Permission]
    user: str | None
    now: float
    question: Question


@dataclass(frozen=True)
class Confirmed:
    """The person said yes to ``question``, the question the call was sealed in (narrowed to the call)."""

    question: Question


@dataclass(frozen=True)
class Released:
    """An approver approved the call the person had confirmed (``question``, narrowed to the call)."""

    question: Question


Consent = Reached | MayBePermitted | Confirmed | Released


# -- what may happen ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """Ask the person with ``rule``'s question first. ``remember``: what a yes may also keep as a
    permission (the question's third button), or None."""

    rule: RequiresConfirmation
    remember: AllowsRemembering | None = None


@dataclass(frozen=True)
class RunUnasked:
    why: Literal["switched_off", "local_unconstrained", "trusted_read_only"]


@dataclass(frozen=True)
class RunPermitted:
    """Run ``question``'s call unasked under ``permission``: the call as the permission was given (its
    ``_meta`` the permission's), with a key of its own."""

    question: Question
    permission: Permission
    remember: AllowsRemembering


@dataclass(frozen=True)
class RunConfirmed:
    """Run ``question``'s call exactly as sealed: the person said yes to it, and ``released``, an approver
    released it too (or none was needed)."""

    question: Question
    released: bool = False


@dataclass(frozen=True)
class Hold:
    approver: RequiresApproval


@dataclass(frozen=True)
class Reject:
    reason: str


Verdict = Ask | RunUnasked | RunPermitted | RunConfirmed | Hold | Reject
# What lets a sealed call run: a yes (or a release), or a permission.
Authorised = RunConfirmed | RunPermitted
# What lets a call run at all.
Runs = RunUnasked | RunConfirmed | RunPermitted


class Gate:
    """The gate of one executor. ``generic`` is the question for an MCP tool the skill does not
    constrain (``remote_asks``)."""

    def __init__(self, generic: RequiresConfirmation) -> None:
        self.generic = generic

    async def verdict(
        self,
        skill: Skill,
        tool_name: str,
        resolved: Tool | ToolNotFoundError,
        arguments: Mapping[str, Any],
        consent: Consent,
        context: CallContext,
    ) -> Verdict:
        """What may happen to a call of ``tool_name`` by ``skill`` with ``arguments`` that has
        ``consent``. ``resolved`` is what the name resolved to (a tool, asked about itself in the call's
        ``context``, or why nothing). The verdict, and the rule that gave it, is a span when tracing is
        on."""
        with tracing.span("mcp-bridge gate", skill=skill.id, tool=tool_name) as span:
            verdict = await _verdict(skill, tool_name, resolved, arguments, consent, self.generic, context)
            if span is not None:  # tracing on: name the rule (off, nothing is computed for it)
                tracing.note(span, verdict=type(verdict).__name__, rule=_rule(verdict, skill, tool_name))
            return verdict


def _rule(verdict: Verdict, skill: Skill, tool_name: str) -> str:
    """The name of the rule that gave ``verdict`` (for the span)."""
    match verdict:
        case RunUnasked(why="switched_off"):
            return "declared"
        case RunUnasked(why="trusted_read_only"):
            return "remote_asks"
        case RunUnasked(why=why):
            return why
        case RunPermitted():
            return "remembered"
        case Hold():
            return "second_approver"
        case Reject():
            return "still_asked"
        case _:  # Ask, RunConfirmed: the skill's own question, or the generic one
            return "declared" if declared(skill, tool_name) is not None else "remote_asks"


async def _verdict(
    skill: Skill,
    tool_name: str,
    resolved: Tool | ToolNotFoundError,
    arguments: Mapping[str, Any],
    consent: Consent,
    generic: RequiresConfirmation,
    context: CallContext,
) -> Verdict:
    tool = None if isinstance(resolved, ToolNotFoundError) else resolved
    asked = await _asked(skill, tool_name, tool, generic, context)
    if isinstance(consent, Confirmed | Released):
        if not isinstance(asked, RequiresConfirmation):
            return Reject("the skill no longer asks about this call")  # still_asked
        approver = second_approver.required(skill, tool_name, arguments)
        if isinstance(consent, Confirmed) and approver is not None:
            return Hold(approver)  # second_approver
        if isinstance(consent, Released) and approver is None:
            return Reject("the skill no longer holds this call for an approver")  # second_approver
        return RunConfirmed(consent.question, released=isinstance(consent, Released))
    if not isinstance(asked, RequiresConfirmation):
        return RunUnasked(asked)
    if isinstance(consent, Reached) and not consent.remembering:
        return Ask(asked)
    remember = await _may_remember(skill, tool_name, tool, arguments, context)
    if isinstance(consent, MayBePermitted) and remember is not None:
        permission = covering(
            consent.standing,
            remember,
            skill=skill.id,
            tool=tool_name,
            source=str(skill.tools[tool_name]),
            arguments=arguments,
            user=consent.user,
            now=consent.now,
        )
        if permission is not None:  # remembered: the call as the permission was given, _meta included
            call = replace(consent.question.first, meta=dict(permission.meta))
            return RunPermitted(replace(consent.question, calls=(call,)), permission, remember)
    return Ask(asked, remember)


def declared(skill: Skill, tool_name: str) -> RequiresConfirmation | None:
    """The confirmation ``skill`` declares and enables for ``tool_name`` (``declared``), or None."""
    constraint = skill.constraints.get(tool_name)
    rule = constraint.requires_confirmation if constraint else None
    return rule if rule is not None and rule.enabled else None


async def _asked(
    skill: Skill, tool_name: str, tool: Tool | None, generic: RequiresConfirmation, context: CallContext
) -> RequiresConfirmation | Literal["switched_off", "local_unconstrained", "trusted_read_only"]:
    """The question a call needs, or why it needs none."""
    constraint = skill.constraints.get(tool_name)
    if constraint is not None and constraint.requires_confirmation is not None:
        return declared(skill, tool_name) or "switched_off"  # declared, either way
    source = skill.tools.get(tool_name)
    if source is None or source.kind == "local":
        return "local_unconstrained"
    if tool is not None:
        try:
            facts = await tool.annotations(context)
        except _UNKNOWN:
            pass  # unknown or unreachable: ask, and let dispatch say what is wrong
        else:
            if facts.vouched and facts.read_only:
                return "trusted_read_only"  # remote_asks's exception
    return generic  # remote_asks


async def _may_remember(
    skill: Skill, tool_name: str, tool: Tool | None, arguments: Mapping[str, Any], context: CallContext
) -> AllowsRemembering | None:
    """What the skill lets the person remember for this call (``remembered``), or None."""
    constraint = skill.constraints.get(tool_name)
    allowed = constraint.allows_remembering if constraint is not None else None
    if allowed is None or tool is None:
        return None
    if second_approver.required(skill, tool_name, arguments) is not None:
        return None  # a second approver is never replaced
    if not allowed.even_if_destructive:
        try:
            destructive = (await tool.annotations(context)).destructive
        except _UNKNOWN:
            destructive = True  # unknown: taken at its worst
        if destructive:
            return None
    return allowed
