"""Samples, summaries and a round-robin runner that spreads machine noise evenly over the variants."""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of `values` (fraction 0.95 for p95); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Series:
    """Latencies of one line of the table, in seconds."""

    name: str
    samples: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000 if self.samples else math.nan

    @property
    def p95_ms(self) -> float:
        return percentile(self.samples, 0.95) * 1000

    def summary(self, *, with_samples: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "n": self.n,
            "errors": self.errors,
            "median_ms": round(self.median_ms, 4),
            "p95_ms": round(self.p95_ms, 4),
            "mean_ms": round(statistics.fmean(self.samples) * 1000, 4) if self.samples else None,
            "min_ms": round(min(self.samples) * 1000, 4) if self.samples else None,
            "max_ms": round(max(self.samples) * 1000, 4) if self.samples else None,
        }
        if with_samples:
            out["samples_ms"] = [round(s * 1000, 4) for s in self.samples]
        return out


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


Variant = Callable[[], Awaitable[Any]]


def round_robin_order(names: list[str], counts: Mapping[str, int]) -> list[list[str]]:
    """The rounds of `round_robin`: round i holds every name whose share of the rounds falls into
    i (a name with fewer samples is spread evenly over the rounds, not bunched at the start),
    starting at a different name each round so none always follows the same one."""
    rounds = max(counts[name] for name in names)
    order = []
    for i in range(rounds):
        shift = i % len(names)
        order.append(
            [
                name
                for name in names[shift:] + names[:shift]
                if (i + 1) * counts[name] // rounds != i * counts[name] // rounds
            ]
        )
    return order


async def round_robin(
    variants: Mapping[str, Variant], counts: Mapping[str, int], *, warmup: int = 5
) -> dict[str, Series]:
    """Time every variant `counts[name]` times, interleaved (`round_robin_order`), after `warmup`
    untimed calls of each. A variant that raises stops the run: a benchmark of a failing call
    measures nothing.
    """
    names = list(variants)
    for name in names:
        for _ in range(warmup):
            await variants[name]()
    series = {name: Series(name) for name in names}
    for round_names in round_robin_order(names, counts):
        for name in round_names:
            start = time.perf_counter()
            await variants[name]()
            series[name].samples.append(time.perf_counter() - start)
    return series


@dataclass
class RatioSpread:
    """How much slower `b` is than `a`, with its spread: median ratio, bootstrap CI, batch ratios."""

    ratio: float
    low: float
    high: float
    batches: list[float]

    def summary(self) -> dict[str, Any]:
        return {
            "ratio_of_medians": round(self.ratio, 4),
            "ci95": [round(self.low, 4), round(self.high, 4)],
            "batch_ratios": [round(r, 4) for r in self.batches],
        }


def ratio_spread(
    a: list[float], b: list[float], *, batches: int = 5, resamples: int = 2000, seed: int = 13
) -> RatioSpread:
    """median(b) / median(a) for samples taken in pairs (a[i] next to b[i]), and its spread.

    The 95 % interval resamples whole pairs (percentile bootstrap), so noise that hit both
    variants of a pair stays paired; the batch ratios are the same figure over consecutive
    slices of the run, which shows drift that a single interval hides.
    """
    pairs = min(len(a), len(b))
    if pairs == 0:
        return RatioSpread(math.nan, math.nan, math.nan, [])
    a, b = a[:pairs], b[:pairs]
    rng = random.Random(seed)
    boot = []
    for _ in range(resamples):
        picks = [rng.randrange(pairs) for _ in range(pairs)]
        boot.append(statistics.median(b[i] for i in picks) / statistics.median(a[i] for i in picks))
    boot.sort()
    size = max(1, pairs // batches)
    slices = [range(start, min(start + size, pairs)) for start in range(0, pairs, size)]
    if len(slices) > 1 and len(slices[-1]) < size:  # fold a short tail into the last full batch
        slices[-2] = range(slices[-2].start, pairs)
        slices.pop()
    return RatioSpread(
        statistics.median(b) / statistics.median(a),
        boot[int(0.025 * resamples)],
        boot[int(0.975 * resamples) - 1],
        [statistics.median(b[i] for i in s) / statistics.median(a[i] for i in s) for s in slices],
    )
