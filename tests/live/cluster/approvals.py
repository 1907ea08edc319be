"""Second approvals through the cluster while an action server dies (`python -m tests.live.cluster`).

Conversations log a note about a refund (the example's log skill holds it for a supervisor) and say
yes: each call waits in the approvals database (PostgreSQL, shared by both action servers). Then sam
decides them on the approval page over HTTP (half approve, half refuse): the first half at once while
the CRM is stopped (SIGSTOP), so the approved calls are running, on both action servers, when action-1
is killed (SIGKILL); the CRM goes on (it writes those calls: the lost runs did reach it); the second
half is decided while action-1 is down; then it is started again. The page
tells each conversation through nginx and Rasa; whichever action server nginx picks runs the approved
call once. A run lost with action-1 stays `running` until its lease (APPROVAL_RUN_LEASE_SECONDS, short
here) passes; the page then tells the conversation again and the other replica resumes it under its
idempotency key.

The guarantees, read from the CRM's and the approvals' databases and the trackers: an approved note is
written exactly once and its conversation told "Saved" once; a refused note is never written and its
conversation told so; every request ends `done` or `refused`. One known gap is counted, not failed: a
conversation whose tell action-1 was relaying when it was killed, after the call ran on action-2, is
never told (Rasa drops the turn with the connection, and the request is done); the page's log names
those tells (502), and the note must still be written exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import asyncpg

from devstack.cluster import Cluster
from devstack.services import descendants
from mcp_bridge.cli.e2e.approvals import ApprovalPage
from tests.live.cluster.scenario import Conversation, Person

CONTACTS = ["dana@example.com", "priya@example.com", "tom@example.org", "lena.fischer@example.net"]
WAITING = "needs a supervisor's approval"
SAVED = "Saved to "
REFUSED = "refused the note"
APPROVER = "sam"
# The action servers' lease on a run of an approved call (devstack/cluster.py passes it on).
RUN_LEASE_SECONDS = 8.0


@dataclass
class Held:
    chat: Conversation
    approve: bool
    request_id: str | None = None
    page_answer: str = ""
    told: list[str] = field(default_factory=list)


def hold(person: Person, chats: list[Conversation]) -> list[str]:
    """Each conversation logs its note and says yes; the problems (none expected)."""
    problems: list[str] = []

    def one(chat: Conversation) -> None:
        if person.say(chat, f"log a call with {chat.email}: {chat.note}", "Save this to ") is None:
            problems.append(f"{chat.sender}: not asked to confirm ({chat.errors[-1:]})")
            return
        if person.say(chat, "yes", WAITING) is None:
            problems.append(f"{chat.sender}: not held for approval ({chat.errors[-1:]})")
            return
        chat.outcome = "held"

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, chats))
    return problems


async def request_ids(database_url: str, senders: list[str]) -> dict[str, str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT conversation_id, id FROM approval_requests WHERE conversation_id = ANY($1::text[])",
            senders,
        )
    finally:
        await conn.close()
    return {str(row["conversation_id"]): str(row["id"]) for row in rows}


async def statuses(database_url: str, ids: list[str]) -> dict[str, tuple[str, int]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT id, status, attempts FROM approval_requests WHERE id = ANY($1::text[])", ids
        )
    finally:
        await conn.close()
    return {str(row["id"]): (str(row["status"]), int(row["attempts"])) for row in rows}


async def notes(database_url: str, run_id: str) -> Counter[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT text FROM notes WHERE text LIKE $1", f"Cluster approval {run_id} %")
    finally:
        await conn.close()
    return Counter(str(row["text"]) for row in rows)


def relay_died(cluster: Cluster) -> set[str]:
    """The requests whose tell the approval page saw fail at the action server (it was killed)."""
    log = cluster.logs / "approval-page.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return set(re.findall(r"approval ([0-9a-f]{32}): the action server answered 502", text))


def told(cluster: Cluster, sender: str) -> list[str]:
    """What the bot said in the conversation after its question was held, through nginx and Rasa's API."""
    token = urllib.parse.quote(cluster.secrets["rasa_auth_token"])
    url = f"{cluster.rasa_url}/conversations/{urllib.parse.quote(sender)}/tracker?token={token}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        events = json.loads(answer.read())["events"]
    texts = [str(e.get("text")) for e in events if e.get("event") == "bot"]
    after = max((i for i, text in enumerate(texts) if WAITING in text), default=len(texts))
    return texts[after + 1 :]


