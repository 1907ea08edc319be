"""A hostile server's schema: what checking a value costs, and how much the event loop lags beside it.

Issue 37's schema (each of N levels ``allOf: [{$ref: next}, {$ref: next}]``, 1.2 KB at 16 levels):
jsonschema alone, as the bridge ran it before (every level timed once, in line), and the bridge now
(compiled once; beyond the limits refused, within them checked with its keyword evaluations
counted). Then a loop-lag probe (a task that sleeps 1 ms and records how late it wakes) while costly
checks run, in line as before and through ``validate_arguments`` now.

`python -m tests.bench.schema_line` prints the lines alone (seconds, no services); `make bench`
prints them with the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from mcp_bridge.tools import schema

LEVELS = (8, 10, 12, 14, 16)
VALUE = {"text": "Dana called about the VAT rate on invoice 4471."}


def fan_out(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {
        f"l{i}": {"allOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"l{levels}"] = {"type": ["object", "string"]}
    return {"$defs": defs, "$ref": "#/$defs/l0"}


@dataclass
class SchemaLine:
    # Per level: seconds for jsonschema alone, in line; the bridge's seconds and what it did.
    jsonschema_seconds: dict[int, float] = field(default_factory=dict)
    bridge_seconds: dict[int, float] = field(default_factory=dict)
    bridge_outcome: dict[int, str] = field(default_factory=dict)
    # Loop lag (worst, ms) while costly checks run: in line as before, and off the loop now.
    lag_in_line_ms: float = 0.0
    lag_now_ms: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "jsonschema_seconds": self.jsonschema_seconds,
            "bridge_seconds": self.bridge_seconds,
            "bridge_outcome": self.bridge_outcome,
            "loop_lag_in_line_ms": self.lag_in_line_ms,
            "loop_lag_now_ms": self.lag_now_ms,
        }


async def _worst_lag(busy: Callable[[], Awaitable[None]]) -> float:
    """The worst lateness of a 1 ms sleep, in ms, while ``busy()`` runs."""
    worst = 0.0
    done = False

    async def probe() -> None:
        nonlocal worst
        while not done:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - started - 0.001)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.01)
    await busy()
    done = True
    await prober
    return worst * 1000


def measure() -> SchemaLine:
    line = SchemaLine()
    for levels in LEVELS:
        document = fan_out(levels)
        started = time.perf_counter()
        jsonschema.Draft202012Validator(document).is_valid(VALUE)
        line.jsonschema_seconds[levels] = time.perf_counter() - started
        started = time.perf_counter()
        try:
            schema.validate_against_schema("bench", document, VALUE)
            line.bridge_outcome[levels] = f"checked, cost {schema.check_schema('bench', document).cost}"
        except schema.SchemaRefusedError:
            line.bridge_outcome[levels] = "refused: fan-out over the limit"
        line.bridge_seconds[levels] = time.perf_counter() - started
    costly = {
        "$defs": fan_out(10)["$defs"],
        "properties": {"text": {"$ref": "#/$defs/l0"}},
        "allOf": [{"$ref": "#/$defs/l0"}],
    }
    inline = jsonschema.Draft202012Validator(costly)

    async def before() -> None:
        for _ in range(4):
            inline.is_valid(VALUE)

    async def now() -> None:
        await asyncio.gather(*(schema.validate_arguments("bench", costly, VALUE) for _ in range(4)))

    line.lag_in_line_ms = asyncio.run(_worst_lag(before))
    line.lag_now_ms = asyncio.run(_worst_lag(now))
    return line


def lines(line: SchemaLine) -> list[str]:
    out = ["", "A hostile schema (levels of allOf: [$ref next, $ref next]; issue 37: 16 levels, 1.2 KB)"]
    out.append(f"  {'levels':<8}{'jsonschema ms':>15}{'bridge ms':>12}  bridge")
    for levels in LEVELS:
        out.append(
            f"  {levels:<8}{line.jsonschema_seconds[levels] * 1000:>15.1f}"
            f"{line.bridge_seconds[levels] * 1000:>12.3f}  {line.bridge_outcome[levels]}"
        )
    out.append(
        f"  loop lag beside 4 checks of a 10-level schema: {line.lag_in_line_ms:.0f} ms in line (before), "
        f"{line.lag_now_ms:.1f} ms now (worst 1 ms sleep's lateness)"
    )
    return out


if __name__ == "__main__":
    print("\n".join(lines(measure())))
