"""The confirmation-aware executor: runs a skill's steps and holds every constrained write for a "yes".

Plain data in (a :class:`Turn`: slots and what the person just said), a :class:`Decision` out
(responses to say, slots to set). The pending confirmation travels in a slot, so the action
server keeps no state between turns and any replica can serve the "yes".

Rules, in order of importance:

* A step whose tool has ``requires_confirmation`` never runs in the turn that reaches it: it is
  recorded as a :class:`PendingConfirmation` (skill, tool, source, exact arguments, digest, id) and
  the person is asked. The constraint is looked up by the tool's *name*, before the name is resolved,
  so it holds for local and MCP tools alike.
* A "yes" runs exactly the stored arguments, once, and only if it answers the question directly: a
  "yes" after another message, after the confirmation expired, or that the NLU was unsure of, asks
  again instead. Arguments that changed since the question cancel the write.
* The tool's name is resolved at dispatch time: this skill's local function, else an MCP tool the
  skill imports. A name that resolves to neither is a loud error and nothing runs.
* A "no" calls nothing.
* A tool from an MCP server that the skill gives no constraint is confirmed too, unless the server
  is marked ``trusted`` in endpoints.yml and annotates the tool read-only. An untrusted server's
  annotations never switch a confirmation off; a skill can, with ``enabled: false``.
* A confirmed write carries an idempotency key (the confirmation id). When its outcome is unknown
  (timeout, connection lost after sending) it is repeated once with the same key, which the store
  honours, so the write lands exactly once.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mcp_bridge.audit import AuditLog
from mcp_bridge.errors import OutcomeUnknownError, ToolArgumentsError, ToolCallError, ToolNotFoundError
from mcp_bridge.local_tools import validate_local_arguments
from mcp_bridge.metrics import timed_tool_call
from mcp_bridge.results import ToolResult, from_local
from mcp_bridge.runtime import MCPRuntime, validate_arguments
from mcp_bridge.skills import RequiresConfirmation, Skill, Step, ToolFunction, resolve_arguments

log = logging.getLogger(__name__)

PENDING_SLOT = "pending_confirmation"


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


@dataclass(frozen=True)
class Say:
    response: str
    variables: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Decision:
    outcome: str
    say: list[Say] = field(default_factory=list)
    # slot name -> new value (None clears it)
    slots: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfirmationPolicy:
    # A "yes" later than this asks again instead of writing.
    ttl_seconds: float = 300.0
    # A "yes" counts only at or above this NLU confidence ...
    min_confidence: float = 0.6
    # ... and only when "no" is not within this margin of it.
    deny_margin: float = 0.25
    affirm_intent: str = "affirm"
    deny_intent: str = "deny"


@dataclass(frozen=True)
class Responses:
    """Responses the executor itself says; the domain must define them."""

    nothing_pending: str = "utter_nothing_pending"
    confirm_again: str = "utter_confirm_again"
    confirmation_invalid: str = "utter_confirmation_invalid"
    tool_failed: str = "utter_tool_failed"
    tool_unavailable: str = "utter_tool_unavailable"
    tool_outcome_unknown: str = "utter_tool_outcome_unknown"
    tool_not_configured: str = "utter_tool_not_configured"
    # The question and the "no" for an MCP tool that the skill gave no constraint (see below).
    confirm_tool_call: str = "utter_confirm_tool_call"
    tool_call_cancelled: str = "utter_tool_call_cancelled"

    def names(self) -> set[str]:
        return set(asdict(self).values())


@dataclass(frozen=True)
class PendingConfirmation:
    id: str
    skill: str
    tool: str
    step: int
    source: str
    arguments: dict[str, Any]
    digest: str
    asked_at: float
    user_turn: int
    # HMAC over every field above and the conversation id, keyed with the action servers' shared
    # secret: a value built or edited outside the action server, or replayed elsewhere, fails it.
    mac: str = ""

    def to_slot(self) -> dict[str, Any]:
        return asdict(self)

    def signed_fields(self, conversation_id: str) -> bytes:
        fields = {key: value for key, value in asdict(self).items() if key != "mac"}
        fields["conversation"] = conversation_id
        return _canonical(fields).encode("ascii")

    @classmethod
    def from_slot(cls, value: Any) -> PendingConfirmation | None:
        """Parse the slot; anything malformed is treated as no confirmation at all."""
        if not isinstance(value, dict):
            return None
        try:
            pending = cls(
                id=str(value["id"]),
                skill=str(value["skill"]),
                tool=str(value["tool"]),
                step=int(value["step"]),
                source=str(value["source"]),
                arguments=dict(value["arguments"]),
                digest=str(value["digest"]),
                asked_at=float(value["asked_at"]),
                user_turn=int(value["user_turn"]),
                mac=str(value.get("mac", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return pending


def call_digest(skill: str, tool: str, source: str, arguments: Mapping[str, Any]) -> str:
    """A digest of exactly the call a confirmation authorises (for the audit trail and binding)."""
    canonical = _canonical({"skill": skill, "tool": tool, "source": source, "arguments": arguments})
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _canonical(value: Any) -> str:
    # ASCII escapes: any text a person can type, unpaired surrogates included, has one encoding.
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


class Executor:
    def __init__(
        self,
        skills: Mapping[str, Skill],
        local_tools: Mapping[str, ToolFunction],
        runtime: MCPRuntime | None,
        *,
        policy: ConfirmationPolicy | None = None,
        responses: Responses | None = None,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.time,
        secret: bytes | None = None,
    ) -> None:
        self.skills = dict(skills)
        self._local = dict(local_tools)
        self._runtime = runtime
        self.policy = policy or ConfirmationPolicy()
        self.responses = responses or Responses()
        self._audit = audit or AuditLog(None)
        self._clock = clock
        if secret is None:
            log.warning(
                "no confirmation secret configured: using one for this process only, so a question "
                "asked before a restart (or by another replica) cannot be confirmed after it"
            )
        self._secret = secret or secrets.token_bytes(32)
        if runtime is not None:
            for skill in self.skills.values():
                runtime.import_tools(skill.id, skill.mcp_imports())

    async def aclose(self) -> None:
        if self._runtime is not None:
            await self._runtime.aclose()

    # -- entry points -------------------------------------------------------------------------

    async def start(self, skill_id: str, turn: Turn) -> Decision:
        """Run a skill from its first step (until it ends or waits for a confirmation)."""
        skill = self.skills[skill_id]
        slots = dict(turn.slots)
        decision = Decision(outcome="done")
        if PENDING_SLOT in slots and slots[PENDING_SLOT] is not None:
            # Starting again replaces an unanswered question; it can never be answered later.
            decision.slots[PENDING_SLOT] = None
        await self._run(skill, 0, turn, slots, decision, confirmed=None)
        return decision

    async def confirm(self, turn: Turn) -> Decision:
        """The person said "yes"."""
        raw = turn.slots.get(PENDING_SLOT)
        pending = PendingConfirmation.from_slot(raw)
        if pending is None:
            if raw is not None:
                log.warning("conversation %s: malformed pending confirmation ignored", turn.conversation_id)
            return Decision("nothing_pending", [Say(self.responses.nothing_pending)], self._clear_if(raw))
        skill, step = self._bound_step(pending)
        if skill is None or step is None or not await self._authentic(pending, skill, turn):
            log.warning(
                "conversation %s: confirmation %s does not match any call this server would make; "
                "nothing was run",
                turn.conversation_id,
                pending.id,
            )
            self._record(turn, pending, "rejected", "confirmation does not match a known call")
            return Decision("rejected", [Say(self.responses.confirmation_invalid)], {PENDING_SLOT: None})
        if self._must_ask_again(pending, turn):
            return await self._ask_again(skill, pending, turn)
        current, _ = resolve_arguments(step, turn.slots)
        if current != pending.arguments:
            self._record(turn, pending, "rejected", "arguments changed after the question")
            decision = Decision("rejected", [Say(self.responses.confirmation_invalid)], {PENDING_SLOT: None})
            self._finish(skill, decision)
            return decision
        self._record(turn, pending, "confirmed", None)
        slots = dict(turn.slots)
        decision = Decision(outcome="done", slots={PENDING_SLOT: None})
        await self._run(skill, pending.step, turn, slots, decision, confirmed=pending)
        return decision

    async def deny(self, turn: Turn) -> Decision:
        """The person said "no": nothing is called."""
        raw = turn.slots.get(PENDING_SLOT)
        pending = PendingConfirmation.from_slot(raw)
        if pending is None:
            return Decision("nothing_pending", [Say(self.responses.nothing_pending)], self._clear_if(raw))
        self._record(turn, pending, "denied", None)
        skill = self.skills.get(pending.skill)
        rule = await self._confirmation_rule(skill, pending.tool) if skill else None
        denial = rule.utter_on_user_denial if rule and rule.utter_on_user_denial else None
        decision = Decision("cancelled", [], {PENDING_SLOT: None})
        if denial:
            decision.say.append(Say(denial, _variables(turn.slots, pending.arguments, tool=pending.tool)))
        else:
            decision.say.append(Say(self.responses.confirmation_invalid))
        if skill is not None:
            self._finish(skill, decision)
        return decision

    # -- the step loop ------------------------------------------------------------------------

    async def _run(
        self,
        skill: Skill,
        start: int,
        turn: Turn,
        slots: dict[str, Any],
        decision: Decision,
        confirmed: PendingConfirmation | None,
    ) -> None:
        results: dict[str, Any] = {}
        for index in range(start, len(skill.steps)):
            step = skill.steps[index]
            if confirmed is not None and index == confirmed.step:
                arguments, missing = dict(confirmed.arguments), list[str]()
            else:
                arguments, missing = resolve_arguments(step, slots, results)
            if missing:
                decision.outcome = "missing_argument"
                decision.say.append(
                    Say(
                        step.on_missing_argument or self.responses.tool_failed,
                        {"error": f"missing {', '.join(missing)}"},
                    )
                )
                self._finish(skill, decision)
                return
            if not (confirmed is not None and index == confirmed.step):
                try:
                    rule = await self._confirmation_rule(skill, step.execute_tool)
                    if rule is not None:
                        await self._check_arguments(skill, step.execute_tool, arguments)
                except (ToolCallError, ToolArgumentsError, ToolNotFoundError) as exc:
                    self._say_failure(skill, step, exc, turn, decision)
                    self._finish(skill, decision)
                    return
                if rule is not None:
                    pending = self._new_pending(skill, index, step, arguments, turn)
                    decision.outcome = "pending"
                    decision.slots[PENDING_SLOT] = pending.to_slot()
                    assert rule.utter_for_confirmation is not None
                    variables = _variables(slots, arguments, tool=step.execute_tool)
                    decision.say.append(Say(rule.utter_for_confirmation, variables))
                    self._record(turn, pending, "asked", None)
                    return
            key = confirmed.id if confirmed is not None and index == confirmed.step else None
            result = await self._dispatch(skill, step, arguments, turn, decision, key)
            if confirmed is not None and index == confirmed.step:
                self._record(turn, confirmed, "executed", _outcome(result))
            if result is not None:
                results.update(result.data)
            if result is None or not self._route(step, result, slots, arguments, results, decision):
                self._finish(skill, decision)
                return
        decision.outcome = "done"
        self._finish(skill, decision)

    async def _dispatch(
        self,
        skill: Skill,
        step: Step,
        arguments: dict[str, Any],
        turn: Turn,
        decision: Decision,
        idempotency_key: str | None,
    ) -> ToolResult | None:
        tool = step.execute_tool
        try:
            try:
                return await self.call_tool(skill, tool, arguments, idempotency_key=idempotency_key)
            except ToolCallError as exc:
                if not (exc.may_have_run and idempotency_key):
                    raise
                # Safe only because the key makes the store keep the first write if it landed.
                log.warning(
                    "outcome of %s.%s unknown (%s); repeating once with the same idempotency key",
                    skill.id,
                    tool,
                    exc,
                )
                try:
                    return await self.call_tool(skill, tool, arguments, idempotency_key=idempotency_key)
                except (ToolCallError, ToolArgumentsError, ToolNotFoundError) as retry_failure:
                    # The first attempt may have landed, whatever the second one met.
                    raise OutcomeUnknownError(f"{exc}; the repeat failed too: {retry_failure}") from None
        except (ToolCallError, ToolArgumentsError, ToolNotFoundError) as exc:
            self._say_failure(skill, step, exc, turn, decision)
        return None

    def _say_failure(self, skill: Skill, step: Step, exc: Exception, turn: Turn, decision: Decision) -> None:
        tool = step.execute_tool
        if isinstance(exc, ToolNotFoundError):
            log.error(
                "REFUSED: tool %r of skill %r resolves to neither a local function nor an MCP tool "
                "(%s); nothing was run (conversation %s)",
                tool,
                skill.id,
                exc,
                turn.conversation_id,
            )
            decision.outcome = "not_configured"
            decision.say.append(Say(self.responses.tool_not_configured))
        elif isinstance(exc, ToolArgumentsError):
            log.warning("tool %r of skill %r: %s", tool, skill.id, exc)
            decision.outcome = "failed"
            decision.say.append(Say(step.on_error or self.responses.tool_failed, {"error": str(exc)}))
        else:
            log.warning("tool %r of skill %r failed: %s", tool, skill.id, exc)
            decision.outcome = "unavailable"
            unknown = isinstance(exc, ToolCallError) and exc.may_have_run
            decision.say.append(
                Say(self.responses.tool_outcome_unknown if unknown else self.responses.tool_unavailable)
            )

    async def _confirmation_rule(self, skill: Skill, tool: str) -> RequiresConfirmation | None:
        """The confirmation a call of ``tool`` needs, or None; decided by name, before resolution."""
        constraint = skill.constraints.get(tool)
        if constraint is not None and constraint.requires_confirmation is not None:
            return skill.confirmation_for(tool)
        source = skill.tools.get(tool)
        if source is None or source.kind == "local":
            return None
        if self._runtime is not None and self._runtime.has_mcp_tool(skill.id, tool):
            if await self._runtime.is_trusted_read_only(skill.id, tool):
                return None
        return RequiresConfirmation(
            enabled=True,
            utter_for_confirmation=self.responses.confirm_tool_call,
            utter_on_user_denial=self.responses.tool_call_cancelled,
        )

    async def _check_arguments(self, skill: Skill, tool: str, arguments: dict[str, Any]) -> None:
        """Refuse arguments the tool would refuse, before the person is asked about them.

        A name that does not resolve is left for dispatch, which refuses it loudly.
        """
        source = skill.tools.get(tool)
        local = self._local.get(tool) if source is not None and source.kind == "local" else None
        if local is not None:
            validate_local_arguments(tool, local, arguments)
        elif self._runtime is not None and self._runtime.has_mcp_tool(skill.id, tool):
            try:
                definition = await self._runtime.get_tool(skill.id, tool)
            except ToolNotFoundError:
                return
            validate_arguments(definition, arguments)

    @timed_tool_call
    async def call_tool(
        self, skill: Skill, tool: str, arguments: dict[str, Any], *, idempotency_key: str | None = None
    ) -> ToolResult:
        """Resolve ``tool`` for ``skill`` now, at dispatch time, and call it once."""
        source = skill.tools.get(tool)
        local = self._local.get(tool) if source is not None and source.kind == "local" else None
        if local is not None:
            kwargs = dict(arguments)
            if idempotency_key is not None and "idempotency_key" in inspect.signature(local).parameters:
                kwargs["idempotency_key"] = idempotency_key
            try:
                value = await local(**kwargs)
            except Exception as exc:  # a local tool's bug must not reach rasa_sdk
                log.exception("local tool %r raised", tool)
                raise _LocalToolFailed(f"local tool {tool!r} raised {type(exc).__name__}") from exc
            return from_local(tool, value)
        if self._runtime is not None and self._runtime.has_mcp_tool(skill.id, tool):
            meta = {"idempotency_key": idempotency_key} if idempotency_key else None
            return await self._runtime.invoke(skill.id, tool, arguments, meta=meta)
        raise ToolNotFoundError(
            f"{tool!r} is not a local tool of skill {skill.id!r} nor an MCP tool it imports"
        )

    def _route(
        self,
        step: Step,
        result: ToolResult,
        slots: dict[str, Any],
        arguments: dict[str, Any],
        results: dict[str, Any],
        decision: Decision,
    ) -> bool:
        """Say what follows the result; True when the skill goes on to its next step."""
        if not result.ok:
            decision.outcome = "failed"
            error = result.error or "the tool reported a failure"
            decision.say.append(Say(step.on_error or self.responses.tool_failed, {"error": error}))
            return False
        empty_list = step.not_found_when_empty and not result.data.get(step.not_found_when_empty)
        if result.data.get("found") is False or empty_list:
            decision.outcome = "not_found"
            if step.on_not_found:
                decision.say.append(Say(step.on_not_found, _variables(slots, arguments, results)))
            return False
        for slot, key in step.fills.items():
            slots[slot] = result.data.get(key)
            decision.slots[slot] = result.data.get(key)
        if step.on_success:
            decision.say.append(Say(step.on_success, _variables(slots, arguments, results)))
        return True

    # -- confirmation bookkeeping -------------------------------------------------------------

    def _new_pending(
        self, skill: Skill, index: int, step: Step, arguments: dict[str, Any], turn: Turn
    ) -> PendingConfirmation:
        source = str(skill.tools[step.execute_tool])
        unsigned = PendingConfirmation(
            id=uuid.uuid4().hex,
            skill=skill.id,
            tool=step.execute_tool,
            step=index,
            source=source,
            arguments=dict(arguments),
            digest=call_digest(skill.id, step.execute_tool, source, arguments),
            asked_at=self._clock(),
            user_turn=turn.user_turn,
        )
        return replace(unsigned, mac=self._mac(unsigned, turn.conversation_id))

    def _mac(self, pending: PendingConfirmation, conversation_id: str) -> str:
        return hmac.new(self._secret, pending.signed_fields(conversation_id), hashlib.sha256).hexdigest()

    def _bound_step(self, pending: PendingConfirmation) -> tuple[Skill | None, Step | None]:
        skill = self.skills.get(pending.skill)
        if skill is None or not 0 <= pending.step < len(skill.steps):
            return skill, None
        step = skill.steps[pending.step]
        return skill, step if step.execute_tool == pending.tool else None

    async def _authentic(self, pending: PendingConfirmation, skill: Skill, turn: Turn) -> bool:
        if not hmac.compare_digest(pending.mac, self._mac(pending, turn.conversation_id)):
            return False
        source = skill.tools.get(pending.tool)
        if source is None or str(source) != pending.source:
            return False
        if await self._confirmation_rule(skill, pending.tool) is None:
            return False
        expected = call_digest(pending.skill, pending.tool, pending.source, pending.arguments)
        return expected == pending.digest

    def _must_ask_again(self, pending: PendingConfirmation, turn: Turn) -> bool:
        if turn.user_turn != pending.user_turn + 1:
            return True  # other messages came between the question and this "yes"
        if self._clock() - pending.asked_at > self.policy.ttl_seconds:
            return True
        if turn.intent is not None and turn.intent != self.policy.affirm_intent:
            return True
        if turn.intent_confidence < self.policy.min_confidence:
            return True
        deny = turn.intent_ranking.get(self.policy.deny_intent, 0.0)
        return turn.intent_confidence - deny < self.policy.deny_margin

    async def _ask_again(self, skill: Skill, old: PendingConfirmation, turn: Turn) -> Decision:
        expired = self._clock() - old.asked_at > self.policy.ttl_seconds
        self._record(turn, old, "expired" if expired else "asked_again", None)
        decision = Decision(
            outcome="pending", say=[Say(self.responses.confirm_again)], slots={PENDING_SLOT: None}
        )
        await self._run(skill, old.step, turn, dict(turn.slots), decision, confirmed=None)
        return decision

    def _finish(self, skill: Skill, decision: Decision) -> None:
        decision.slots[PENDING_SLOT] = None
        for slot in skill.reset_slots:
            decision.slots[slot] = None

    @staticmethod
    def _clear_if(raw: Any) -> dict[str, Any]:
        return {PENDING_SLOT: None} if raw is not None else {}

    def _record(self, turn: Turn, pending: PendingConfirmation, decision: str, result: str | None) -> None:
        self._audit.record(
            conversation=turn.conversation_id,
            skill=pending.skill,
            tool=pending.tool,
            source=pending.source,
            confirmation=pending.id,
            digest=pending.digest,
            decision=decision,
            result=result,
        )


class _LocalToolFailed(ToolCallError):
    may_have_run = True


def _outcome(result: ToolResult | None) -> str:
    if result is None:
        return "not run or unknown"
    return "ok" if result.ok else f"error: {result.error}"


def _variables(
    slots: Mapping[str, Any],
    arguments: Mapping[str, Any],
    result: Mapping[str, Any] | None = None,
    *,
    tool: str | None = None,
) -> dict[str, Any]:
    """Template variables for a response: slots by name, ``arg_<name>`` and ``result_<key>``.

    Rasa renders a custom action's responses before it applies the action's slot events, so every
    value a response shows is passed explicitly. The prefixes keep names like ``text`` clear of
    the keys a bot message itself uses.
    """
    variables: dict[str, Any] = {}
    for prefix, source in (("", slots), ("arg_", arguments), ("result_", result or {})):
        for key, value in source.items():
            if isinstance(value, list):
                variables[prefix + key] = _lines(value)
            elif isinstance(value, str | int | float | bool):
                variables[prefix + key] = value
    if tool is not None:
        variables["tool_name"] = tool
        variables["tool_arguments"] = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)
    return variables


def _lines(items: list[Any]) -> str:
    lines = []
    for item in items:
        if isinstance(item, dict) and "text" in item:
            when = str(item.get("created_at") or "")[:10]
            lines.append(f"- {when + ': ' if when else ''}{item['text']}")
        else:
            lines.append(f"- {item}")
    return "\n".join(lines)
