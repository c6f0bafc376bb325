"""Time added to each garbage collection by the package's GC pause hook.

Public API only: the package is set up as an application would, with
``ProcessMetrics`` on an SDK ``MeterProvider``, and the time spent in
collections is read from the exported ``process_metrics.cpython.gc.pause.time``.

Two workloads, each run with four variants: no package; an empty Python gc
callback (CPython's own cost of calling any gc callback); the package with its
defaults; the package with ``gc_pause_histogram=True``. The variants take turns
in every round, in rotating order, and each round is timed in this thread's CPU
time, so that a preemption on a busy machine does not count.

- ``churn``: a loop that allocates small cyclic lists, so generation 0 collects
  every few hundred allocations (the realistic case, and the noisier one);
- ``forced``: ``gc.collect(0)`` in a loop on an empty young generation, where
  the collection itself costs almost nothing and the callbacks are most of it
  (the precise figure).

Added time per collection = (median round time with - without) / collections in
the round, with a 95% interval from resampling whole rounds, and the
min-of-rounds difference. For churn, the added time is also given as a share of
the time the collections themselves took.

    python benchmarks/gc_pauses.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

VARIANTS = ("none", "empty callback", "package", "package, gc_pause_histogram")
CHURN_ALLOCATIONS = 300_000
# Without the GIL each gc.collect(0) is a full stop-the-world collection (about
# 25 ms in a test process, not 2 µs): far fewer there, or a run takes hours.
FORCED_COLLECTIONS = 200 if sysconfig.get_config_var("Py_GIL_DISABLED") else 20_000
PAUSE_TIME = "process_metrics.cpython.gc.pause.time"


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Round:
    cpu_seconds: float
    collections: int
    gc_seconds: float | None
    """Time in collections during the round, as the package reported it."""


@dataclass(frozen=True)
class Added:
    """What one variant adds to each collection of one workload, over no package."""

    workload: str
    variant: str
    collections: float
    """Median collections per round."""
    per_gc_ns: Estimate
    """Median-based, with a bootstrap 95% interval."""
    per_gc_min_ns: float
    """Min-of-rounds estimate."""
    pause_ns: float | None
    """Median time per collection, as the package reported it."""
    share_of_gc: float | None
    """Added time over the time spent collecting (churn only)."""


@dataclass(frozen=True)
class GcPauseCost:
    """The result of one run: every variant but ``none``, for every workload."""

    python: str
    rounds: int
    rows: tuple[Added, ...]


def churn(allocations: int = CHURN_ALLOCATIONS) -> None:
    for _ in range(allocations):
        a: list[object] = []
        a.append(a)


def forced(collections: int = FORCED_COLLECTIONS) -> None:
    collect = gc.collect
    for _ in range(collections):
        collect(0)


WORKLOADS: dict[str, Callable[[], None]] = {"churn": churn, "forced": forced}


def _empty(phase: str, info: dict[str, int]) -> None:
    pass


class _Package:
    """The package on its own provider; reads back the time it reported in collections."""

    def __init__(self, histogram: bool) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        options = ProcessMetricsOptions(gc_pause_histogram=histogram)
        self.metrics = ProcessMetrics(options, meter_provider=self.provider)

    def gc_seconds(self) -> float:
        data = self.reader.get_metrics_data()
        return sum(
            float(point.value)
            for rm in (data.resource_metrics if data is not None else ())
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == PAUSE_TIME
            for point in m.data.data_points
            if isinstance(point, NumberDataPoint)
        )

    def close(self) -> None:
        self.metrics.close()
        self.provider.shutdown()


@contextmanager
def variant(name: str) -> Iterator[_Package | None]:
    if name == "none":
        yield None
    elif name == "empty callback":
        gc.callbacks.append(_empty)
        try:
            yield None
        finally:
            gc.callbacks.remove(_empty)
    else:
        package = _Package(histogram=name.endswith("gc_pause_histogram"))
        try:
            yield package
        finally:
            package.close()


def collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


def one_round(workload: Callable[[], None], name: str) -> Round:
    """One timed run. Nothing but the workload runs between the collect and the clock."""
    with variant(name):
        gc.collect()
        n0 = collections()
        t0 = time.thread_time()
        workload()
        cpu = time.thread_time() - t0
        n = collections() - n0
    return Round(cpu, n, None)


def gc_time(workload: Callable[[], None], name: str) -> Round:
    """One untimed run, with the time in collections read back from the SDK.

    Apart from the timed rounds: the SDK's collection right before the
    workload would leave the allocator and the young generation in another
    state than in the variants without the package.
    """
    with variant(name) as package:
        assert package is not None
        gc.collect()
        before = package.gc_seconds()
        n0 = collections()
        workload()
        n = collections() - n0
        spent = package.gc_seconds() - before
    return Round(0.0, n, spent)


def measure(workload: Callable[[], None], rounds: int) -> dict[str, list[Round]]:
    found: dict[str, list[Round]] = {name: [] for name in VARIANTS}
    workload()  # warm-up
    for r in range(rounds):
        for i in range(len(VARIANTS)):
            name = VARIANTS[(r + i) % len(VARIANTS)]
            found[name].append(one_round(workload, name))
    return found


def pauses(workload: Callable[[], None], name: str, rounds: int) -> list[Round]:
    return [gc_time(workload, name) for _ in range(max(3, rounds // 4))]


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


def added(
    workload: str, found: Mapping[str, Sequence[Round]], name: str, timed: Sequence[Round]
) -> Added:
    """``timed``: the untimed runs of ``name`` with the time in collections (none without it)."""
    mine = found[name]
    n = statistics.median(r.collections for r in mine)
    samples = {x: [r.cpu_seconds for r in found[x]] for x in ("none", name)}

    def per_gc(medians: Mapping[str, float]) -> float:
        return (medians[name] - medians["none"]) / n * 1e9

    estimate = bootstrap(samples, per_gc)
    lowest = (min(samples[name]) - min(samples["none"])) / n * 1e9
    times = [r.gc_seconds / r.collections * 1e9 for r in timed if r.gc_seconds and r.collections]
    pause = statistics.median(times) if times else None
    share = estimate.value / pause if pause and workload == "churn" else None
    return Added(workload, name, n, estimate, lowest, pause, share)


def benchmark(*, rounds: int = 40) -> GcPauseCost:
    """Measure every workload and variant; nothing is printed."""
    if rounds < 1:
        raise ValueError(f"rounds must be an int >= 1; got {rounds!r:.40}")
    rows: list[Added] = []
    for workload, run in WORKLOADS.items():
        found = measure(run, rounds)
        for name in VARIANTS[1:]:
            timed = pauses(run, name, rounds) if name.startswith("package") else []
            rows.append(added(workload, found, name, timed))
    return GcPauseCost(python=sys.version.split()[0], rounds=rounds, rows=tuple(rows))


def table(result: GcPauseCost) -> str:
    lines = [
        f"Python {result.python}, {result.rounds} rounds, CPU time of this thread",
        "",
        "| workload | variant | collections per round | added per GC (ns) | 95% interval"
        " | min-of-rounds (ns) | GC pause (µs) | share of GC time |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for a in result.rows:
        pause = "" if a.pause_ns is None else f"{a.pause_ns / 1e3:.1f}"
        share = "" if a.share_of_gc is None else f"{a.share_of_gc:.1%}"
        e = a.per_gc_ns
        lines.append(
            f"| {a.workload} | {a.variant} | {a.collections:.0f} | {e.value:.0f}"
            f" | {e.low:.0f} to {e.high:.0f} | {a.per_gc_min_ns:.0f} | {pause} | {share} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Time added to each GC by the package.")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    print(table(benchmark(rounds=args.rounds)))


if __name__ == "__main__":
    main()
