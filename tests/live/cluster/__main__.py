"""`python -m tests.live.cluster` (`make cluster-test`): faults across replicas, through nginx.

Starts the whole cluster (devstack/cluster.py: PostgreSQL, Redis, the CRM, 2 MCP servers, 2 action
servers, 2 Rasa servers, nginx) on free loopback ports with its data in var/cluster-test/, runs
200 conversations (half confirmed, half denied) while one action server, one MCP server and one
Rasa server are killed and restarted in turn, then reads the CRM's PostgreSQL database directly.
Then 12 conversations whose notes need a supervisor's approval are decided on the approval page (half
approved, half refused) while an action server is killed and restarted (tests/live/cluster/approvals.py).

The write guarantees must hold exactly, or the exit status is 1:
  * every note the person confirmed and was told "Saved" is there exactly once (0 lost);
  * no note is there twice (0 doubled), and none carries a repeated idempotency key;
  * no note of a conversation that said "no", or never answered the question, is there;
  * notes written = notes confirmed;
  * some conversations were asked on one action-server replica and answered on the other;
  * an approved note is written exactly once and its conversation told once; a refused one never.
Errors the person saw are allowed (a replica died under their message) and are counted by kind.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
import time
import uuid
from collections import Counter

import asyncpg

from devstack.cluster import REPLICAS, Cluster
from devstack.engines import remove_postgres_data
from devstack.services import REPO_ROOT
from tests.live.cluster.approvals import RUN_LEASE_SECONDS, approval_needles, run_approvals
from tests.live.cluster.scenario import (
    Conversation,
    Faults,
    audit_replicas,
    errors_by_kind,
    run_conversations,
)

CONVERSATIONS = 200
WORKERS = 6
SCHEDULE = [("action-1", 40), ("mcp-1", 80), ("rasa-1", 120)]
HOLD_BACK_FROM = 160  # these start only when every killed replica is back
APPROVALS = 12  # held for a supervisor, decided on the approval page around a kill of action-1
VAR = REPO_ROOT / "var" / "cluster-test"


async def notes_written(database_url: str, run_id: str) -> list[tuple[str, str | None]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT text, idempotency_key FROM notes WHERE text LIKE $1 ORDER BY id",
            f"Cluster check {run_id} %",
        )
    finally:
        await conn.close()
    return [(str(row["text"]), row["idempotency_key"]) for row in rows]


def passed_on(cluster: Cluster) -> str:
    """Requests nginx passed to another replica (one refused or dropped them), by service."""
    names = {str(port): name for name, port in cluster.front.items()}
    counts: Counter[str] = Counter()
    log = cluster.var / "nginx" / "access.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        fields = line.split(" ")
        if len(fields) > 6 and fields[5].endswith(","):  # "$upstream_addr" lists every replica tried
            counts[names.get(fields[1], fields[1])] += 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"


def leaks(cluster: Cluster, chats: list[Conversation], run_id: str) -> list[str]:
    """Secrets, access tokens or note texts found in any log or audit trail the cluster wrote, or in
    what `make cluster-up` prints and writes to urls.json (they must never be there)."""
    needles = {f"secret {name}": value for name, value in cluster.secrets.items()}
    needles.update({f"note of {chat.sender}": chat.note for chat in chats[:20]})
    needles.update(approval_needles(cluster, run_id))
    # An OAuth access token (a JWT: base64url of '{"'), which the action servers hold in memory only.
    needles["access token"] = "eyJ"
    found = []
    printed = {"the table `make cluster-up` prints": cluster.table(), "urls.json": json.dumps(cluster.urls())}
    for where, text in printed.items():
        found += [f"{what} in {where}" for what, value in needles.items() if value in text]
    logs = [
        *cluster.logs.glob("*.log"),
        *(cluster.var / "nginx").glob("*.log"),
        *cluster.var.glob("audit-*.jsonl"),
    ]
    for path in sorted(logs):
        text = path.read_text(errors="replace")
        hits = Counter(what.split(" of ")[0] for what, value in needles.items() if value in text)
        found += [f"{what} ×{n} in {path.name}" for what, n in sorted(hits.items())]
    return found


def check(
    chats: list[Conversation], notes: list[tuple[str, str | None]], cluster: Cluster
) -> tuple[list[str], list[str]]:
    """(figures to print, broken guarantees)."""
    per_text = Counter(text for text, _ in notes)
    keys = Counter(key for _, key in notes if key is not None)
    yes = [c for c in chats if c.says_yes]
    no = [c for c in chats if not c.says_yes]
    told_saved = [c for c in yes if c.outcome == "saved"]
    unanswered = [
        c for c in chats if c.outcome.startswith("stopped") and c.outcome != "stopped: answering the question"
    ]
    lost = [c for c in told_saved if per_text[c.note] == 0]
    doubled = [text for text, n in per_text.items() if n > 1]
    after_no = [c for c in no if per_text[c.note] > 0]
    never_answered_written = [c for c in unanswered if per_text[c.note] > 0]
    yes_not_told = [c for c in yes if c.outcome != "saved"]
    yes_not_told_written = [c for c in yes_not_told if per_text[c.note] > 0]
    confirmed = len(told_saved) + len(yes_not_told_written)

    audit = audit_replicas(cluster, REPLICAS)
    asked_here_answered_there = {"yes": 0, "no": 0}
    for chat in chats:
        decisions = audit.get(chat.sender, {})
        asked = decisions.get("asked", [])
        answered = decisions.get("confirmed" if chat.says_yes else "denied", [])
        if asked and answered and asked[-1] != answered[-1]:
            asked_here_answered_there["yes" if chat.says_yes else "no"] += 1
    rasa_switched = sum(1 for c in chats if len(c.rasa_replicas) > 1)

    figures = [
        f"conversations: {len(chats)} ({len(yes)} said yes, {len(no)} said no)",
        f'told "Saved": {len(told_saved)}; told "Nothing was written": '
        f"{sum(c.outcome == 'cancelled' for c in no)}",
        f"notes written: {len(notes)}; notes confirmed: {confirmed} "
        f'(told "Saved" {len(told_saved)} + said yes but saw an error and the note is there '
        f"{len(yes_not_told_written)})",
        f"doubled: {len(doubled)}; repeated idempotency keys: {sum(n > 1 for n in keys.values())}",
        f'lost (told "Saved", not there): {len(lost)}',
        f'written after a "no": {len(after_no)}; written without an answer to the question: '
        f"{len(never_answered_written)}",
        f'said yes, not told "Saved": {len(yes_not_told)} ({len(yes_not_told_written)} of them written)',
        f"asked on one action server, answered on the other: {sum(asked_here_answered_there.values())} "
        f"({asked_here_answered_there['yes']} confirmed, {asked_here_answered_there['no']} denied)",
        f"conversations served by both Rasa servers: {rasa_switched}",
    ]
    outcomes = Counter(c.outcome for c in chats)
    figures.append("outcomes: " + ", ".join(f"{name} {n}" for name, n in outcomes.most_common()))
    kinds = errors_by_kind(chats)
    figures.append(
        "errors the person saw: "
        + (", ".join(f"{kind} ×{n}" for kind, n in kinds.most_common()) if kinds else "none")
    )

    broken = []
    if lost:
        broken.append(f'{len(lost)} note(s) lost: told "Saved" but not in the store')
    if doubled or any(n > 1 for n in keys.values()):
        broken.append(f"{len(doubled)} note(s) written twice")
    if after_no:
        broken.append(f'{len(after_no)} note(s) written after a "no"')
    if never_answered_written:
        broken.append(f"{len(never_answered_written)} note(s) written though the question was never answered")
    if len(notes) != confirmed:
        broken.append(f"notes written ({len(notes)}) != notes confirmed ({confirmed})")
    if sum(asked_here_answered_there.values()) == 0:
        broken.append("no conversation was asked on one action server and answered on the other")
    if not told_saved or not any(c.outcome == "cancelled" for c in no):
        broken.append("the run confirmed or denied nothing: the cluster did not work")
    return figures, broken


def main() -> int:
    # A SIGTERM (make interrupted, a CI timeout) still stops the cluster: the `finally` below runs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    run_id = uuid.uuid4().hex[:8]
    remove_postgres_data(VAR / "postgres")  # a link into the temporary folder, maybe (engines.py)
    shutil.rmtree(VAR, ignore_errors=True)
    cluster = Cluster(VAR, durable=False, approval_run_lease=RUN_LEASE_SECONDS)
    began = time.monotonic()
    print(f"== cluster test {run_id}: starting the cluster in {VAR} (two Rasa servers load their model)")
    broken: list[str] = []
    try:
        cluster.start()
        started = time.monotonic()
        print(f"   up after {started - began:.0f} s")
        for name, url in cluster.urls().items():
            if name in ("rasa", "mcp", "metrics"):
                print(f"   {name:<8} {url}")
        print(
            f"== {CONVERSATIONS} conversations, {WORKERS} at a time, through nginx; killing "
            + ", then ".join(f"{name} at conversation {at}" for name, at in SCHEDULE)
        )
        faults = Faults(cluster, SCHEDULE)
        chats = run_conversations(cluster, run_id, CONVERSATIONS, WORKERS, faults, HOLD_BACK_FROM)
        print(f"   conversations took {time.monotonic() - started:.0f} s")
        notes = asyncio.run(notes_written(cluster.crm_database_url, run_id))
        figures, broken = check(chats, notes, cluster)
        print(f"== {APPROVALS} conversations held for a supervisor, decided on the approval page")
        approval_figures, approval_broken = run_approvals(cluster, run_id, APPROVALS)
        figures += approval_figures
        broken += approval_broken
        figures.append(f"requests nginx passed on to the other replica: {passed_on(cluster)}")
        leaked = leaks(cluster, chats, run_id)
        figures.append(f"secrets or note texts in the logs: {', '.join(leaked) if leaked else 'none'}")
        if leaked:
            broken.append("secrets or note texts in the logs: " + ", ".join(leaked))
        for record in faults.records:
            state = (
                f"back after {record.back_after_s:.1f} s"
                if record.error is None
                else f"NOT back: {record.error}"
            )
            figures.append(
                f"killed {record.name} with {record.in_flight} conversation(s) in flight, "
                f"at conversation {record.at_conversation}; {state}"
            )
            if record.error is not None:
                broken.append(f"{record.name} did not come back: {record.error}")
        if len(faults.records) != len(SCHEDULE):
            broken.append(f"only {len(faults.records)} of {len(SCHEDULE)} faults happened")
        print("== figures")
        for line in figures:
            print(f"   {line}")
        (VAR / "figures.json").write_text(json.dumps({"figures": figures, "broken": broken}, indent=2))
    finally:
        print("== stopping the cluster")
        cluster.stop()
    print(f"== took {time.monotonic() - began:.0f} s in all")
    if broken:
        print("FAILED: " + "; ".join(broken))
        print(f"logs and audit trails kept in {VAR}")
        return 1
    cluster.postgres.remove()  # the database; logs and audit trails stay
    print("PASSED: every confirmed note written exactly once, nothing written without a yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
