"""A second approver: calls a skill holds, after the requester's yes, until a person with a role decides.

A constraint ``requires_approval_from: {role: supervisor, when: ..., expires_after: 30m}`` next to
``requires_confirmation`` (:mod:`mcp_bridge.skills.files`) makes the requester's yes insufficient. The
rules, by name, in order of importance:

``held_until_decided``
   A confirmed call that needs an approval (:func:`required`) never runs in the turn that confirms
   it: it is recorded as an :class:`ApprovalRequest` (the exact call, the question's idempotency key,
   who asked, the conversation, the sealed question, the expiry) in a store every replica shares
   (:mod:`mcp_bridge.approvals.store`), and the requester is told it waits. A requester the channel
   does not name cannot ask for an approval: nothing is held, nothing runs.
``never_the_requester``
   Only a person with the request's role decides it, and never its requester. The two are named in
   different namespaces (the requester as a channel names them, ``socketio:dana``; the approver as
   the approval page logged them in, a password login or an OpenID subject), so they are compared
   as *persons*, through the deployment's identity mapping (:class:`People`, the approvers file's
   ``people:``): an approver or a requester the mapping does not name may not be decided for at all
   (``unknown_person``), and one person on both sides is ``own_request``; names that look alike
   (:func:`same_person`: equal without their channel prefix) are refused too, mapping or not. Each
   such attempt is refused and audited.
``decided_once``
   A request is decided once: the store's update is conditional on it still pending and unexpired,
   so two approvers (on two replicas) at the same moment get one decision. A request not decided
   within its expiry is refused (``expired``) and nothing of it ever runs.
``runs_once``
   An approved request runs once: the action that runs it takes it from ``approved`` to ``running``
   with one conditional update, in the request's own conversation only, and calls the tool with the
   question's idempotency key and the sealed question's arguments, only when the seal verifies and
   they equal the store's copy (:meth:`Approvals.sealed`). A refused or expired request is told to
   its requester once.
``lost_run``
   A run holds a lease (:data:`RUN_LEASE_SECONDS`, ``APPROVAL_RUN_LEASE_SECONDS``), which its action
   server renews every third of it while the run goes on (:meth:`Approvals.leased`), so a slow tool
   never looks lost. If its action server dies before the outcome is recorded, the request stays
   ``running`` until the lease passes unrenewed; then the approval page's sweep tells the conversation
   again and one action takes it up again (one conditional update, a new lease): ``resume``. The call
   may have reached the tool, so it runs again only with the same idempotency key on a tool that
   honours it (the tool keeps one write per key: written once either way); on any other tool, or after
   :data:`MAX_RUNS` runs, it is never repeated: the requester hears that it may have been done, and the
   request ends with an unknown outcome.

Every step is an audit entry (``decision``: ``approval_requested``, ``approved``, ``approval_refused``,
``approval_expired``, ``approval_not_allowed``, ``approval_resumed``, ``approval_rejected``: the stored
call is not the sealed one, and nothing ran), with who decided (``decided_by``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mcp_bridge.approvals import textmatch
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.observability.audit import AuditDecision, AuditLog
from mcp_bridge.question import Question, claimed, open_question
from mcp_bridge.sealing import Seal
from mcp_bridge.skills.files import RequiresApproval, Skill

if TYPE_CHECKING:
    from mcp_bridge.tools.sources import Tool  # the MCP runtime is not imported for a type

log = logging.getLogger(__name__)

__all__ = [
    "MAX_RUNS",
    "RUN_LEASE_SECONDS",
    "ApprovalRequest",
    "ApprovalStore",
    "Approvals",
    "Approver",
    "Decided",
    "People",
    "Taken",
    "may_run_again",
    "required",
    "same_person",
]


Status = Literal["pending", "approved", "refused", "expired", "running", "done"]
# How long a run of an approved call may go without its outcome recorded before it counts as lost
# (its action server died): far longer than a call takes (a tool's timeout, twice for its repeat).
RUN_LEASE_SECONDS = 300.0
# A request is run at most this many times (the first and the resumed ones), then never again.
MAX_RUNS = 3
# Slots kept with a request, for the responses said when it runs (a note's contact name, say).
MAX_SLOT_CHARS = 8000


@dataclass(frozen=True)
class ApprovalRequest:
    """One held call, as the store keeps it."""

    id: str
    conversation_id: str
    # Who confirmed the call, as the channel named them ("socketio:alice", "rest:alice").
    requester: str
    role: str
    skill: str
    tool: str
    arguments: dict[str, Any]
    # The idempotency key the call carries when it runs: the question's.
    key: str
    # The question the requester confirmed, narrowed to this call and sealed (mcp_bridge.question).
    question: dict[str, Any]
    # The conversation's slots when it was confirmed (for the responses said when it runs).
    slots: dict[str, Any]
    created_at: float
    expires_at: float
    status: Status = "pending"
    decided_by: str | None = None
    decided_at: float | None = None
    # The requester's conversation has been told the outcome.
    told: bool = False
    result: str | None = None
    # How many times an action has taken it to run (more than one: resumed after a lost run).
    attempts: int = 0

    @property
    def requester_name(self) -> str:
        return person(self.requester)

    def claimed_question(self) -> Question | None:
        """What its sealed question says, unverified (for the audit trail only)."""
        return claimed(self.question)


class ApprovalStore(Protocol):
    """Where requests live, shared by every replica; every change is one conditional update."""

    async def add(self, request: ApprovalRequest) -> None: ...

    async def get(self, request_id: str) -> ApprovalRequest | None: ...

    async def pending(self, roles: Collection[str], now: float) -> list[ApprovalRequest]:
        """Undecided, unexpired requests for any of ``roles``, oldest first."""
        ...

    async def decide(self, request_id: str, status: Status, by: str, now: float) -> bool:
        """pending -> ``status`` (approved/refused), if still pending, unexpired at ``now`` and
        ``by`` is not the requester's name; True when this call made the change."""
        ...

    async def expire_due(self, now: float) -> list[ApprovalRequest]:
        """pending -> expired for every request whose expiry has passed; the requests it changed."""
        ...

    async def untold(self, now: float, retry_after: float) -> list[ApprovalRequest]:
        """Decided requests whose conversation has not been told, and requests running past their
        lease, not tried in ``retry_after`` seconds (marked tried now)."""
        ...

    async def take(
        self, request_id: str, conversation_id: str, now: float, lease: float
    ) -> ApprovalRequest | None:
        """For the action in ``conversation_id``, one of, as one conditional update each: approved and
        unexpired -> running (leased until ``now + lease``); running past its lease -> leased again;
        approved and expired -> expired and told; refused or expired -> told. The request as this
        call left it (``attempts`` counts the runs), or None when there is nothing (left) to do."""
        ...

    async def renew(self, request_id: str, attempts: int, until: float) -> bool:
        """A running request's lease moved to ``until``, if it is still the run ``attempts`` counts;
        True when it was."""
        ...

    async def finish(self, request_id: str, result: str) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Approver:
    """A person logged in to the approval page: their name and roles (from the deployment)."""

    user: str
    roles: frozenset[str] = field(default_factory=frozenset)


