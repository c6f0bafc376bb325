"""GIL wait (probes/gil_wait.py, process_metrics.cpython.gil.wait.*), produced for real.

Beside one CPU-bound pure-Python thread, a thread that becomes ready waits
about one switch interval for the GIL (``sys.getswitchinterval()``), then asks
the holder to drop it. The tests hold the probe to that at two intervals,
alternated from one reading to the next so that the host's load hits both
alike, and to nothing at all when the process is quiet. A reading in which the
GIL's holder itself waited for a CPU more than half of the time is about the
CPU, not the GIL: it is left out (a saturated host may leave too few).
The probe runs at a shorter period than its default here (its constructor's
own parameter), for more samples per second of test.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.linux import schedstat
from opentelemetry.instrumentation.process.probes import gil_wait
from opentelemetry.instrumentation.process.probes.gil_wait import (
    THREAD_NAME,
    GilWait,
    GilWaitReading,
    gil_enabled,
)

from .conftest import collect, value
from .support.forkapps import c_fork

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
needs_gil = pytest.mark.skipif(not gil_enabled(), reason="needs a build with a GIL")

PERIOD = 0.05


class Spinner:
    """One pure-Python thread that holds the GIL whenever it runs."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.tid = 0
        self.thread = threading.Thread(target=self._spin)
        self.thread.start()
        while not self.tid:
            time.sleep(0.01)

    def _spin(self) -> None:
        self.tid = threading.get_native_id()
        while not self.stop.is_set():
            pass

    def sched(self) -> tuple[int, int]:
        return schedstat.read(f"/proc/self/task/{self.tid}/schedstat")

    def end(self) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def probe() -> Iterator[GilWait]:
    found = GilWait(PERIOD)
    assert found.start()
    try:
        yield found
    finally:
        found.stop()


def interval_of(probe: GilWait, seconds: float) -> tuple[int, float, float | None]:
    """(samples, seconds waited, longest) of one reading ``seconds`` after the previous."""
    before = probe.read()
    time.sleep(seconds)
    after = probe.read()
    return after.samples - before.samples, after.seconds - before.seconds, after.longest


@needs_gil
def test_beside_a_cpu_bound_thread_a_wake_waits_about_one_switch_interval(
    probe: GilWait,
) -> None:
    old = sys.getswitchinterval()
    spinner = Spinner()
    means: dict[float, list[float]] = {0.005: [], 0.001: []}
    longest: dict[float, float] = {0.005: 0.0, 0.001: 0.0}
    try:
        for i in range(40):
            if min(len(v) for v in means.values()) >= 6:
                break
            interval = (0.005, 0.001)[i % 2]
            sys.setswitchinterval(interval)
            probe.read()  # the reading starts at this interval
            c0, r0 = spinner.sched()
            samples, waited, top = interval_of(probe, 0.6)
            c1, r1 = spinner.sched()
            held_back = r1 - r0 > 0.5 * (c1 - c0 + r1 - r0)  # the holder waited for a CPU
            if samples and not held_back:
                means[interval].append(waited / samples)
                longest[interval] = max(longest[interval], top or 0.0)
    finally:
        spinner.end()
        sys.setswitchinterval(old)
    if min(len(v) for v in means.values()) < 3:
        pytest.skip(f"the host kept the GIL's holder off a CPU: {means}")
    five, one = statistics.median(means[0.005]), statistics.median(means[0.001])
    assert five >= 0.8 * 0.005 and one >= 0.8 * 0.001, (five, one)
    assert longest[0.005] >= 0.005 and longest[0.001] >= 0.001, longest
    assert one < 0.6 * five  # the reading moves with the interval


@needs_gil
def test_a_quiet_process_waits_for_no_gil(probe: GilWait) -> None:
    readings = [interval_of(probe, 0.5) for _ in range(3)]
    samples = sum(n for n, _, _ in readings)
    # Naps of half a period to one and a half at random: a sample per period on average.
    assert 0.6 * 1.5 / PERIOD <= samples <= 1.5 * 1.5 / PERIOD
    assert sum(w for _, w, _ in readings) / samples < 0.0001
    assert max(top or 0.0 for _, _, top in readings) < 0.001


@needs_gil
def test_the_longest_wait_is_absent_until_it_wakes_and_zero_is_a_measured_zero() -> None:
    probe = GilWait(period=10.0)
    assert probe.read() == GilWaitReading(0, 0.0, 0, None)  # not started: nothing known
    quick = GilWait(PERIOD)
    assert quick.start()
    try:
        time.sleep(4 * PERIOD)
        got = quick.read()
        # A loaded host can keep the new thread off a CPU past its first wake: read again
        # (a read without a wake since has no longest to lose).
        deadline = time.monotonic() + 10
        while got.samples == 0 and time.monotonic() < deadline:
            time.sleep(PERIOD)
            got = quick.read()
        assert got.samples >= 1 and got.longest == 0.0  # it woke, and waited for nothing
    finally:
        quick.stop()


