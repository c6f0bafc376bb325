"""What the saturation group adds to a collection, measured in a real limited cgroup.

    python benchmarks/saturation.py [--rounds 40] [--calls 200]

Needs root on Linux with cgroup v1 cpu, cpuacct and memory controllers (or
the same under v2): it creates cgroups with a CPU quota (4 CPUs, more than
the host has, so that nothing is throttled) and a memory limit (1 GiB), and
runs the measurement in a child process moved into them before it
instruments anything. The cgroups are removed afterwards.

In that child, in interleaved rounds (the order rotates, the time is this
thread's CPU time so that preemption by other load does not count):

- ``off``: the default options with ``saturation=False``;
- ``on``: the default options with ``saturation=True`` (what auto mode does here);
- ``floor``: a MeterProvider whose observable callbacks return constant
  observations shaped like the group's points (same instruments, same
  attributes), and ``empty``, a MeterProvider without instruments: their
  difference is the SDK's floor for the group's points;
- ``bare``: ``os.open``/``os.read``/``os.close`` of exactly the files the group
  reads, found with an audit hook (the opens of ``on`` that ``off`` does not make);
- the group's reads, to split what it adds into its reads and the rest (its
  callbacks, and the SDK beyond the floor): the package's own
  ``process_metrics.refresh.cpu_time`` with the group on, minus with it off,
  read from the collections of the rounds (public: the metric is on by default).

Goal (issue 10): ``on - off <= (floor - empty) + 1.25 * bare``, with one open
per distinct file. ``main()`` prints a table and returns :class:`SaturationCost`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
QUOTA_CPUS = 4
MEMORY_LIMIT = 1 << 30
BARE_FACTOR = 1.25


@dataclass(frozen=True)
class SaturationCost:
    """Per-collection figures in microseconds of thread CPU time (medians over rounds)."""

    python: str
    cgroups: list[str]
    """The cgroup folders the measured process was in."""
    rounds: int
    calls: int
    files: list[str]
    """The files the group read in one collection."""
    max_opens_per_file: int
    points: int
    """Data points the group adds to a collection."""
    off_us: float
    on_us: float
    added_us: float
    """Median over rounds of (on - off) in the same round."""
    sdk_floor_us: float
    """Median over rounds of (floor - empty): the SDK's cost for the group's points."""
    bare_us: float
    reads_us: float
    """What the group adds to the package's own refresh CPU time (median on - median off)."""
    rest_us: float
    """added_us - reads_us - sdk_floor_us: the callbacks, and the SDK beyond its floor."""
    budget_us: float
    """sdk_floor_us + 1.25 * bare_us."""
    goal_met: bool
    """added_us <= budget_us, and one open per file."""
    rounds_within_budget: float
    """Share of rounds in which that round's added <= that round's budget."""
    ratio_to_off: float
    """added_us / off_us: what the group adds, relative to a collection without it."""


# --- in the child: the measurement ---------------------------------------------------------


def _provider() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]), reader


def _ours(saturation: bool) -> tuple[Callable[[], Any], Any]:
    from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

    provider, reader = _provider()
    metrics = ProcessMetrics(ProcessMetricsOptions(saturation=saturation), meter_provider=provider)
    return reader.get_metrics_data, metrics


def _refresh_cpu_us(data: Any) -> float:
    """The package's own refresh CPU time in one collection's data, in microseconds."""
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "process_metrics.refresh.cpu_time":
                    return float(m.data.data_points[0].value) * 1e6
    raise LookupError("process_metrics.refresh.cpu_time is not in the collection")


def _group_metrics(data: Any) -> list[Any]:
    from opentelemetry.instrumentation.process.metrics import METRICS

    names = {m.name for m in METRICS if m.group == "saturation"}
    return [
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name in names
    ]


