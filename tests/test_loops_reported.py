"""The event-loop metrics through the real instrumentor, on a real SDK.

Each figure is checked against the length of each ``time.sleep`` that blocks
a loop, and asyncio's own timer heap and selector. Which metrics are selected
decides what is measured: the delays tick a timer, the utilisation times
``select``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric

from opentelemetry.instrumentation.process import (
    ProcessInstrumentor,
    ProcessMetricsOptions,
    watch_loop,
)
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
from opentelemetry.instrumentation.process.sources import runtime as runtime_sources
from opentelemetry.instrumentation.process.sources.base import ReadContext

from .conftest import Sdk, collect
from .support.gc import collector_paused  # noqa: F401 - autouse
from .support.loopapps import (
    DELAY_MAX,
    DELAY_MEAN,
    DELAY_P50,
    DELAY_P99,
    LOOP_METRICS,
    RUNNERS,
    UTILIZATION,
    UVLOOP_CLOCK,
    by_loop,
    hooks_installed,
    idle_loop,
    in_thread,
    periodic_app,
    probed,
    run_with,
    selector_timed,
    uvloop,
)

# The instrumentor probes every 20 ms (the monitor's default interval). A loop
# blocked for b reads a maximum lag in [b - INTERVAL, b + SLACK]: the tick
# falls due at most one interval into the block, and runs when it ends; SLACK
# is the wake-up latency plus scheduling noise on 2 shared cores.
INTERVAL = 0.02
SLACK = 0.05
# An idle loop runs its tick about 1 ms late here. The median must be within
# IDLE_MEDIAN; the maximum within IDLE_MAX, which only heavy noise approaches.
IDLE_MEDIAN = 0.005
IDLE_MAX = 0.05


def assert_blocked(metrics: dict[str, Metric], label: str, blocks: list[float]) -> None:
    """The window of a loop blocked ``blocks`` times reads as the module docstring says."""
    top = by_loop(metrics, DELAY_MAX)[label]
    low, high = max(blocks) - INTERVAL - UVLOOP_CLOCK, max(blocks) + SLACK
    assert low <= top <= high, (top, blocks)
    p99 = by_loop(metrics, DELAY_P99)[label]
    assert p99 <= top
    assert by_loop(metrics, DELAY_P50)[label] <= IDLE_MEDIAN
    assert 0 < by_loop(metrics, DELAY_MEAN)[label] < top


# --- the truth


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_loop_blocked_once_a_second_reports_the_block_as_its_maximum_delay(
    runner: str, sdk: Sdk
) -> None:
    """instrument() before any loop exists (the opentelemetry-instrument case)."""
    run = run_with(runner)
    sdk.instrument(event_loop=True)
    blocks: list[float] = []
    t0 = time.monotonic()
    run(periodic_app(blocks)())
    ran = time.monotonic() - t0
    got = sdk.collect()
    assert set(by_loop(got, DELAY_MAX)) == {"MainThread"}
    assert len(blocks) == 3
    assert_blocked(got, "MainThread", blocks)
    # Three late ticks in about 150: over 1 %, so p99 is one of them.
    p99 = by_loop(got, DELAY_P99)["MainThread"]
    assert min(blocks) - INTERVAL - UVLOOP_CLOCK <= p99
    if runner == "uvloop":
        assert UTILIZATION not in got  # libuv does not expose its idle time
        top = by_loop(got, DELAY_MAX)["MainThread"]
        assert abs(top * 1000 - round(top * 1000)) < 1e-6, top  # its clock counts whole ms
    else:
        busy = by_loop(got, UTILIZATION)["MainThread"]
        assert abs(busy - sum(blocks) / ran) < 0.03, (busy, blocks, ran)


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_idle_loop_reports_a_few_milliseconds_at_most(runner: str, sdk: Sdk) -> None:
    sdk.instrument(event_loop=True)
    # A stall of the host (2 busy cores) is lag the probe rightly reports, and uvloop's
    # timer wakes the loop at each tick: up to 3 rounds, one collection each.
    for _ in range(3):
        run_with(runner)(asyncio.sleep(1.0))
        got = sdk.collect()
        top = by_loop(got, DELAY_MAX)["MainThread"]
        median = by_loop(got, DELAY_P50)["MainThread"]
        mean = by_loop(got, DELAY_MEAN)["MainThread"]
        busy = by_loop(got, UTILIZATION)["MainThread"] if runner == "asyncio" else 0.0
        if median <= IDLE_MEDIAN and top <= IDLE_MAX and mean <= IDLE_MEDIAN and busy < 0.1:
            break
    assert 0 <= median <= IDLE_MEDIAN and median <= top <= IDLE_MAX, (median, top)
    assert mean <= IDLE_MEDIAN
    assert busy < 0.1


@pytest.mark.parametrize("runner", RUNNERS)
def test_instrument_inside_a_running_loop(
    runner: str, provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    blocks: list[float] = []
    inst = ProcessInstrumentor()

    async def app() -> dict[str, Metric]:
        inst.instrument(meter_provider=provider, event_loop=True)
        await periodic_app(blocks, count=1, every=0.5)()
        return collect(reader)  # from inside the loop, as a pull exporter would

    try:
        got = run_with(runner)(app())
    finally:
        inst.uninstrument()
    assert set(by_loop(got, DELAY_MAX)) == {"MainThread"}
    assert_blocked(got, "MainThread", blocks)


def test_loops_in_several_threads_are_one_series_each(sdk: Sdk) -> None:
    """Each thread blocks for its own length; each series shows its own loop's block.

    Three loops and this thread share 2 cores with other jobs, so a loop thread
    can wait well over 50 ms for a core: the lengths are far enough apart that
    a 0.2 s slack still tells each loop's series from the others'. One loop is
    uvloop.
    """
    sdk.instrument(event_loop=True)
    lengths = {"alpha": 0.05, "beta": 0.3, "gamma": 0.6}
    runners = {"alpha": "asyncio", "beta": "uvloop" if uvloop else "asyncio", "gamma": "asyncio"}
    blocks: dict[str, list[float]] = {name: [] for name in lengths}
    ready = {name: threading.Event() for name in lengths}
    release = threading.Event()

    def body(name: str) -> None:
        async def app() -> None:
            await periodic_app(blocks[name], count=2, every=0.8, block=lengths[name])()
            ready[name].set()
            while not release.is_set():
                await asyncio.sleep(0.02)

        run_with(runners[name])(app())

    threads = [in_thread(name, lambda n=name: body(n)) for name in lengths]  # type: ignore[misc]
    try:
        assert all(event.wait(20) for event in ready.values())
        got = sdk.collect()
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    for name in LOOP_METRICS[:4]:
        assert set(by_loop(got, name)) == set(lengths), name
    for name, length in lengths.items():
        top = by_loop(got, DELAY_MAX)[name]
        low, high = max(blocks[name]) - INTERVAL - UVLOOP_CLOCK, max(blocks[name]) + 0.2
        assert low <= top <= high, (name, top, blocks[name], length)


def test_a_closed_loop_leaves_no_series_at_the_next_collection(sdk: Sdk) -> None:
    sdk.instrument(event_loop=True)
    thread = in_thread("short-lived", lambda: asyncio.run(asyncio.sleep(0.3)))
    thread.join(10)
    last = sdk.collect()
    assert "short-lived" in by_loop(last, DELAY_MAX)  # its last window, once
    after = sdk.collect()
    for name in LOOP_METRICS:
        assert "short-lived" not in by_loop(after, name), name


_EXITS = textwrap.dedent(
    """
    import asyncio, sys, threading
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    reader = InMemoryMetricReader()
    ProcessInstrumentor().instrument(
        meter_provider=MeterProvider(metric_readers=[reader]), event_loop=True
    )
    run = asyncio.run
    if sys.argv[1] == "uvloop":
        import uvloop
        run = uvloop.run

    async def main():
        await asyncio.sleep(0.3)

    # A loop in a thread that is not a daemon, and one in the main thread.
    worker = threading.Thread(target=lambda: run(main()), name="worker")
    worker.start()
    run(main())
    worker.join()
    print(sorted(
        p.attributes["thread.name"]
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "process_metrics.eventloop.delay.max"
        for p in m.data.data_points
    ))
    """
)


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_probe_never_keeps_a_process_alive(runner: str) -> None:
    if runner == "uvloop" and uvloop is None:
        pytest.skip("uvloop is not installed")
    # A probe that kept its loop or the process alive would hang here until the timeout.
    done = subprocess.run(
        [sys.executable, "-c", _EXITS, runner], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['MainThread', 'worker']", done.stdout
    assert done.stderr == ""


_UVLOOP_LATE = textwrap.dedent(
    """
    import asyncio, json, time
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=provider, event_loop=True)
    import uvloop  # while reporting runs: it keeps the wrapped asyncio function

    def loops():
        data = reader.get_metrics_data()
        return {
            p.attributes["thread.name"]: p.value
            for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "process_metrics.eventloop.delay.max"
            for p in m.data.data_points
        }

    async def main():
        await asyncio.sleep(0.2)
        time.sleep(0.1)
        await asyncio.sleep(0.05)

    uvloop.run(main())
    during = loops()
    inst.uninstrument()
    uvloop.run(main())  # through the kept wrapper, which only passes the call on
    after = loops()
    inst.instrument(meter_provider=provider, event_loop=True)
    uvloop.run(main())
    again = loops()
    inst.uninstrument()
    print(json.dumps({"during": during, "after": after, "again": again}))
    """
)


def test_uvloop_imported_while_reporting_runs_is_probed_and_released() -> None:
    if uvloop is None:
        pytest.skip("uvloop is not installed")
    done = subprocess.run(
        [sys.executable, "-c", _UVLOOP_LATE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    for phase in ("during", "again"):
        assert list(got[phase]) == ["MainThread"], got
        assert 0.1 - INTERVAL - UVLOOP_CLOCK <= got[phase]["MainThread"] <= 0.1 + SLACK, got
    assert got["after"] == {}, got


@pytest.mark.parametrize(
    ("source", "read", "fed"),
    [
        ("asyncio_loops", "read_delays", LOOP_METRICS[:4]),
        ("asyncio_select_timing", "read_utilization", (UTILIZATION,)),
    ],
)
def test_a_failing_loop_read_drops_only_its_points_and_recovers(
    source: str,
    read: str,
    fed: tuple[str, ...],
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fault injected into the monitor's read while a loop runs (test_faults has no loop)."""

    sdk.instrument(event_loop=True)
    with idle_loop("app-loop"):
        time.sleep(0.1)
        healthy = sdk.collect()
        assert set(LOOP_METRICS) <= set(healthy)
        real = getattr(LoopMonitor, read)

        def broken(self: LoopMonitor) -> Any:
            raise RuntimeError("injected")

        monkeypatch.setattr(LoopMonitor, read, broken)
        caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.process")
        failing = []
        for _ in range(2):
            time.sleep(0.1)  # ticks in each window: the other loop source has points
            failing.append(sdk.collect())
        monkeypatch.setattr(LoopMonitor, read, real)
        time.sleep(0.1)
        back = sdk.collect()
    for got in failing:
        assert set(got) == set(healthy) - set(fed)
    ours = [r.getMessage() for r in caplog.records if repr(source) in r.getMessage()]
    assert len(ours) == 2 and "failed" in ours[0] and "works again" in ours[1], ours
    assert all("app-loop" in by_loop(back, name) for name in fed)


