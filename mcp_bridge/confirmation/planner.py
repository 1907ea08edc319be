"""The step loop: a skill's steps from one step on, each call as the gate says, and what came of it.

:func:`run_steps` takes no modes. It runs what the gate lets run and returns what happened: the run's
end (:class:`~mcp_bridge.confirmation.decisions.Run`: done, a failure, a result that ends the skill, a
server that stopped to ask) or the calls it gathered to ask about
(:class:`~mcp_bridge.confirmation.asking.Gathered`). What to do with gathered calls (ask about them,
or run the one a permission covers) is its caller's decision.

``ask_before_write``'s half that runs: a call the gate says to ask about is gathered, not run. The run
goes on past it while the next steps need asking about too and need nothing it would give, then stops
there, so that all of them are asked about in one question.

A ``for_each`` step splits a run into one line per item of its list; each line has its own slots and
results, and the slots a run sets in the conversation are those all its lines agree on.

The call a verdict already let through (the person's yes, an approver's release, a permission:
:data:`~mcp_bridge.confirmation.gate.Authorised`) is the first step's, and runs exactly as sealed,
whatever the slots say by now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_bridge.confirmation.asking import Gathered, Planned
from mcp_bridge.confirmation.decisions import Run, Say, Scope
from mcp_bridge.confirmation.gate import Ask, Authorised, Reached, Runs, RunUnasked
from mcp_bridge.confirmation.parts import Parts
from mcp_bridge.skills.files import ResultArgument, SlotArgument, Step, runs_when, step_arguments
from mcp_bridge.tools.context import Resume

__all__ = ["run_steps"]


@dataclass(frozen=True)
class _Line:
    """One line of a run: its slots, its results, and ``own``, the slot values it set itself."""

    slots: Mapping[str, Any]
    results: Mapping[str, Any] = field(default_factory=dict)
    own: Mapping[str, Any] = field(default_factory=dict)

    def set(self, values: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> _Line:
        return _Line({**self.slots, **values}, {**self.results, **(results or {})}, {**self.own, **values})


async def run_steps(
    parts: Parts,
    scope: Scope,
    start: int,
    authorised: Authorised | None = None,
    resume: Resume | None = None,
) -> Run | Gathered:
    """Run the scope's skill from step ``start`` with the turn's slots, each call as the gate says.

    ``authorised``: the verdict that let the call of step ``start`` through already (its question's one
    call runs exactly as sealed). ``resume``: the answers to a server's questions, for the first call
    of step ``start`` (the call the server stopped).
    """
    skill, turn = scope.skill, scope.turn
    lines = [_Line(dict(turn.slots))]
    said: list[Say] = []
    gathered: list[Planned] = []
    for index in range(start, len(skill.steps)):
        step = skill.steps[index]
        resolved = parts.tools.find(skill, step.execute_tool)
        sealed = authorised if authorised is not None and index == authorised.question.first.step else None
        asked: Ask | None = None
        unasked: RunUnasked | None = None
        first_arguments: Mapping[str, Any] = {}
        if sealed is None:
            lines = _expand(step, lines)
            runnable = [line for line in lines if runs_when(step, line.slots, line.results)]
            if not runnable:
                continue
            # Whether the gate asks about the step's calls does not depend on their arguments.
            first_arguments, _ = step_arguments(step, runnable[0].slots, runnable[0].results)
            verdict = await parts.gate.verdict(
                skill, step.execute_tool, resolved, first_arguments, Reached(), scope.context
            )
            if isinstance(verdict, Ask):
                asked = verdict
            elif isinstance(verdict, RunUnasked):
                unasked = verdict
            else:  # a call reached has no consent: the gate asks, or lets it run unasked
                raise TypeError(f"the gate gave {type(verdict).__name__} for a call it only reached")
            if gathered and (asked is None or _waits_for(step, gathered, lines)):
                break  # asked about after the gathered calls, in a question of its own
        updated: list[_Line] = []
        for position, line in enumerate(lines):
            runs: Runs
            if sealed is not None:
                arguments = dict(sealed.question.first.arguments)
                runs = sealed
            else:
                if not runs_when(step, line.slots, line.results):
                    updated.append(line)
                    continue
                arguments, missing = step_arguments(step, line.slots, line.results)
                if missing:
                    response = step.on_missing_argument or parts.responses.tool_failed
                    missed = Say(response, {"error": f"missing {', '.join(missing)}"})
                    return Run("missing_argument", (*said, missed), _filled(lines))
                if asked is not None:
                    ask = asked
                    if arguments != first_arguments:  # what a yes may remember depends on them
                        verdict = await parts.gate.verdict(
                            skill, step.execute_tool, resolved, arguments, Reached(), scope.context
                        )
                        if not isinstance(verdict, Ask):
                            raise TypeError(
                                f"the gate gave {type(verdict).__name__} for a call it asks about"
                            )
                        ask = verdict
                    gathered.append(Planned(index, step, resolved, ask, arguments, line.slots, line.own))
                    updated.append(line)
                    continue
                assert unasked is not None
                runs = unasked
            ran = await parts.runner.run(
                scope, step, resolved, arguments, line.slots, line.results, runs, resume
            )
            resume = None  # the answers go with the stopped call only
            if isinstance(ran, Run):
                return replace(ran, say=(*said, *ran.say), slots={**_filled(lines), **ran.slots})
            said.extend(ran.say)
            line = line.set(ran.slots, ran.data)
            updated.append(line)
            if ran.outcome is not None:
                return Run(ran.outcome, tuple(said), _filled([*updated, *lines[position + 1 :]]))
        lines = updated
    if not gathered:
        return Run("done", tuple(said), _filled(lines))
    return Gathered(tuple(gathered), split=len(lines) != 1, said=tuple(said), slots=_filled(lines))


def _expand(step: Step, lines: list[_Line]) -> list[_Line]:
    """A ``for_each`` step: each line becomes one line per item of its list (none: the line as is)."""
    if step.for_each is None:
        return lines
    out: list[_Line] = []
    for line in lines:
        items = line.slots.get(step.for_each.slot)
        if isinstance(items, list) and items:
            out.extend(line.set({step.for_each.as_: item}) for item in items)
        else:
            out.append(line)
    return out


def _waits_for(step: Step, planned: Sequence[Planned], lines: Sequence[_Line]) -> bool:
    """``step`` needs what a gathered call would give: a slot it fills, or a result not there yet."""
    filled_by_them = {slot for one in planned for slot in one.step.fills}
    for source in (*step.arguments.values(), step.when):
        if isinstance(source, SlotArgument) and source.slot in filled_by_them:
            return True
        if isinstance(source, ResultArgument) and any(source.result not in line.results for line in lines):
            return True
    return False


def _filled(lines: Sequence[_Line]) -> dict[str, Any]:
    """The slots a run sets in the conversation: its one line's, or what all its lines agree on."""
    if len(lines) == 1:
        return dict(lines[0].own)
    first, *others = lines
    return {k: v for k, v in first.own.items() if all(k in o.own and o.own[k] == v for o in others)}
