"""`python -m tests.bench` (`make bench`): every figure measured side by side in one run, at both ends.

The ends are the action-server environments of the supported range (tests/bench/ends.py): by
default `.venv` (rasa-sdk 3.21, Python 3.13) and `.venv-sdk36` (rasa-sdk 3.6, Python 3.10), whatever
interpreter runs this; `--python PATH` (repeated) picks others, `--this-end` only this interpreter's.
Starts a seeded CRM (REST), its MCP server, a worker per end for the in-process sections, a worker
per peer found for section 8 (fastmcp in .venv, Rasa Pro in .venv-pro: tests/bench/peers.py), the
action servers of every end (on that end's interpreter) and one Rasa server on free local ports,
stops them all at the end (also on error), prints one table whose columns are the ends and writes
var/bench/bench.json and var/bench/bench.png (not tracked: a run a report cites is copied into
docs/reports/runs/ by hand). Timings are reported, never asserted: a missed target prints MISS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from tests.bench import (
    cluster_line,
    ends,
    floor_server,
    micro,
    peers,
    rasa_turns,
    reader_line,
    record_line,
    report,
    router,
    schema_line,
    tracing_line,
    webhook,
)
from tests.support import procs
from tests.support.conversation import skills_with_source

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {"local": "local", "mcp": "mcp:crm"}
_T = TypeVar("_T")
WARMUP_REQUESTS = 10  # confirmations per action server before its "warm, idle" memory reading


@dataclass(frozen=True)
class Config:
    calls: int = 300  # section 1, per end and variant
    sessions: int = 100  # section 2, per end and variant
    cycles: int = 200  # section 3, per end and variant
    requests: int = 300  # section 4, per end, variant, concurrency level and round
    load_rounds: int = 5  # section 4: rounds per level, every action server in turn within each
    levels: tuple[int, ...] = (1, 8, 32)
    turns: int = 300  # section 5, per end and variant, taken next to each other
    cluster_conversations: int = 40  # section 7, per end, setting (2 or 1 action servers) and round
    cluster_rounds: int = 4  # section 7: every round visits every end, with 2 and 1 action servers
    cluster_clients: int = 8
    peer_samples: int = 60  # section 8, per line and variant
    out: Path = REPO / "var" / "bench"
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
    peer_samples=6,
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


def _scratch_parent() -> str | None:
    """Where the CRM database and the audit logs go: memory (/dev/shm) when there is one.

    A disk's fsync time swings with whatever else the machine writes (17 ms per commit at worst on
    the shared machine, 0.1 ms in memory), and that would drown what is measured here: the bridge.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


Line = tuple[str, str]  # (end, variant)


def _load_and_memory(
    servers: dict[Line, procs.ServiceProcess], others: dict[str, list[int]], config: Config
) -> tuple[dict[Line, list[webhook.LoadResult]], dict[Line, dict[str, dict[str, int]]]]:
    """Every end's action servers (tools local and over MCP) run at once; each concurrency level runs
    rounds in which every one of them takes its turn (the first one moving on every round), so all
    meet the same moments of the machine. Memory and CPU count each server's processes (tree).

    `others`: the pids of the services behind them (MCP server, CRM REST), whose CPU is counted too.
    """
    load: dict[Line, list[webhook.LoadResult]] = {line: [] for line in servers}
    memory: dict[Line, dict[str, dict[str, int]]] = {line: {} for line in servers}
    trees: dict[Line, list[int]] = {}
    with contextlib.ExitStack() as stack:
        for line, server in servers.items():
            stack.enter_context(server)
            assert server.process is not None
            trees[line] = webhook.tree(server.process.pid)
            memory[line]["start"] = webhook.rss_kib(*trees[line])
        for line, server in servers.items():
            run_async(webhook.load(server.url, "-".join(line), WARMUP_REQUESTS, 1))
            memory[line]["rest"] = webhook.rss_kib(*trees[line])
        order = list(servers)
        for clients in config.levels:
            _say(f"section 4: {clients} clients, {config.load_rounds} rounds, each action server in turn")
            rounds: dict[Line, list[webhook.LoadResult]] = {line: [] for line in servers}
            for r in range(config.load_rounds):
                shift = r % len(order)
                for line in order[shift:] + order[:shift]:
                    counted = {"action server": trees[line], **others}
                    rounds[line].append(
                        run_async(
                            webhook.load(servers[line].url, "-".join(line), config.requests, clients, counted)
                        )
                    )
            for line in servers:
                load[line].append(webhook.merge_rounds(rounds[line]))
        for line in servers:
            memory[line]["after_load"] = webhook.rss_kib(*trees[line])
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