# --- the metrics selected decide what is measured


def _one_loop(inst: Callable[[], Any], reader: InMemoryMetricReader) -> dict[str, Any]:
    """A loop in a thread, started after ``inst()``: its timers, its selector, one collection."""
    blocked, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.2)
        holder["timers"] = probed(loop)
        holder["timed"] = selector_timed(loop)
        time.sleep(0.1)  # a block: a delay, and busy time
        for _ in range(2):  # the probe has taken its delay: parked, at the next select;
            await asyncio.sleep(0)  # else its late tick, in the iteration after
        blocked.set()
        await loop.run_in_executor(None, release.wait, 10)

    inst()
    thread = in_thread("app-loop", lambda: asyncio.run(app()))
    try:
        assert blocked.wait(10)  # not a fixed sleep: a loaded host may stall the loop
        got = collect(reader)
    finally:
        release.set()
        thread.join(10)
    return {**holder, "delay": by_loop(got, DELAY_MAX), "busy": by_loop(got, UTILIZATION)}


@pytest.mark.parametrize(
    "exclude",
    [[], [UTILIZATION], ["process_metrics.eventloop.delay.*"]],
    ids=["all", "no utilisation", "no delays"],
)
def test_only_what_a_selected_metric_reads_is_measured(exclude: list[str], sdk: Sdk) -> None:
    """Utilisation excluded: select is not timed. Delays excluded: the loop gets no probe."""
    got = _one_loop(lambda: sdk.instrument(event_loop=True, exclude=exclude), sdk.reader)
    delays = not any("delay" in name for name in exclude)
    busy = UTILIZATION not in exclude
    assert got["timers"] == (1 if delays else 0)
    assert got["timed"] is busy
    if delays:
        assert 0.1 - INTERVAL - UVLOOP_CLOCK <= got["delay"]["app-loop"] <= 0.1 + SLACK, got
    else:
        assert got["delay"] == {}
    if busy:
        assert 0.0 < got["busy"]["app-loop"] <= 1.0, got
    else:
        assert got["busy"] == {}


