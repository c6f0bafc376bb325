"""Overhead of the event-loop lag probe, and what it reads.

Public API only: the package runs as an application would have it, with
``ProcessMetrics`` on an SDK ``MeterProvider``, with ``event_loop=False``
(the baseline: everything but the probe), with ``event_loop=True``, and with
``event_loop=True`` but the utilisation metric excluded (the delays alone).
Nothing collects during a measurement: what differs is the probe alone.
``--against DIR`` adds the same two probe configurations run from another
checkout's ``DIR/src`` (an older commit: ``git worktree add DIR REV``), so
that old and new are measured side by side in one run.

Each measurement runs in a child process of its own (``--child``), in
rounds that interleave the configurations in a new random order each time,
so that drift on a shared machine lands on all. Workloads:

- ``idle``: a loop that only sleeps: process CPU time (getrusage) per second,
  and the wakes of the loop's thread per second (its voluntary context
  switches: each is one sleep in ``select`` that ended);
- ``callbacks``: tiny callbacks, each scheduling the next, so that every
  loop iteration selects once and runs one callback (the worst case for
  anything done per iteration); throughput per CPU second of the loop's thread
  (``time.thread_time``: other jobs on a shared machine do not count);
- ``tasks``: 100 tasks yielding with ``await asyncio.sleep(0)``, per CPU second;
- ``calls``: Python calls per loop iteration of ``callbacks``, exact;
- ``server`` and ``saturated``: what the probe reports for a loop whose work
  is known: requests of 0.1 to 2 ms at random gaps (the loop sleeps between
  them), or always some ready (it never sleeps), each with one 200 ms block.

Usage::

    python benchmarks/loop_lag.py [--loop asyncio|uvloop] [--seconds 2] [--rounds 5]
                                  [--against DIR] [--only WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

UTILIZATION = "process_metrics.eventloop.utilization"
DELAYS = "process_metrics.eventloop.delay."
CONFIGS = ("event_loop=False", "event_loop=True", "event_loop=True, utilization excluded")
OLD = "old: "
"""Prefix of a configuration run from the ``--against`` checkout."""
LOOPS = ("asyncio", "uvloop")
BLOCK = 0.2
"""Seconds of the one block of the ``server`` and ``saturated`` workloads."""

Body = Callable[[float], Coroutine[Any, Any, dict[str, float]]]


@dataclass(frozen=True)
class Figure:
    """One figure of one workload: its median per configuration, and ratios to the baseline."""

    workload: str
    name: str
    medians: dict[str, float]
    ratios: dict[str, tuple[float, float, float]]
    """Per configuration: the median, lowest and highest of the ratios to ``event_loop=False``
    in the same round (paired, so that drift between rounds cancels)."""


@dataclass(frozen=True)
class LoopProbeCost:
    """The result of one run."""

    loop: str
    seconds: float
    rounds: int
    configs: list[str]
    figures: list[Figure]

    def figure(self, workload: str, name: str) -> Figure:
        return next(f for f in self.figures if (f.workload, f.name) == (workload, name))


# --- the workloads, each in a child process; each returns its figures


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def idle(seconds: float) -> dict[str, float]:
    await asyncio.sleep(0.05)  # started, and the probe's first tick passed
    wakes = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    cpu, wall = cpu_seconds(), time.monotonic()
    await asyncio.sleep(seconds)
    wall = time.monotonic() - wall
    wakes = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - wakes
    return {
        "CPU, µs per second": (cpu_seconds() - cpu) / wall * 1e6,
        "wakes per second": wakes / wall,
    }


async def callbacks(seconds: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    count = 0
    end = time.monotonic() + seconds

    def step() -> None:
        nonlocal count
        count += 1
        if count % 1000 or time.monotonic() < end:
            loop.call_soon(step)
        else:
            done.set_result(None)

    start = time.thread_time()
    loop.call_soon(step)
    await done
    return {"per CPU second": count / (time.thread_time() - start)}


async def tasks(seconds: float, width: int = 100) -> dict[str, float]:
    steps = 0
    end = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal steps
        while time.monotonic() < end:
            for _ in range(100):
                await asyncio.sleep(0)
            steps += 100

    start = time.thread_time()
    await asyncio.gather(*(worker() for _ in range(width)))
    return {"per CPU second": steps / (time.thread_time() - start)}


async def calls(_seconds: float, iterations: int = 20_000) -> dict[str, float]:
    """Python calls (functions and builtins) per iteration, counted with ``sys.setprofile``.

    The median is an iteration's own, exact; the mean adds the ticks' work
    (one every 20 ms), spread over the iterations.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    made = 0
    counts: list[int] = []

    def profile(_frame: Any, event: str, _arg: Any) -> None:
        nonlocal made
        if event in ("call", "c_call"):
            made += 1

    def step() -> None:
        counts.append(made)
        if len(counts) <= iterations:
            loop.call_soon(step)
        else:
            sys.setprofile(None)
            done.set_result(None)

    await asyncio.sleep(0)
    loop.call_soon(lambda: sys.setprofile(profile))
    loop.call_soon(step)
    await done
    each = [b - a for a, b in itertools.pairwise(counts)]
    return {"per iteration": statistics.median(each), "per iteration, mean": statistics.fmean(each)}


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def server(seconds: float, saturated: bool = False) -> dict[str, float]:
    """Requests of 0.1 to 2 ms at random gaps (mean 5 ms), or back to back; one 200 ms block."""
    rng = random.Random(7)
    start = time.monotonic()
    blocked = False
    while time.monotonic() - start < seconds:
        await asyncio.sleep(0 if saturated else rng.expovariate(200))
        spin(rng.uniform(0.0001, 0.002))
        if not blocked and time.monotonic() - start >= seconds / 2:
            blocked = True
            time.sleep(BLOCK)
    await asyncio.sleep(0.05)  # the tick the block delayed runs
    return {}