def router_service(routes: dict[str, str]) -> procs.ServiceProcess:
    """tests/bench/router.py on a free port: Rasa's one action endpoint, passing each conversation's
    calls on to the action server of its route."""
    port = procs.free_port()
    base = f"http://{procs.HOST}:{port}"
    return procs.ServiceProcess(
        "router",
        [sys.executable, str(Path(router.__file__)), str(port)],
        env=procs.child_env({"BENCH_ROUTES": json.dumps(routes)}),
        ready_url=f"{base}/health",
        url=base,
    )


def _say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def run(config: Config, chosen: list[ends.End]) -> int:
    started = time.monotonic()
    meta: dict[str, Any] = {
        "started_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "loadavg_start": _loadavg(),
        "ends": [end.summary() for end in chosen],
        # The CRM, its MCP server, the floor server, the router and the load clients run here.
        "services_python": platform.python_version(),
        "mcp": metadata.version("mcp"),
        "commit": _git_commit(),
        "event_loop": event_loop_name(),
        "config": {
            key: str(value) if isinstance(value, Path) else value for key, value in asdict(config).items()
        },
    }
    keys = [end.key for end in chosen]
    _say("ends: " + "; ".join(end.describe() for end in chosen))
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
            floor = services.start(floor_service())

            _say(
                f"sections 1-3 in a worker per end, interleaved (n = {config.calls}, {config.sessions}, "
                f"{config.cycles})"
            )
            running = ends.workers(chosen, rest.url)
            try:
                common = {"mcp_url": mcp.url, "token": token}
                tool_call = ends.interleaved(
                    running,
                    "tool_call",
                    dict.fromkeys(keys, {**common, "floor_url": floor.url}),
                    config.calls,
                    warmup=5,
                )
                session = ends.interleaved(
                    running,
                    "session",
                    dict.fromkeys(keys, common),
                    config.sessions,
                    warmup=micro.SESSION_WARMUP,
                )
                cycle = ends.interleaved(
                    running,
                    "executor_cycle",
                    {key: {**common, "workdir": str(workdir / f"cycle-{i}")} for i, key in enumerate(keys)},
                    config.cycles,
                    warmup=5,
                )
                found, skipped = peers.find_peers(chosen[0])
                _say(
                    f"section 8: the bridge beside {', '.join(found) or 'no peer'}, "
                    f"{config.peer_samples} samples per line and variant"
                )
                peer_lines = peers.measure(
                    running,
                    {
                        end.key: f"mcp-bridge ({letter}: {end.short})"
                        for letter, end in zip("ABCDEFGH", chosen, strict=False)
                    },
                    found,
                    procs.child_env({}),
                    {
                        **{
                            key: {**common, "workdir": str(workdir / f"peers-{i}")}
                            for i, key in enumerate(keys)
                        },
                        **dict.fromkeys(found, common),
                    },
                    config.peer_samples,
                    warmup=3,
                    skipped=skipped,
                )
            finally:
                for worker in running.values():
                    worker.close()
            _say("the confirmation reader at 1 kB, 64 kB and 1 MB")
            reader = reader_line.measure()
            _say("a hostile server's schema: jsonschema alone, the bridge, the event loop's lag")
            schemas = schema_line.measure()
            _say("the confirmation's CPU with tracing off, with no tracing hooks, and with spans")
            traced = tracing_line.measure()
            _say("the record: the action server's CPU per confirmed write, 0.3.0 beside this release")
            recorded = record_line.measure()

            skills = {
                variant: skills_with_source(workdir / f"skills-{variant}", src)
                for variant, src in VARIANTS.items()
            }
            python = {end.key: end.python for end in chosen}
            lines: list[Line] = [(key, variant) for key in keys for variant in VARIANTS]
            # The action servers read the MCP server block; their own action_endpoint is never used.
            endpoints = procs.write_endpoints(workdir / "endpoints-actions.yml", "http://127.0.0.1:1/webhook")

            def action_server(line: Line, port: int) -> procs.ServiceProcess:
                key, variant = line
                return procs.action_server(
                    endpoints=endpoints,
                    crm_url=rest.url,
                    mcp_url=mcp.url,
                    mcp_token=token,
                    skills_dir=skills[variant],
                    audit_log=workdir / f"audit-{keys.index(key)}-{variant}.jsonl",
                    port=port,
                    python=python[key],
                )

            # Section 5: one Rasa server; the router passes each conversation on to its line's
            # action server (route e<end><variant>).
            routes = {f"e{keys.index(key)}{variant}": (key, variant) for key, variant in lines}
            ports = {route: procs.free_port() for route in routes}
            hop = services.start(
                router_service({route: f"http://{procs.HOST}:{ports[route]}" for route in routes})
            )
            _say("starting one Rasa server for every end and variant (takes a minute or two)")
            model = config.model or procs.current_model()
            meta["rasa_model"] = model.name
            access = procs.RasaAccess.generate()
            rasa = services.start(
                procs.rasa_server(
                    model=model,
                    endpoints=procs.write_endpoints(workdir / "endpoints-rasa.yml", f"{hop.url}/webhook"),
                    access=access,
                )
            )

            _say(f"sections 4 and 6: {len(lines)} action servers, {config.requests} requests per level")
            assert mcp.process is not None and rest.process is not None
            load, memory = _load_and_memory(
                {line: action_server(line, procs.free_port()) for line in lines},
                {"MCP server": [mcp.process.pid], "CRM REST": [rest.process.pid]},
                config,
            )

            _say(f"section 5: {config.turns} Rasa turns per end and variant, in turn, on one Rasa server")
            with contextlib.ExitStack() as stack:
                for route, line in routes.items():
                    stack.enter_context(action_server(line, ports[route]))
                by_route = run_async(
                    rasa_turns.interleaved_yes_turns(
                        rasa.url, list(routes), config.turns, rest_token=access.rest_token
                    )
                )
            turns = {line: by_route[route] for route, line in routes.items()}
        finally:
            services.close()
        _say(
            f"section 7: the cluster, {config.cluster_conversations} conversations per end, setting and "
            f"round from {config.cluster_clients} clients, {config.cluster_rounds} rounds (starting it takes "
            "minutes)"
        )
        cluster = cluster_line.measure(
            REPO / "var" / "bench-cluster",
            python,
            conversations=config.cluster_conversations,
            clients=config.cluster_clients,
            rounds=config.cluster_rounds,
        )
    meta["wall_s"] = round(time.monotonic() - started, 1)
    meta["loadavg_end"] = _loadavg()
    results = {
        key: report.Results(
            tool_call[key],
            session[key],
            cycle[key],
            {variant: load[(key, variant)] for variant in VARIANTS},
            {variant: turns[(key, variant)] for variant in VARIANTS},
            {variant: memory[(key, variant)] for variant in VARIANTS},
            cluster[key],
            reader,  # one measurement, in this process: the reader is the same code at every end
        )
        for key in keys
    }
    print(report.write(results, chosen, meta, config.out, peer_lines))
    print("\n".join(reader_line.lines(reader)))
    print("\n".join(schema_line.lines(schemas)))
    print("\n".join(tracing_line.lines(traced)))
    print("\n".join(record_line.lines(recorded)))
    print(f"\nwritten: {config.out / 'bench.json'}, {config.out / 'bench.png'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke run, not a measurement")
    parser.add_argument(
        "--out", type=Path, help="output folder (default var/bench/; with --quick var/bench-quick/)"
    )
    parser.add_argument(
        "--model", type=Path, help="Rasa model (default: the current one, as `make train` names it)"
    )
    parser.add_argument(
        "--python",
        type=Path,
        action="append",
        help="an end: an action-server venv's interpreter (repeat for each; default .venv and .venv-sdk36)",
    )
    parser.add_argument("--this-end", action="store_true", help="only the interpreter running this")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else Config()
    if args.quick:  # a smoke run never overwrites a measurement
        config = replace(config, out=REPO / "var" / "bench-quick")
    overrides = {key: value for key, value in (("out", args.out), ("model", args.model)) if value is not None}
    config = replace(config, **overrides)
    return run(config, ends.choose(args.python, args.this_end))


if __name__ == "__main__":
    sys.exit(main())
