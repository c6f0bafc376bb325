"""Overhead of the event-loop lag probe.

Public API only: the package runs as an application would have it, with
``ProcessMetrics`` on an SDK ``MeterProvider``, with ``event_loop=False``
(the baseline: everything but the probe), with ``event_loop=True``, and with
``event_loop=True`` but the utilisation metric excluded (the delays alone).
Nothing collects during a measurement: what differs is the probe alone (one
timer per loop, every 20 ms, and, for the utilisation, the timing of the
loop's ``select``).

(a) Idle: a loop that only sleeps; process CPU time (getrusage) per second of
    loop time. The difference, divided by the ticks in a second, is the CPU
    cost of one wake-up of an idle loop.
(b) Busy: a loop running tiny callbacks (each schedules the next, so every
    loop iteration selects once and runs one callback: the worst case for the
    timed select) and tiny tasks (``await asyncio.sleep(0)``), throughput per
    CPU second of the loop's thread (``time.thread_time``: other jobs on a
    shared machine do not count).

Rounds interleave the three configurations in a new random order each time, so
drift on a shared machine lands on both. Usage::

    python benchmarks/loop_lag.py [--loop asyncio|uvloop] [--seconds 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

PROBE_INTERVAL = 0.02
"""Seconds between two ticks of the probe, as docs/runtime.md gives it (not configurable)."""

UTILIZATION = "process_metrics.eventloop.utilization"
CONFIGS = ("event_loop=False", "event_loop=True", "event_loop=True, utilization excluded")
LOOPS = ("asyncio", "uvloop")


@dataclass(frozen=True)
class Workload:
    """One workload: the median per configuration and the probe's difference."""

    name: str
    unit: str
    baseline: float
    """Median without the probe (``event_loop=False``)."""
    probe: float
    """Median with the probe (``event_loop=True``)."""
    delays_only: float
    """Median with the probe, the utilisation metric excluded (``select`` not timed)."""
    spread: float
    """(max - min) / median over the rounds, the largest of the three configurations."""

    @property
    def change(self) -> float:
        """Relative change with the probe (negative: slower or costlier for throughput)."""
        return self._relative(self.probe)

    @property
    def delays_only_change(self) -> float:
        """Relative change with the probe, the utilisation excluded."""
        return self._relative(self.delays_only)

    def _relative(self, value: float) -> float:
        return (value - self.baseline) / self.baseline if self.baseline else 0.0


@dataclass(frozen=True)
class LoopProbeCost:
    """The result of one run."""

    loop: str
    seconds: float
    rounds: int
    idle: Workload
    """CPU seconds per second of an idle loop."""
    callbacks: Workload
    """Callbacks per CPU second."""
    tasks: Workload
    """Task steps per CPU second."""
    idle_cpu_share: float
    """Share of one core the probe adds to an idle loop (may be below the noise)."""
    idle_us_per_tick: float
    """CPU microseconds per tick on an idle loop: ``idle_cpu_share`` over the ticks."""
    calls_per_iteration: dict[str, float]
    """Python calls (functions and builtins) per loop iteration, by configuration: exact."""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_loop(main: Coroutine[Any, Any, float], loop: str) -> float:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def with_package(config: str, body: Callable[[], float]) -> float:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    options = ProcessMetricsOptions(
        event_loop=config != CONFIGS[0],
        exclude=(UTILIZATION,) if config == CONFIGS[2] else (),
    )
    metrics = ProcessMetrics(options, meter_provider=provider)
    try:
        return body()
    finally:
        metrics.close()
        provider.shutdown()


async def idle(seconds: float) -> float:
    """CPU seconds per second of an idle loop."""
    cpu, wall = cpu_seconds(), time.monotonic()
    await asyncio.sleep(seconds)
    return (cpu_seconds() - cpu) / (time.monotonic() - wall)


async def callbacks(seconds: float) -> float:
    """Callbacks per CPU second, each scheduling the next."""
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
    return count / (time.thread_time() - start)


async def tasks(seconds: float, width: int = 100) -> float:
    """Task steps per CPU second, ``width`` tasks each yielding with sleep(0)."""
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
    return steps / (time.thread_time() - start)