def _floor(metrics: Iterable[Any]) -> Callable[[], Any]:
    """Constant observations with the group's instruments and attributes."""
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics.export import Sum

    provider, reader = _provider()
    meter = provider.get_meter("benchmarks.saturation_floor")
    for metric in metrics:
        points = [Observation(p.value, dict(p.attributes or {})) for p in metric.data.data_points]

        def callback(
            _options: CallbackOptions, points: list[Observation] = points
        ) -> list[Observation]:
            return points

        data = metric.data
        if isinstance(data, Sum):
            create: Any = (
                meter.create_observable_counter
                if data.is_monotonic
                else meter.create_observable_up_down_counter
            )
        else:
            create = meter.create_observable_gauge
        create(metric.name, callbacks=[callback], unit=metric.unit)
    collect: Callable[[], Any] = reader.get_metrics_data
    return collect


_opened: list[str] = []
_recording: list[bool] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _recording and event == "open" and isinstance(args[0], str):
        _opened.append(args[0])


def _opens(fn: Callable[[], Any]) -> Counter[str]:
    _opened.clear()
    _recording.append(True)
    try:
        fn()
    finally:
        _recording.clear()
    return Counter(_opened)


def _bare(paths: Sequence[str]) -> Callable[[], None]:
    flags = os.O_RDONLY | os.O_CLOEXEC

    def read() -> None:
        for path in paths:
            fd = os.open(path, flags)
            os.read(fd, 16384)
            os.close(fd)

    return read


def _per_call_us(fn: Callable[[], Any], calls: int) -> float:
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls / 1000


def measure(rounds: int = 40, calls: int = 200) -> SaturationCost:
    """The measurement, in this process (which should be in a limited cgroup)."""
    sys.addaudithook(_audit)
    (off, _), (on, _) = _ours(False), _ours(True)
    subjects = {"off": off, "on": on}
    for fn in subjects.values():
        fn()  # warm up, and the first collection's baselines
    on_opens, off_opens = _opens(subjects["on"]), _opens(subjects["off"])
    files = sorted(set(on_opens) - set(off_opens))
    group = _group_metrics(subjects["on"]())
    subjects["floor"] = _floor(group)
    subjects["empty"] = _provider()[1].get_metrics_data
    subjects["bare"] = _bare(files)
    times: dict[str, list[float]] = {name: [] for name in subjects}
    refresh: dict[str, list[float]] = {"on": [], "off": []}
    names = list(subjects)
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(_per_call_us(subjects[name], calls))
                if name in refresh:  # one more collection, untimed, for its refresh figure
                    refresh[name].append(_refresh_cpu_us(subjects[name]()))
    finally:
        gc.enable()
    reads_us = statistics.median(refresh["on"]) - statistics.median(refresh["off"])
    return _summary(times, reads_us, files, on_opens, group, rounds, calls)


def _summary(
    times: dict[str, list[float]],
    reads_us: float,
    files: list[str],
    opens: Counter[str],
    group: list[Any],
    rounds: int,
    calls: int,
) -> SaturationCost:
    med = {name: statistics.median(values) for name, values in times.items()}
    added = [on - off for on, off in zip(times["on"], times["off"], strict=True)]
    floor = [f - e for f, e in zip(times["floor"], times["empty"], strict=True)]
    budget = [f + BARE_FACTOR * b for f, b in zip(floor, times["bare"], strict=True)]
    max_opens = max((opens[f] for f in files), default=0)
    added_us, floor_us = statistics.median(added), statistics.median(floor)
    budget_us = floor_us + BARE_FACTOR * med["bare"]
    return SaturationCost(
        python=sys.version.split()[0],
        cgroups=_own_cgroups(),
        rounds=rounds,
        calls=calls,
        files=files,
        max_opens_per_file=max_opens,
        points=sum(len(m.data.data_points) for m in group),
        off_us=med["off"],
        on_us=med["on"],
        added_us=added_us,
        sdk_floor_us=floor_us,
        bare_us=med["bare"],
        reads_us=reads_us,
        rest_us=added_us - reads_us - floor_us,
        budget_us=budget_us,
        goal_met=added_us <= budget_us and max_opens == 1,
        rounds_within_budget=sum(a <= b for a, b in zip(added, budget, strict=True)) / rounds,
        ratio_to_off=added_us / med["off"],
    )


def _own_cgroups() -> list[str]:
    return [line.split(":", 2)[2] + f" ({line.split(':', 2)[1] or 'v2'})"
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.split(":", 2)[1] in ("cpu", "cpuacct", "memory", "")]  # fmt: skip


