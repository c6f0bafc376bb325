"""Supervisor mode: what each child process adds to a collection, against 0 to 64 real children.

    python benchmarks/children.py                  # about 1 minute; JSON and a plot
    python benchmarks/children.py --smoke          # a few rounds, no plot

Children are real processes (``sleep``), started by this script. For each
count, one interleaved loop times, round after round:

- ``list: children files`` - the direct read of each task's ``children`` file;
- ``list: psutil`` - ``Process().children(recursive=True)``, which reads every
  process of the host;
- ``bare psutil reads`` - for each child, the reads the per-child metrics make,
  in one ``oneshot()``, on cached ``Process`` handles, with nothing else;
- ``refresh: children`` - this package's refresh of the children sources
  (listing, slots, per-child reads, tree totals), page faults excluded: the
  same reads as the bare loop, plus the listing and the bookkeeping;
- ``refresh: + page faults`` - the same with the per-child page faults (one
  more ``/proc/<pid>/stat`` read per child: psutil has no API for them);
- ``collection`` - a whole SDK collection of a default ``children=True``
  ``ProcessMetrics`` on an ``InMemoryMetricReader``.

Time is the CPU time of the thread that makes the call (``thread_time``):
on a shared machine, waiting for a CPU is not the call's cost. It reports the
median of each, the cost per child (least-squares slope over
the counts), the ratio of our per-child cost to the bare reads' (goal: at
most 1.5), and the SDK's cost per point: (collection - its own refresh) /
points. The snapshot cache is used directly (an internal API) to time the
children sources alone. It also counts, exactly, the files each one opens and
the directories it lists (an audit hook).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.linux import stat
from opentelemetry.instrumentation.process.linux.children import descendant_pids
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import children as children_sources

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "children.json"
PLOT = ROOT / "docs" / "_static" / "benchmarks" / "children.png"
COUNTS = (0, 1, 2, 4, 8, 16, 32, 48, 64)
SOURCES = tuple(s.name for s in children_sources.SOURCES)
WITHOUT_FAULTS = tuple(
    n for n in SOURCES if n not in ("children_paging_faults", "children_memory_full")
)
WITH_FAULTS = (*WITHOUT_FAULTS, "children_paging_faults")


def bare_reads(handles: list[psutil.Process]) -> None:
    """The per-child psutil reads, done bare."""
    for p in handles:
        with p.oneshot():
            p.status()
            p.cpu_times()
            p.memory_info()
            p.io_counters()
            p.num_threads()
            p.num_fds()
            p.num_ctx_switches()
            p.create_time()


def bare_reads_and_faults(handles: list[psutil.Process]) -> None:
    """The same, plus each child's stat file (its start time and page faults), as ours reads."""
    bare_reads(handles)
    for p in handles:
        stat.of_process(p.pid)