WORKLOADS: dict[str, Body] = {
    "idle": idle,
    "callbacks": callbacks,
    "tasks": tasks,
    "calls": calls,
    "server": server,
    "saturated": lambda seconds: server(seconds, saturated=True),
}
REPORTED = ("server", "saturated")


def child(workload: str, config: str, seconds: float, loop: str) -> dict[str, Any]:
    """One measurement in this process: the workload's figures, and where the package came from."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    options = ProcessMetricsOptions(
        event_loop=config != CONFIGS[0],
        exclude=(UTILIZATION,) if config == CONFIGS[2] else (),
    )
    metrics = ProcessMetrics(options, meter_provider=provider)
    try:
        main = WORKLOADS[workload](seconds)
        if loop == "uvloop":
            import uvloop

            figures = uvloop.run(main)
        else:
            figures = asyncio.run(main)
        if workload in REPORTED:
            figures = reported(reader)
    finally:
        metrics.close()
        provider.shutdown()
    return {"figures": figures, "package": _package()}


def _package() -> str:
    """The folder the package was imported from."""
    return str(Path(inspect.getfile(ProcessMetrics)).resolve().parent)


def reported(reader: InMemoryMetricReader) -> dict[str, float]:
    """The loop's delays (ms) and utilisation over the whole run, as exported."""
    found: dict[str, float] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name.startswith(DELAYS) or metric.name == UTILIZATION:
                    for point in metric.data.data_points:  # type: ignore[union-attr]
                        if dict(point.attributes or {}).get("thread.name") == "MainThread":
                            short = metric.name.rsplit(".", 1)[-1]
                            scale = 1.0 if metric.name == UTILIZATION else 1e3
                            found[f"{short}{'' if scale == 1.0 else ', ms'}"] = (
                                point.value * scale  # type: ignore[union-attr]
                            )
    return found


# --- the parent: rounds of children


def run_child(
    workload: str, config: str, seconds: float, loop: str, against: str | None
) -> dict[str, float]:
    env = dict(os.environ)
    expected = _package()
    # The child imports the package from where this process did (mutmut's copy, say),
    # not from where the venv's editable install points.
    src = str(Path(expected).parents[2])
    if config.startswith(OLD):
        src = expected = str(Path(str(against), "src").resolve())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            workload,
            config.removeprefix(OLD),
            str(seconds),
            loop,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120 + 4 * seconds,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{workload}, {config}: {done.stderr[-1500:]}")
    got = json.loads(done.stdout)
    if not got["package"].startswith(expected):
        raise RuntimeError(f"{config} ran the package from {got['package']}, not {expected}")
    figures: dict[str, float] = got["figures"]
    return figures


