"""Runs test cases against a running Rasa server (REST channel, HTTP API) and its action server.

Each case gets a conversation id of its own, unique to this run, so cases can run at the same time
(at most ``concurrency`` at once) and a rerun never meets an old tracker. For every ``user`` step the
runner sends the message through ``POST /webhooks/rest/webhook``, then reads what happened in answer
from ``GET /conversations/<id>/tracker`` (bot messages with their response name, which Rasa records
as ``metadata.utter_action``, and slot events) and from the action server's audit trail (tool calls).
An ``approval`` step decides the conversation's held call on the approval page as the approver named
(:mod:`mcp_bridge.cli.e2e.approvals`), then waits until the conversation has been told the decision
(Rasa records the page's ``trigger_intent`` as a user event of the intent ``approval_decided``, and the
turn ends with ``action_listen``); an ``approval_expires`` step only waits for that. The checks after
either are about that turn. A case stops at its first failing step.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from mcp_bridge.cli.e2e.approvals import ApprovalPage, ApproverError
from mcp_bridge.cli.e2e.calls import Call, CallLog
from mcp_bridge.cli.e2e.cases import ACTION_STEPS, Step, TestCase, show
from mcp_bridge.contract import APPROVAL_INTENT
from mcp_bridge.observability.audit import AuditKeys

BOT_CHECKS = ("utter", "bot")
TOOL_CHECKS = ("tool_called", "no_tool_called")
APPROVAL_STEPS = ("approval", "approval_expires")
# How often a wait for the conversation to be told looks at its tracker.
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Target:
    """Where the bot under test runs."""

    rasa_url: str
    # Rasa's --auth-token, when the server was started with one (the tracker API needs it).
    rasa_token: str | None = None
    # The REST channel's bearer token (mcp_bridge.channels.rest), sent as Authorization: Bearer.
    rest_token: str | None = None
    # The action server's AUDIT_LOG; needed only by tool_called / no_tool_called steps.
    audit_log: Path | None = None
    timeout: float = 60.0
    # The approval page (approval steps), and the approvers' passwords by name.
    approval_page: str | None = None
    approver_passwords: Mapping[str, str] = field(default_factory=dict)
    # The action server's audit keys (AUDIT_KEY, AUDIT_EXTRA_KEYS), to match argument digests.
    audit_keys: AuditKeys = field(default_factory=AuditKeys)


@dataclass(frozen=True)
class Message:
    response: str | None
    text: str | None

    def __str__(self) -> str:
        text = show(self.text) if self.text is not None else ""
        return f"{self.response or '(no response name)'} {text}".strip()


@dataclass(frozen=True)
class Failure:
    step: Step
    expected: str
    got: str
    # What happened in the turn, for the reader: the bot's messages, the slots set, the calls made.
    context: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaseResult:
    case: TestCase
    conversation_id: str
    failure: Failure | None = None
    # The case could not be run to the end (Rasa unreachable, an HTTP error, ...).
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.failure is None and self.error is None


@dataclass
class _Turn:
    user: Step
    messages: list[Message] = field(default_factory=list)
    slots: list[tuple[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    def context(self) -> tuple[str, ...]:
        lines = [f"in answer to step {self.user.number} ({self.user.text}):"]
        if self.messages:
            lines.append("  the bot said:")
            lines.extend(f"    {index}. {message}" for index, message in enumerate(self.messages, start=1))
        else:
            lines.append("  the bot said nothing")
        if self.slots:
            lines.append("  slots set: " + ", ".join(f"{name}={_brief(value)}" for name, value in self.slots))
        if self.calls:
            lines.append("  tools called: " + "; ".join(call.describe() for call in self.calls))
        return tuple(lines)


def _brief(value: Any, limit: int = 80) -> str:
    shown = show(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


class RunnerError(Exception):
    """The run cannot start (for example: tool steps without an audit trail)."""


async def run_cases(
    cases: Sequence[TestCase], target: Target, *, concurrency: int = 4, run_id: str | None = None
) -> list[CaseResult]:
    """Run every case, ``concurrency`` at a time; results in the order of ``cases``."""
    if target.audit_log is None and any(step.kind in TOOL_CHECKS for case in cases for step in case.steps):
        raise RunnerError(
            "these cases check tool calls (tool_called / no_tool_called): give the action server's "
            "audit trail (--audit PATH, the AUDIT_LOG the action server writes)"
        )
    deciding = any(step.kind == "approval" for case in cases for step in case.steps)
    if any(step.kind in APPROVAL_STEPS for case in cases for step in case.steps):
        if target.audit_log is None:
            raise RunnerError(
                "these cases have approval steps, which find the held call in the action server's "
                "audit trail: give it (--audit PATH, the AUDIT_LOG the action server writes)"
            )
        if deciding and target.approval_page is None:
            raise RunnerError("these cases have approval steps: give the approval page (--approval-page URL)")
    run_id = run_id or uuid.uuid4().hex[:8]
    gate = asyncio.Semaphore(max(1, concurrency))
    timeout = aiohttp.ClientTimeout(total=target.timeout)
    page = (
        ApprovalPage(target.approval_page, target.approver_passwords, target.timeout)
        if deciding and target.approval_page is not None
        else None
    )
    async with aiohttp.ClientSession(timeout=timeout) as http:
        client = _Rasa(http, target)
        calls = CallLog(target.audit_log, target.audit_keys) if target.audit_log is not None else None

        async def one(index: int, case: TestCase) -> CaseResult:
            async with gate:
                return await _run_case(client, calls, page, case, f"e2e-{run_id}-{index:03d}")

        try:
            return list(await asyncio.gather(*(one(i, case) for i, case in enumerate(cases, start=1))))
        finally:
            if page is not None:
                await page.aclose()


async def _run_case(
    client: _Rasa, calls: CallLog | None, page: ApprovalPage | None, case: TestCase, conversation_id: str
) -> CaseResult:
    started = time.monotonic()

    def result(failure: Failure | None = None, error: str | None = None) -> CaseResult:
        return CaseResult(case, conversation_id, failure, error, time.monotonic() - started)

    try:
        if case.fixtures:
            # Rasa starts the session (action_session_start) before it appends these, so the
            # first message finds the session running and the slots kept.
            await client.append_slots(conversation_id, case.fixtures)
        events_seen = len(await client.events(conversation_id))
        calls_seen = len(calls.calls(conversation_id)) if calls is not None else 0
        turn: _Turn | None = None
        pending: list[Step] = []
        for step in case.steps:
            if step.kind not in ACTION_STEPS:
                pending.append(step)
                continue
            if turn is not None and (failure := _check_turn(turn, pending)):
                return result(failure)
            pending = []
            if step.kind == "user":
                await client.say(conversation_id, step.value, step.metadata)
                events = await client.events(conversation_id)
            else:
                failure, told = None, True
                if step.kind == "approval":
                    assert page is not None and calls is not None  # run_cases insists on both
                    failure, told = await _decide(page, calls, step, conversation_id)
                if failure is not None:
                    return result(failure)
                # A decision the page refused is told nothing: the turn is empty (and checked so).
                wait = step.within if step.kind == "approval_expires" else client.timeout
                found = await client.told(conversation_id, events_seen, wait) if told else None
                if told and found is None:
                    what = "the decision" if step.kind == "approval" else "the held call's outcome"
                    return result(
                        Failure(step, f"the conversation told {what}", f"nothing within {wait:g} s")
                    )
                events = found if found is not None else await client.events(conversation_id)
            turn = _Turn(step)
            for event in events[events_seen:]:
                if event.get("event") == "bot":
                    response = (event.get("metadata") or {}).get("utter_action")
                    turn.messages.append(Message(response, event.get("text")))
                elif event.get("event") == "slot":
                    turn.slots.append((str(event.get("name")), event.get("value")))
            events_seen = len(events)
            if calls is not None:
                made = calls.calls(conversation_id)
                turn.calls, calls_seen = made[calls_seen:], len(made)
        assert turn is not None  # a case starts with a user step (checked when loading)
        return result(_check_turn(turn, pending))
    except (aiohttp.ClientError, asyncio.TimeoutError, _HTTPError, ApproverError) as exc:
        return result(error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


async def _decide(
    page: ApprovalPage, calls: CallLog, step: Step, conversation_id: str
) -> tuple[Failure | None, bool]:
    """The approver decides the conversation's latest held call on the page: (a failure, or None;
    whether the conversation is now to be told)."""
    held = calls.approvals(conversation_id)
    if not held:
        return Failure(step, "a call of this conversation held for an approver", "no call was held"), False
    request_id = held[-1]
    listed = any(item.get("id") == request_id for item in await page.pending(step.value))
    expect_listed = step.page_answers in ("decided", "already_decided")
    if step.page_answers == "decided" and not listed:
        got = f"it is not on {step.value}'s list on the approval page"
        return Failure(step, f"the held call {request_id[:8]} waiting for {step.value}", got), False
    if not expect_listed and listed:
        got = f"it is on {step.value}'s list, to decide"
        return Failure(step, f"the held call {request_id[:8]} not offered to {step.value}", got), False
    answer = await page.decide(step.value, request_id, step.approve)
    if answer.kind != step.page_answers:
        decision = "approve" if step.approve else "refuse"
        return Failure(
            step, f"the page to answer {step.page_answers} to {decision}", f"it answered {answer}"
        ), False
    return None, answer.kind == "decided"


def audit_warning(results: Sequence[CaseResult], target: Target) -> str | None:
    """A warning when cases checked tool calls but the audit trail holds nothing of this run.

    Then it is probably not the trail of the action server that Rasa calls, and a passing
    ``no_tool_called`` proves nothing.
    """
    checking = any(step.kind in TOOL_CHECKS for result in results for step in result.case.steps)
    if not checking or target.audit_log is None:
        return None
    if CallLog(target.audit_log).conversations() & {result.conversation_id for result in results}:
        return None
    return (
        f"warning: the audit trail {target.audit_log} holds nothing from this run's conversations; "
        "if it is not the AUDIT_LOG of the action server that Rasa calls, no_tool_called proves nothing"
    )


# -- checking one turn ---------------------------------------------------------------------------


def _check_turn(turn: _Turn, checks: list[Step]) -> Failure | None:
    """The failure with the lowest step number among this turn's checks, or None."""
    failures: list[Failure] = []
    bot_failure = _check_messages(turn, [step for step in checks if step.kind in BOT_CHECKS], checks)
    if bot_failure is not None:
        failures.append(bot_failure)
    for step in checks:
        if step.kind in ("slot_was_set", "slot_was_not_set"):
            failure = _check_slots(turn, step)
        elif step.kind == "tool_called":
            failure = _check_called(turn, step)
        elif step.kind == "no_tool_called":
            failure = _check_not_called(turn, step)
        else:
            continue
        if failure is not None:
            failures.append(failure)
    return min(failures, key=lambda failure: failure.step.number) if failures else None