def measure(
    name: str,
    unit: str,
    workload: Callable[[float], Coroutine[Any, Any, float]],
    *,
    loop: str,
    seconds: float,
    rounds: int,
) -> Workload:
    values: dict[str, list[float]] = {c: [] for c in CONFIGS}
    rng = random.Random(1)
    for _ in range(rounds):
        for config in rng.sample(CONFIGS, len(CONFIGS)):
            values[config].append(with_package(config, lambda: run_loop(workload(seconds), loop)))
    medians = {c: statistics.median(v) for c, v in values.items()}
    spread = max((max(v) - min(v)) / medians[c] if medians[c] else 0.0 for c, v in values.items())
    return Workload(name, unit, *(medians[c] for c in CONFIGS), spread=spread)


def calls_per_iteration(config: str, loop: str, iterations: int = 20_000) -> float:
    """Python calls per iteration of a loop running one trivial callback per iteration.

    Counted with ``sys.setprofile``: what the probe adds to each iteration is
    the difference from ``event_loop=False``, independent of the machine's
    noise (a tick every 20 ms adds a few calls, spread over the iterations).
    """

    async def run() -> float:
        running = asyncio.get_running_loop()
        done = running.create_future()
        count = 0
        calls = 0

        def profile(_frame: Any, event: str, _arg: Any) -> None:
            nonlocal calls
            if event in ("call", "c_call"):
                calls += 1

        def step() -> None:
            nonlocal count
            count += 1
            if count < iterations:
                running.call_soon(step)
            else:
                sys.setprofile(None)
                done.set_result(None)

        await asyncio.sleep(0)
        running.call_soon(lambda: sys.setprofile(profile))
        running.call_soon(step)
        await done
        return calls / iterations

    return with_package(config, lambda: run_loop(run(), loop))


def benchmark(*, loop: str = "asyncio", seconds: float = 2.0, rounds: int = 5) -> LoopProbeCost:
    """Measure the three workloads on ``loop``; nothing is printed."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}; got {loop!r:.40}")
    if rounds < 1 or seconds <= 0:
        raise ValueError(
            f"rounds must be >= 1 and seconds > 0; got {rounds!r:.20}, {seconds!r:.20}"
        )

    def one(
        name: str, unit: str, workload: Callable[[float], Coroutine[Any, Any, float]]
    ) -> Workload:
        return measure(name, unit, workload, loop=loop, seconds=seconds, rounds=rounds)

    idle_cpu = one("idle: CPU per second of loop time", "s/s", idle)
    share = idle_cpu.probe - idle_cpu.baseline
    return LoopProbeCost(
        loop=loop,
        seconds=seconds,
        rounds=rounds,
        idle=idle_cpu,
        callbacks=one("callbacks per CPU second", "1/s", callbacks),
        tasks=one("task steps per CPU second", "1/s", tasks),
        idle_cpu_share=share,
        idle_us_per_tick=share * PROBE_INTERVAL * 1e6,
        calls_per_iteration={c: calls_per_iteration(c, loop) for c in CONFIGS},
    )


def table(result: LoopProbeCost) -> str:
    lines = [
        f"loop={result.loop} seconds={result.seconds} rounds={result.rounds}, "
        f"probe every {PROBE_INTERVAL * 1000:g} ms",
        "",
        "| workload | event_loop=False | event_loop=True | change "
        "| utilisation excluded | change | spread |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    idle = result.idle
    lines.append(
        f"| {idle.name} | {idle.baseline * 1e6:.0f} µs/s | {idle.probe * 1e6:.0f} µs/s "
        f"| {result.idle_cpu_share:+.2%} of a core | {idle.delays_only * 1e6:.0f} µs/s "
        f"| {idle.delays_only - idle.baseline:+.2%} of a core | {idle.spread:.0%} |"
    )
    for w in (result.callbacks, result.tasks):
        lines.append(
            f"| {w.name} | {w.baseline / 1e3:.1f} k | {w.probe / 1e3:.1f} k "
            f"| {w.change:+.1%} | {w.delays_only / 1e3:.1f} k | {w.delays_only_change:+.1%} "
            f"| {w.spread:.0%} |"
        )
    lines += ["", f"idle: {result.idle_us_per_tick:.0f} µs of CPU per tick", ""]
    base = result.calls_per_iteration[CONFIGS[0]]
    lines += ["| Python calls per loop iteration (exact) | calls | added |", "|---|---:|---:|"]
    for config, calls in result.calls_per_iteration.items():
        lines.append(f"| {config} | {calls:.2f} | {calls - base:+.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(table(benchmark(loop=args.loop, seconds=args.seconds, rounds=args.rounds)))


if __name__ == "__main__":
    main()
