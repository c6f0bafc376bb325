"""A CPU-bound neighbour, parkable worker threads, and the run-queue scenario run alone.

Run as a script, ``python runqueue.py THREADS SECONDS`` measures one window in a
fresh process, so that no thread of another test starts or exits inside it (an
exiting thread takes its run_delay out of the OS's sum): this process pinned
to one CPU beside a CPU-bound neighbour, ``THREADS`` threads hashing (or, for
0, the main thread spinning) for ``SECONDS``. It prints one JSON object:
``waited`` (the metric's growth), ``by_os`` (the threads' run_delay added up
from ``/proc``), ``wall`` and ``cpu`` (this process's CPU time), all in seconds.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import threading
import time


def hog(cpu: int, seconds: float) -> subprocess.Popen[str]:
    """A CPU-bound process pinned to ``cpu`` for ``seconds``, returned once it spins."""
    code = (
        f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\n"
        f"end = time.monotonic() + {seconds}\nprint('spinning', flush=True)\n"
        "while time.monotonic() < end: pass"
    )
    neighbour = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert neighbour.stdout is not None
    if neighbour.stdout.readline().strip() != "spinning":
        raise RuntimeError(f"the neighbour did not start: exit code {neighbour.wait()}")
    return neighbour


class Workers:
    """``n`` threads that hash in C (the GIL released) while running, parked otherwise."""

    def __init__(self, n: int) -> None:
        self.stop, self.running = threading.Event(), threading.Event()
        self.parked = threading.Semaphore(0)
        self.threads = [threading.Thread(target=self._work) for _ in range(n)]
        for t in self.threads:
            t.start()
        self.park()

    def _work(self) -> None:
        data = b"x" * (1 << 20)
        while not self.stop.is_set():
            self.parked.release()
            self.running.wait()
            while self.running.is_set() and not self.stop.is_set():
                hashlib.sha256(data).digest()

    def run(self) -> None:
        self.running.set()

    def park(self) -> None:
        self.running.clear()
        for _ in self.threads:
            self.parked.acquire()

    def end(self) -> None:
        self.stop.set()
        self.running.set()
        for t in self.threads:
            t.join()


def os_sum() -> float:
    """The run_delay of this process's live threads, added up from ``/proc``, in seconds."""
    total = 0
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError):
            pass
    return total / 1e9


def measure(threads: int, seconds: float) -> dict[str, float]:
    """One window beside a neighbour on this process's one CPU (see the module)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

    wait = "process_metrics.cpu.linux.run_queue.wait_time"
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = ProcessMetrics(ProcessMetricsOptions(include=[]), meter_provider=provider)

    def waited() -> float:
        data = reader.get_metrics_data()
        assert data is not None
        found = [
            m.data.data_points[0].value
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == wait
        ]
        return float(found[0])

    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    workers = Workers(threads)
    neighbour = hog(cpu, seconds + 1.0)
    try:
        before, os_before = waited(), os_sum()
        cpu_before, wall_before = time.process_time(), time.monotonic()
        if threads:
            workers.run()
            time.sleep(seconds)
            workers.park()
        else:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
        wall, used = time.monotonic() - wall_before, time.process_time() - cpu_before
        by_os, after = os_sum() - os_before, waited()
    finally:
        workers.end()
        neighbour.wait()
        made.close()
        provider.shutdown()
    return {"waited": after - before, "by_os": by_os, "wall": wall, "cpu": used}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), float(sys.argv[2]))))
