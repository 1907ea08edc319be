"""The confirmation-aware executor: runs a skill's steps and holds every constrained write for a "yes".

Plain data in (a :class:`Turn`: slots and what the person just said), a :class:`Decision` out
(responses to say, slots to set). The pending confirmation travels in a slot, sealed
(:mod:`mcp_bridge.sealing`), so the action server keeps no state and any replica can serve the "yes".
What counts as a yes is the reader's to say (:mod:`mcp_bridge.reader`); which calls need one is
:mod:`mcp_bridge.confirmation`'s; tools are resolved to one interface and called through its layers
(:mod:`mcp_bridge.tools`, :mod:`mcp_bridge.pipeline`).

Each entry point reads the turn, runs what it must, and builds its one :class:`Decision` at the end;
the steps on the way return small immutable results (:class:`_Step`, :class:`_Run`) and change
nothing they were given.

The rules, in order of importance:

1. A step whose tool needs a confirmation never runs in the turn that reaches it: the exact call is
   sealed into the tracker and the person is asked. The need is found by the tool's *name*, before
   the name is resolved, so it holds for local and MCP tools alike.
2. A tool from an MCP server that the skill gives no constraint needs a confirmation too, unless
   the server is marked ``trusted`` and annotates the tool read-only. A skill can switch it off
   explicitly (``enabled: false``).
3. Only a plain yes to the question just asked, from the person who was asked, runs the call:
   exactly the sealed arguments, once, with the question's idempotency key (the first question's
   id, kept when the same call is asked about again). A seal that does not verify, arguments that
   changed since, or a yes that came late or after other messages never write. An answer of any kind
   from someone else (another user the channel names) is refused and audited; the question waits
   for its person.
4. A no calls nothing. An edit or a redirect replaces the question with a new one. An answer
   after the question expired is told so and that nothing was written, and the question is asked
   again (audited as expired). An unclear answer asks again, and so does a message over the
   reader's limit, which nothing reads. A message that is not an answer is handed back to the bot,
   and the question is asked again afterwards; a question left behind by a new request is dropped
   aloud.
5. The tool's name is resolved at dispatch time; a name that resolves to nothing is a loud error,
   and nothing runs.
6. A run that reaches several constrained calls (steps in a row, or one step over a list) asks about
   them in one question, a numbered list. Each call is sealed on its own, with its own idempotency
   key, and gets its own decision: the person answers each ("yes to 1, no to 2", "only the first",
   "all", "none", the buttons), and an answer that does not decide every call is asked again. On
   such an answer each approved call runs as rule 3 says, whatever happens to the others; each
   refused call runs not at all; every decision is audited per call. "change 2 to: ..." edits one
   call and asks about the list again. The skill ends with that answer (steps after the list do not
   run). A run that did not split into lines and reaches one call asks about it exactly as rules 1
   to 5 say; one call of a split run is a list of one (its context is not the conversation's).
7. A confirmed call whose skill requires a second approver for it is held, not run: it waits for a
   person with the role, never the requester, and runs (once, with the question's key) only when
   the conversation is told it was approved in time (:mod:`mcp_bridge.approvals`).
8. A skill may let the person answer one call's question with "yes, and don't ask again today" (the
   reader's grant, or the question's third button): the call runs as rule 3 says, and a sealed
   permission is kept in the tracker. A later new request whose one call it covers runs that call
   unasked, saying so; a list of several calls, an edit, a second approver or a destructive tool
   is asked about as before (:mod:`mcp_bridge.permissions` says which calls a permission covers).

A server that acts as the person (:mod:`mcp_bridge.person_oauth`) and has no usable sign-in of the
person is never called: its :class:`SignInRequiredError` goes up to the Rasa action, which shows the
sign-in link; the skill runs again after the sign-in and asks as usual (a sign-in is never a yes).
A held call released by its approver (rule 7) runs as the requester, whose yes was sealed with it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from mcp_bridge import approvals, permissions, templating
from mcp_bridge.approvals import Approvals
from mcp_bridge.audit import AuditLog, AuditWriteError
from mcp_bridge.confirmation import declared, needs_confirmation
from mcp_bridge.contract import (
    AFFIRM_INTENT,
    DENY_INTENT,
    ELICITATION_SLOT,
    PENDING_SLOT,
    PERMISSIONS_SLOT,
)
from mcp_bridge.errors import (
    InputRequiredError,
    QuestionLapsedError,
    ToolArgumentsError,
    ToolCallError,
    ToolNotFoundError,
    ToolResultInvalidError,
)
from mcp_bridge.permissions import Permission
from mcp_bridge.person_oauth import SignInRequiredError, acting
from mcp_bridge.pipeline import check_arguments
from mcp_bridge.reader import (
    Choices,
    ConfirmationReader,
    Edit,
    EditCall,
    Grant,
    NluOpinion,
    No,
    Other,
    Redirect,
    TooLong,
    Unclear,
    Yes,
)
from mcp_bridge.results import ToolResult
from mcp_bridge.sealing import (
    PendingConfirmation,
    Question,
    Seal,
    call_digest,
    question_from_slot,
    question_to_slot,
)
from mcp_bridge.server_questions import ServerQuestions
from mcp_bridge.skills import (
    AllowsRemembering,
    RequiresApproval,
    RequiresConfirmation,
    ResultArgument,
    Skill,
    SlotArgument,
    Step,
    resolve_arguments,
    runs_when,
)
from mcp_bridge.sources import Tool
from mcp_bridge.tools import ToolBox

log = logging.getLogger(__name__)

_FAILURES = (ToolCallError, ToolArgumentsError, ToolNotFoundError)
# Outcomes after which a question is pending.
_WAITING = ("pending", "refused")


@dataclass(frozen=True)
class Turn:
    """What the executor needs to know about the conversation at this turn."""

    conversation_id: str
    slots: Mapping[str, Any]
    # How many messages the person has sent so far; binds a "yes" to the question just before it.
    user_turn: int
    intent: str | None = None
    intent_confidence: float = 1.0
    intent_ranking: Mapping[str, float] = field(default_factory=dict)
    # What the person just typed (or the button payload they sent).
    text: str = ""
    # True when this action runs in answer to a new message; False when the confirmation loop
    # resumes after another action (the question just asked, or an interruption the bot handled).
    new_message: bool = True
    # True when the confirmation loop is the conversation's active loop: a pending question is
    # being answered or was interrupted. A pending question without it was left behind.
    loop_active: bool = False
    # Who sent the message, as the channel authenticated them ("socketio:...", "rest:..."); None
    # when the channel names nobody. A question is sealed to it, and only its answers count.
    user: str | None = None


@dataclass(frozen=True)
class Say:
    response: str
    variables: Mapping[str, Any] = field(default_factory=dict)
    # Buttons added to the response's own (a question about several calls: one per call).
    buttons: tuple[Mapping[str, str], ...] = ()


Outcome = Literal[
    "pending",  # a question is waiting for the person's answer
    "done",  # the skill ran to its end
    "cancelled",  # the person said no; nothing was called
    "handed_back",  # the message was not an answer; the bot handles it, the question waits
    "nothing_pending",
    "too_long",  # the message was over the reader's limit: refused unread, nothing pending or called
    "rejected",  # the pending confirmation did not hold; nothing was called
    "refused",  # an answer from someone other than the person asked; nothing called, the question waits
    "failed",
    "not_found",
    "unavailable",
    "not_configured",
    "missing_argument",
    "awaiting_approval",  # confirmed, and held for a second approver (rule 7); nothing called yet
]


@dataclass(frozen=True)
class Decision:
    """What the executor decided for one turn: built once, at the end, and not changed after."""

    outcome: Outcome
    say: list[Say] = field(default_factory=list)
    # slot name -> new value (None clears it)
    slots: dict[str, Any] = field(default_factory=dict)

    @property
    def waiting(self) -> bool:
        """A question is pending after this decision (the confirmation loop stays active)."""
        return self.outcome in _WAITING


@dataclass(frozen=True)
class ConfirmationPolicy:
    # A "yes" later than this asks again instead of writing.
    ttl_seconds: float = 300.0
    # The NLU's second opinion: a "yes" counts only at or above this confidence ...
    min_confidence: float = 0.6
    # ... and only when "no" is not within this margin of it.
    deny_margin: float = 0.25
    affirm_intent: str = AFFIRM_INTENT
    deny_intent: str = DENY_INTENT


@dataclass(frozen=True)
class Responses:
    """Responses the executor itself says; the domain must define them (`mcp-bridge init` adds them)."""

    nothing_pending: str = "utter_nothing_pending"
    confirm_again: str = "utter_confirm_again"
    confirmation_invalid: str = "utter_confirmation_invalid"
    tool_failed: str = "utter_tool_failed"
    tool_unavailable: str = "utter_tool_unavailable"
    tool_outcome_unknown: str = "utter_tool_outcome_unknown"
    tool_not_configured: str = "utter_tool_not_configured"
    # The question and the "no" for an MCP tool that the skill gave no constraint (rule 2).
    confirm_tool_call: str = "utter_confirm_tool_call"
    tool_call_cancelled: str = "utter_tool_call_cancelled"
    # Said before the question again when the answer was neither a plain yes nor a plain no.
    answer_yes_or_no: str = "utter_answer_yes_or_no"
    # Said when a question left behind (the person started something else) is dropped.
    question_dropped: str = "utter_question_dropped"
    # Said instead of reading a message over the reader's limit (variable: limit).
    message_too_long: str = "utter_message_too_long"
    # Said when an answer comes after the question expired (the policy's ttl), before it is asked again.
    confirmation_expired: str = "utter_confirmation_expired"
    # A question about several calls (variables: calls, the numbered list; count), with Yes / No
    # buttons for all of them; the executor adds one "Only <n>" button per call.
    confirm_calls: str = "utter_confirm_calls"
    # The same for a list of one (one call of a request that made several; variable: calls).
    confirm_one_call: str = "utter_confirm_one_call"
    # Said before the list again when the answer did not decide each call.
    answer_each_call: str = "utter_answer_each_call"
    # Said for each call the person refused when others were approved (variables: place, call).
    call_skipped: str = "utter_call_skipped"
    # Said when the person refused every call of the list.
    calls_cancelled: str = "utter_calls_cancelled"
    # Said when a tool ran but its result breaks the output schema it publishes (variable: tool_name).
    tool_result_invalid: str = "utter_tool_result_invalid"
    # Said when the answer to a 2025-11-25 server's question came after the server stopped waiting
    # (variable: tool_name): it was told cancel, and its tool may have written.
    elicitation_lapsed: str = "utter_elicitation_lapsed"
    # Rule 8. Said after the call a permission was given with (variables: permission, until).
    permission_granted: str = "utter_permission_granted"
    # Said after a call that ran unasked because a permission covers it (variables: permission, until).
    permission_used: str = "utter_permission_used"
    # Said when the person withdraws their permissions (variable: count, how many were withdrawn).
    permissions_revoked: str = "utter_permissions_revoked"

    def names(self) -> set[str]:
        """The responses every bot needs (those of rule 8 only a bot whose skills allow it)."""
        return set(asdict(self).values()) - self.permission_names()

    def permission_names(self) -> set[str]:
        return {self.permission_granted, self.permission_used, self.permissions_revoked}


@dataclass(frozen=True)
class _Step:
    """What one step's result came to; ``outcome`` None: the skill goes on to its next step."""

    outcome: Outcome | None
    say: tuple[Say, ...] = ()
    # The slots the result fills (the step's ``fills``).
    slots: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Run:
    """What running a skill from one step came to: all it said and set, and the question it ended on."""

    outcome: Outcome
    say: tuple[Say, ...] = ()
    slots: Mapping[str, Any] = field(default_factory=dict)
    asked: Question | None = None

    @property
    def waiting(self) -> bool:
        return self.outcome in _WAITING


