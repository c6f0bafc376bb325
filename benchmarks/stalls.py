"""What the two stall readers cost: the run-queue wait per thread, and the GIL-wait probe when idle.

- **Run-queue wait** (``linux/schedstat.RunQueueWait``, on by default on
  Linux): the CPU time of one update over ``n`` threads, against none, per
  thread: threads that slept since the last update (one clock read each, no
  file), and threads that all ran since (one ``schedstat`` file each).
  Updates are 30 ms apart, as collections are far apart: the files are not
  hot in the caches as in a tight loop.
- **GIL wait** (``gil_wait=True``): the CPU time of an idle process over a
  window, with the probe and without, in child processes that take turns:
  what the probe costs a process that does nothing else, in µs per second.

    python benchmarks/stalls.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass

from opentelemetry.instrumentation.process.linux import schedstat

THREADS = 200
IDLE_CHILD = """
import sys, time
if sys.argv[1] == "probe":
    from opentelemetry.instrumentation.process.probes.gil_wait import GilWait
    GilWait().start()
time.sleep(0.5)  # started; then the window, in the process's CPU clock (ns)
t = time.process_time()
time.sleep(float(sys.argv[2]))
print(time.process_time() - t)
"""


@dataclass(frozen=True)
class StallCost:
    python: str
    threads: int
    rounds: int
    idle_thread_us: float
    """CPU per collection, per thread that slept since the last one (µs)."""
    busy_thread_us: float
    """CPU per collection, per thread that ran since the last one (µs)."""
    window_s: float
    probe_idle_us_per_s: float
    """CPU the GIL-wait probe costs an idle process, µs per second (median of rounds)."""
    probe_idle_rounds: tuple[float, ...]


class Crowd:
    """``n`` threads that wait on a shared event; ``stir()`` has each one run once."""

    def __init__(self, n: int) -> None:
        self.go, self.stop = threading.Event(), False
        self.ran = threading.Semaphore(0)
        self.threads = [threading.Thread(target=self._wait) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _wait(self) -> None:
        while True:
            self.go.wait()
            if self.stop:
                return
            sum(range(200))  # a moment on a CPU
            self.ran.release()
            while self.go.is_set() and not self.stop:
                time.sleep(0.001)

    def stir(self) -> None:
        self.go.set()
        for _ in self.threads:
            self.ran.acquire()
        self.go.clear()
        time.sleep(0.005)  # each is back waiting

    def end(self) -> None:
        self.stop = True
        self.go.set()
        for t in self.threads:
            t.join()


def _update_us(counter: schedstat.RunQueueWait, tids: list[int]) -> float:
    t0 = time.thread_time()
    counter.update(tids)
    return (time.thread_time() - t0) * 1e6


def run_queue(n: int, rounds: int) -> tuple[float, float]:
    """(µs per idle thread, µs per busy thread) of one update, over no crowd."""
    me = [threading.get_native_id()]
    crowd = Crowd(n)
    try:
        tids = me + [t.native_id for t in crowd.threads if t.native_id is not None]
        alone, idle, busy = (
            schedstat.RunQueueWait(),
            schedstat.RunQueueWait(),
            (schedstat.RunQueueWait()),
        )
        for counter, ids in ((alone, me), (idle, tids), (busy, tids)):
            counter.update(ids)
        times: dict[str, list[float]] = {"alone": [], "idle": [], "busy": []}
        for _ in range(rounds):  # the crowd sleeps throughout: nothing to read
            time.sleep(0.03)
            times["alone"].append(_update_us(alone, me))
            time.sleep(0.03)
            times["idle"].append(_update_us(idle, tids))
        for _ in range(rounds):  # each thread runs between two updates: its file is read
            crowd.stir()
            time.sleep(0.03)
            times["busy"].append(_update_us(busy, tids))
    finally:
        crowd.end()
    base = statistics.median(times["alone"])
    return (
        (statistics.median(times["idle"]) - base) / n,
        (statistics.median(times["busy"]) - base) / n,
    )


def probe_idle(window: float, rounds: int) -> tuple[float, ...]:
    """µs/s the probe adds to an idle process, per round: with it, minus without."""
    found = []
    for _ in range(rounds):
        cpu = {}
        for mode in ("probe", "none"):
            done = subprocess.run(
                [sys.executable, "-c", IDLE_CHILD, mode, str(window)],
                capture_output=True,
                text=True,
                check=True,
            )
            cpu[mode] = float(done.stdout)
        found.append((cpu["probe"] - cpu["none"]) / window * 1e6)
    return tuple(found)


def measure(quick: bool = False) -> StallCost:
    n, rounds = (20, 5) if quick else (THREADS, 40)
    window, probe_rounds = (1.0, 1) if quick else (10.0, 5)
    idle_us, busy_us = run_queue(n, rounds)
    probe = probe_idle(window, probe_rounds)
    return StallCost(
        python=sys.version.split()[0],
        threads=n,
        rounds=rounds,
        idle_thread_us=idle_us,
        busy_thread_us=busy_us,
        window_s=window,
        probe_idle_us_per_s=statistics.median(probe),
        probe_idle_rounds=probe,
    )


def markdown(r: StallCost) -> str:
    rounds = ", ".join(f"{v:,.0f}" for v in r.probe_idle_rounds)
    return "\n".join(
        [
            "| Reader | Cost |",
            "|---|---|",
            f"| Run-queue wait, per thread that slept since the last collection "
            f"({r.threads} threads, median of {r.rounds}) | {r.idle_thread_us:.2f} µs |",
            f"| Run-queue wait, per thread that ran since the last collection | "
            f"{r.busy_thread_us:.2f} µs |",
            f"| GIL-wait probe, in an idle process ({r.window_s:g} s windows: {rounds}) | "
            f"{r.probe_idle_us_per_s:,.0f} µs/s ({r.probe_idle_us_per_s / 1e4:.3f} % of a core) |",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds (smoke)")
    parser.add_argument("--json", action="store_true", help="the result as JSON")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        print("the stall readers are Linux-only", file=sys.stderr)
        return 1
    result = measure(quick=args.quick)
    print(json.dumps(asdict(result)) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
