"""Interleaved timing, and pyperf's data model for the results.

Neither pyperf nor pytest-benchmark interleaves many configurations inside one
process: pyperf runs one benchmark per worker process, pytest-benchmark one test
after another. On a shared, noisy 2-core machine, drift (another job starting,
a thermal or host-side change) then lands on whichever configuration happened to
run at that moment, and ratios between configurations are biased. So the loop
is ours: every round visits every subject once in a new random order, pauses,
and times one collection. The values are then stored as pyperf benchmarks, so
``python -m pyperf stats`` / ``compare_to`` / ``hist`` work on the JSON, and the
medians and median absolute deviations come from pyperf itself.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pyperf

from subjects import Subject


@dataclass
class Samples:
    """Seconds per collection, one list per subject, index = round."""

    values: dict[str, list[float]] = field(default_factory=dict)
    warmups: dict[str, list[float]] = field(default_factory=dict)
    rounds: int = 0
    min_gap: float = float("inf")
    """Shortest time between two timed collections of one subject."""
    stopped_early: bool = False


# Two collections of one subject are never closer than this: above the package's
# 0.1 s minimum utilisation window, under which a collection would reuse the last
# utilisation instead of computing it (and be timed doing less than in production).
MIN_GAP = 0.15


def interleaved(
    subjects: Sequence[Subject],
    rounds: int,
    pause: float,
    *,
    warmup_rounds: int = 2,
    budget: float = 600.0,
    seed: int = 1,
    min_gap: float = MIN_GAP,
) -> Samples:
    """Each round: shuffle, then for each subject sleep ``pause`` and time one collection.

    The sleep is longer when needed so that two collections of one subject are at
    least ``min_gap`` apart (a subject can end one round and start the next).
    """
    rng = random.Random(seed)
    out = Samples(
        {s.name: [] for s in subjects},
        {s.name: [] for s in subjects},
    )
    last: dict[str, float] = {}
    deadline = time.monotonic() + budget
    order = list(subjects)
    clock = time.perf_counter
    for r in range(warmup_rounds + rounds):
        if time.monotonic() > deadline:
            out.stopped_early = True
            break
        rng.shuffle(order)
        for s in order:
            since = clock() - last.get(s.name, -1e9)
            time.sleep(max(pause, min_gap - since))
            t0 = clock()
            s.collect()
            dt = clock() - t0
            if s.name in last and r >= warmup_rounds:
                out.min_gap = min(out.min_gap, t0 - last[s.name])
            last[s.name] = t0
            if r < warmup_rounds:
                out.warmups[s.name].append(dt)
                continue
            out.values[s.name].append(dt)
        if r >= warmup_rounds:
            out.rounds += 1
    return out


def back_to_back(
    subjects: Sequence[Subject], n: int, *, budget: float = 120.0, seed: int = 2
) -> Samples:
    """``n`` collections in a row per subject, no pause: the figure a naive loop gives."""
    rng = random.Random(seed)
    order = list(subjects)
    rng.shuffle(order)
    out = Samples()
    per_subject = budget / max(1, len(order))
    clock = time.perf_counter
    for s in order:
        s.collect()  # warm-up
        values: list[float] = []
        stop = time.monotonic() + per_subject
        for _ in range(n):
            t0 = clock()
            s.collect()
            values.append(clock() - t0)
            if time.monotonic() > stop:
                out.stopped_early = True
                break
        out.values[s.name] = values
    out.rounds = n
    return out


def to_benchmarks(
    prefix: str, samples: Samples, descriptions: Mapping[str, str]
) -> list[pyperf.Benchmark]:
    benches = []
    for name, values in samples.values.items():
        if not values:
            continue
        metadata = {
            "name": f"{prefix}/{name}",
            "unit": "second",
            "loops": 1,
            "description": descriptions.get(name, name),
        }
        warm = [(1, v) for v in samples.warmups.get(name, [])]
        run = pyperf.Run(values, warmups=warm or None, metadata=metadata, collect_metadata=False)
        benches.append(pyperf.Benchmark([run]))
    return benches


def dump_suite(benches: Sequence[pyperf.Benchmark], path: str, metadata: Mapping[str, str]) -> None:
    for b in benches:
        b.update_metadata({k: v for k, v in metadata.items() if v})
    pyperf.BenchmarkSuite(list(benches)).dump(path, replace=True)


@dataclass(frozen=True)
class Stat:
    median: float
    mad: float
    mean: float
    stdev: float
    n: int


def stat(values: Sequence[float]) -> Stat:
    """pyperf's own statistics for one list of values (seconds)."""
    bench = pyperf.Benchmark(
        [pyperf.Run(list(values), metadata={"name": "x", "unit": "second"}, collect_metadata=False)]
    )
    n = len(values)
    return Stat(
        bench.median(),
        bench.median_abs_dev() if n > 1 else 0.0,
        bench.mean(),
        bench.stdev() if n > 1 else 0.0,
        n,
    )


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


def bootstrap(
    samples: Mapping[str, Sequence[float]],
    names: Sequence[str],
    fn: Callable[[Mapping[str, float]], float],
    *,
    resamples: int = 2000,
    seed: int = 3,
) -> Estimate:
    """``fn`` of the medians, with a 95% interval from resampling whole rounds.

    Rounds are resampled jointly (the same indices for every subject): the subjects
    of one round ran within a second of each other and share its noise.
    """
    n = min(len(samples[x]) for x in names)
    cols = {x: list(samples[x][:n]) for x in names}
    point = fn({x: statistics.median(v) for x, v in cols.items()})
    if n < 3:
        return Estimate(point, point, point)
    rng = random.Random(seed)
    found = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        found.append(fn({x: statistics.median([v[i] for i in idx]) for x, v in cols.items()}))
    found.sort()
    return Estimate(point, found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1])