class Refresh:
    """One refresh of a set of children sources per call."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.cache = SnapshotCache(ProcessMetricsOptions(children=True), names)
        self.seen = self.cache.snapshot().generation

    def __call__(self) -> None:
        self.seen = self.cache.snapshot(self.seen).generation


def timed(subjects: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds of each subject, interleaved round by round."""
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    clock = time.thread_time
    for _ in range(rounds):
        for name, call in subjects.items():
            start = clock()
            call()
            samples[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


_AUDIT = {"on": False, "count": 0}


def _audit(event: str, _args: tuple[Any, ...]) -> None:
    if _AUDIT["on"] and event in ("open", "os.listdir", "os.scandir"):
        _AUDIT["count"] += 1


def opens(call: Callable[[], Any]) -> int:
    """Files opened and directories listed by one ``call()``, counted by an audit hook."""
    if not _AUDIT.get("installed"):
        sys.addaudithook(_audit)  # hooks cannot be removed: it is switched off instead
        _AUDIT["installed"] = True
    _AUDIT["count"], _AUDIT["on"] = 0, True
    try:
        call()
    finally:
        _AUDIT["on"] = False
    return int(_AUDIT["count"])


def slope(xs: list[int], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def points_of(reader: InMemoryMetricReader) -> int:
    data = reader.get_metrics_data()
    return sum(
        len(m.data.data_points)
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
    )


def run(rounds: int) -> dict[str, Any]:
    # A SIGTERM still stops the children below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    started: list[subprocess.Popen[bytes]] = []
    by_count: dict[int, dict[str, float]] = {}
    try:
        for count in COUNTS:
            while len(started) < count:
                started.append(subprocess.Popen(["sleep", "600"]))
            deadline = time.monotonic() + 10
            while len(psutil.Process().children()) != count:
                assert time.monotonic() < deadline, "children did not start"
                time.sleep(0.01)
            handles = [psutil.Process(p.pid) for p in started]
            reader = InMemoryMetricReader()
            provider = MeterProvider(metric_readers=[reader])
            metrics = ProcessMetrics(ProcessMetricsOptions(children=True), meter_provider=provider)
            points = points_of(reader)
            refresh_alone = Refresh(WITH_FAULTS)
            subjects: dict[str, Callable[[], Any]] = {
                "list: children files": lambda: descendant_pids(os.getpid()),
                "list: psutil": lambda: psutil.Process().children(recursive=True),
                "bare psutil reads": lambda h=handles: bare_reads(h),  # type: ignore[misc]
                "bare reads + page faults": lambda h=handles: bare_reads_and_faults(h),  # type: ignore[misc]
                "refresh: children": Refresh(WITHOUT_FAULTS),
                "refresh: + page faults": refresh_alone,
                "collection": lambda r=reader: r.get_metrics_data(),  # type: ignore[misc]
            }
            gc.collect()
            for call in subjects.values():  # warm: psutil caches a little on a first call
                call()
            counted = {
                f"opens: {n}": opens(subjects[n])
                for n in (
                    "bare psutil reads",
                    "bare reads + page faults",
                    "refresh: children",
                    "refresh: + page faults",
                )
            }
            medians = timed(subjects, rounds)
            # The collection's own refresh (every source of the default set):
            # the rest of a collection is the SDK's.
            refresh_total = Refresh(_all_sources(metrics))
            medians["refresh: whole collection"] = timed({"r": refresh_total}, rounds)["r"]
            medians["points"] = points
            medians.update(counted)
            by_count[count] = medians
            metrics.close()
            provider.shutdown()
            print(
                f"{count:3d} children: "
                + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in medians.items() if _timed(k))
                + f", {points} points, {counted}",
                flush=True,
            )
    finally:
        for p in started:
            p.kill()
            p.wait()
    return summarise(by_count)


def _all_sources(metrics: ProcessMetrics) -> tuple[str, ...]:
    live = metrics._live
    assert live is not None
    return tuple(s.name for s in live.cache.sources)


def _timed(name: str) -> bool:
    return name != "points" and not name.startswith("opens: ")


def summarise(by_count: dict[int, dict[str, float]]) -> dict[str, Any]:
    counts = sorted(by_count)
    names = [k for k in by_count[counts[0]] if _timed(k)]
    opens_per_child = {
        k.removeprefix("opens: "): slope(counts, [by_count[c][k] for c in counts])
        for k in by_count[counts[0]]
        if k.startswith("opens: ")
    }
    per_child = {n: slope(counts, [by_count[c][n] for c in counts]) for n in names}
    sdk_per_point = [
        (by_count[c]["collection"] - by_count[c]["refresh: whole collection"])
        / by_count[c]["points"]
        for c in counts
    ]
    points_per_child = slope(counts, [by_count[c]["points"] for c in counts])
    return {
        "counts": counts,
        "medians_s": {str(c): by_count[c] for c in counts},
        "per_child_s": per_child,
        "ratio_refresh_to_bare": per_child["refresh: children"] / per_child["bare psutil reads"],
        "ratio_with_faults_to_bare": per_child["refresh: + page faults"]
        / per_child["bare psutil reads"],
        "ratio_with_faults_to_bare_with_faults": per_child["refresh: + page faults"]
        / per_child["bare reads + page faults"],
        "sdk_per_point_s": statistics.median(sdk_per_point),
        "points_per_child": points_per_child,
        "opens_per_child": opens_per_child,
        "host_processes": len(psutil.pids()),
        "python": sys.version.split()[0],
        "psutil": psutil.__version__,
        "cpus": os.cpu_count(),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = result["counts"]
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    for name, style in (
        ("collection", "-"),
        ("refresh: + page faults", "-"),
        ("refresh: children", "-"),
        ("bare reads + page faults", "--"),
        ("bare psutil reads", "--"),
        ("list: psutil", ":"),
        ("list: children files", ":"),
    ):
        ys = [result["medians_s"][str(c)][name] * 1e3 for c in counts]
        ax.plot(counts, ys, style, marker="o", markersize=3, label=name)
    ax.set_xlabel("child processes")
    ax.set_ylabel("CPU ms per call (median of the thread time)")
    ax.set_title("Supervisor mode: cost against child processes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few rounds, no plot, no files")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    result = run(3 if args.smoke else args.rounds)
    print(json.dumps({k: v for k, v in result.items() if k != "medians_s"}, indent=1))
    if args.smoke:
        return
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, PLOT)
    print(f"wrote {RESULTS.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