DecidedKind = Literal[
    "approved", "refused", "own_request", "not_allowed", "unknown_person", "already_decided", "unknown"
]


@dataclass(frozen=True)
class Decided:
    """What an approver's decision came to; only ``approved`` and ``refused`` changed anything."""

    kind: DecidedKind
    request: ApprovalRequest | None = None


TakenKind = Literal["run", "resume", "refused", "expired", "nothing"]


@dataclass(frozen=True)
class Taken:
    """What the requester's conversation does with a decided request: run it, run it again after a
    lost run (``resume``: ``lost_run``), tell a refusal or an expiry, or nothing (unknown, another
    conversation's, or already run or told)."""

    kind: TakenKind
    request: ApprovalRequest | None = None


@dataclass(frozen=True)
class People:
    """The deployment's identity mapping (``never_the_requester``): who each person is in the chat
    (their identities as the channels name them, ``socketio:dana``, ``rest:operator``) and on the
    approval page (their logins there, password logins or OpenID subjects). Each identity names one
    person."""

    chat: Mapping[str, str] = field(default_factory=dict)  # channel identity -> person
    page: Mapping[str, str] = field(default_factory=dict)  # approval-page user -> person

    def requester(self, identity: str) -> str | None:
        return self.chat.get(identity)

    def approver(self, user: str) -> str | None:
        return self.page.get(user)


def person(user: str) -> str:
    """The person a channel name names: ``rest:alice`` and ``socketio:alice`` are both ``alice``."""
    return user.split(":", 1)[1] if ":" in user else user


def same_person(requester: str, approver: str) -> bool:
    """Conservatively the same person: equal names once the channel prefix is taken off, ignoring case."""
    return person(requester).casefold() == person(approver).casefold()


