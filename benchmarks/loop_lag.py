"""Overhead of the event-loop lag probe.

(a) Idle: a loop that only sleeps, process CPU time (getrusage) per second of
    loop time, without and with the monitor.
(b) Busy: a loop running tiny callbacks (each schedules the next, so every
    loop iteration selects once and runs one callback: the worst case for the
    timed select) and tiny tasks (``await asyncio.sleep(0)``), throughput per
    CPU second of the loop's thread (``time.thread_time``: other jobs on a
    shared machine do not count), without and with the monitor.

Rounds interleave the configurations in a new random order each time, so
drift on a shared machine lands on all of them. Usage::

    python benchmarks/loop_lag.py [--loop asyncio|uvloop] [--seconds 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.instrumentation.process.runtime.loop_lag import (
    DEFAULT_INTERVAL,
    LoopLagMonitor,
)


@dataclass(frozen=True)
class Config:
    name: str
    interval: float | None  # None: no monitor
    utilization: bool = True


@dataclass
class Results:
    """Per configuration, one value per round."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(main: Coroutine[Any, Any, float], loop: str) -> float:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def with_monitor(config: Config, body: Callable[[], float]) -> float:
    if config.interval is None:
        return body()
    monitor = LoopLagMonitor(interval=config.interval, utilization=config.utilization)
    monitor.start()
    try:
        return body()
    finally:
        monitor.stop()


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
    configs: list[Config],
    workload: Callable[[float], Coroutine[Any, Any, float]],
    *,
    loop: str,
    seconds: float,
    rounds: int,
) -> Results:
    results = Results()
    rng = random.Random(1)
    for _ in range(rounds):
        for config in rng.sample(configs, len(configs)):
            value = with_monitor(config, lambda: run(workload(seconds), loop))
            results.add(config.name, value)
    return results


def table(title: str, unit: str, scale: float, results: Results, configs: list[Config]) -> str:
    """Medians, their difference from the first config, and (max - min) / median."""
    names = [c.name for c in configs]
    base = results.median(names[0])
    lines = [title, f"{'config':<28}{'median ' + unit:>18}{'vs first':>12}{'spread':>10}"]
    for name in names:
        vals = results.values[name]
        med = results.median(name)
        spread = (max(vals) - min(vals)) / med if med else 0.0
        lines.append(f"{name:<28}{med * scale:>18.1f}{(med - base) * scale:>+12.1f}{spread:>9.0%}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--intervals", default=f"{DEFAULT_INTERVAL}")
    args = parser.parse_args()
    intervals = [float(x) for x in args.intervals.split(",")]
    configs = [Config("no monitor", None)]
    configs += [Config(f"interval {i * 1000:g} ms", i) for i in intervals]
    if args.loop == "asyncio":
        configs.append(Config(f"interval {intervals[0] * 1000:g} ms, no util", intervals[0], False))
    common = {"loop": args.loop, "seconds": args.seconds, "rounds": args.rounds}
    print(f"loop={args.loop} seconds={args.seconds} rounds={args.rounds}")
    workloads = [
        ("(a) idle: CPU per second of loop time", "us/s", 1e6, idle),
        ("(b1) callbacks per CPU second", "k/s", 1e-3, callbacks),
        ("(b2) task steps per CPU second", "k/s", 1e-3, tasks),
    ]
    for title, unit, scale, workload in workloads:
        results = measure(configs, workload, **common)
        print("\n" + table(title, unit, scale, results, configs))


if __name__ == "__main__":
    main()