async def decide_all(page: ApprovalPage, held: list[Held]) -> None:
    """Every decision at once, as several approvers clicking together."""

    async def one(item: Held) -> None:
        assert item.request_id is not None
        item.page_answer = str(await page.decide(APPROVER, item.request_id, item.approve))

    await asyncio.gather(*(one(item) for item in held))


def _signal(cluster: Cluster, name: str, signum: int) -> None:
    """``signum`` to the process ``name`` and everything it started."""
    pid = cluster.running[name].pid
    assert pid is not None
    for each in [pid, *(child for child, _ in descendants(pid))]:
        os.kill(each, signum)


async def _running(cluster: Cluster, ids: list[str], timeout: float = 30.0) -> int:
    """Waits (at most ``timeout``) until every request of ``ids`` is running; how many are."""
    deadline = time.monotonic() + timeout
    while True:
        found = await statuses(cluster.bridge_database_url, ids)
        count = sum(1 for status, _ in found.values() if status == "running")
        if count == len(ids) or time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.2)


async def _decide_with_a_kill(
    cluster: Cluster, held: list[Held], passwords: dict[str, str]
) -> tuple[float, int]:
    """The first half decided at once while the CRM is stopped (SIGSTOP), so the approved calls hang
    on their way to it, some on action-1 (nginx deals requests round robin, one worker); action-1
    killed; the CRM goes on; the second half decided while action-1 is down; action-1 back. Its
    restart time, and how many runs were in flight when it was killed."""
    page = ApprovalPage(cluster.approval_page_url, {APPROVER: passwords[APPROVER]})
    try:
        listed = {item["id"] for item in await page.pending(APPROVER)}
        missing = [h.chat.sender for h in held if h.request_id not in listed]
        if missing:
            raise AssertionError(f"not on {APPROVER}'s list on the approval page: {missing}")
        first, second = held[: len(held) // 2], held[len(held) // 2 :]
        _signal(cluster, "crm-rest", signal.SIGSTOP)
        try:
            await decide_all(page, first)
            in_flight = await _running(cluster, [h.request_id for h in first if h.approve and h.request_id])
            cluster.kill("action-1")
        finally:
            _signal(cluster, "crm-rest", signal.SIGCONT)
        print(f"    killed action-1 (SIGKILL) with {in_flight} approved call(s) running", flush=True)
        await decide_all(page, second)
        began = time.monotonic()
        await asyncio.to_thread(cluster.restart, "action-1")
        return time.monotonic() - began, in_flight
    finally:
        await page.aclose()


def run_approvals(cluster: Cluster, run_id: str, count: int) -> tuple[list[str], list[str]]:
    """(figures, broken guarantees) of `count` held conversations decided around a kill of action-1."""
    person = Person(cluster.rasa_url, cluster.secrets["rest_token"])
    chats = [
        Conversation(
            index=i,
            sender=f"cluster-approval-{run_id}-{i:02d}",
            email=CONTACTS[i % len(CONTACTS)],
            note=f"Cluster approval {run_id} conversation {i:02d}: agreed a refund of {10 + i} EUR.",
            says_yes=True,
        )
        for i in range(count)
    ]
    began = time.monotonic()
    broken = hold(person, chats)
    ids = asyncio.run(request_ids(cluster.bridge_database_url, [c.sender for c in chats]))
    # 4 approvals and 2 refusals decided around the kill, then 2 and 4 while action-1 is down.
    pattern = [True, True, False, True, False, True, True, False, False, True, False, False]
    held = [Held(c, pattern[i % len(pattern)], ids.get(c.sender)) for i, c in enumerate(chats)]
    held = [h for h in held if h.request_id is not None]
    if len(held) != count:
        broken.append(f"only {len(held)} of {count} calls were held for approval")
    restart, in_flight = asyncio.run(_decide_with_a_kill(cluster, held, cluster.approver_passwords()))
    # Every conversation told: approved ones after their run (or its resumption, past the lease).
    deadline = time.monotonic() + RUN_LEASE_SECONDS + 60
    while True:
        for item in held:
            item.told = told(cluster, item.chat.sender)
        if all(item.told for item in held) or time.monotonic() > deadline:
            break
        relay = relay_died(cluster)
        wanted = [h.request_id for h in held if h.request_id]
        now = asyncio.run(statuses(cluster.bridge_database_url, wanted))
        ran = {rid for rid, (status, _) in now.items() if status == "done"}
        if all(h.told or (h.request_id in relay and h.request_id in ran) for h in held):
            break  # the only ones not told ran already, their relay killed (the known gap below)
        time.sleep(1.0)
    time.sleep(2.0)  # a late second telling would show up now
    for item in held:
        item.told = told(cluster, item.chat.sender)
    written = asyncio.run(notes(cluster.crm_database_url, run_id))
    ended = asyncio.run(statuses(cluster.bridge_database_url, [h.request_id for h in held if h.request_id]))

    approved = [h for h in held if h.approve]
    refused = [h for h in held if not h.approve]
    not_once = [h.chat.sender for h in approved if written[h.chat.note] != 1]
    after_refusal = [h.chat.sender for h in refused if written[h.chat.note] > 0]
    # A conversation whose tell was relayed by action-1 when it was killed may have had its call run
    # (on the other action server, once) and never hear it: Rasa drops the turn when the relaying
    # connection dies, and the request is done, so no sweep tells it again. A known gap, counted and
    # reported; every other approved conversation must be told "Saved" exactly once.
    relay_lost = relay_died(cluster)
    unheard = [h for h in approved if not h.told and h.request_id in relay_lost and written[h.chat.note] == 1]
    saved_told = [
        h.chat.sender
        for h in approved
        if h not in unheard and (sum(SAVED in t for t in h.told) != 1 or len(h.told) != 1)
    ]
    refused_told = [
        h.chat.sender for h in refused if sum(REFUSED in t for t in h.told) != 1 or len(h.told) != 1
    ]
    page_refused = [h.chat.sender for h in held if h.page_answer != "decided"]
    end_states = Counter(status for status, _ in ended.values())
    resumed = sum(1 for _, attempts in ended.values() if attempts > 1)
    wrong_end = [
        h.chat.sender
        for h in held
        if h.request_id and ended.get(h.request_id, ("?", 0))[0] != ("done" if h.approve else "refused")
    ]
    if not_once:
        broken.append(f"approved notes not written exactly once: {not_once}")
    if after_refusal:
        broken.append(f"refused notes written: {after_refusal}")
    if saved_told:
        broken.append(f'approved conversations not told "Saved" exactly once: {saved_told}')
    if refused_told:
        broken.append(f"refused conversations not told the refusal exactly once: {refused_told}")
    if page_refused:
        broken.append(f"the approval page did not take these decisions: {page_refused}")
    if resumed == 0:
        broken.append("no approved run was lost with action-1 and resumed: the kill missed them all")
    if wrong_end:
        broken.append(f"requests that did not end done (approved) or refused: {wrong_end}")
    figures = [
        f"approvals: {len(held)} calls held, {len(approved)} approved, {len(refused)} refused on the page, "
        f"action-1 killed with {in_flight} approved calls running (held at the stopped CRM), the other "
        f"half decided while it was down (back after {restart:.1f} s)",
        f"approved notes written once: {len(approved) - len(not_once)} of {len(approved)}; "
        f"refused notes written: {len(after_refusal)}",
        f"requests ended: {', '.join(f'{s} {n}' for s, n in sorted(end_states.items()))}; "
        f"resumed after a lost run: {resumed}",
        f"approvals took {time.monotonic() - began:.0f} s",
        f"approved, written once, not told (the action server relaying the decision was killed as the "
        f"call ran; known gap): {len(unheard)}",
    ]
    return figures, broken


def approval_needles(cluster: Cluster, run_id: str) -> dict[str, str]:
    """Approver passwords and the held notes' texts: never in a log."""
    needles = {f"password of approver {name}": value for name, value in cluster.approver_passwords().items()}
    needles[f"note of cluster-approval-{run_id}-00"] = f"Cluster approval {run_id} conversation 00"
    return needles