def required(skill: Skill, tool: str, arguments: Mapping[str, Any]) -> RequiresApproval | None:
    """The approval a confirmed call of ``tool`` with ``arguments`` needs (``held_until_decided``),
    or None."""
    constraint = skill.constraints.get(tool)
    rule = constraint.requires_approval_from if constraint is not None else None
    if rule is None:
        return None
    return rule if held_because(rule, arguments) is not None else None


def held_because(rule: RequiresApproval, arguments: Mapping[str, Any]) -> str | None:
    """Why a confirmed call with ``arguments`` waits under ``rule`` (for the audit trail, never a
    value), or None when it does not."""
    if rule.when is None:
        return "every call waits"
    value = arguments.get(rule.when.argument)
    # A value that is not text (or missing) is shown as JSON would show it: a rule on it still applies.
    text = value if isinstance(value, str) else str(value)
    # On the text's skeleton, never as written, and failing closed (mcp_bridge.approvals.textmatch).
    return textmatch.why_held(text, rule.when.contains_any)


def may_run_again(tool: Tool | None, runs: int) -> bool:
    """``lost_run``: a held call whose earlier run was lost runs again only under its key, on a tool that
    keeps one write per key (``tool``: what its name resolves to now, None if nothing), and at most
    :data:`MAX_RUNS` times in all."""
    return runs <= MAX_RUNS and tool is not None and tool.honours_idempotency_key()