def test_instrument_inside_a_running_loop_times_its_select_too(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    """The delays source opens first; the utilisation source then times the same loop."""
    inst = ProcessInstrumentor()

    async def app() -> tuple[int, bool, dict[str, Metric]]:
        inst.instrument(meter_provider=provider, event_loop=True)
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        time.sleep(0.1)
        await asyncio.sleep(0.1)
        return probed(loop), selector_timed(loop), collect(reader)

    try:
        timers, timed, got = asyncio.run(app())
    finally:
        inst.uninstrument()
    assert (timers, timed) == (1, True)
    assert 0.0 < by_loop(got, UTILIZATION)["MainThread"] <= 1.0


def test_a_loop_running_before_instrument_is_reported_once_watched(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        holder["loop"] = asyncio.get_running_loop()
        running.set()
        while not release.is_set():
            await asyncio.sleep(0.02)

    thread = in_thread("early", lambda: asyncio.run(app()))
    inst = ProcessInstrumentor()
    try:
        assert running.wait(10)
        inst.instrument(meter_provider=provider, event_loop=True)
        time.sleep(0.1)
        before = by_loop(collect(reader), DELAY_MAX)
        watch_loop(holder.pop("loop"))
        # Its begin runs in its own thread, which a loaded host may stall: collect until
        # it shows (it always does once begun), within a generous deadline.
        deadline = time.monotonic() + 10
        while True:
            time.sleep(0.2)
            after = collect(reader)
            shown = "early" in by_loop(after, DELAY_MAX) and "early" in by_loop(after, UTILIZATION)
            if shown or time.monotonic() > deadline:
                break
    finally:
        release.set()
        thread.join(10)
        inst.uninstrument()
    assert before == {}  # running before instrument(): not seen until it starts again
    assert "early" in by_loop(after, DELAY_MAX)
    assert "early" in by_loop(after, UTILIZATION)


def test_closing_the_loops_source_that_never_opened_does_nothing() -> None:
    process = psutil.Process()
    ctx = ReadContext(
        process=process,
        facts=read_facts(process, cpu_frequency=False),
        options=ProcessMetricsOptions(),
        faults=FaultLog(),
        direct=False,
    )
    before = (asyncio.events._set_running_loop, hooks_installed())
    runtime_sources._close_loops(ctx)
    assert ctx.state == {}
    assert (asyncio.events._set_running_loop, hooks_installed()) == before