def _says(message: Message, step: Step) -> bool:
    return message.response == step.value if step.kind == "utter" else message.text == step.value


def _check_messages(turn: _Turn, steps: list[Step], checks: list[Step]) -> Failure | None:
    """Every message described, in order; an utter and a bot step side by side may share one."""
    messages = turn.messages
    deepest = (-1, -1)  # (steps matched, position of the last matched message)

    def walk(index: int, position: int, kinds: frozenset[str]) -> bool:
        nonlocal deepest
        if (index, position) > deepest:
            deepest = (index, position)
        if index == len(steps):
            return position == len(messages) - 1
        step = steps[index]
        if position >= 0 and step.kind not in kinds and _says(messages[position], step):
            if walk(index + 1, position, kinds | {step.kind}):
                return True
        nxt = position + 1
        return (
            nxt < len(messages)
            and _says(messages[nxt], step)
            and walk(index + 1, nxt, frozenset({step.kind}))
        )

    if walk(0, -1, frozenset()):
        return None
    matched, position = deepest
    if matched < len(steps):
        step = steps[matched]
        nxt = position + 1
        got = f"the bot said {messages[nxt]}" if nxt < len(messages) else "no further message from the bot"
        if nxt == 0 and not messages:
            got = "the bot said nothing"
        what = (
            f"a message with the response {step.value}"
            if step.kind == "utter"
            else f"the text {show(step.value)}"
        )
        return Failure(step, what, got, turn.context())
    extra = messages[position + 1]
    anchor = steps[-1] if steps else turn.user
    if not steps and checks:
        anchor = min(checks, key=lambda step: step.number)
    expected = "no further message" if steps else "no message (no utter or bot step describes one)"
    return Failure(anchor, expected, f"the bot also said {extra}", turn.context())


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return float(left) == float(right)
    return bool(left == right)