@needs_gil
def test_it_stops_and_its_thread_ends() -> None:
    probe = GilWait(PERIOD)
    assert probe.start()
    assert THREAD_NAME in {t.name for t in threading.enumerate()}
    probe.stop()
    # It ends at its next wake, 1.5 periods at most; a loaded host may run it later.
    deadline = time.monotonic() + 100 * PERIOD
    while THREAD_NAME in {t.name for t in threading.enumerate()}:
        assert time.monotonic() < deadline, "the sampling thread did not end"
        time.sleep(PERIOD / 5)


def just_sampled(probe: GilWait) -> None:
    """Until the probe has just taken a sample: it then naps, not waiting for the GIL.

    A fork from C while another thread waits for the GIL copies CPython's GIL
    condition variable with a waiter the child does not have, and the child can
    hang at its first release of the GIL: only Python's at-fork hook renews it.
    That is CPython's hazard, not this probe's, so this test forks between waits.
    """
    seen = probe.read().samples
    deadline = time.monotonic() + 5
    while probe.read().samples == seen:
        assert time.monotonic() < deadline, "the probe took no sample in 5 s"
        time.sleep(0.0005)  # asleep, the GIL is free: the probe takes it without waiting


def _child_collects(reader: InMemoryMetricReader) -> dict[str, object]:
    """In a forked child: the samples of its first collection, and of one a few wakes later."""
    name = "process_metrics.cpython.gil.wait.samples"
    first = value(collect(reader)[name])
    later = first
    deadline = time.monotonic() + 10  # two wakes take 2.5 periods; a loaded host may be late
    while later < first + 2 and time.monotonic() < deadline:
        time.sleep(PERIOD)
        later = value(collect(reader)[name])
    return {
        "first": first,
        "later": later,
        "threads": sorted(t.name for t in threading.enumerate()),
    }


@needs_gil
@pytest.mark.parametrize("fork", ["os.fork", "c_fork"])
def test_a_forked_child_starts_its_own_probe_even_with_the_lock_held_at_the_fork(
    fork: str,
) -> None:
    """The source's after-fork hook is the probe's one fork mechanism (with or without
    Python's at-fork hooks): without it the child's thread is gone and its lock held."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = ProcessMetrics(ProcessMetricsOptions(gil_wait=True), meter_provider=provider)
    try:
        collect(reader)
        assert made._live is not None
        probe: GilWait = made._live.cache._ctx.state["cpython_gil_wait"]
        time.sleep(3 * PERIOD)
        just_sampled(probe)
        held = probe._guard  # the lock a read takes: held by the parent at the fork
        held.acquire()
        try:
            pid = os.fork() if fork == "os.fork" else c_fork()
            if pid == 0:  # the child: never back into pytest
                code = 1
                try:
                    signal.alarm(20)  # a hang ends the child (SIGALRM's default), not the run
                    out = _child_collects(reader)
                    # Its own totals, from 0 (the parent's were many), and its own thread.
                    code = 0 if out["first"] <= 1 and out["later"] >= 2 else 3
                    code = code if THREAD_NAME in out["threads"] else 4  # type: ignore[operator]
                finally:
                    os._exit(code)
        finally:
            held.release()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert probe.read().samples > 0  # the parent's goes on
    finally:
        made.close()
        provider.shutdown()


@needs_gil
def test_through_the_package_it_is_opt_in_and_reports_every_field() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = ProcessMetrics(ProcessMetricsOptions(gil_wait=True), meter_provider=provider)
    try:
        deadline = time.monotonic() + 5
        found = collect(reader)
        while "process_metrics.cpython.gil.wait.max" not in found:
            assert time.monotonic() < deadline, sorted(found)
            time.sleep(0.1)
            found = collect(reader)
        assert value(found["process_metrics.cpython.gil.wait.samples"]) >= 1
        assert value(found["process_metrics.cpython.gil.wait.time"]) >= 0.0
        contended = value(found["process_metrics.cpython.gil.wait.contended"])
        assert 0 <= contended <= value(found["process_metrics.cpython.gil.wait.samples"])
    finally:
        made.close()
        provider.shutdown()


def test_without_a_gil_nothing_is_registered_and_no_thread_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if gil_enabled():
        # A build with a GIL cannot run without one: its check stands for a free-threaded build.
        monkeypatch.setattr(gil_wait, "gil_enabled", lambda: False)
    assert GilWait.available() is False
    # An earlier test's probe thread may still be ending: only a new one would be ours.
    earlier = {t.ident for t in threading.enumerate() if t.name == THREAD_NAME}
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = ProcessMetrics(ProcessMetricsOptions(gil_wait=True), meter_provider=provider)
    try:
        found = collect(reader)
        assert not [name for name in found if ".gil." in name]
        assert "process.cpu.time" in found
        assert {t.ident for t in threading.enumerate() if t.name == THREAD_NAME} <= earlier
    finally:
        made.close()
        provider.shutdown()
