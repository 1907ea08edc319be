"""The cluster line of `make bench`: whole conversations through nginx with 1 and with 2 action servers,
at each end.

Starts the cluster of `make cluster-up` (devstack/cluster.py: PostgreSQL, Redis, the CRM, 2 MCP
servers, 2 action servers, 2 Rasa servers behind nginx) once, in a folder of its own, then runs
rounds of conversations (ask, then "yes") through nginx's REST channel from several clients at once.
Each round runs every end in turn (the action servers restarted on that end's interpreter, then a
few conversations to warm them, unmeasured), and within an end alternates between 2 action servers
and 1 (the second is killed for its part and started again after it), so every setting meets the
same machine; the order of the ends, and of 2 and 1, flips every round. Reports conversations per
second and the p95 of the "yes" turn for each end and setting.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench.rasa_turns import ASKED, DANA, SAVED, _say, _texts, rest_headers
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


async def _round(
    rasa_url: str, rest_token: str, label: str, conversations: int, clients: int, series: Series
) -> float:
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
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=rest_headers(rest_token)
    ) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return time.perf_counter() - started


def _use(cluster: Any, python: str) -> None:
    """The cluster's action servers on `python` (stopped and started again when it changes)."""
    if cluster.action_python == python:
        return
    names = [name for name in cluster.running if name.startswith("action-")]
    for name in names:
        cluster.running[name].stop()
    cluster.action_python = python
    for name in names:
        cluster.restart(name)


def measure(
    var: Path, pythons: dict[str, str], *, conversations: int, clients: int, rounds: int
) -> dict[str, dict[int, ClusterLine]]:
    """end -> action servers -> line. `pythons`: end -> its interpreter. Each round visits every end
    (order flipping every round) and runs 2 and 1 action servers there (order flipping every round);
    `conversations` per end, setting and round. The cluster's data go to `var`, emptied first."""
    from devstack.cluster import Cluster
    from devstack.engines import remove_postgres_data

    remove_postgres_data(var / "postgres")
    shutil.rmtree(var, ignore_errors=True)
    keys = list(pythons)
    cluster = Cluster(var, durable=False)
    cluster.action_python = pythons[keys[0]]
    cluster.start()
    token = cluster.secrets["rest_token"]
    lines = {
        key: {count: ClusterLine(count, 0, 0.0, Series(f"{key}: {count} action servers")) for count in (2, 1)}
        for key in keys
    }
    try:
        for r in range(rounds):
            for key in keys if r % 2 == 0 else keys[::-1]:
                if r == 0 or cluster.action_python != pythons[key]:
                    _use(cluster, pythons[key])
                    asyncio.run(_round(cluster.rasa_url, token, f"warm-up-{r}", 6, 2, Series("warm-up")))
                for count in (2, 1) if r % 2 == 0 else (1, 2):
                    if count == 1:
                        cluster.kill("action-2")
                    line = lines[key][count]
                    line.wall_s += asyncio.run(
                        _round(cluster.rasa_url, token, f"{count}-{r}", conversations, clients, line.yes_turn)
                    )
                    line.conversations += conversations
                    if count == 1:
                        cluster.restart("action-2")
    finally:
        cluster.stop()
        cluster.postgres.remove()
    return lines
