"""The printed table, bench.json and bench.png."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench import reader_line
from tests.bench.cluster_line import ClusterLine
from tests.bench.reader_line import ReaderLine
from tests.bench.stats import RatioSpread, Series, ratio, ratio_spread
from tests.bench.webhook import LoadResult

MIB = 1024.0


@dataclass
class Target:
    name: str
    passed: bool
    detail: str

    def summary(self) -> dict[str, Any]:
        return {"target": self.name, "result": "PASS" if self.passed else "MISS", "detail": self.detail}


@dataclass
class Results:
    """Everything one run measured; filled in section by section."""

    tool_call: dict[str, Series]
    session: dict[str, Series]
    executor_cycle: dict[str, Series]
    load: dict[str, list[LoadResult]]
    rasa_turn: dict[str, Series]
    memory: dict[str, dict[str, dict[str, int]]]
    cluster: dict[int, ClusterLine]
    reader: ReaderLine | None = None


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:9.2f}"


def _times(a: float, b: float, what: str) -> str:
    r = ratio(a, b)
    return "" if math.isnan(r) else f"{r:6.2f}x {what}  ({a - b:+.2f} ms)"


def targets(results: Results) -> list[Target]:
    out: list[Target] = []
    bridge, sdk = results.tool_call["bridge"].median_ms, results.tool_call["sdk"].median_ms
    overhead = ratio(bridge, sdk) - 1
    out.append(
        Target(
            "bridge adds <= 10% to the bare SDK call (median)",
            overhead <= 0.10,
            f"{overhead:+.1%} ({bridge:.2f} ms vs {sdk:.2f} ms)",
        )
    )
    reused, per_call = results.session["reused"].median_ms, results.session["per_call"].median_ms
    speedup = ratio(per_call, reused)
    out.append(
        Target(
            "reused session >= 10x faster than a session per call (median)",
            speedup >= 10,
            f"{speedup:.1f}x ({reused:.2f} ms vs {per_call:.2f} ms; against section 1's SDK call "
            f"{ratio(per_call, sdk):.1f}x)",
        )
    )
    for variant, levels in results.load.items():
        top = max(levels, key=lambda level: level.clients)
        out.append(
            Target(
                f"no errors at {top.clients} concurrent clients ({variant})",
                top.latency.errors == 0,
                f"{top.latency.errors} errors in {top.latency.n} requests",
            )
        )
    ex = results.executor_cycle
    cycle = ratio(ex["mcp"].median_ms, ex["local"].median_ms)
    bound = ""
    if "noop_sdk" in results.tool_call:
        bound = f"; if its 2 calls each added only the SDK's no-op floor: {floor(results).cycle_bound:.2f}x"
    out.append(
        Target(
            "executor confirmation cycle over MCP <= 2x local (median)",
            cycle <= 2.0,
            f"{cycle:.2f}x ({ex['mcp'].median_ms:.2f} ms vs {ex['local'].median_ms:.2f} ms)" + bound,
        )
    )
    at8 = {
        variant: next((lv for lv in levels if lv.clients == 8), None)
        for variant, levels in results.load.items()
    }
    local8, mcp8 = at8.get("local"), at8.get("mcp")
    if local8 is not None and mcp8 is not None:
        share = ratio(mcp8.throughput, local8.throughput)
        per_round = [ratio(m, lo) for m, lo in zip(mcp8.round_rps, local8.round_rps, strict=True)]
        rounds = f"; per round {' '.join(f'{r:.0%}' for r in per_round)}" if len(per_round) > 1 else ""
        out.append(
            Target(
                "action server with MCP tools >= 50% of local req/s at 8 clients",
                share >= 0.5,
                f"{share:.0%} ({mcp8.throughput:.0f} vs {local8.throughput:.0f} req/s{rounds})",
            )
        )
    local, mcp = results.rasa_turn["local"], results.rasa_turn["mcp"]
    spread = turn_spread(results)
    extra = spread.ratio - 1
    out.append(
        Target(
            'MCP adds <= 10% to a whole Rasa "yes" turn vs local (median, turns interleaved)',
            extra <= 0.10 and mcp.errors == 0 and local.errors == 0,
            f"{extra:+.1%}, 95% CI {spread.low - 1:+.1%} to {spread.high - 1:+.1%} "
            f"({mcp.median_ms:.2f} ms vs {local.median_ms:.2f} ms; errors {mcp.errors} / {local.errors})",
        )
    )
    return out


@dataclass
class Floor:
    """Section 1's floor lines, read against the CRM call (medians, ms)."""

    added: float  # the bridge's call to the CRM MCP server minus the local function
    noop: float  # a no-op tool over the SDK as the bridge runs it: the least an MCP call adds
    http: float  # the same function behind a plain POST: the HTTP hop alone
    sdk_server: float  # hand-written JSON-RPC to the SDK's server, minus the HTTP hop
    sdk_client: float  # the SDK's client against the same server, minus hand-written JSON-RPC
    cycle_bound: float  # the best cycle ratio if each of its 2 calls added only `noop`


