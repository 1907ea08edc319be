"""`python -m tests.bench.memory` (`make bench-memory`): the action server's memory at rest, by process.

Starts a seeded CRM REST API and its MCP server, then, one at a time, the action server of each
setting (its MCP tools), confirms 10 notes through it (warm: the MCP session open, every module
imported), and reads each of its processes from /proc: what it is (its command line), VmRSS and PSS
(/proc/<pid>/smaps_rollup: a page shared by N processes counts 1/N in each, so the PSS of a server's
processes adds up to what the machine spends on it, where RSS counts shared pages once per process).

Settings: each end's default; `ACTION_SERVER_SANIC_WORKERS=1` and `=2` (rasa-sdk's own setting);
`SANIC_WORKERS=1` (Sanic's own name, which rasa-sdk does not read). Writes var/bench/memory.txt.
Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench import webhook
from tests.bench.__main__ import REPO, _loadavg, _scratch_parent, run_async
from tests.support import procs
from tests.support.conversation import skills_with_source

WARMUP = 10
MIB = 1024.0


@dataclass
class Setting:
    name: str
    python: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Process:
    pid: int
    role: str
    rss_kib: int
    pss_kib: int


def _listening_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on ``port`` (/proc/net/tcp and tcp6; state 0A is LISTEN)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def _holds(pid: int, inodes: set[str]) -> bool:
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except (FileNotFoundError, PermissionError):
        return False
    return any(link.startswith("socket:[") and link[8:-1] in inodes for link in links)


def role(pid: int, top: int, inodes: set[str]) -> str:
    """What a process of the action server is: the one started (Sanic's manager, or rasa-sdk 3.6's
    server), a worker (it holds the listening socket), the multiprocessing sync manager Sanic starts
    for its workers' shared state, or multiprocessing's resource tracker."""
    try:
        line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return "gone"
    if pid == top:
        return "the process started (serves, or manages Sanic's workers)"
    if "resource_tracker" in line:
        return "multiprocessing resource tracker"
    if _holds(pid, inodes):
        return "Sanic worker (serves the requests)"
    if "spawn_main" in line:
        return "multiprocessing sync manager (Sanic's shared state)"
    return line[:60]


def pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, PermissionError):
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def measure_one(setting: Setting, base: dict[str, object], workdir: Path) -> list[Process]:
    service = procs.action_server(
        endpoints=base["endpoints"],  # type: ignore[arg-type]
        crm_url=str(base["crm_url"]),
        mcp_url=str(base["mcp_url"]),
        mcp_token=str(base["token"]),
        skills_dir=base["skills"],  # type: ignore[arg-type]
        audit_log=workdir / f"audit-{setting.name.replace(' ', '_')}.jsonl",
        python=str(setting.python),
        extra_env=setting.env,
    )
    with service:
        assert service.process is not None
        run_async(webhook.load(service.url, "memory", WARMUP, 1))
        time.sleep(1.0)
        top = service.process.pid
        inodes = _listening_inodes(int(service.url.split(":")[-1].split("/")[0]))
        return [
            Process(pid, role(pid, top, inodes), webhook.rss_kib(pid)["VmRSS"], pss_kib(pid))
            for pid in webhook.tree(top)
        ]


def settings() -> list[Setting]:
    new, old = REPO / ".venv" / "bin" / "python", REPO / ".venv-sdk36" / "bin" / "python"
    found = [
        Setting("rasa-sdk 3.21 default (ACTION_SERVER_SANIC_WORKERS unset)", new),
        Setting("rasa-sdk 3.21 ACTION_SERVER_SANIC_WORKERS=1", new, {"ACTION_SERVER_SANIC_WORKERS": "1"}),
        Setting("rasa-sdk 3.21 ACTION_SERVER_SANIC_WORKERS=2", new, {"ACTION_SERVER_SANIC_WORKERS": "2"}),
        Setting(
            "rasa-sdk 3.21 SANIC_WORKERS=1 (Sanic's name; rasa-sdk reads not it)", new, {"SANIC_WORKERS": "1"}
        ),
    ]
    if old.exists():
        found.append(Setting("rasa-sdk 3.6 default", old))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.memory", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "var" / "bench" / "memory.txt")
    args = parser.parse_args(argv)
    lines = [
        f"python -m tests.bench.memory  {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime())}",
        f"load average at start {_loadavg()}; each action server warm after {WARMUP} confirmed notes"
        " over MCP; MiB",
        "",
    ]
    services = procs.Services()
    with tempfile.TemporaryDirectory(prefix="memory-", dir=_scratch_parent()) as tmp:
        workdir = Path(tmp)
        try:
            rest = services.start(procs.crm_rest(procs.seed_db(workdir / "crm.sqlite3")))
            token = secrets.token_urlsafe(16)
            mcp = services.start(procs.crm_mcp(rest.url, token=token))
            base: dict[str, object] = {
                "endpoints": procs.write_endpoints(workdir / "endpoints.yml", "http://127.0.0.1:1/webhook"),
                "crm_url": rest.url,
                "mcp_url": mcp.url,
                "token": token,
                "skills": skills_with_source(workdir / "skills", "mcp:crm"),
            }
            for setting in settings():
                print(f"==> {setting.name}", file=sys.stderr, flush=True)
                found = measure_one(setting, base, workdir)
                rss = sum(p.rss_kib for p in found) / MIB
                pss = sum(p.pss_kib for p in found) / MIB
                lines.append(f"{setting.name}: {len(found)} processes, RSS {rss:.1f}, PSS {pss:.1f}")
                for p in found:
                    lines.append(f"    {p.role:<58} RSS {p.rss_kib / MIB:6.1f}  PSS {p.pss_kib / MIB:6.1f}")
        finally:
            services.close()
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
