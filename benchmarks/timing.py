"""Interleaved timing, statistics, and pyperf's data model for the results.

pyperf runs one benchmark per worker process and pytest-benchmark one test after
another; neither can interleave many configurations that must live in one
process. On a shared machine, drift then lands on whichever configuration ran at
that moment. So the loop is ours: every round visits every subject once in a new
random order, pauses, and times one collection. The values are stored as pyperf
benchmarks (``python -m pyperf stats/compare_to/hist`` work on them), and the
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

MIN_GAP = 0.15
"""Seconds between two collections of one subject: above this package's 0.1 s minimum
utilisation window, under which a collection reuses the last utilisation."""


@dataclass
class Samples:
    """Seconds per collection, one list per subject, index = round."""

    values: dict[str, list[float]] = field(default_factory=dict)
    rounds: int = 0
    min_gap: float = float("inf")
    """Shortest time measured between two timed collections of one subject."""
    stopped_early: bool = False


@dataclass(frozen=True)
class Stat:
    median: float
    mad: float
    n: int


@dataclass(frozen=True)
class Estimate:
    """A figure and its 95% bootstrap interval."""

    value: float
    low: float
    high: float


def interleaved(
    subjects: Sequence[Subject], rounds: int, pause: float, *, budget: float, warmup: int = 1
) -> Samples:
    """Each round: shuffle, then for each subject sleep ``pause`` and time one collection."""
    rng = random.Random(1)
    out = Samples({s.name: [] for s in subjects})
    last: dict[str, float] = {}
    deadline = time.monotonic() + budget
    order = list(subjects)
    for r in range(warmup + rounds):
        if time.monotonic() > deadline:
            out.stopped_early = True
            break
        rng.shuffle(order)
        for s in order:
            seconds, started = _time_one(s, pause, last.get(s.name))
            if r >= warmup:
                out.values[s.name].append(seconds)
                out.min_gap = min(out.min_gap, started - last.get(s.name, -1e9))
            last[s.name] = started
        out.rounds += r >= warmup
    return out


def _time_one(s: Subject, pause: float, last: float | None) -> tuple[float, float]:
    """Sleep at least ``pause`` (and MIN_GAP since ``last``), then time one collection."""
    since = time.perf_counter() - (last if last is not None else -1e9)
    time.sleep(max(pause, MIN_GAP - since))
    started = time.perf_counter()
    data = s.collect()
    seconds = time.perf_counter() - started
    s.after(data)
    return seconds, started


def back_to_back(subjects: Sequence[Subject], n: int, *, budget: float) -> Samples:
    """``n`` collections in a row per subject, no pause: the figure a naive loop gives."""
    out = Samples()
    per_subject = budget / max(1, len(subjects))
    for s in subjects:
        s.collect()
        values: list[float] = []
        stop = time.monotonic() + per_subject
        while len(values) < n and time.monotonic() < stop:
            started = time.perf_counter()
            s.collect()
            values.append(time.perf_counter() - started)
        out.values[s.name] = values
    out.rounds = n
    return out


def stat(values: Sequence[float]) -> Stat:
    """pyperf's median and median absolute deviation of ``values`` (seconds)."""
    bench = _benchmark("x", values, "")
    return Stat(bench.median(), bench.median_abs_dev() if len(values) > 1 else 0.0, len(values))


def bootstrap(
    columns: Mapping[str, Sequence[float]],
    fn: Callable[[Mapping[str, float]], float],
    *,
    paired: bool = True,
    resamples: int = 2000,
) -> Estimate:
    """``fn`` of the medians of ``columns``, with a 95% interval from resampling.

    ``paired``: the columns come from one interleaved run and are resampled by
    whole rounds (the same indices for all). Otherwise (different sweep points,
    timed apart) each column is resampled on its own.
    """
    point = fn({k: statistics.median(v) for k, v in columns.items()})
    if min(len(v) for v in columns.values()) < 3:
        return Estimate(point, point, point)
    rng = random.Random(3)
    found = sorted(fn(_resample(columns, rng, paired)) for _ in range(resamples))
    return Estimate(point, found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1])


def _resample(
    columns: Mapping[str, Sequence[float]], rng: random.Random, paired: bool
) -> dict[str, float]:
    n = min(len(v) for v in columns.values())
    shared = [rng.randrange(n) for _ in range(n)]
    medians = {}
    for name, values in columns.items():
        idx = shared if paired else [rng.randrange(len(values)) for _ in values]
        medians[name] = statistics.median(values[i] for i in idx)
    return medians


def _benchmark(name: str, values: Sequence[float], description: str) -> pyperf.Benchmark:
    metadata = {"name": name, "unit": "second", "loops": 1, "description": description or name}
    return pyperf.Benchmark([pyperf.Run(list(values), metadata=metadata, collect_metadata=False)])


def dump_suite(
    samples: Mapping[str, Samples],
    descriptions: Mapping[str, str],
    path: str,
    meta: Mapping[str, str],
) -> None:
    """Every timed value as one pyperf suite: ``<phase>/<subject>``."""
    benches = []
    for phase, found in samples.items():
        for name, values in found.values.items():
            if values:
                bench = _benchmark(f"{phase}/{name}", values, descriptions.get(name, name))
                bench.update_metadata({k: v for k, v in meta.items() if v})
                benches.append(bench)
    pyperf.BenchmarkSuite(benches).dump(path, replace=True)