# What a skill's tool name resolved to: the tool, or why nothing (refused loudly at dispatch, rule 5).
_Resolved = Tool | ToolNotFoundError


def _may_repeat(resolved: _Resolved, runs: int) -> bool:
    """A held call whose earlier run was lost runs again only under its key, on a tool that keeps one
    write per key, and at most approvals.MAX_RUNS times in all."""
    return (
        runs <= approvals.MAX_RUNS
        and not isinstance(resolved, ToolNotFoundError)
        and resolved.honours_idempotency_key()
    )


@dataclass(frozen=True)
class _Line:
    """One line of a run. A ``for_each`` step splits a run into one line per item of its list; each
    line has its own slots and results, and ``own`` holds the slot values it set itself."""

    slots: Mapping[str, Any]
    results: Mapping[str, Any] = field(default_factory=dict)
    own: Mapping[str, Any] = field(default_factory=dict)

    def set(self, values: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> _Line:
        return _Line({**self.slots, **values}, {**self.results, **(results or {})}, {**self.own, **values})


@dataclass(frozen=True)
class _Planned:
    """A constrained call a run reached (rule 1): to be asked about, not run."""

    index: int
    step: Step
    resolved: _Resolved
    rule: RequiresConfirmation
    arguments: dict[str, Any]
    slots: Mapping[str, Any]
    # The slot values of its line that the conversation does not hold (sealed as the call's context).
    context: Mapping[str, Any] = field(default_factory=dict)


class Executor:
    def __init__(
        self,
        skills: Mapping[str, Skill],
        tools: ToolBox,
        *,
        policy: ConfirmationPolicy | None = None,
        responses: Responses | None = None,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.time,
        seal: Seal | None = None,
        reader: ConfirmationReader | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.skills = dict(skills)
        self.tools = tools
        self.policy = policy or ConfirmationPolicy()
        self.responses = responses or Responses()
        self.reader = reader or ConfirmationReader(
            affirm_intent=self.policy.affirm_intent,
            deny_intent=self.policy.deny_intent,
            min_confidence=self.policy.min_confidence,
            deny_margin=self.policy.deny_margin,
        )
        self._audit = audit or AuditLog(None)
        self._clock = clock
        self._seal = seal or Seal.ephemeral()
        # Questions an MCP server asks during a call (mcp_bridge.server_questions).
        self.questions = ServerQuestions(self._seal)
        # Rule 7's store and rules; None: a call that needs a second approver is refused, unrun.
        self.approvals = approvals
        # Rule 2's question, for an MCP tool the skill gives no constraint.
        self._unconstrained = RequiresConfirmation(
            enabled=True,
            utter_for_confirmation=self.responses.confirm_tool_call,
            utter_on_user_denial=self.responses.tool_call_cancelled,
        )

    async def aclose(self) -> None:
        await self.tools.aclose()
        if self.approvals is not None:
            await self.approvals.store.aclose()

    # -- entry points: one per Rasa action ----------------------------------------------------

    async def start(self, skill_id: str, turn: Turn) -> Decision:
        """Run a skill from its first step, until it ends or asks (rule 1); not for a message over
        the reader's limit, which is refused unread.

        A question still pending while the confirmation loop is active was interrupted: it stays
        and is asked again afterwards. One left behind outside the loop is dropped aloud (rule 4).
        """
        skill = self.skills[skill_id]
        too_long = self.reader.too_long(turn.text) if turn.new_message else None
        if too_long is not None:
            # Started by a message over the limit: whatever the NLU took from it is not used.
            return Decision("too_long", [self._too_long(too_long)])
        said: list[Say] = []
        cleared: dict[str, Any] = {}
        raw = turn.slots.get(PENDING_SLOT)
        if turn.slots.get(ELICITATION_SLOT) is not None and not turn.loop_active:
            cleared[ELICITATION_SLOT] = None  # a server's question left behind: dropped unanswered
        if raw is not None and not turn.loop_active:
            cleared = {**cleared, PENDING_SLOT: None}
            left_behind = question_from_slot(raw)
            if left_behind is not None:
                for call in left_behind:
                    self._record(turn, call, "dropped", "the person started something else")
                said = [Say(self.responses.question_dropped)]
        run = await self._run(skill, 0, turn, permitted=True)
        return self._decision(skill, run, said=said, slots=cleared, owns_question=not turn.loop_active)

    async def answer(self, turn: Turn) -> Decision:
        """The confirmation loop: read the answer to the pending question and act on it (rules 3, 4).

        With ``turn.new_message`` false the loop is resuming: right after the question was asked
        there is nothing to do; after an interruption the question is asked again.
        """
        if turn.slots.get(ELICITATION_SLOT) is not None:
            return await self.questions.answer(self, turn)  # a server's question, not a confirmation
        raw = turn.slots.get(PENDING_SLOT)
        question = question_from_slot(raw)
        if raw is not None and question is None:
            log.warning("conversation %s: malformed pending confirmation ignored", turn.conversation_id)
        if question is not None and question[0].in_batch:
            return await self._answer_calls(question, turn)  # rule 6
        pending = question[0] if question is not None else None
        if not turn.new_message:
            return await self._resume(turn, pending, raw)
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        if pending is None:
            reading = self.reader.read(turn.text, nlu)
            if isinstance(reading, TooLong):
                return Decision("too_long", [self._too_long(reading)], _clear(raw))
            if isinstance(reading, Yes | No):
                return Decision("nothing_pending", [Say(self.responses.nothing_pending)], _clear(raw))
            return Decision("handed_back")  # not an answer to anything: the bot's to handle
        if pending.user != turn.user:
            return self._refuse(turn, pending)
        bound = await self._verified(pending, turn)
        if bound is None:
            return self._reject(turn, pending, "confirmation does not match a known call")
        skill, step, resolved = bound
        reading = self.reader.read(turn.text, nlu, pending.arguments)
        if isinstance(reading, Yes):
            return await self._confirmed(skill, step, resolved, pending, turn)
        if isinstance(reading, Grant):
            allowed = await self._may_remember(skill, pending.tool, resolved, pending.arguments)
            if allowed is not None:
                return await self._confirmed(skill, step, resolved, pending, turn, remember=allowed)
            reading = Unclear("a permission this call cannot be given")
        if isinstance(reading, No):
            return await self.deny(turn)
        if isinstance(reading, Other):
            self._record(turn, pending, "handed_back", None)
            return Decision("handed_back")
        if isinstance(reading, TooLong):
            self._record(turn, pending, "unclear", reading.reason)
            return await self._ask_again(skill, pending, turn, [self._too_long(reading)])
        if isinstance(reading, Edit | Redirect):
            slot = skill.edits.get("text" if isinstance(reading, Edit) else "email")
            value = reading.text if isinstance(reading, Edit) else reading.email
            if slot is not None:
                return await self._changed(skill, pending, turn, slot, value)
            reason = f"an {reading.kind} this skill does not allow"
        else:
            reason = reading.reason
        if self._late(pending):
            return await self._expired(skill, pending, turn)
        self._record(turn, pending, "unclear", reason)
        return await self._ask_again(skill, pending, turn, [Say(self.responses.answer_yes_or_no)])

    async def deny(self, turn: Turn) -> Decision:
        """No: nothing is called, and the person hears the skill's denial."""
        if turn.slots.get(ELICITATION_SLOT) is not None:
            return await self.questions.cancel(self, turn)  # the server hears cancel
        raw = turn.slots.get(PENDING_SLOT)
        question = question_from_slot(raw)
        if question is None:
            return Decision("nothing_pending", [Say(self.responses.nothing_pending)], _clear(raw))
        pending = question[0]
        if pending.user != turn.user:
            return self._refuse(turn, pending)
        if pending.in_batch:
            for call in question:
                self._record(turn, call, "denied", None)
            return Decision(
                "cancelled", [Say(self.responses.calls_cancelled)], _ended(self.skills.get(pending.skill))
            )
        self._record(turn, pending, "denied", None)
        skill = self.skills.get(pending.skill)
        rule = await self._needs_yes(skill, pending.tool) if skill is not None else None
        if rule is not None and rule.utter_on_user_denial:
            variables = templating.variables(turn.slots, pending.arguments, tool=pending.tool)
            said = Say(rule.utter_on_user_denial, variables)
        else:
            said = Say(self.responses.confirmation_invalid)
        return Decision("cancelled", [said], _ended(skill))

    # -- answers --------------------------------------------------------------------------

    def _too_long(self, reading: TooLong) -> Say:
        return Say(self.responses.message_too_long, {"limit": reading.limit})

    async def _resume(self, turn: Turn, pending: PendingConfirmation | None, raw: Any) -> Decision:
        if pending is None:
            return Decision("nothing_pending", [], _clear(raw))
        if pending.user_turn == turn.user_turn:
            return Decision("pending")  # asked in this very turn
        bound = await self._verified(pending, turn)
        if bound is None:
            return self._reject(turn, pending, "confirmation does not match a known call")
        self._record(turn, pending, "asked_again", None)
        return await self._ask_again(bound[0], pending, turn, [Say(self.responses.confirm_again)])

    async def _confirmed(
        self,
        skill: Skill,
        step: Step,
        resolved: _Resolved,
        pending: PendingConfirmation,
        turn: Turn,
        *,
        remember: AllowsRemembering | None = None,
    ) -> Decision:
        """A plain yes: run exactly the sealed call, once, if it still holds (rule 3). ``resolved``:
        what the step's tool name resolved to when the question was checked. ``remember``: the yes
        also gives a permission, as the skill allows it (rule 8)."""
        if self._late(pending):
            return await self._expired(skill, pending, turn)
        if turn.user_turn != pending.user_turn + 1:
            self._record(turn, pending, "asked_again", None)
            return await self._ask_again(skill, pending, turn, [Say(self.responses.confirm_again)])
        current, _ = resolve_arguments(step, turn.slots)
        if current != pending.arguments:
            return self._reject(turn, pending, "arguments changed after the question", skill)
        self._record(turn, pending, "confirmed", None)
        second = approvals.required(skill, pending.tool, pending.arguments)
        if second is not None:
            return await self._hold(skill, second, pending, turn)
        run = await self._run(skill, pending.step, turn, confirmed=pending, resolved=resolved)
        if remember is None:
            return self._decision(skill, run, slots={PENDING_SLOT: None})
        granted, slot = self._grant(skill, remember, pending, turn)
        said = Say(self.responses.permission_granted, self._permission_variables(granted))
        decision = self._decision(skill, run, slots={PENDING_SLOT: None})
        return replace(decision, say=[*decision.say, said], slots={**decision.slots, PERMISSIONS_SLOT: slot})

    # -- rule 8: remembered permission --------------------------------------------------------

    async def _may_remember(
        self, skill: Skill, tool: str, resolved: _Resolved, arguments: Mapping[str, Any]
    ) -> AllowsRemembering | None:
        found = None if isinstance(resolved, ToolNotFoundError) else resolved
        return await permissions.may_remember(skill, tool, found, arguments)

    def _held_permissions(self, turn: Turn) -> list[Permission]:
        return permissions.from_slot(turn.slots.get(PERMISSIONS_SLOT), self._seal, turn.conversation_id)

    def _grant(
        self, skill: Skill, allowed: AllowsRemembering, pending: PendingConfirmation, turn: Turn
    ) -> tuple[Permission, list[dict[str, Any]] | None]:
        """A new permission for calls like ``pending``, sealed, and the slot with it (expired ones
        dropped)."""
        now = self._clock()
        variables = templating.variables(turn.slots, pending.arguments, tool=pending.tool)
        label = pending.tool
        if allowed.describe:
            try:
                label = allowed.describe.format_map(variables)
            except (KeyError, ValueError, IndexError, AttributeError):
                pass  # a variable this call does not have: named by its tool instead
        permission = permissions.sign(
            Permission(
                id=uuid.uuid4().hex,
                skill=skill.id,
                tool=pending.tool,
                source=pending.source,
                scope=permissions.scope_of(allowed, pending.arguments),
                user=turn.user,
                granted_at=now,
                expires_at=now + allowed.seconds,
                label=label,
            ),
            self._seal,
            turn.conversation_id,
        )
        kept = [p for p in self._held_permissions(turn) if p.expires_at > now]
        self._record(turn, pending, "permission_granted", None, permission=permission.id)
        return permission, permissions.to_slot([*kept, permission])

    def _permission_variables(self, permission: Permission) -> dict[str, Any]:
        until = permissions.until(permission.expires_at, self._clock())
        return {"permission": permission.label, "until": until}

    async def _covered(self, skill: Skill, one: _Planned, turn: Turn) -> Permission | None:
        """The permission that lets this one call run unasked (rule 8), or None."""
        held = self._held_permissions(turn)
        if not held:
            return None
        allowed = await self._may_remember(skill, one.step.execute_tool, one.resolved, one.arguments)
        if allowed is None:
            return None
        return permissions.covering(
            held,
            allowed,
            skill=skill.id,
            tool=one.step.execute_tool,
            source=str(skill.tools[one.step.execute_tool]),
            arguments=one.arguments,
            user=turn.user,
            now=self._clock(),
        )

    async def _run_permitted(self, skill: Skill, one: _Planned, permission: Permission, turn: Turn) -> _Run:
        """Rule 8: a call a permission covers runs unasked, once, with a key of its own, from its step."""
        unsigned = self._pending(skill, one.index, one.step, one.arguments, turn, None)
        pending = self._seal.sign(unsigned, turn.conversation_id)
        self._record(turn, pending, "permission_used", None, permission=permission.id)
        then = replace(turn, slots=one.slots)
        run = await self._run(skill, one.index, then, confirmed=pending, resolved=one.resolved)
        used = Say(self.responses.permission_used, {**self._permission_variables(permission)})
        return replace(run, say=(*run.say, used))

    async def revoke(self, turn: Turn) -> Decision:
        """ "stop saving without asking": every permission of this person in the conversation is
        withdrawn (audited each); anyone else's stay."""
        held = self._held_permissions(turn)
        now = self._clock()
        mine = [p for p in held if p.user == turn.user]
        for permission in mine:
            self._audit.record(
                conversation=turn.conversation_id,
                user=turn.user,
                skill=permission.skill,
                tool=permission.tool,
                source=permission.source,
                confirmation=None,
                digest="",
                decision="permission_revoked",
                result="expired" if permission.expires_at <= now else None,
                permission=permission.id,
            )
        rest = [p for p in held if p.user != turn.user and p.expires_at > now]
        said = Say(self.responses.permissions_revoked, {"count": sum(p.expires_at > now for p in mine)})
        return Decision("done", [said], {PERMISSIONS_SLOT: permissions.to_slot(rest)})

    def _late(self, pending: PendingConfirmation) -> bool:
        return self._clock() - pending.asked_at > self.policy.ttl_seconds

    async def _expired(self, skill: Skill, pending: PendingConfirmation, turn: Turn) -> Decision:
        """An answer after the question expired: the person hears that it expired and nothing was
        written, the audit says so, and the same call is asked again (it keeps its key)."""
        self._record(turn, pending, "expired", None)
        return await self._ask_again(skill, pending, turn, [Say(self.responses.confirmation_expired)])

    async def _hold(
        self, skill: Skill, rule: RequiresApproval, pending: PendingConfirmation, turn: Turn
    ) -> Decision:
        """Rule 7: the confirmed call is held for a second approver, and the requester told so."""
        outcome, said = await self._held(rule, pending, turn, turn.slots)
        return Decision(outcome, [said], _ended(skill))

    async def _held(
        self, rule: RequiresApproval, pending: PendingConfirmation, turn: Turn, slots: Mapping[str, Any]
    ) -> tuple[Outcome, Say]:
        """Hold one confirmed call for its approver (rule 7): what to say, and whether it is held."""
        variables = templating.variables(slots, pending.arguments, tool=pending.tool)
        held = None
        if self.approvals is not None:
            held = await self.approvals.hold(rule, pending, turn.conversation_id, slots)
        if held is None:
            return "rejected", Say(approvals.RESPONSES.unavailable, variables)
        variables |= {"approval_role": rule.role, "approval_expires_after": rule.expires_after}
        return "awaiting_approval", Say(approvals.RESPONSES.waiting, variables)

    async def approval_decided(self, turn: Turn, approval_id: str) -> Decision:
        """Rule 7, in the requester's conversation, told a decision: an approved call runs once,
        exactly as sealed, with the question's key (again, under that key, only when its run was lost:
        :mod:`mcp_bridge.approvals` rule 5); a refusal or an expiry is said once; anything else
        (unknown, another conversation's, already run or told) says and changes nothing. The
        conversation may have moved on since, so no slot is set."""
        taken = await self.approvals.take(approval_id, turn.conversation_id) if self.approvals else None
        request = taken.request if taken is not None else None
        if taken is None or request is None or taken.kind == "nothing":
            return Decision("nothing_pending")
        variables = templating.variables(request.slots, request.arguments, tool=request.tool)
        if taken.kind not in ("run", "resume"):
            said = approvals.RESPONSES.refused if taken.kind == "refused" else approvals.RESPONSES.expired
            return Decision("cancelled", [Say(said, variables)])
        assert self.approvals is not None
        pending = request.pending_confirmation()
        then = replace(turn, slots=request.slots)  # the conversation as the requester confirmed it
        bound = await self._verified(pending, then) if pending is not None else None
        if pending is None or bound is None:
            log.warning("approval %s: the held call does not match a known call; nothing was run", request.id)
            await self.approvals.finish(request, "rejected: does not match a known call")
            return Decision("rejected", [Say(self.responses.confirmation_invalid)])
        skill, step, resolved = bound
        if taken.kind == "resume" and not _may_repeat(resolved, request.attempts):
            # A lost run (its action server died) may have reached the tool: never repeated unkeyed.
            log.warning("approval %s: its run was lost; not repeated (no tool keeps its key)", request.id)
            await self.approvals.finish(request, "outcome unknown: its run was lost, not repeated")
            return Decision("unavailable", [Say(self.responses.tool_outcome_unknown, variables)])
        # Told by the approval page, not said by anyone: a server that acts as the person is called as
        # the requester, the person whose yes was sealed with the call; never as nobody or another.
        then = replace(then, user=pending.user)
        try:
            with acting(turn.conversation_id, pending.user, skill.id):
                if pending.in_batch:  # one call of a list: alone, with the context it was planned in
                    run = await self._run_one(skill, step, resolved, pending, then)
                else:
                    run = await self._run(skill, pending.step, then, confirmed=pending, resolved=resolved)
        except SignInRequiredError:
            # The requester's sign-in is gone (disconnected, or it could not be renewed): nothing was
            # sent, and the request is done; the action shows them the link, and the skill asks anew.
            await self.approvals.finish(request, "not run: the requester must sign in first")
            raise
        try:
            await self.approvals.finish(request, run.outcome)
        except Exception:  # the store failed after the call: the person hears what the call did
            log.exception("approval %s: ran (%s), but could not be marked done", request.id, run.outcome)
        return Decision(run.outcome, list(run.say))

    async def _changed(
        self, skill: Skill, old: PendingConfirmation, turn: Turn, slot: str, value: str
    ) -> Decision:
        """An edit or a redirect: the skill runs again with ``slot`` changed and asks anew.

        The new arguments are checked like the first ones. If the run does not end in a new
        question (an unknown contact, a text the tool refuses), the person hears why and the old
        question is asked again, unchanged.
        """
        changed = replace(turn, slots={**turn.slots, slot: value})
        # An edit that changes nothing is the same call: it keeps its key (asked_before).
        run = await self._run(skill, 0, changed, asked_before=old)
        if run.waiting and run.asked is not None:
            new = run.asked[0]
            self._record(
                turn, old, "edited", f"{slot} changed", new_digest=new.digest, new_confirmation=new.id
            )
            return self._decision(skill, run, then={slot: value})
        self._record(turn, old, "unclear", f"the change of {slot} was refused")
        return await self._ask_again(skill, old, turn, run.say)

    async def _ask_again(
        self, skill: Skill, old: PendingConfirmation, turn: Turn, said: Sequence[Say]
    ) -> Decision:
        """Ask the pending question again after ``said``, bound to this turn (a new id and seal), of the
        same person. The same call keeps its idempotency key, so confirming it again cannot write it
        twice."""
        run = await self._run(skill, old.step, replace(turn, user=old.user), asked_before=old)
        return self._decision(skill, run, said=said, slots={PENDING_SLOT: None})

    def _decision(
        self,
        skill: Skill,
        run: _Run,
        *,
        said: Sequence[Say] = (),
        slots: Mapping[str, Any] | None = None,
        owns_question: bool = True,
        then: Mapping[str, Any] | None = None,
    ) -> Decision:
        """An entry point's one decision: what it ``said`` and set (``slots``) first, then the run's, then
        ``then``. A run that ends without a question ends the skill (its question and reset slots
        cleared) unless it interrupted a pending question (``owns_question`` false), which stays."""
        ended = _ended(skill) if owns_question and not run.waiting else {}
        return Decision(
            run.outcome, [*said, *run.say], {**(slots or {}), **run.slots, **ended, **(then or {})}
        )

    # -- the step loop --------------------------------------------------------------------

    async def _run(
        self,
        skill: Skill,
        start: int,
        turn: Turn,
        *,
        confirmed: PendingConfirmation | None = None,
        asked_before: PendingConfirmation | None = None,
        resolved: _Resolved | None = None,
        permitted: bool = False,
    ) -> _Run:
        """Run ``skill`` from step ``start`` with the turn's slots; ``confirmed`` is the call a yes just
        authorised, ``asked_before`` the question a new one replaces (the same call keeps its key),
        ``resolved`` what the first step's tool name resolved to, if that is known already;
        ``permitted``: a new request, whose one call a remembered permission may cover (rule 8).

        Constrained calls are gathered, not run (rule 1): the run goes on past them while the next
        steps are constrained too and need nothing the gathered calls would give, then asks about
        all of them (rule 6). A run of one line that gathered one call asks as it always did.
        """
        lines = [_Line(dict(turn.slots))]
        said: list[Say] = []
        planned: list[_Planned] = []
        for index in range(start, len(skill.steps)):
            step = skill.steps[index]
            if index != start or resolved is None:
                resolved = self._resolve(skill, step.execute_tool)
            authorised = confirmed if confirmed is not None and index == confirmed.step else None
            rule: RequiresConfirmation | None = None
            if authorised is None:
                lines = _expand(step, lines)
                if not any(runs_when(step, line.slots, line.results) for line in lines):
                    continue
                rule = await self._needs_yes(skill, step.execute_tool, resolved)
                if planned and (rule is None or _waits_for(step, planned, lines)):
                    break  # asked about after the gathered calls, in a question of its own
            updated: list[_Line] = []
            for position, line in enumerate(lines):
                if authorised is None and not runs_when(step, line.slots, line.results):
                    updated.append(line)
                    continue
                if authorised is not None:
                    arguments = dict(authorised.arguments)
                else:
                    arguments, missing = resolve_arguments(step, line.slots, line.results)
                    if missing:
                        response = step.on_missing_argument or self.responses.tool_failed
                        missed = Say(response, {"error": f"missing {', '.join(missing)}"})
                        return _Run("missing_argument", (*said, missed), _filled(lines))
                    if rule is not None:
                        planned.append(_Planned(index, step, resolved, rule, arguments, line.slots, line.own))
                        updated.append(line)
                        continue
                called = await self._dispatch(skill, step, resolved, arguments, line.slots, turn, authorised)
                if isinstance(called, _Run):
                    return replace(called, say=(*said, *called.say), slots={**_filled(lines), **called.slots})
                results = {**line.results, **called.data}
                routed = self._route(step, called, line.slots, arguments, results)
                said.extend(routed.say)
                line = line.set(routed.slots, called.data)
                updated.append(line)
                if routed.outcome is not None:
                    return _Run(routed.outcome, tuple(said), _filled([*updated, *lines[position + 1 :]]))
            lines = updated
        if planned:
            if len(planned) == 1 and len(lines) == 1:
                one = planned[0]
                permission = await self._covered(skill, one, turn) if permitted else None
                if permission is not None:
                    ran = await self._run_permitted(skill, one, permission, turn)
                    return replace(ran, say=(*said, *ran.say), slots={**_filled(lines), **ran.slots})
                asked = await self._ask(
                    skill,
                    one.index,
                    one.step,
                    one.resolved,
                    one.rule,
                    one.arguments,
                    one.slots,
                    turn,
                    asked_before,
                )
            else:
                before = (asked_before,) if asked_before is not None else ()
                asked = await self._ask_calls(skill, planned, turn, before)
            return replace(asked, say=(*said, *asked.say), slots={**_filled(lines), **asked.slots})
        return _Run("done", tuple(said), _filled(lines))

    def _resolve(self, skill: Skill, name: str) -> _Resolved:
        try:
            return self.tools.resolve(skill, name)
        except ToolNotFoundError as exc:
            return exc

    async def _needs_yes(
        self, skill: Skill, name: str, resolved: _Resolved | None = None
    ) -> RequiresConfirmation | None:
        """Rules 1 and 2, as :mod:`mcp_bridge.confirmation` decides them."""
        resolved = self._resolve(skill, name) if resolved is None else resolved
        tool = None if isinstance(resolved, ToolNotFoundError) else resolved
        return await needs_confirmation(skill, name, tool, default=self._unconstrained)

    async def _ask(
        self,
        skill: Skill,
        index: int,
        step: Step,
        resolved: _Resolved,
        rule: RequiresConfirmation,
        arguments: dict[str, Any],
        slots: Mapping[str, Any],
        turn: Turn,
        asked_before: PendingConfirmation | None,
    ) -> _Run:
        """Rule 1: seal the exact call into the tracker and ask. Arguments the tool would refuse are
        refused now, before the person is asked about them. ``asked_before``: the question this one
        asks again; the same call keeps its idempotency key."""
        # A name that resolves to nothing (no such local function, or a server that does not serve
        # it) is asked about all the same; dispatch refuses it loudly (rule 5).
        if not isinstance(resolved, ToolNotFoundError):
            try:
                await check_arguments(resolved, arguments)
            except ToolNotFoundError:
                pass
            except _FAILURES as exc:
                return self._failure(skill, step, exc, turn)
        pending = self._seal.sign(
            self._pending(skill, index, step, arguments, turn, asked_before), turn.conversation_id
        )
        assert rule.utter_for_confirmation is not None
        variables = templating.variables(slots, arguments, tool=step.execute_tool)
        # Rule 8: a third button gives a permission, where the skill allows one for this call.
        remember = await self._may_remember(skill, step.execute_tool, resolved, arguments)
        buttons = (permissions.GRANT_BUTTON,) if remember else ()
        question = Say(rule.utter_for_confirmation, variables, buttons)
        self._record(turn, pending, "asked", None)
        return _Run("pending", (question,), {PENDING_SLOT: pending.to_slot()}, (pending,))

    def _pending(
        self,
        skill: Skill,
        index: int,
        step: Step,
        arguments: Mapping[str, Any],
        turn: Turn,
        asked_before: PendingConfirmation | None,
    ) -> PendingConfirmation:
        """The exact call of ``step``, unsigned, as a question about it (or a permission's use) holds
        it; the same call as ``asked_before`` keeps its idempotency key."""
        source = str(skill.tools[step.execute_tool])
        digest = call_digest(skill.id, step.execute_tool, source, arguments)
        question_id = uuid.uuid4().hex
        same_call = asked_before is not None and asked_before.digest == digest
        return PendingConfirmation(
            id=question_id,
            skill=skill.id,
            tool=step.execute_tool,
            step=index,
            source=source,
            arguments=dict(arguments),
            digest=digest,
            asked_at=self._clock(),
            user_turn=turn.user_turn,
            key=asked_before.key if same_call and asked_before is not None else question_id,
            user=turn.user,
        )

    async def _ask_calls(
        self, skill: Skill, planned: Sequence[_Planned], turn: Turn, asked_before: Question
    ) -> _Run:
        """Rule 6: seal each call on its own, as one question, and ask with a numbered list. Arguments
        a tool would refuse are refused now, before anything is asked. A call asked about before
        (the same call, in ``asked_before``) keeps its idempotency key."""
        for one in planned:
            if isinstance(one.resolved, ToolNotFoundError):
                continue  # asked about all the same; dispatch refuses it loudly (rule 5)
            try:
                await check_arguments(one.resolved, one.arguments)
            except ToolNotFoundError:
                pass
            except _FAILURES as exc:
                return self._failure(skill, one.step, exc, turn)
        keys = {call.digest: call.key for call in asked_before}
        batch, now = uuid.uuid4().hex, self._clock()
        calls: list[PendingConfirmation] = []
        for place, one in enumerate(planned, start=1):
            source = str(skill.tools[one.step.execute_tool])
            digest = call_digest(skill.id, one.step.execute_tool, source, one.arguments)
            question_id = uuid.uuid4().hex
            call = PendingConfirmation(
                id=question_id,
                skill=skill.id,
                tool=one.step.execute_tool,
                step=one.index,
                source=source,
                arguments=dict(one.arguments),
                digest=digest,
                asked_at=now,
                user_turn=turn.user_turn,
                key=keys.get(digest, question_id),
                user=turn.user,
                batch=batch,
                place=place,
                count=len(planned),
                context=dict(one.context),
            )
            calls.append(self._seal.sign(call, turn.conversation_id))
        for call in calls:
            self._record(turn, call, "asked", None)
        question = tuple(calls)
        return _Run(
            "pending",
            (self._list(skill, question, turn.slots),),
            {PENDING_SLOT: question_to_slot(question)},
            question,
        )

    def _list(self, skill: Skill, calls: Question, slots: Mapping[str, Any]) -> Say:
        """The question about several calls: each on its numbered line, and a button per call."""
        lines = "\n".join(f"{call.place}. {self._describe(skill, call, slots)}" for call in calls)
        buttons = tuple({"title": f"Only {call.place}", "payload": f"only {call.place}"} for call in calls)
        if len(calls) == 1:
            return Say(self.responses.confirm_one_call, {"calls": lines, "count": 1})
        return Say(
            self.responses.confirm_calls,
            {"calls": lines, "count": len(calls)},
            buttons if 2 <= len(calls) <= _MAX_CALL_BUTTONS else (),
        )

    def _describe(self, skill: Skill, call: PendingConfirmation, slots: Mapping[str, Any]) -> str:
        """A call's line in the list: its tool's ``describe`` filled in, or its name and arguments."""
        variables = templating.variables({**slots, **call.context}, call.arguments, tool=call.tool)
        rule = declared(skill, call.tool)
        if rule is not None and rule.describe:
            try:
                return rule.describe.format_map(variables)
            except (KeyError, ValueError, IndexError, AttributeError):
                pass  # a variable this call does not have: named plainly instead
        return f"{call.tool} {variables['tool_arguments']}"

    async def _answer_calls(self, calls: Question, turn: Turn) -> Decision:
        """Rule 6: the answer to a question about several calls, read once, decided per call."""
        first = calls[0]
        if first.user != turn.user:
            return self._refuse(turn, first)
        bound = await self._verified_calls(calls, turn)
        if bound is None:
            for call in calls[1:]:
                self._record(turn, call, "rejected", "confirmation does not match a known call")
            return self._reject(turn, first, "confirmation does not match a known call")
        skill, steps = bound
        if not turn.new_message:
            if first.user_turn == turn.user_turn:
                return Decision("pending")  # asked in this very turn
            self._record_all(turn, calls, "asked_again", None)
            return await self._ask_calls_again(skill, steps, calls, turn, [Say(self.responses.confirm_again)])
        nlu = NluOpinion(turn.intent, turn.intent_confidence, turn.intent_ranking)
        names = [call.tool.rsplit("_", 1)[-1] for call in calls]
        reading = self.reader.read_calls(turn.text, nlu, [call.arguments for call in calls], names)
        if isinstance(reading, Choices):
            return await self._decided(skill, steps, calls, reading.approved, turn)
        if isinstance(reading, Other):
            self._record_all(turn, calls, "handed_back", None)
            return Decision("handed_back")
        if isinstance(reading, TooLong):
            self._record_all(turn, calls, "unclear", reading.reason)
            return await self._ask_calls_again(skill, steps, calls, turn, [self._too_long(reading)])
        if isinstance(reading, EditCall):
            return await self._edited_call(skill, steps, calls, reading, turn)
        if self._late(first):
            self._record_all(turn, calls, "expired", None)
            expired = [Say(self.responses.confirmation_expired)]
            return await self._ask_calls_again(skill, steps, calls, turn, expired)
        self._record_all(turn, calls, "unclear", reading.reason)
        return await self._ask_calls_again(skill, steps, calls, turn, [Say(self.responses.answer_each_call)])

    async def _decided(
        self,
        skill: Skill,
        steps: Sequence[tuple[Step, _Resolved]],
        calls: Question,
        approved: Sequence[bool],
        turn: Turn,
    ) -> Decision:
        """A yes or no for each call: each approved call runs as rule 3 says, each refused one never."""
        first = calls[0]
        if not any(approved):  # a no to every call cancels, late or not: nothing runs
            self._record_all(turn, calls, "denied", None)
            return Decision("cancelled", [Say(self.responses.calls_cancelled)], _ended(skill))
        if self._late(first):
            self._record_all(turn, calls, "expired", None)
            expired = [Say(self.responses.confirmation_expired)]
            return await self._ask_calls_again(skill, steps, calls, turn, expired)
        if turn.user_turn != first.user_turn + 1:
            self._record_all(turn, calls, "asked_again", None)
            return await self._ask_calls_again(skill, steps, calls, turn, [Say(self.responses.confirm_again)])
        for call, (step, _) in zip(calls, steps, strict=True):
            if not _still_holds(step, call, turn.slots):
                for other in calls:
                    if other is not call:
                        self._record(turn, other, "rejected", "another call of the question changed")
                return self._reject(turn, call, "arguments changed after the question", skill)
        said: list[Say] = []
        outcome: Outcome = "done"
        # A call its server stops to ask the person about keeps its question (the elicitation slot).
        kept: dict[str, Any] = {}
        asking: list[Say] = []
        for call, (step, resolved), yes in zip(calls, steps, approved, strict=True):
            if not yes:
                self._record(turn, call, "denied", None)
                variables = {"place": call.place, "call": self._describe(skill, call, turn.slots)}
                said.append(Say(self.responses.call_skipped, variables))
                continue
            self._record(turn, call, "confirmed", None)
            second = approvals.required(skill, call.tool, call.arguments)
            if second is not None:  # rule 7: this call waits for its approver; the others do not
                held, waiting = await self._held(second, call, turn, {**turn.slots, **call.context})
                said.append(waiting)
                outcome = held if outcome == "done" else outcome
                continue
            run = await self._run_one(skill, step, resolved, call, turn)
            if ELICITATION_SLOT in kept and run.slots.get(ELICITATION_SLOT) is not None:
                # One server question waits at a time: this call's is not asked, and the call not
                # completed (its server hears nothing more; a held call is told cancel when its
                # wait runs out). The person hears so, and can ask for it again afterwards.
                self._record(turn, call, "executed", "not completed: another call's question is waiting")
                error = "it has a question of its own while another is waiting; ask for it again after"
                said.append(Say(self.responses.tool_failed, {"error": error, "tool_name": call.tool}))
                continue
            if run.slots.get(ELICITATION_SLOT) is not None:
                asking = list(run.say)  # said last: the question the person answers next
            else:
                said.extend(run.say)
            outcome = run.outcome if outcome == "done" else outcome
            kept.update(run.slots)
        return Decision(outcome, [*said, *asking], {**_ended(skill), **kept})

    async def _run_one(
        self, skill: Skill, step: Step, resolved: _Resolved, call: PendingConfirmation, turn: Turn
    ) -> _Run:
        """One confirmed call of a list, exactly as sealed, with the slots it was planned with."""
        slots = {**turn.slots, **call.context}
        called = await self._dispatch(skill, step, resolved, dict(call.arguments), slots, turn, call)
        if isinstance(called, _Run):
            return called
        routed = self._route(step, called, slots, call.arguments, called.data)
        return _Run(routed.outcome or "done", tuple(routed.say), {})

    async def _edited_call(
        self,
        skill: Skill,
        steps: Sequence[tuple[Step, _Resolved]],
        calls: Question,
        edit: EditCall,
        turn: Turn,
    ) -> Decision:
        """ "change 2 to: ...": that call's text argument changes, and the list is asked about again."""
        slot = skill.edits.get("text")
        old = calls[edit.place - 1]
        step = steps[edit.place - 1][0]
        changed = [
            name
            for name, source in step.arguments.items()
            if slot is not None and isinstance(source, SlotArgument) and source.slot == slot
        ]
        if slot is None or not changed:
            self._record_all(turn, calls, "unclear", "an edit this call does not allow")
            return await self._ask_calls_again(
                skill, steps, calls, turn, [Say(self.responses.answer_each_call)]
            )
        planned = self._replanned(skill, steps, calls)
        one = planned[edit.place - 1]
        planned[edit.place - 1] = replace(
            one,
            arguments={**one.arguments, **dict.fromkeys(changed, edit.text)},
            context={**one.context, slot: edit.text},
        )
        run = await self._ask_calls(skill, planned, replace(turn, user=old.user), calls)
        if not run.waiting or run.asked is None:
            self._record_all(turn, calls, "unclear", f"the change of {slot} was refused")
            return await self._ask_calls_again(skill, steps, calls, turn, run.say)
        new = run.asked[edit.place - 1]
        self._record(turn, old, "edited", f"{slot} changed", new_digest=new.digest, new_confirmation=new.id)
        return Decision(run.outcome, list(run.say), dict(run.slots))

    async def _ask_calls_again(
        self,
        skill: Skill,
        steps: Sequence[tuple[Step, _Resolved]],
        calls: Question,
        turn: Turn,
        said: Sequence[Say],
    ) -> Decision:
        """The same list again after ``said``, bound to this turn, of the same person; each call keeps
        its idempotency key."""
        planned = self._replanned(skill, steps, calls)
        run = await self._ask_calls(skill, planned, replace(turn, user=calls[0].user), calls)
        return self._decision(skill, run, said=said, slots={PENDING_SLOT: None})

    def _replanned(
        self, skill: Skill, steps: Sequence[tuple[Step, _Resolved]], calls: Question
    ) -> list[_Planned]:
        """The calls of a question, as they were planned: to seal them again."""
        planned = []
        for call, (step, resolved) in zip(calls, steps, strict=True):
            rule = declared(skill, call.tool) or self._unconstrained
            planned.append(_Planned(call.step, step, resolved, rule, dict(call.arguments), {}, call.context))
        return planned

    async def _dispatch(
        self,
        skill: Skill,
        step: Step,
        resolved: _Resolved,
        arguments: dict[str, Any],
        slots: Mapping[str, Any],
        turn: Turn,
        confirmed: PendingConfirmation | None,
    ) -> ToolResult | _Run:
        """Call the tool the name resolved to (rule 5); a confirmed call with its key, exactly once
        (rule 3). A failure comes back as the run's end.

        ``slots`` are the conversation's slots as the run has them now (an MCP server's
        ``meta_map.from_slots`` sends some of them in ``_meta``).
        """
        result: ToolResult | _Run
        outcome = "not run"
        try:
            if isinstance(resolved, ToolNotFoundError):
                raise resolved
            key = confirmed.key if confirmed else None
            result = await resolved.call(arguments, idempotency_key=key, slots=slots)
            outcome = "ok" if result.ok else f"error: {result.error}"
        except InputRequiredError as exc:
            result = self.questions.asked(self, skill, step, arguments, turn, confirmed, exc)
            outcome = "stopped to ask the person"
        except _FAILURES as exc:
            if isinstance(exc, SignInRequiredError) and confirmed is not None:
                self._record(turn, confirmed, "executed", "not run: the person must sign in first")
            result = self._failure(skill, step, exc, turn)
            if isinstance(exc, QuestionLapsedError):
                outcome = "outcome unknown: the server stopped waiting for the answer (told cancel)"
            elif isinstance(exc, ToolCallError) and exc.may_have_run:
                outcome = "outcome unknown"
        if confirmed is not None:
            try:
                self._record(turn, confirmed, "executed", outcome)
            except AuditWriteError:
                pass  # logged; the call ran, and the person must hear what happened, not "nothing"
        return result

    def _route(
        self,
        step: Step,
        result: ToolResult,
        slots: Mapping[str, Any],
        arguments: Mapping[str, Any],
        results: Mapping[str, Any],
    ) -> _Step:
        """What follows the result: what to say, the slots it fills, and whether the skill goes on."""
        if not result.ok:
            error = result.error or "the tool reported a failure"
            return _Step("failed", (Say(step.on_error or self.responses.tool_failed, {"error": error}),))
        empty_list = step.not_found_when_empty and not result.data.get(step.not_found_when_empty)
        false_flag = step.not_found_when_false and result.data.get(step.not_found_when_false) is False
        if empty_list or false_flag:
            if not step.on_not_found:
                return _Step("not_found")
            variables = templating.variables(slots, arguments, results, list_format=step.list_format)
            return _Step("not_found", (Say(step.on_not_found, variables),))
        fills = {slot: result.data.get(key) for slot, key in step.fills.items()}
        if not step.on_success:
            return _Step(None, (), fills)
        variables = templating.variables({**slots, **fills}, arguments, results, list_format=step.list_format)
        return _Step(None, (Say(step.on_success, variables),), fills)

    def _failure(self, skill: Skill, step: Step, exc: Exception, turn: Turn) -> _Run:
        tool = step.execute_tool
        if isinstance(exc, SignInRequiredError):
            raise exc  # nothing was sent; the action shows the sign-in link, the skill resumes after
        if isinstance(exc, ToolNotFoundError):
            log.error(
                "REFUSED: tool %r of skill %r resolves to neither a local function nor an MCP tool "
                "(%s); nothing was run (conversation %s)",
                tool,
                skill.id,
                exc,
                turn.conversation_id,
            )
            return _Run("not_configured", (Say(self.responses.tool_not_configured),))
        if isinstance(exc, ToolArgumentsError):
            log.warning("tool %r of skill %r: %s", tool, skill.id, exc)
            return _Run("failed", (Say(step.on_error or self.responses.tool_failed, {"error": str(exc)}),))
        log.warning("tool %r of skill %r failed: %s", tool, skill.id, exc)
        if isinstance(exc, QuestionLapsedError | ToolResultInvalidError):
            said = (
                self.responses.elicitation_lapsed
                if isinstance(exc, QuestionLapsedError)
                else self.responses.tool_result_invalid
            )
            return _Run("unavailable", (Say(said, {"tool_name": tool}),))
        unknown = isinstance(exc, ToolCallError) and exc.may_have_run
        said = self.responses.tool_outcome_unknown if unknown else self.responses.tool_unavailable
        return _Run("unavailable", (Say(said),))

    # -- the question's binding -----------------------------------------------------------

    async def _verified(
        self, pending: PendingConfirmation, turn: Turn
    ) -> tuple[Skill, Step, _Resolved] | None:
        """The skill and step a pending confirmation names, and what its tool resolves to, if its seal
        and binding hold."""
        skill = self.skills.get(pending.skill)
        if skill is None or not 0 <= pending.step < len(skill.steps):
            return None
        step = skill.steps[pending.step]
        source = skill.tools.get(pending.tool)
        if step.execute_tool != pending.tool or source is None or str(source) != pending.source:
            return None
        if not self._seal.verify(pending, turn.conversation_id):
            return None
        resolved = self._resolve(skill, pending.tool)
        if await self._needs_yes(skill, pending.tool, resolved) is None:
            return None
        return skill, step, resolved

    async def _verified_calls(
        self, calls: Question, turn: Turn
    ) -> tuple[Skill, list[tuple[Step, _Resolved]]] | None:
        """The skill and, per call, the step and what its tool resolves to, if the question's seals
        and binding hold (each call as :meth:`_verified` checks one, and together one question)."""
        skill = self.skills.get(calls[0].skill)
        if skill is None or not self._seal.verify_question(calls, turn.conversation_id):
            return None
        steps = []
        for call in calls:
            if call.skill != skill.id or not 0 <= call.step < len(skill.steps):
                return None
            step = skill.steps[call.step]
            source = skill.tools.get(call.tool)
            if step.execute_tool != call.tool or source is None or str(source) != call.source:
                return None
            resolved = self._resolve(skill, call.tool)
            if await self._needs_yes(skill, call.tool, resolved) is None:
                return None
            steps.append((step, resolved))
        return skill, steps

    def _record_all(self, turn: Turn, calls: Question, decision: str, result: str | None) -> None:
        for call in calls:
            self._record(turn, call, decision, result)

    def _reject(
        self, turn: Turn, pending: PendingConfirmation, reason: str, skill: Skill | None = None
    ) -> Decision:
        log.warning(
            "conversation %s: confirmation %s rejected (%s); nothing was run",
            turn.conversation_id,
            pending.id,
            reason,
        )
        self._record(turn, pending, "rejected", reason)
        return Decision("rejected", [Say(self.responses.confirmation_invalid)], _ended(skill))

    def _refuse(self, turn: Turn, pending: PendingConfirmation) -> Decision:
        """Rule 3: only the person asked may answer. Nothing runs; the question stays for them."""
        log.warning(
            "conversation %s: an answer to confirmation %s came from someone other than the person "
            "asked; refused, nothing was run",
            turn.conversation_id,
            pending.id,
        )
        self._record(
            turn, pending, "refused", "answered by someone other than the person asked", answered_by=turn.user
        )
        return Decision("refused", [Say(self.responses.confirmation_invalid)])

    def _record(
        self,
        turn: Turn,
        pending: PendingConfirmation,
        decision: str,
        result: str | None,
        **extra: str | None,
    ) -> None:
        self._audit.record_question(turn.conversation_id, pending, decision, result, **extra)


# Up to this many calls in a question, each gets an "Only <n>" button; more are answered in words.
_MAX_CALL_BUTTONS = 5


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


def _waits_for(step: Step, planned: Sequence[_Planned], lines: Sequence[_Line]) -> bool:
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


def _still_holds(step: Step, call: PendingConfirmation, slots: Mapping[str, Any]) -> bool:
    """The call's arguments are still what its step makes of the slots (the conversation's, with
    the call's own context over them); results of earlier steps are not kept, so not compared."""
    current, _ = resolve_arguments(step, {**slots, **call.context})
    return all(
        current.get(name) == call.arguments.get(name)
        for name, source in step.arguments.items()
        if not isinstance(source, ResultArgument)
    )


def _ended(skill: Skill | None) -> dict[str, Any]:
    """The slots that end a skill: no question pending, and the skill's reset slots cleared."""
    resets = skill.reset_slots if skill is not None else ()
    return {PENDING_SLOT: None, **{slot: None for slot in resets}}


def _clear(raw: Any) -> dict[str, Any]:
    return {PENDING_SLOT: None} if raw is not None else {}