def _check_slots(turn: _Turn, step: Step) -> Failure | None:
    for expectation in step.slots:
        values = [value for name, value in turn.slots if name == expectation.name]
        if expectation.has_value:
            hit = any(_same(value, expectation.value) for value in values)
        else:
            hit = bool(values)
        if step.kind == "slot_was_set" and not hit:
            got = (
                f"{expectation.name} was set to {', then '.join(show(v) for v in values)}"
                if values
                else f"{expectation.name} was not set"
            )
            return Failure(step, f"{expectation} set", got, turn.context())
        if step.kind == "slot_was_not_set" and hit:
            values_shown = ", then ".join(show(v) for v in values)
            return Failure(
                step,
                f"{expectation} not set",
                f"{expectation.name} was set to {values_shown}",
                turn.context(),
            )
    return None


def _check_called(turn: _Turn, step: Step) -> Failure | None:
    reached = [call for call in turn.calls if call.tool == step.value and call.sent]
    expected = f"a call of {step.value}" + (
        " with " + ", ".join(f"{name}={show(value)}" for name, value in step.arguments.items())
        if step.arguments
        else ""
    )
    matching = [call for call in reached if not call.mismatches(step.arguments)]
    if step.times is not None:
        if len(matching) == step.times:
            return None
        expected = f"exactly {step.times} " + expected.removeprefix("a ").replace("call of", "call(s) of", 1)
        got = f"{len(matching)}: " + ("; ".join(call.describe() for call in matching) or "none")
        return Failure(step, expected, got, turn.context())
    if matching:
        return None
    if reached:
        got = "; ".join(
            f"{call.describe()} with a different {', '.join(call.mismatches(step.arguments))}"
            for call in reached
        )
    elif turn.calls:
        got = (
            "no call of " + step.value + "; calls made: " + "; ".join(call.describe() for call in turn.calls)
        )
    else:
        got = "no tool was called"
    return Failure(step, expected, got, turn.context())