def floor(results: Results) -> Floor:
    tc, ex = results.tool_call, results.executor_cycle
    added = tc["bridge"].median_ms - tc["local"].median_ms
    noop, http, raw = tc["noop_sdk"].median_ms, tc["noop_plain"].median_ms, tc["noop_jsonrpc"].median_ms
    local_cycle = ex["local"].median_ms
    return Floor(added, noop, http, raw - http, noop - raw, ratio(local_cycle + 2 * noop, local_cycle))


def turn_spread(results: Results) -> RatioSpread:
    return ratio_spread(results.rasa_turn["local"].samples, results.rasa_turn["mcp"].samples)


def table(results: Results, meta: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    head = f"  {'line':<44}{'n':>6}{'median ms':>11}{'p95 ms':>10}   ratio of medians"

    def row(label: str, series: Series, note: str = "") -> None:
        err = f"  errors {series.errors}" if series.errors else ""
        add(f"  {label:<44}{series.n:>6}{_ms(series.median_ms):>11}{_ms(series.p95_ms):>10}   {note}{err}")

    add(f"make bench  {meta['started_at']}  wall {meta['wall_s']:.0f} s  {meta['cpus']} CPUs")
    add(f"load average at start {meta['loadavg_start']}, at end {meta['loadavg_end']}; {meta['event_loop']}")
    add(f"Rasa model {meta.get('rasa_model', '-')}; CRM database and audit logs under {meta['scratch']}")
    if float(meta["loadavg_start"].split()[0]) > 0.5 * meta["cpus"]:
        add(
            "WARNING: the machine was busy before the run started; calls that cross more processes (MCP) "
            "suffer more from waiting for a CPU, so compare the lines of one run, not runs."
        )
    add("")
    tc = results.tool_call
    add("1. one tool call, find_contact_by_email (variants interleaved round-robin)")
    add(head)
    row("local function (floor without MCP)", tc["local"], "1.00x local")
    row(
        "bare SDK ClientSession, kept open (MCP floor)",
        tc["sdk"],
        _times(tc["sdk"].median_ms, tc["local"].median_ms, "local"),
    )
    row(
        "MCPRuntime.invoke (the bridge)",
        tc["bridge"],
        _times(tc["bridge"].median_ms, tc["sdk"].median_ms, "SDK"),
    )
    if "noop_sdk" in tc:
        row("floor: no-op tool, plain HTTP POST", tc["noop_plain"], "")
        row(
            "floor: no-op tool, hand-written JSON-RPC POST",
            tc["noop_jsonrpc"],
            _times(tc["noop_jsonrpc"].median_ms, tc["noop_plain"].median_ms, "plain HTTP"),
        )
        row(
            "floor: no-op tool, SDK as the bridge runs it",
            tc["noop_sdk"],
            _times(tc["noop_sdk"].median_ms, tc["noop_plain"].median_ms, "plain HTTP"),
        )
        f = floor(results)
        add(
            f"  A no-op tool over MCP: {f.noop:.2f} ms = HTTP hop {f.http:.2f} + the SDK's server "
            f"{f.sdk_server:.2f} + the SDK's client {f.sdk_client:.2f}."
        )
        add(
            f"  The bridge adds {f.added:.2f} ms to the CRM lookup: the CRM MCP server's own work and the "
            f"third process in the chain {f.added - f.noop:+.2f}."
        )
    add("")
    se = results.session
    add("2. MCP session reuse (bare SDK, interleaved)")
    add(head)
    row("session kept open and reused", se["reused"], "1.00x reused")
    row(
        "new client + session per call",
        se["per_call"],
        _times(se["per_call"].median_ms, se["reused"].median_ms, "reused"),
    )
    add("")
    ex = results.executor_cycle
    add('3. executor confirmation cycle: start -> pending, confirm ("yes") -> write (interleaved)')
    add(head)
    row("tools local", ex["local"], "1.00x local")
    row("tools over MCP (bridge)", ex["mcp"], _times(ex["mcp"].median_ms, ex["local"].median_ms, "local"))
    add("")
    add("4. action server under load: POST /webhook action_confirm_tool, one conversation per request;")
    add("   each level in rounds, local and MCP in turn; req/s is all requests over all their wall time")
    add("   (CPU ms per request from /proc, 10 ms ticks: action server, MCP server, CRM REST, load client)")
    columns = (
        f"{'clients':>8}{'requests':>9}{'errors':>7}{'req/s':>9}{'median ms':>11}{'p95 ms':>10}{'wall s':>8}"
        f"{'CPU: act':>10}{'mcp':>6}{'rest':>6}{'client':>7}"
    )
    add(f"  {'tools':<7}{columns}")
    for variant, levels in results.load.items():
        for level in levels:
            s = level.latency
            cpu = "".join(
                f"{level.cpu_ms[key]:>{width}.2f}" if key in level.cpu_ms else f"{'-':>{width}}"
                for key, width in (("action server", 10), ("MCP server", 6), ("CRM REST", 6), ("client", 7))
            )
            add(
                f"  {variant:<7}{level.clients:>8}{s.n:>9}{s.errors:>7}{level.throughput:>9.1f}"
                f"{_ms(s.median_ms):>11}{_ms(s.p95_ms):>10}{level.wall_s:>8.2f}{cpu}"
            )
    add("")
    rt = results.rasa_turn
    add('5. whole Rasa turn over the REST channel, the "yes" turn only; a Rasa server per variant,')
    add("   conversations alternating between them turn by turn")
    add(head)
    row("tools local", rt["local"], "1.00x local")
    row("tools over MCP", rt["mcp"], _times(rt["mcp"].median_ms, rt["local"].median_ms, "local"))
    spread = turn_spread(results)
    add(
        f"  MCP/local {spread.ratio:.3f}, 95% bootstrap CI {spread.low:.3f} to {spread.high:.3f} "
        f"(pairs resampled); per batch of {max(1, rt['local'].n // 5)} pairs: "
        + " ".join(f"{r:.3f}" for r in spread.batches)
    )
    add("")
    add("6. action server memory (VmRSS, MiB; peak = VmHWM)")
    add(f"  {'tools':<7}{'after start':>12}{'warm, idle':>12}{'after load':>12}{'peak':>8}")
    for variant, points in results.memory.items():

        def mib(point: str, key: str = "VmRSS", points: dict[str, dict[str, int]] = points) -> str:
            value = points.get(point, {}).get(key)
            return "-" if value is None else f"{value / MIB:.1f}"

        add(
            f"  {variant:<7}{mib('start'):>12}{mib('rest'):>12}{mib('after_load'):>12}"
            f"{mib('after_load', 'VmHWM'):>8}"
        )
    add("")
    add(
        '7. the cluster (make cluster-up): conversations (ask, "yes") through nginx, 2 Rasa and 2 MCP '
        "servers;"
    )
    add("   rounds alternate 2 and 1 action servers (the second stopped for its rounds)")
    add(
        f"  {'action servers':<16}{'conversations':>14}{'errors':>8}{'conv/s':>9}"
        f"{'yes median ms':>15}{'yes p95 ms':>12}"
    )
    for count, line in results.cluster.items():
        s = line.yes_turn
        add(
            f"  {count:<16}{line.conversations:>14}{s.errors:>8}{line.per_second:>9.2f}"
            f"{_ms(s.median_ms):>15}{_ms(s.p95_ms):>12}"
        )
    lines.extend(reader_line.lines(results.reader) if results.reader else [])
    add("")
    add("Targets")
    for target in targets(results):
        add(f"  {'PASS' if target.passed else 'MISS'}  {target.name}: {target.detail}")
    return "\n".join(lines)


def to_json(results: Results, meta: dict[str, Any]) -> dict[str, Any]:
    def group(series: dict[str, Series]) -> dict[str, Any]:
        return {name: s.summary() for name, s in series.items()}

    return {
        "meta": meta,
        "tool_call": group(results.tool_call),
        "session": group(results.session),
        "executor_cycle": group(results.executor_cycle),
        "webhook_load": {
            variant: [level.summary() for level in levels] for variant, levels in results.load.items()
        },
        "rasa_turn": group(results.rasa_turn),
        "rasa_turn_ratio": turn_spread(results).summary(),
        "memory_kib": results.memory,
        "cluster": {str(count): line.summary() for count, line in results.cluster.items()},
        "reader": results.reader.summary() if results.reader else None,
        "targets": [target.summary() for target in targets(results)],
    }


def chart(results: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    colours = {"local": "#4c72b0", "mcp": "#dd8452", "sdk": "#55a868", "bridge": "#dd8452"}

    def bars(ax: Any, items: list[tuple[str, Series, str]], title: str, log: bool = False) -> None:
        labels = [label for label, _, _ in items]
        medians = [s.median_ms for _, s, _ in items]
        p95 = [s.p95_ms - s.median_ms for _, s, _ in items]
        ax.bar(labels, medians, yerr=[[0] * len(items), p95], capsize=4, color=[c for _, _, c in items])
        for i, value in enumerate(medians):
            ax.annotate(
                f"{value:.1f}",
                (i, value),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(8, 2),
                textcoords="offset points",
            )
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("ms (bar: median, whisker: p95)")
        if log:
            ax.set_yscale("log")
        ax.tick_params(axis="x", labelsize=8)

    tc, se = results.tool_call, results.session
    bars(
        axes[0][0],
        [
            ("local\nfunction", tc["local"], colours["local"]),
            ("bare SDK\nsession", tc["sdk"], colours["sdk"]),
            ("bridge\ninvoke", tc["bridge"], colours["bridge"]),
            ("SDK reused\n(section 2)", se["reused"], colours["sdk"]),
            ("SDK session\nper call", se["per_call"], "#c44e52"),
        ],
        "One tool call (find_contact_by_email)",
        log=True,
    )
    ex, rt = results.executor_cycle, results.rasa_turn
    bars(
        axes[0][1],
        [
            ("executor cycle\nlocal", ex["local"], colours["local"]),
            ("executor cycle\nMCP", ex["mcp"], colours["mcp"]),
            ('Rasa "yes" turn\nlocal', rt["local"], colours["local"]),
            ('Rasa "yes" turn\nMCP', rt["mcp"], colours["mcp"]),
        ],
        "Confirmation: executor cycle and whole Rasa turn",
    )
    ax_tp, ax_lat = axes[1]
    for variant, levels in results.load.items():
        clients = [level.clients for level in levels]
        colour = colours.get(variant, None)
        ax_tp.plot(clients, [level.throughput for level in levels], "o-", label=variant, color=colour)
        ax_lat.plot(
            clients,
            [level.latency.median_ms for level in levels],
            "o-",
            label=f"{variant} median",
            color=colour,
        )
        ax_lat.plot(
            clients, [level.latency.p95_ms for level in levels], "o--", label=f"{variant} p95", color=colour
        )
    for ax, title, unit in (
        (ax_tp, "Action server /webhook action_confirm_tool: throughput", "requests/s"),
        (ax_lat, "Action server /webhook action_confirm_tool: latency", "ms"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks([level.clients for level in next(iter(results.load.values()))])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: Results, meta: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = table(results, meta)
    (out / "bench.json").write_text(json.dumps(to_json(results, meta), indent=2) + "\n")
    chart(results, out / "bench.png")
    return text
