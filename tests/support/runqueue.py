"""A CPU-bound neighbour, parkable worker threads, and the run-queue scenario run alone.

Run as a script, ``python runqueue.py THREADS SECONDS`` measures one window in a
fresh process, so that no thread of another test starts or exits inside it (an
exiting thread takes its run_delay out of the OS's sum): this process pinned
to one CPU beside a CPU-bound neighbour, ``THREADS`` threads hashing (or, for
0, the main thread spinning) for ``SECONDS``. ``python runqueue.py quiet
SECONDS`` sleeps instead, ten times, with no neighbour, at the highest CFS
priority (nice -20, where allowed), so that the load of other processes on the
machine does not make it wait at its wake-ups. Either prints one JSON object,
in seconds: ``waited`` (the metric's growth between two collections), ``lo``
and ``hi`` (the threads' run_delay added up from ``/proc`` over the window
between the two collections, and over the window around them: the metric's
growth lies between), ``by_os`` (that sum over the stall alone, from the
neighbour's start to its stop), ``wall`` and ``cpu`` (this process's CPU time)
over the stall, and ``niced`` (whether the quiet run got its priority).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


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


def pause(neighbour: subprocess.Popen[str] | None, how: signal.Signals) -> None:
    """Stop or continue ``neighbour``; with SIGSTOP, until the kernel says it is stopped."""
    if neighbour is None:
        return
    neighbour.send_signal(how)
    if how == signal.SIGSTOP:
        while Path(f"/proc/{neighbour.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.001)


def window(what: str, seconds: float) -> dict[str, float]:
    """The script's figures for ``what`` (a thread count or ``quiet``), from a fresh process.

    The process imports the package from where this one did (mutmut's copy, say).
    """
    from opentelemetry.instrumentation.process.linux import schedstat

    src = str(Path(schedstat.__file__).resolve().parents[4])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, __file__, what, str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    found: dict[str, float] = json.loads(done.stdout)
    return found


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


def measure(threads: int | None, seconds: float) -> dict[str, float]:
    """One window beside a neighbour on this process's one CPU, or quiet (``None``)."""
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

    niced = False
    if threads is None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -20)
            niced = True
        except OSError:
            pass
    else:
        cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    workers = Workers(threads or 0)
    neighbour = hog(cpu, 60.0) if threads is not None else None
    # The neighbour is stopped while the readings are taken: the reading thread then
    # waits for no CPU, and the metric's window and the OS's are the same.
    pause(neighbour, signal.SIGSTOP)
    try:
        # Each collection bracketed by the OS's sums: on a loaded machine the reading
        # thread itself may wait for a CPU in between, which both count.
        around_before = os_sum()
        before = waited()
        widest_from = time.monotonic()
        os_before = os_sum()
        cpu_before, wall_before = time.process_time(), time.monotonic()
        pause(neighbour, signal.SIGCONT)
        if threads is None:
            for _ in range(10):
                time.sleep(seconds / 10)
        elif threads:
            workers.run()
            time.sleep(seconds)
            workers.park()
        else:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
        pause(neighbour, signal.SIGSTOP)
        wall, used = time.monotonic() - wall_before, time.process_time() - cpu_before
        os_after = os_sum()
        widest = time.monotonic() - widest_from
        after = waited()
        around_after = os_sum()
    finally:
        workers.end()
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
        made.close()
        provider.shutdown()
    return {
        "waited": after - before,
        "lo": os_after - os_before,
        "hi": around_after - around_before,
        "by_os": os_after - os_before,
        "wall": wall,
        "widest": widest,
        "cpu": used,
        "niced": niced,
    }


if __name__ == "__main__":
    threads = None if sys.argv[1] == "quiet" else int(sys.argv[1])
    print(json.dumps(measure(threads, float(sys.argv[2]))))