def benchmark(
    *,
    loop: str = "asyncio",
    seconds: float = 2.0,
    rounds: int = 5,
    against: str | None = None,
    only: Sequence[str] = (),
) -> LoopProbeCost:
    """Measure the workloads (``only`` these, if given) on ``loop``; nothing is printed."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}; got {loop!r:.40}")
    if rounds < 1 or seconds <= 0:
        raise ValueError(
            f"rounds must be >= 1 and seconds > 0; got {rounds!r:.20}, {seconds!r:.20}"
        )
    if against is not None and not Path(against, "src").is_dir():
        raise ValueError(f"against must be a checkout with a src folder; got {against!r:.80}")
    if set(only) - set(WORKLOADS):
        raise ValueError(f"only takes workloads of {', '.join(WORKLOADS)}; got {only!r:.80}")
    workloads = [w for w in WORKLOADS if not only or w in only]
    configs = [*CONFIGS, *(f"{OLD}{c}" for c in CONFIGS[1:] if against)]
    rng = random.Random(1)
    values: dict[str, list[dict[str, dict[str, float]]]] = {w: [] for w in workloads}
    for _ in range(rounds):
        for workload in workloads:
            # What the probe reports needs the probe; the calls are exact: one round.
            todo = configs[1:] if workload in REPORTED else configs
            if workload == "calls" and values[workload]:
                continue
            one = {
                c: run_child(workload, c, seconds, loop, against)
                for c in rng.sample(todo, len(todo))
            }
            values[workload].append(one)
    figures = [
        _figure(workload, name, runs)
        for workload, runs in values.items()
        for name in sorted({n for run in runs for figures in run.values() for n in figures})
    ]
    return LoopProbeCost(loop, seconds, rounds, configs, figures)


def _figure(workload: str, name: str, runs: list[dict[str, dict[str, float]]]) -> Figure:
    columns: dict[str, list[float]] = {}
    for run in runs:
        for config, figures in run.items():
            if name in figures:
                columns.setdefault(config, []).append(figures[name])
    medians = {c: statistics.median(v) for c, v in columns.items()}
    ratios: dict[str, tuple[float, float, float]] = {}
    base = columns.get(CONFIGS[0], [])
    for config, column in columns.items():
        if base and all(base):
            paired = [v / b for v, b in zip(column, base, strict=True)]
            ratios[config] = (statistics.median(paired), min(paired), max(paired))
    return Figure(workload, name, medians, ratios)


def table(result: LoopProbeCost) -> str:
    configs = result.configs
    lines = [
        f"loop={result.loop} seconds={result.seconds} rounds={result.rounds}. Medians; "
        "in brackets, the throughput's ratio to event_loop=False in the same round (median, "
        "and range over the rounds), or the difference from event_loop=False",
        "",
        "| workload | figure | " + " | ".join(configs) + " |",
        "|---|---|" + "---:|" * len(configs),
    ]
    for f in result.figures:
        cells = []
        for config in configs:
            value = f.medians.get(config)
            cell = "" if value is None else _number(value)
            if value is not None and config != CONFIGS[0] and CONFIGS[0] in f.medians:
                if f.workload in ("idle", "calls"):
                    cell += f" ({value - f.medians[CONFIGS[0]]:+.3g})"
                else:
                    mid, low, high = f.ratios[config]
                    cell += f" ({mid:.3f}x, {low:.2f}-{high:.2f})"
            cells.append(cell)
        lines.append(f"| {f.workload} | {f.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _number(value: float) -> str:
    if abs(value) >= 1e4:
        return f"{value / 1e3:,.1f} k"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", help="a checkout of an older commit: its src/ is run too")
    parser.add_argument("--only", nargs="*", default=(), choices=WORKLOADS, help="these workloads")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, config, seconds, loop = args.child
        print(json.dumps(child(workload, config, float(seconds), loop)))
        return
    result = benchmark(
        loop=args.loop,
        seconds=args.seconds,
        rounds=args.rounds,
        against=args.against,
        only=args.only,
    )
    print(table(result))


if __name__ == "__main__":
    main()
