"""The action server's CPU per confirmed write: the previous release beside this one, whose record is on
SQLite and on PostgreSQL.

One confirmed write is two `/webhook` requests as Rasa sends them (the skill's action asks, the
person's signed "yes" answers), local tools writing to the example CRM over REST. Three action servers
run side by side on this machine's `.venv`: release 0.3.0 (its tree taken from git, run from its own
example bot), which kept nothing of its own, and this release with its record in a SQLite file and in
a PostgreSQL database (Debian's server on a free port, its data in a temporary folder). They take
their batches in turn, round after round, so the machine's moments fall on all three alike; the CPU
of each server's processes (the rasa-sdk process tree, from /proc) is read before and after each
batch. The CRM's CPU is not counted: it is the same for all three.

`python -m tests.bench.record_line` prints the line alone (a minute or two); `make bench` prints it with
the rest. The aim (issue 36): this release within 5 % of the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import secrets
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench import webhook
from tests.support import procs
from tests.support.rasa_calls import said

REPO = Path(__file__).resolve().parents[2]
# Release 0.3.0 as it landed (CHANGELOG.md, 2026-12-05).
PREVIOUS = ("0.3.0", "e791694")
VARIANTS = ("0.3.0", "SQLite", "PostgreSQL")
BATCH = 40  # confirmed writes per batch (the CPU clock ticks in 10 ms)
ROUNDS = 8
WARMUP = 5
DANA = "dana@example.com"


@dataclass
class RecordLine:
    # CPU ms per confirmed write, one sample per batch, by variant.
    cpu_ms: dict[str, list[float]] = field(default_factory=dict)
    skipped: str = ""

    def median(self, variant: str) -> float:
        return statistics.median(self.cpu_ms[variant])

    def summary(self) -> dict[str, Any]:
        return {"cpu_ms_per_write": self.cpu_ms, "skipped": self.skipped}


def previous_release(target: Path) -> Path | None:
    """Release 0.3.0's tree, from this repository's history (None when the history does not have it:
    a shallow clone)."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", PREVIOUS[1]], cwd=REPO, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def _local_skills(bot: Path, target: Path) -> Path:
    """``bot``'s skill files with every tool local (the CRM's functions in the action server)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in (bot / "skills").glob("*.yml"):
        (target / path.name).write_text(path.read_text().replace(": mcp:crm", ": local"))
    return target


async def _confirmed_writes(url: str, count: int, tag: str) -> None:
    """``count`` notes, each asked about and confirmed; each must be saved."""
    async with aiohttp.ClientSession() as http:
        for i in range(count):
            note = f"Bench note {tag} {i} {uuid.uuid4().hex[:8]}"
            chat = await webhook.pending_conversation(http, url, note)
            async with http.post(url, json=chat.payload("action_confirm_tool")) as response:
                answer = await response.json(content_type=None)
            if said(answer) != ["utter_note_saved"]:
                raise RuntimeError(f"{tag}: the yes did not save (HTTP {response.status}): {answer!r}")


@contextlib.contextmanager
def _postgres(folder: Path) -> Iterator[str]:
    from devstack.engines import Postgres

    server = Postgres(folder / "data", secrets.token_urlsafe(16), durable=False)
    service = server.service()
    try:
        service.start()
        yield server.create_database("bench_record", "bench_record", secrets.token_urlsafe(16))
    finally:
        service.close()


def measure(rounds: int = ROUNDS, batch: int = BATCH) -> RecordLine:
    line = RecordLine({variant: [] for variant in VARIANTS})
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        work.chmod(0o755)  # PostgreSQL's user reaches its data folder below
        previous = previous_release(work / "release")
        if previous is None:
            line.skipped = f"release {PREVIOUS[0]} ({PREVIOUS[1]}) is not in this clone's history"
            return line
        services = procs.Services()
        stack.callback(services.close)
        rest = services.start(procs.crm_rest(procs.seed_db(work / "crm.sqlite3")))
        database = stack.enter_context(_postgres(work / "pg"))
        endpoints = procs.write_endpoints(work / "endpoints.yml", "http://127.0.0.1:1/webhook")
        ours = _local_skills(procs.EXAMPLE_BOT, work / "skills")
        port = procs.free_port()
        servers = {
            "0.3.0": procs.ServiceProcess(
                "action-server-0.3.0",
                [sys.executable, "-m", "rasa_sdk", "--actions", "actions", "--port", str(port)],
                env=procs.child_env(
                    {
                        "PYTHONPATH": str(previous),
                        "ACTION_SERVER_HOST": procs.HOST,
                        "ACTION_SERVER_PORT": str(port),
                        "ENDPOINTS": str(endpoints),
                        "SKILLS_DIR": str(
                            _local_skills(previous / "examples" / "crm_bot", work / "skills-0.3.0")
                        ),
                        "CRM_URL": rest.url,
                        "CRM_MCP_URL": "http://127.0.0.1:1/mcp",
                        "CRM_MCP_TOKEN": "unused-the-tools-are-local",
                        "AUDIT_LOG": str(work / "audit-0.3.0.jsonl"),
                        "CONFIRMATION_SECRET": procs.TEST_CONFIRMATION_SECRET,
                        "MCP_BRIDGE_CHANNEL_KEY": procs.TEST_CHANNEL_KEY,
                        "APPROVALS_DATABASE": str(work / "approvals-0.3.0.sqlite3"),
                        "MCP_BRIDGE_DATABASE": None,
                    }
                ),
                ready_url=f"http://{procs.HOST}:{port}/health",
                url=f"http://{procs.HOST}:{port}/webhook",
                cwd=previous / "examples" / "crm_bot",
                start_timeout=60.0,
            ),
            "SQLite": procs.action_server(
                endpoints=endpoints,
                crm_url=rest.url,
                mcp_url="http://127.0.0.1:1/mcp",
                mcp_token="unused-the-tools-are-local",
                skills_dir=ours,
                audit_log=work / "audit-sqlite.jsonl",
                database=work / "record.sqlite3",
            ),
            "PostgreSQL": procs.action_server(
                endpoints=endpoints,
                crm_url=rest.url,
                mcp_url="http://127.0.0.1:1/mcp",
                mcp_token="unused-the-tools-are-local",
                skills_dir=ours,
                audit_log=work / "audit-postgres.jsonl",
                database=database,
            ),
        }
        trees: dict[str, list[int]] = {}
        for variant, server in servers.items():
            stack.enter_context(server)
            assert server.process is not None
            trees[variant] = webhook.tree(server.process.pid)
            asyncio.run(_confirmed_writes(server.url, WARMUP, f"{variant} warm-up"))
        order = list(servers)
        for r in range(rounds):
            shift = r % len(order)
            for variant in order[shift:] + order[:shift]:
                before = webhook.cpu_seconds(*trees[variant])
                asyncio.run(_confirmed_writes(servers[variant].url, batch, variant))
                spent = webhook.cpu_seconds(*trees[variant]) - before
                line.cpu_ms[variant].append(spent * 1000 / batch)
    return line


def lines(line: RecordLine) -> list[str]:
    out = ["", "The record: the action server's CPU per confirmed write (local tools; start + yes), median"]
    if line.skipped:
        return [*out, f"  not measured: {line.skipped}"]
    base = line.median("0.3.0")
    out.append(f"  {'action server':<44}{'batches':>8}{'CPU ms':>10}{'vs 0.3.0':>10}{'IQR ms':>9}")
    for variant, samples in line.cpu_ms.items():
        name = (
            f"release 0.3.0 ({PREVIOUS[1]})" if variant == "0.3.0" else f"this release, record on {variant}"
        )
        quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
        change = (line.median(variant) / base - 1) * 100 if base else float("nan")
        out.append(
            f"  {name:<44}{len(samples):>8}{line.median(variant):>10.2f}{change:>+9.1f}%"
            f"{quartiles[2] - quartiles[0]:>9.2f}"
        )
    return out


if __name__ == "__main__":
    print("\n".join(lines(measure())))
