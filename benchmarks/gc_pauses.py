"""Time added to each garbage collection by the GC pause recorder.

Two workloads, each run without a callback, with an empty Python callback
(CPython's own cost of calling any gc callback), with the recorder, and with
the recorder counting buckets. The variants take turns in every round, in
rotating order, and each round is timed in this thread's CPU time, so that a
preemption on a busy machine does not count.

- ``churn``: a loop that allocates small cyclic lists, so generation 0 collects
  every few hundred allocations (the realistic case, and the noisier one);
- ``forced``: ``gc.collect(0)`` in a loop on an empty young generation, where
  the collection itself costs almost nothing and the callbacks are most of it
  (the precise figure).

Added time per collection = (median round time with - without) / collections in
the round, with a 95% interval from resampling whole rounds, and the
min-of-rounds difference.

    python benchmarks/gc_pauses.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry.instrumentation.process.runtime.gc_pauses import GcPauses

VARIANTS = ("none", "empty callback", "recorder", "recorder+buckets")
CHURN_ALLOCATIONS = 300_000
FORCED_COLLECTIONS = 20_000


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Round:
    cpu_seconds: float
    collections: int
    gc_seconds: float | None  # time in collections, by the recorder when it ran


@dataclass(frozen=True)
class Added:
    workload: str
    variant: str
    collections: float  # median per round
    per_gc_ns: Estimate  # median-based, with a bootstrap 95% interval
    per_gc_min_ns: float  # min-of-rounds estimate
    pause_ns: float | None  # median GC pause, by the recorder
    share_of_gc: float | None  # added time over the time spent collecting


def churn() -> None:
    for _ in range(CHURN_ALLOCATIONS):
        a: list[object] = []
        a.append(a)


def forced() -> None:
    collect = gc.collect
    for _ in range(FORCED_COLLECTIONS):
        collect(0)


WORKLOADS: dict[str, Callable[[], None]] = {"churn": churn, "forced": forced}


def _empty(phase: str, info: dict[str, int]) -> None:
    pass


@contextmanager
def variant(name: str) -> Iterator[GcPauses | None]:
    if name == "none":
        yield None
    elif name == "empty callback":
        gc.callbacks.append(_empty)
        try:
            yield None
        finally:
            gc.callbacks.remove(_empty)
    else:
        recorder = GcPauses(histogram=name == "recorder+buckets")
        recorder.start()
        try:
            yield recorder
        finally:
            recorder.stop()


def collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


def one_round(workload: Callable[[], None], name: str) -> Round:
    with variant(name) as recorder:
        gc.collect()
        before = recorder.read() if recorder else None
        n0 = collections()
        t0 = time.thread_time()
        workload()
        cpu = time.thread_time() - t0
        n = collections() - n0
        after = recorder.read() if recorder else None
    spent = sum(after.seconds) - sum(before.seconds) if after and before else None
    return Round(cpu, n, spent)


def measure(workload: Callable[[], None], rounds: int) -> dict[str, list[Round]]:
    found: dict[str, list[Round]] = {name: [] for name in VARIANTS}
    workload()  # warm-up
    for r in range(rounds):
        for i in range(len(VARIANTS)):
            name = VARIANTS[(r + i) % len(VARIANTS)]
            found[name].append(one_round(workload, name))
    return found


def bootstrap(
    samples: Mapping[str, Sequence[float]],
    fn: Callable[[Mapping[str, float]], float],
    *,
    resamples: int = 2000,
    seed: int = 3,
) -> Estimate:
    """``fn`` of the medians, with a 95% interval from resampling whole rounds.

    Rounds are resampled jointly: the variants of one round ran within a second
    of each other and share its noise.
    """
    n = min(len(v) for v in samples.values())
    point = fn({x: statistics.median(v[:n]) for x, v in samples.items()})
    rng = random.Random(seed)
    found = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        found.append(fn({x: statistics.median([v[i] for i in idx]) for x, v in samples.items()}))
    found.sort()
    return Estimate(point, found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1])


def added(workload: str, found: Mapping[str, Sequence[Round]], name: str) -> Added:
    mine = found[name]
    n = statistics.median(r.collections for r in mine)
    samples = {x: [r.cpu_seconds for r in found[x]] for x in ("none", name)}

    def per_gc(medians: Mapping[str, float]) -> float:
        return (medians[name] - medians["none"]) / n * 1e9

    estimate = bootstrap(samples, per_gc)
    lowest = (min(samples[name]) - min(samples["none"])) / n * 1e9
    pauses = [r.gc_seconds / r.collections * 1e9 for r in mine if r.gc_seconds and r.collections]
    pause = statistics.median(pauses) if pauses else None
    share = estimate.value / pause if pause and workload == "churn" else None
    return Added(workload, name, n, estimate, lowest, pause, share)


def table(rows: Sequence[Added], rounds: int) -> str:
    lines = [
        f"Python {sys.version.split()[0]}, {rounds} rounds, CPU time of this thread",
        "",
        "| workload | variant | collections per round | added per GC (ns) | 95% interval"
        " | min-of-rounds (ns) | GC pause (µs) | share of GC time |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for a in rows:
        pause = "" if a.pause_ns is None else f"{a.pause_ns / 1e3:.1f}"
        share = "" if a.share_of_gc is None else f"{a.share_of_gc:.1%}"
        e = a.per_gc_ns
        lines.append(
            f"| {a.workload} | {a.variant} | {a.collections:.0f} | {e.value:.0f}"
            f" | {e.low:.0f} to {e.high:.0f} | {a.per_gc_min_ns:.0f} | {pause} | {share} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[Added]:
    parser = argparse.ArgumentParser(description="Time added to each GC by the recorder.")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    rows = []
    for workload, run in WORKLOADS.items():
        found = measure(run, args.rounds)
        rows += [added(workload, found, name) for name in VARIANTS[1:]]
    print(table(rows, args.rounds))
    return rows


if __name__ == "__main__":
    main()
