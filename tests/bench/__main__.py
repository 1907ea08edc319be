"""`python -m tests.bench` (`make bench`): every figure measured side by side in one run.

Starts a seeded CRM (REST), its MCP server, the action server and a Rasa server on free local ports,
stops them all at the end (also on error), prints a table and writes bench-results/bench.json and
bench-results/bench.png. Timings are reported, never asserted: a missed target prints MISS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from crm import tools as crm_tools
from tests.bench import cluster_line, floor_server, micro, rasa_turns, reader_line, report, webhook
from tests.support import procs
from tests.support.conversation import skills_with_source

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {"local": "local", "mcp": "mcp:crm"}
_T = TypeVar("_T")
WARMUP_REQUESTS = 10  # confirmations per action server before its "warm, idle" memory reading


@dataclass(frozen=True)
class Config:
    calls: int = 300  # section 1, per variant
    sessions: int = 100  # section 2, per variant
    cycles: int = 200  # section 3, per variant
    requests: int = 300  # section 4, per variant, concurrency level and round
    load_rounds: int = 5  # section 4: rounds per level, local and MCP alternating within each
    levels: tuple[int, ...] = (1, 8, 32)
    turns: int = 300  # section 5, per variant, in pairs (one local turn next to one MCP turn)
    cluster_conversations: int = 40  # section 7, per round
    cluster_rounds: int = 4  # section 7: rounds alternate 2 and 1 action servers
    cluster_clients: int = 8
    out: Path = REPO / "bench-results"
    model: Path | None = None  # None: the model of the current domain, config and data (`make train`)


QUICK = Config(
    calls=30,
    sessions=10,
    cycles=20,
    requests=40,
    load_rounds=2,
    turns=6,
    cluster_conversations=8,
    cluster_rounds=2,
)


def run_async(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run on uvloop when it is installed, as the action server (Sanic) runs the bridge."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def event_loop_name() -> str:
    try:
        return f"uvloop {metadata.version('uvloop')}"
    except metadata.PackageNotFoundError:
        return "asyncio"


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _git_commit() -> str:
    result = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or "unknown"


async def _in_process(
    workdir: Path, mcp_url: str, token: str, floor_url: str, config: Config
) -> tuple[Any, Any, Any]:
    try:
        tool_call = await micro.tool_call(mcp_url, token, config.calls, floor_url)
        session = await micro.session_reuse(mcp_url, token, config.sessions)
        cycle = await micro.executor_cycle(workdir, mcp_url, token, config.cycles)
        return tool_call, session, cycle
    finally:
        await crm_tools.close_client()


def _scratch_parent() -> str | None:
    """Where the CRM database and the audit logs go: memory (/dev/shm) when there is one.

    A disk's fsync time swings with whatever else the machine writes (17 ms per commit at worst on
    the shared machine, 0.1 ms in memory), and that would drown what is measured here: the bridge.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _start_together(services: procs.Services, starting: list[procs.ServiceProcess]) -> None:
    """Start slow services (Rasa servers) side by side; raise the first failure after all tried."""
    failures: list[BaseException] = []

    def start(service: procs.ServiceProcess) -> None:
        try:
            services.start(service)
        except BaseException as exc:  # reported below, once every thread is done
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(service,)) for service in starting]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _load_and_memory(
    servers: dict[str, procs.ServiceProcess], others: dict[str, int], config: Config
) -> tuple[dict[str, list[webhook.LoadResult]], dict[str, dict[str, dict[str, int]]]]:
    """Both action servers run at once; each concurrency level runs rounds of local and MCP in
    turn (the order flips every round), so both meet the same moments of the machine.

    `others`: the pids of the services behind them (MCP server, CRM REST), whose CPU is counted too.
    """
    load: dict[str, list[webhook.LoadResult]] = {name: [] for name in servers}
    memory: dict[str, dict[str, dict[str, int]]] = {name: {} for name in servers}
    pids: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for name, server in servers.items():
            stack.enter_context(server)
            assert server.process is not None
            pids[name] = server.process.pid
            memory[name]["start"] = webhook.rss_kib(pids[name])
        for name, server in servers.items():
            run_async(webhook.load(server.url, name, WARMUP_REQUESTS, 1))
            memory[name]["rest"] = webhook.rss_kib(pids[name])
        for clients in config.levels:
            _say(f"section 4: {clients} clients, {config.load_rounds} rounds of local and MCP in turn")
            rounds: dict[str, list[webhook.LoadResult]] = {name: [] for name in servers}
            for r in range(config.load_rounds):
                for name in list(servers) if r % 2 == 0 else list(servers)[::-1]:
                    counted = {"action server": pids[name], **others}
                    rounds[name].append(
                        run_async(webhook.load(servers[name].url, name, config.requests, clients, counted))
                    )
            for name in servers:
                load[name].append(webhook.merge_rounds(rounds[name]))
        for name in servers:
            memory[name]["after_load"] = webhook.rss_kib(pids[name])
    return load, memory


