"""`python -m tests.bench.cpu_profile` (`make profile`): where the CPU of an MCP tool call goes.

Runs the executor's confirmation cycle (ask, "yes", write) with the tools local and over MCP, in
alternating rounds, against a seeded CRM REST API and its MCP server on free local ports, and
writes var/bench/profile.txt:

1. CPU milliseconds per cycle, by process (this process = the action server's side: executor,
   bridge, SDK client; the MCP server; the CRM REST API), read from /proc, so a busy machine
   slows the figures' wall time but hardly their CPU;
2. a cProfile (CPU clock) of the client side over MCP, and one of the MCP server (requests only,
   start-up excluded): own CPU by package, then the top functions.

cProfile's own cost inflates deep call stacks, so read the shares, not the absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crm import tools as crm_tools

from tests.bench import micro
from tests.bench.__main__ import REPO, _loadavg, _scratch_parent, run_async
from tests.bench.webhook import cpu_seconds
from tests.support import procs
from tests.support.conversation import skills_with_source

PROFILED_SERVER = Path(__file__).with_name("_profiled_server.py")


def by_package(stats: pstats.Stats, top: int = 14) -> list[tuple[str, float]]:
    """Own CPU share by package (site-packages name, project folder, or stdlib module)."""
    own: Counter[str] = Counter()
    for (filename, _, function), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if match := re.search(r"site-packages/([^/]+)", filename):
            key = match.group(1).removesuffix(".py")
        elif filename.startswith(str(REPO)):
            key = Path(filename).relative_to(REPO).parts[0] + " (this project)"
        elif match := re.search(r"python3\.\d+/([^/]+)", filename):
            key = "stdlib " + match.group(1).removesuffix(".py")
        else:
            key = "built-ins (" + function.split(" of ")[0].strip("<>{}")[:30] + ")"
        own[key] += tottime
    total = sum(own.values()) or 1.0
    return [(key, value / total) for key, value in own.most_common(top)]


def top_functions(stats: pstats.Stats, top: int = 15) -> str:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    text = re.sub(r"/\S*/site-packages/", "", text)
    text = text.replace(str(REPO) + "/", "")
    text = re.sub(r"/\S*/lib/python3\.\d+/", "", text)
    body = text[text.index("ncalls") :] if "ncalls" in text else text
    return "\n".join(line.rstrip()[:150] for line in body.splitlines() if line.strip())


async def measure(
    workdir: Path,
    mcp_url: str,
    token: str,
    pids: dict[str, int],
    cycles: int,
    rounds: int,
    profile_server: Callable[[], None],
) -> dict[str, Any]:
    executors = {
        name: micro._executor(skills_with_source(workdir / f"skills-{name}", source), mcp_url, token)
        for name, source in (("local", "local"), ("mcp", "mcp:crm"))
    }
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in executors}
    try:
        for name, executor in executors.items():
            for _ in range(10):
                await micro._confirmation_cycle(executor, name)
        for r in range(rounds):
            for name in list(executors) if r % 2 == 0 else list(executors)[::-1]:
                before = {key: cpu_seconds(pid) for key, pid in pids.items()}
                own, wall = time.process_time(), time.perf_counter()
                for _ in range(cycles):
                    await micro._confirmation_cycle(executors[name], name)
                figures = {
                    "wall": time.perf_counter() - wall,
                    "action server side": time.process_time() - own,
                    **{key: cpu_seconds(pid) - before[key] for key, pid in pids.items()},
                }
                for key, seconds in figures.items():
                    cpu[name].setdefault(key, []).append(seconds / cycles * 1000)
        profile_server()  # only now: its profiler would inflate the CPU figures above
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for _ in range(cycles * 2):
            await micro._confirmation_cycle(executors["mcp"], "mcp")
        profiler.disable()
    finally:
        for executor in executors.values():
            await executor.aclose()
        await crm_tools.close_client()
    return {"cpu": cpu, "client": pstats.Stats(profiler)}


def report(result: dict[str, Any], server: pstats.Stats, meta: dict[str, str]) -> str:
    lines = [
        f"python -m tests.bench.cpu_profile  {meta['started']}  commit {meta['commit']}",
        f"load average at start {meta['load_start']}, at end {meta['load_end']}",
        "",
        "1. per confirmation cycle (2 tool calls: find_contact_by_email, add_timeline_note),"
        " medians over rounds",
        f"  {'ms per cycle':<22}" + "".join(f"{key:>20}" for key in result["cpu"]["local"]),
    ]
    for name, figures in result["cpu"].items():
        lines.append(f"  {name:<22}" + "".join(f"{statistics.median(v):>20.2f}" for v in figures.values()))
    local, mcp = result["cpu"]["local"], result["cpu"]["mcp"]
    cpu_keys = [key for key in local if key != "wall"]
    total_local = sum(statistics.median(local[key]) for key in cpu_keys)
    total_mcp = sum(statistics.median(mcp[key]) for key in cpu_keys)
    lines.append(f"  CPU of all processes per cycle: local {total_local:.2f} ms, MCP {total_mcp:.2f} ms")
    for title, stats in (
        ("2. client side over MCP (this process)", result["client"]),
        ("3. MCP server", server),
    ):
        lines += ["", f"{title}: own CPU by package"]
        lines += [f"  {share:6.1%}  {key}" for key, share in by_package(stats)]
        lines += ["", f"{title}: top functions by own CPU", top_functions(stats)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.cpu_profile", description=__doc__)
    parser.add_argument("--cycles", type=int, default=50, help="cycles per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per variant (default %(default)s)")
    parser.add_argument("--out", type=Path, default=REPO / "var" / "bench" / "profile.txt")
    args = parser.parse_args(argv)
    import subprocess

    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    meta = {
        "started": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "load_start": _loadavg(),
    }
    services = procs.Services()
    with tempfile.TemporaryDirectory(prefix="profile-", dir=_scratch_parent()) as tmp:
        workdir = Path(tmp)
        server_profile = workdir / "mcp-server.prof"
        try:
            rest = services.start(procs.crm_rest(procs.seed_db(workdir / "crm.sqlite3")))
            token = secrets.token_urlsafe(16)
            mcp_service = procs.crm_mcp(rest.url, token=token)
            mcp_service.args = [
                sys.executable,
                str(PROFILED_SERVER),
                str(server_profile),
                *mcp_service.args[3:],
            ]
            mcp = services.start(mcp_service)
            assert rest.process is not None and mcp.process is not None
            # The local tools of this process call the CRM REST API, which requires its token.
            os.environ.update(CRM_URL=rest.url, CRM_API_TOKEN=procs.child_env()["CRM_API_TOKEN"])
            pids = {"MCP server": mcp.process.pid, "CRM REST": rest.process.pid}
            result = run_async(
                measure(
                    workdir,
                    mcp.url,
                    token,
                    pids,
                    args.cycles,
                    args.rounds,
                    lambda: mcp.process.send_signal(signal.SIGUSR1) if mcp.process else None,
                )
            )
        finally:
            services.close()
        server = pstats.Stats(str(server_profile))
    meta["load_end"] = _loadavg()
    text = report(result, server, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