class Approvals:
    """The rules above, over a store and the audit trail."""

    def __init__(
        self,
        store: ApprovalStore,
        audit: AuditLog | None = None,
        *,
        clock: Callable[[], float] = time.time,
        run_lease: float = RUN_LEASE_SECONDS,
        people: People | None = None,
    ) -> None:
        """``people``: the identity mapping the approval page decides with (``never_the_requester``);
        the action server, which holds and runs requests but never decides one, has none."""
        self.store = store
        self.people = people
        self._audit = audit or AuditLog(None)
        self._clock = clock
        self.run_lease = run_lease

    async def hold(
        self,
        rule: RequiresApproval,
        question: Question,
        sealed: Mapping[str, Any],
        conversation_id: str,
        slots: Mapping[str, Any],
    ) -> ApprovalRequest | None:
        """``held_until_decided``: record the confirmed call, ``question`` narrowed to it and
        ``sealed``, as a request; None when the requester is not named (nothing is held; the caller
        says so and nothing runs)."""
        call = question.first
        if question.user is None:
            self._record(conversation_id, question, "approval_not_allowed", "the requester is not named")
            return None
        now = self._clock()
        request = ApprovalRequest(
            id=uuid.uuid4().hex,
            conversation_id=conversation_id,
            requester=question.user,
            role=rule.role,
            skill=question.skill,
            tool=call.tool,
            arguments=dict(call.arguments),
            key=call.key,
            question=dict(sealed),
            slots=_kept(slots),
            created_at=now,
            expires_at=now + rule.seconds,
        )
        await self.store.add(request)
        self._record(
            conversation_id,
            question,
            "approval_requested",
            held_because(rule, call.arguments),
            approval=request.id,
            role=rule.role,
        )
        return request

    async def pending(self, approver: Approver) -> list[ApprovalRequest]:
        """What ``approver`` may decide: their roles' pending requests, not their own."""
        requests = await self.store.pending(approver.roles, self._clock())
        return [r for r in requests if self._not_theirs(r, approver) is None]

    async def decide(self, request_id: str, approver: Approver, approve: bool) -> Decided:
        """``never_the_requester`` and ``decided_once``: the approver's decision, once."""
        request = await self.store.get(request_id)
        if request is None:
            return Decided("unknown")
        if request.role not in approver.roles:
            self._note(request, "approval_not_allowed", f"lacks the role {request.role}", approver)
            return Decided("not_allowed", request)
        refusal = self._not_theirs(request, approver)
        if refusal is not None:
            kind, why = refusal
            self._note(request, "approval_not_allowed", why, approver)
            return Decided(kind, request)
        now = self._clock()
        status: Status = "approved" if approve else "refused"
        if not await self.store.decide(request.id, status, person(approver.user), now):
            current = await self.store.get(request.id)
            return Decided("already_decided", current)
        decided = replace(request, status=status, decided_by=approver.user, decided_at=now)
        self._note(decided, "approved" if approve else "approval_refused", None, approver)
        return Decided("approved" if approve else "refused", decided)

    def _not_theirs(self, request: ApprovalRequest, approver: Approver) -> tuple[DecidedKind, str] | None:
        """Why ``approver`` may not decide ``request`` as a person (``never_the_requester``), or None
        when they may."""
        if same_person(request.requester, approver.user):
            return "own_request", "the requester cannot approve their own request"
        if self.people is None:
            return None
        who = self.people.approver(approver.user)
        if who is None:
            return "unknown_person", "the approver is not in the deployment's identity mapping"
        asked = self.people.requester(request.requester)
        if asked is None:
            return "unknown_person", "the requester is not in the deployment's identity mapping"
        if asked == who:
            return "own_request", f"the requester cannot approve their own request (both are {who})"
        return None

    async def expire_due(self) -> list[ApprovalRequest]:
        """``decided_once``: refuse every request whose expiry has passed undecided."""
        expired = await self.store.expire_due(self._clock())
        for request in expired:
            self._note(request, "approval_expired", "not decided in time", None)
        return expired

    async def take(self, request_id: str, conversation_id: str) -> Taken:
        """``runs_once``: what the requester's conversation is to do with a decided request, once."""
        request = await self.store.take(request_id, conversation_id, self._clock(), self.run_lease)
        if request is None:
            return Taken("nothing")
        if request.status == "running" and request.attempts > 1:
            # lost_run: its last run ended without an outcome (its action server died).
            self._note(
                request, "approval_resumed", f"run {request.attempts}: the last run left no outcome", None
            )
            return Taken("resume", request)
        if request.status == "running":
            return Taken("run", request)
        if request.status == "expired" and request.decided_by is not None:
            # Approved, but not run before it expired: it never runs now.
            self._note(request, "approval_expired", "approved but not run before it expired", None)
        if request.status in ("refused", "expired"):
            return Taken(request.status, request)
        return Taken("nothing", request)

    def sealed(self, request: ApprovalRequest, seal: Seal) -> Question | None:
        """``runs_once``'s "exactly as sealed": the question the requester confirmed, narrowed to this call,
        when it opens with ``seal`` for the request's conversation and is the store's call (skill,
        tool, key, requester and arguments equal); None, audited, otherwise, so a row changed in the
        store runs nothing."""
        opened = open_question(request.question, seal, request.conversation_id)
        if not isinstance(opened, Question) or len(opened.calls) != 1:
            why = "its sealed question cannot be read"
        elif (opened.skill, opened.first.tool, opened.first.key, opened.user) != (
            request.skill,
            request.tool,
            request.key,
            request.requester,
        ):
            why = "its sealed question is for another call"
        elif dict(opened.first.arguments) != request.arguments:
            why = "the stored arguments differ from the sealed ones"
        else:
            return opened
        self._note(request, "approval_rejected", f"not run: {why}", None)
        return None

    @contextlib.asynccontextmanager
    async def leased(self, request: ApprovalRequest) -> AsyncIterator[None]:
        """``lost_run``: while the block runs ``request`` (taken to run), its lease is renewed every third
        of it, so only a run whose action server died is ever taken up again."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.run_lease / 3)
                until = self._clock() + self.run_lease
                try:
                    if not await self.store.renew(request.id, request.attempts, until):
                        return  # finished, or no longer this run's
                except Exception:  # a database hiccup: the next renewal tries again
                    log.warning("approval %s: its run's lease was not renewed", request.id, exc_info=True)

        renewing = asyncio.create_task(renew())
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def finish(self, request: ApprovalRequest, result: str) -> None:
        await self.store.finish(request.id, result)

    def _note(
        self, request: ApprovalRequest, decision: AuditDecision, result: str | None, by: Approver | None
    ) -> None:
        question = request.claimed_question()
        call = question.first if question is not None else None
        self._audit.record(
            conversation=request.conversation_id,
            user=request.requester,
            skill=request.skill,
            tool=request.tool,
            source=call.source if call else None,
            confirmation=call.id if call else None,
            digest=call.digest if call else None,
            approval=request.id,
            role=request.role,
            decision=decision,
            result=result,
            decided_by=by.user if by else None,
        )

    def _record(
        self,
        conversation_id: str,
        question: Question,
        decision: AuditDecision,
        result: str | None,
        **extra: Any,
    ) -> None:
        self._audit.record_question(conversation_id, question, question.first, decision, result, **extra)


def _kept(slots: Mapping[str, Any]) -> dict[str, Any]:
    """The slots a request keeps: plain values only, short ones only."""
    kept: dict[str, Any] = {}
    for name, value in slots.items():
        if name == PENDING_SLOT or not isinstance(value, str | int | float | bool):
            continue
        if isinstance(value, str) and len(value) > MAX_SLOT_CHARS:
            continue
        kept[name] = value
    return kept