def _check_not_called(turn: _Turn, step: Step) -> Failure | None:
    reached = [call for call in turn.calls if call.tool == step.value and call.sent]
    if not reached:
        return None
    got = f"{step.value} was called: " + "; ".join(call.describe() for call in reached)
    return Failure(step, f"no call of {step.value}", got, turn.context())


# -- Rasa's HTTP API -----------------------------------------------------------------------------


class _HTTPError(Exception):
    pass


class _Rasa:
    def __init__(self, http: aiohttp.ClientSession, target: Target) -> None:
        self.http = http
        self.timeout = target.timeout
        self.base = target.rasa_url.rstrip("/")
        self.params: dict[str, str] = {"token": target.rasa_token} if target.rasa_token else {}
        self.rest_headers = {"Authorization": f"Bearer {target.rest_token}"} if target.rest_token else {}

    def _conversation(self, conversation_id: str, tail: str) -> str:
        return f"{self.base}/conversations/{quote(conversation_id, safe='')}/{tail}"

    async def _json(
        self,
        method: str,
        url: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        async with self.http.request(
            method, url, json=body, params={**self.params, **(params or {})}, headers=headers
        ) as reply:
            text = await reply.text()
            if reply.status != 200:
                raise _HTTPError(f"{method} {url} answered {reply.status}: {text[:300]}")
            return json.loads(text) if text else None

    async def say(self, conversation_id: str, text: str, metadata: Mapping[str, Any]) -> None:
        body: dict[str, Any] = {"sender": conversation_id, "message": text}
        if metadata:
            body["metadata"] = dict(metadata)
        await self._json("POST", f"{self.base}/webhooks/rest/webhook", body, headers=self.rest_headers)

    async def events(self, conversation_id: str) -> list[dict[str, Any]]:
        tracker = await self._json(
            "GET", self._conversation(conversation_id, "tracker"), params={"include_events": "ALL"}
        )
        return list((tracker or {}).get("events") or [])

    async def append_slots(self, conversation_id: str, slots: Mapping[str, Any]) -> None:
        events = [{"event": "slot", "name": name, "value": value} for name, value in slots.items()]
        await self._json("POST", self._conversation(conversation_id, "tracker/events"), events)

    async def told(self, conversation_id: str, seen: int, within: float) -> list[dict[str, Any]] | None:
        """The conversation's events once, after event ``seen``, it has been told an approval's
        outcome and its turn has ended; None when that does not happen ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            events = await self.events(conversation_id)
            new = events[seen:]
            told = [
                i for i, e in enumerate(new) if e.get("event") == "user" and _intent(e) == APPROVAL_INTENT
            ]
            if told and any(
                e.get("event") == "action" and e.get("name") == "action_listen" for e in new[told[0] :]
            ):
                return events
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_SECONDS)


def _intent(event: Mapping[str, Any]) -> str | None:
    intent = (event.get("parse_data") or {}).get("intent") or {}
    return intent.get("name") if isinstance(intent, dict) else None