# --- in the parent: the cgroups ------------------------------------------------------------


def _own_folder(controller: str) -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _hier, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
    raise RuntimeError(f"no cgroup v1 {controller} controller here")


@contextlib.contextmanager
def limited_cgroups() -> Iterator[list[Path]]:
    """New v1 cgroups (cpu with a quota, cpuacct, memory with a limit), removed afterwards."""
    name = f"otel-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folders = [_own_folder(c) / name for c in ("cpu", "cpuacct", "memory")]
    made: list[Path] = []
    try:
        for folder in folders:
            folder.mkdir()
            made.append(folder)
        (folders[0] / "cpu.cfs_period_us").write_text("100000")
        (folders[0] / "cpu.cfs_quota_us").write_text(str(QUOTA_CPUS * 100000))
        (folders[2] / "memory.limit_in_bytes").write_text(str(MEMORY_LIMIT))
        yield folders
    finally:
        for folder in reversed(made):
            with contextlib.suppress(FileNotFoundError):
                folder.rmdir()  # the child has exited: empty


def unavailable() -> str | None:
    """Why the measurement cannot run here, or ``None`` when it can."""
    if not sys.platform.startswith("linux"):
        return "cgroups are Linux only"
    if os.geteuid() != 0:
        return "creating cgroups and moving a process into them needs root"
    try:
        for controller in ("cpu", "cpuacct", "memory"):
            if not (_own_folder(controller) / "cgroup.procs").is_file():
                return f"the cgroup v1 {controller} controller is not mounted here"
    except (OSError, RuntimeError) as exc:
        return str(exc)
    return None


def run_in_limited_cgroup(rounds: int = 40, calls: int = 200) -> SaturationCost:
    """Create the cgroups, measure in a child moved into them, return its figures."""
    with limited_cgroups() as folders:
        argv = [sys.executable, __file__, "--child", "--rounds", str(rounds), "--calls", str(calls)]
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None and child.stdout is not None
        for folder in folders:
            (folder / "cgroup.procs").write_text(str(child.pid))
        child.stdin.write("go\n")  # moved: it may start
        child.stdin.close()
        out = child.stdout.read()
        if child.wait() != 0:
            raise RuntimeError(f"the measuring child failed ({child.returncode})")
    return SaturationCost(**json.loads(out))


def table(cost: SaturationCost) -> str:
    verdict = "met" if cost.goal_met else "MISSED"
    return "\n".join(
        [
            f"Python {cost.python}; {cost.rounds} rounds of {cost.calls} calls; thread CPU time",
            f"cgroups: {', '.join(cost.cgroups)}",
            f"{len(cost.files)} files, at most {cost.max_opens_per_file} open(s) each per "
            f"collection; {cost.points} points",
            "",
            "| per collection | µs |",
            "|---|---:|",
            f"| default, saturation=False | {cost.off_us:.1f} |",
            f"| default, saturation=True | {cost.on_us:.1f} |",
            f"| added by the group (paired median) | {cost.added_us:.1f} |",
            f"| SDK floor for its {cost.points} points | {cost.sdk_floor_us:.1f} |",
            f"| bare open/read/close of its {len(cost.files)} files | {cost.bare_us:.1f} |",
            f"| its sources, as a refresh reads them | {cost.reads_us:.1f} |",
            f"| the rest: callbacks, SDK beyond the floor | {cost.rest_us:.1f} |",
            f"| budget: floor + {BARE_FACTOR} x bare | {cost.budget_us:.1f} |",
            "",
            f"goal {verdict}: added {cost.added_us:.1f} µs vs budget {cost.budget_us:.1f} µs "
            f"(within budget in {cost.rounds_within_budget:.0%} of rounds); "
            f"added / collection without the group = {cost.ratio_to_off:.1%}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> SaturationCost:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.stdin.readline()  # wait until moved into the cgroups
        cost = measure(args.rounds, args.calls)
        print(json.dumps(asdict(cost)))
        return cost
    why = unavailable()
    if why is not None:
        raise SystemExit(f"benchmarks/saturation.py: {why}")
    cost = run_in_limited_cgroup(args.rounds, args.calls)
    print(table(cost))
    return cost


if __name__ == "__main__":
    main()