def floor_service() -> procs.ServiceProcess:
    """tests/bench/floor_server.py on a free port: a tool that does nothing, over MCP and plain HTTP."""
    port = procs.free_port()
    base = f"http://{procs.HOST}:{port}"
    return procs.ServiceProcess(
        "floor",
        [sys.executable, str(Path(floor_server.__file__)), str(port)],
        env=procs.child_env({}),
        ready_url=f"{base}/health",
        url=base,
    )


def _say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def run(config: Config) -> int:
    started = time.monotonic()
    meta: dict[str, Any] = {
        "started_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "loadavg_start": _loadavg(),
        "python": platform.python_version(),
        "mcp": metadata.version("mcp"),
        "rasa_sdk": metadata.version("rasa-sdk"),
        "commit": _git_commit(),
        "event_loop": event_loop_name(),
        "config": {
            key: str(value) if isinstance(value, Path) else value for key, value in asdict(config).items()
        },
    }
    services = procs.Services()
    scratch = _scratch_parent()
    meta["scratch"] = scratch or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="bench-", dir=scratch) as tmp:
        workdir = Path(tmp)
        try:
            _say("starting the CRM REST API and its MCP server")
            db = procs.seed_db(workdir / "crm.sqlite3")
            rest = services.start(procs.crm_rest(db))
            token = secrets.token_urlsafe(24)
            mcp = services.start(procs.crm_mcp(rest.url, token=token))
            os.environ["CRM_URL"] = rest.url  # the local tool functions of sections 1 and 3
            floor = services.start(floor_service())

            _say(f"sections 1-3 in process (n = {config.calls}, {config.sessions}, {config.cycles})")
            tool_call, session, cycle = run_async(_in_process(workdir, mcp.url, token, floor.url, config))
            _say("the confirmation reader at 1 kB, 64 kB and 1 MB")
            reader = reader_line.measure()

            skills = {
                name: skills_with_source(workdir / f"skills-{name}", src) for name, src in VARIANTS.items()
            }

            def action_server(name: str, port: int) -> procs.ServiceProcess:
                return procs.action_server(
                    endpoints=endpoints,
                    crm_url=rest.url,
                    mcp_url=mcp.url,
                    mcp_token=token,
                    skills_dir=skills[name],
                    audit_log=workdir / f"audit-{name}.jsonl",
                    port=port,
                )

            # Section 5: a Rasa server per variant, each calling an action server of its own.
            ports = {name: procs.free_port() for name in VARIANTS}
            endpoints_for = {
                name: procs.write_endpoints(
                    workdir / f"endpoints-{name}.yml", f"http://{procs.HOST}:{ports[name]}/webhook"
                )
                for name in VARIANTS
            }
            endpoints = endpoints_for["local"]  # the MCP server block is the same in both
            _say("starting two Rasa servers, one per variant (takes a minute or two)")
            model = config.model or procs.current_model()
            meta["rasa_model"] = model.name
            rasa = {name: procs.rasa_server(model=model, endpoints=endpoints_for[name]) for name in VARIANTS}
            _start_together(services, list(rasa.values()))

            _say(f"sections 4 and 6: two action servers, {config.requests} requests per level")
            assert mcp.process is not None and rest.process is not None
            load, memory = _load_and_memory(
                {name: action_server(name, procs.free_port()) for name in VARIANTS},
                {"MCP server": mcp.process.pid, "CRM REST": rest.process.pid},
                config,
            )

            _say(f"section 5: {config.turns} Rasa turns per variant, alternating between the two servers")
            with contextlib.ExitStack() as stack:
                for name in VARIANTS:
                    stack.enter_context(action_server(name, ports[name]))
                turns = run_async(
                    rasa_turns.interleaved_yes_turns(
                        {name: rasa[name].url for name in VARIANTS}, config.turns
                    )
                )
        finally:
            services.close()
        _say(
            f"section 7: the cluster, {config.cluster_conversations} conversations per round from "
            f"{config.cluster_clients} clients, {config.cluster_rounds} rounds (starting it takes minutes)"
        )
        cluster = cluster_line.measure(
            REPO / "var" / "bench-cluster",
            conversations=config.cluster_conversations,
            clients=config.cluster_clients,
            rounds=config.cluster_rounds,
        )
    meta["wall_s"] = round(time.monotonic() - started, 1)
    meta["loadavg_end"] = _loadavg()
    results = report.Results(tool_call, session, cycle, load, turns, memory, cluster, reader)
    print(report.write(results, meta, config.out))
    print(f"\nwritten: {config.out / 'bench.json'}, {config.out / 'bench.png'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke run, not a measurement")
    parser.add_argument("--out", type=Path, help="output folder (default bench-results/)")
    parser.add_argument(
        "--model", type=Path, help="Rasa model (default: the current one, as `make train` names it)"
    )
    args = parser.parse_args(argv)
    config = QUICK if args.quick else Config()
    overrides = {key: value for key, value in (("out", args.out), ("model", args.model)) if value is not None}
    config = replace(config, **overrides)
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
