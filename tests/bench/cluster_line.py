"""The cluster line of `make bench`: whole conversations through nginx with 1 and with 2 action servers.

Starts the cluster of `make cluster-up` (scripts/cluster.py: PostgreSQL, Redis, the CRM, 2 MCP
servers, 2 action servers, 2 Rasa servers behind nginx) in a folder of its own, then runs rounds of
conversations (ask, then "yes") through nginx's REST channel from several clients at once,
alternating between 2 action servers and 1 (the second is stopped for the round and started again
after it), so both settings meet the same machine. Reports conversations per second and the p95
of the "yes" turn for each.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench.rasa_turns import ASKED, DANA, SAVED, _say, _texts
from tests.bench.stats import Series


@dataclass
class ClusterLine:
    action_servers: int
    conversations: int
    wall_s: float
    yes_turn: Series

    @property
    def per_second(self) -> float:
        return self.conversations / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "action_servers": self.action_servers,
            "conversations": self.conversations,
            "errors": self.yes_turn.errors,
            "wall_s": round(self.wall_s, 3),
            "conversations_per_s": round(self.per_second, 2),
            **self.yes_turn.summary(with_samples=False),
        }


async def _round(rasa_url: str, label: str, conversations: int, clients: int, series: Series) -> float:
    queue = iter(range(conversations))

    async def client(http: aiohttp.ClientSession) -> None:
        for i in queue:
            sender = f"bench-cluster-{label}-{i}-{time.monotonic_ns()}"
            asked = await _say(http, rasa_url, sender, f"log a call with {DANA}: bench cluster {label} {i}")
            if ASKED not in _texts(asked):
                series.errors += 1
                continue
            start = time.perf_counter()
            try:
                ok = SAVED in _texts(await _say(http, rasa_url, sender, "yes"))
            except (aiohttp.ClientError, RuntimeError, asyncio.TimeoutError):
                ok = False
            series.samples.append(time.perf_counter() - start)
            series.errors += 0 if ok else 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return time.perf_counter() - started


def measure(var: Path, *, conversations: int, clients: int, rounds: int) -> dict[int, ClusterLine]:
    """Rounds alternate 2, 1, 1, 2, ... action servers; `conversations` per round. The cluster's data
    go to `var`, emptied first (PostgreSQL runs as its own user, so not a private temporary folder)."""
    from scripts.cluster import Cluster

    shutil.rmtree(var, ignore_errors=True)
    cluster = Cluster(var, durable=False)
    cluster.start()
    lines = {count: ClusterLine(count, 0, 0.0, Series(f"{count} action servers")) for count in (2, 1)}
    try:
        asyncio.run(_round(cluster.rasa_url, "warm-up", 6, 2, Series("warm-up")))
        for r in range(rounds):
            for count in (2, 1) if r % 2 == 0 else (1, 2):
                if count == 1:
                    cluster.kill("action-2")
                line = lines[count]
                line.wall_s += asyncio.run(
                    _round(cluster.rasa_url, f"{count}-{r}", conversations, clients, line.yes_turn)
                )
                line.conversations += conversations
                if count == 1:
                    cluster.restart("action-2")
    finally:
        cluster.stop()
    return lines
