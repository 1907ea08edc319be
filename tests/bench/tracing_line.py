"""The confirmation's CPU with tracing off, against the same code with every tracing hook stubbed out,
and with spans made (not exported): one confirmation is a start (the question) and a "yes" (the write),
with local tools, in this process, interleaved so the machine's load falls on all three alike.

"off" is what an action server without a ``tracing:`` block runs: each would-be span is one check
(``mcp_bridge.observability.tracing``). "no hooks" replaces the plugin's tracing entry points with
no-ops, the nearest to a build without them; the two should be equal within the noise (the spread of
"no hooks" itself). "on" shows what spans cost when a backend is configured.

`python -m tests.bench.tracing_line` prints the line alone (about a minute, no services); `make bench`
prints it with the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.observability import tracing
from mcp_bridge.observability.audit import AuditKeys, AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.bench.stats import Series, percentile
from tests.support.conversation import Conversation
from tests.support.fixture_tools import Notebook, local_tools, write_skills

CYCLES = 400
WARMUP = 20
VARIANTS = ("off", "no hooks", "on")


@dataclass
class TracingLine:
    cpu: dict[str, Series] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {name: series.summary(with_samples=False) for name, series in self.cpu.items()}


@contextlib.contextmanager
def _setting(name: str) -> Iterator[None]:
    """Tracing as ``name`` says, for the cycles run inside."""
    saved = (tracing.span, tracing.note, tracing._state.tracer, tracing._state.looked_up)
    try:
        if name == "no hooks":
            tracing.span = lambda *args, **kwargs: tracing._OFF  # type: ignore[assignment]
            tracing.note = lambda *args, **kwargs: None  # type: ignore[assignment]
        if name == "on":
            from opentelemetry.sdk.trace import TracerProvider

            tracing._state.tracer = TracerProvider().get_tracer("bench")  # spans made, none exported
            tracing._state.looked_up = True
        else:
            tracing._state.tracer, tracing._state.looked_up = None, True
        yield
    finally:
        tracing.span, tracing.note, tracing._state.tracer, tracing._state.looked_up = saved


def _executor(directory: Path, book: Notebook) -> Executor:
    tools = local_tools(book)
    skills = load_skills(write_skills(directory, "local"), local_tools=tools, mcp_servers={}, responses=None)
    audit = AuditLog(None, keys=AuditKeys.random(), observers=[tracing.audit_span])
    return Executor(skills, ToolBox(tools, None, audit=audit), audit=audit)


def measure(cycles: int = CYCLES) -> TracingLine:
    book = Notebook()
    line = TracingLine({name: Series(f"confirmation CPU, tracing {name}") for name in VARIANTS})

    async def run() -> None:
        with tempfile.TemporaryDirectory() as folder:
            executor = _executor(Path(folder), book)

            async def cycle() -> None:
                chat = Conversation(executor, contact_email="dana@example.com", note_text="bench note")
                await chat.start()
                await chat.yes()

            async def timed(name: str, once: Callable[[], Awaitable[None]]) -> None:
                with _setting(name):
                    started = time.process_time()
                    await once()
                    line.cpu[name].samples.append(time.process_time() - started)

            for name in VARIANTS:
                with _setting(name):
                    for _ in range(WARMUP):
                        await cycle()
            for i in range(cycles):
                for name in VARIANTS[i % 3 :] + VARIANTS[: i % 3]:
                    await timed(name, cycle)

    asyncio.run(run())
    return line


def lines(line: TracingLine) -> list[str]:
    off, bare = line.cpu["off"], line.cpu["no hooks"]
    spread_us = (percentile(bare.samples, 0.75) - percentile(bare.samples, 0.25)) * 1e6
    difference_us = (off.median_ms - bare.median_ms) * 1000
    verdict = "within noise" if abs(difference_us) <= spread_us / 2 else "OUTSIDE the noise"
    out = ["", "Tracing: CPU of one confirmation (start + yes, local tools), median"]
    out.append(f"  {'setting':<44}{'n':>6}{'CPU ms':>11}")
    for name, series in line.cpu.items():
        out.append(f"  {'tracing ' + name:<44}{series.n:>6}{series.median_ms:>11.3f}")
    out.append(
        f"  tracing off vs no hooks: {difference_us:+.1f} us ({difference_us / 10 / bare.median_ms:+.1f} %); "
        f"half the spread (IQR) of no hooks: {spread_us / 2:.1f} us: {verdict}"
    )
    return out


if __name__ == "__main__":
    print("\n".join(lines(measure())))
