"""Fault injection: a failing source drops only its own points, logs once, raises nothing.

These faults cannot be produced for real on demand (AccessDenied on our own
process, a field missing on this platform), so the OS call behind each
source is replaced by one that raises, and put back afterwards.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import gc
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import (
    ProcessInstrumentor,
    ProcessMetricsOptions,
    faultlog,
)
from opentelemetry.instrumentation.process import facts as facts_module
from opentelemetry.instrumentation.process.catalog import supported
from opentelemetry.instrumentation.process.faultlog import FAULT_LOG_PERIOD
from opentelemetry.instrumentation.process.instruments import _registries
from opentelemetry.instrumentation.process.linux import procfs
from opentelemetry.instrumentation.process.metrics import METRICS, Kind
from opentelemetry.instrumentation.process.probes.gc_pauses import TIMED_BY_INTERPRETER, GcPauses
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import SOURCES, ReadContext
from opentelemetry.instrumentation.process.sources import process as process_sources
from opentelemetry.instrumentation.process.sources import saturation as saturation_sources
from opentelemetry.instrumentation.process.sources.process import REFRESH

from .conftest import HOST_MODES, Clock, Sdk, collect, collect_after_close, points, reported
from .support.gc import callbacks_kept

LOGGER = "opentelemetry.instrumentation.process"
ON_LINUX = sys.platform.startswith("linux")

# Every source is faulted at its read (below, from SOURCES). These go deeper, for the
# sources of the first releases: the OS call behind each, so that its errors are
# seen to reach the source. The two sources that read a procfs file themselves go
# through the module's ``open``.
TARGETS: dict[str, tuple[Any, str]] = {
    "process_memory": (psutil.Process, "memory_info"),
    "process_io": (psutil.Process, "io_counters"),
    "process_num_threads": (psutil.Process, "num_threads"),
    "process_num_fds": (psutil.Process, "num_fds"),
    "process_num_handles": (psutil.Process, "num_handles"),
    "process_threads": (psutil.Process, "threads"),
    "process_signals": (procfs, "open"),
    "process_smaps": (psutil.Process, "memory_full_info"),
    "system_cpu": (psutil, "cpu_times"),
    "system_memory": (psutil, "virtual_memory"),
    "system_cpu_freq": (psutil, "cpu_freq"),
    "system_disk": (psutil, "disk_io_counters"),
    "system_network": (psutil, "net_io_counters"),
    "system_swap": (psutil, "swap_memory"),
    "system_vmstat": (procfs, "open"),
    "system_filesystem": (psutil, "disk_partitions"),
    "system_connections": (psutil, "net_connections"),
    "cpython_gc": (gc, "get_stats"),
    "cpython_gc_pauses": (GcPauses, "read"),
    "asyncio_loops": (LoopMonitor, "read_delays"),
    "asyncio_select_timing": (LoopMonitor, "read_utilization"),
    # Each file's own faults (vanished, unreadable, garbage) are in test_linux_cgroup.py.
    "cgroup_cpu": (saturation_sources, "read_all"),
    "cgroup_memory": (saturation_sources, "read_all"),
    "pressure": (saturation_sources, "read_all"),
    "process_rusage": (
        (process_sources._resource, "getrusage")
        if process_sources._resource is not None
        else (psutil.Process, "cpu_times")
    ),
}

# Every exception psutil (or the OS call) can raise there.
ERRORS: dict[str, Callable[[], BaseException]] = {
    "AccessDenied": lambda: psutil.AccessDenied(1),
    "NoSuchProcess": lambda: psutil.NoSuchProcess(1),
    "ZombieProcess": lambda: psutil.ZombieProcess(1),
    "NotImplementedError": lambda: NotImplementedError("not on this platform"),
    "OSError": lambda: OSError(5, "Input/output error"),
    "PermissionError": lambda: PermissionError(13, "Permission denied"),
    "AttributeError": lambda: AttributeError("module 'psutil' has no attribute 'x'"),
}


class _NoFields:
    """What a platform returns when it lacks the fields a source needs."""


class _EmptyFile(_NoFields):
    """A procfs file without the lines a source needs."""

    def __iter__(self) -> Any:
        return iter(())

    def __enter__(self) -> _EmptyFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None


# Sources whose direct Linux reads fall back to psutil: faulted at the OS call with
# direct reads off (the fallback itself is tested below, for each).
FALLS_BACK = {
    name
    for name, source in SOURCES.items()
    if source.direct and any(m.source == name for m in METRICS)
}


def _options_for(source: str) -> dict[str, Any]:
    fed = [m for m in METRICS if m.source == source and supported(m)]
    gated = {m.option for m in fed if m.option}
    direct = {"direct_reads": False} if source in FALLS_BACK else {}
    if gated == {"saturation"}:  # its sources share one reader: turn on only this one
        others = [m.name for m in METRICS if m.option == "saturation" and m.source != source]
        return {"saturation": True, "exclude": others}
    # A source that takes its value from another of the same refresh when it can (its
    # needs) reads it itself only without that one: theirs are left out.
    given = {"exclude": [m.name for m in METRICS if m.source in SOURCES[source].needs]}
    if gated:
        return {**direct, **given, **{option: True for option in gated if option}}
    return {**direct, **given, "include": [m.name for m in fed if not m.default]}


CASES = [
    pytest.param(source, error, id=f"{source}-{error}")
    for source in TARGETS
    if any(m.source == source and supported(m) for m in METRICS)
    for error in [*ERRORS, "missing-field"]
]


@contextlib.contextmanager
def _event_loop_in_a_thread() -> Iterator[None]:
    """An idle asyncio loop running in a thread, for the event-loop source to report."""
    stop = threading.Event()

    async def idle() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.005)

    thread = threading.Thread(target=lambda: asyncio.run(idle()), name="faults-loop", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def _collect_fed(
    reader: InMemoryMetricReader, source: str, want: set[str] | None = None
) -> dict[str, Any]:
    """One collection; for a probed source, the first one with ``want`` (or any) of its."""
    got = collect(reader)
    deadline = time.monotonic() + 10
    while source in PROBED_SOURCES and time.monotonic() < deadline:
        if want is None and any(m.source == source for m in METRICS if m.name in got):
            break
        if want is not None and want <= set(got):
            break
        time.sleep(0.05)  # the probe ticks every 20 ms once the loop is found
        got = collect(reader)
    return got


def _sharers(source: str) -> set[str]:
    """``source`` and the sources that call what it calls: a fault there fails them all."""
    if source == "cpython_gc" and TIMED_BY_INTERPRETER:  # 3.15: the pauses from gc.get_stats()
        return {source, "cpython_gc_pauses"}
    return {source}


def _healthy(reader: InMemoryMetricReader, source: str) -> tuple[dict[str, Any], set[str]]:
    """One healthy collection, and the metrics of ``source`` in it; skips where it has none."""
    healthy = _collect_fed(reader, source)
    fed = {m.name for m in METRICS if m.source == source} & set(healthy)
    if not fed:
        assert source not in LOOP_SOURCES, "the loop this test started was not reported"
        pytest.skip(f"this host has nothing for {source} to read (no such device or cgroup)")
    return healthy, fed


# The event-loop sources: the test starts a loop for them to report.
LOOP_SOURCES = {"asyncio_loops", "asyncio_select_timing"}
# Sources with points only for a window in which their probe ran: the loops' (a tick), and
# the GIL wait's longest wait (a wake of its thread, every 0.1 to 0.3 s: one may fall
# between two collections of a slow machine, and none between the next two).
PROBED_SOURCES = LOOP_SOURCES | {"cpython_gil_wait"}


@pytest.mark.parametrize(("source", "error"), CASES)
def test_failing_source_drops_only_its_points(
    source: str,
    error: str,
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner, name = TARGETS[source]
    real = getattr(owner, name, builtins.open)
    sdk.instrument(**_options_for(source))
    with contextlib.ExitStack() as stack:
        if source in LOOP_SOURCES:
            stack.enter_context(_event_loop_in_a_thread())
        _drops_only_its_points(source, error, owner, name, real, sdk.reader, monkeypatch, caplog)


def _drops_only_its_points(
    source: str,
    error: str,
    owner: Any,
    name: str,
    real: Any,
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    healthy, fed = _healthy(reader, source)
    fed |= {m.name for m in METRICS if m.source in _sharers(source)} & set(healthy)

    if error == "missing-field":

        def broken(*_a: Any, **_k: Any) -> Any:
            if name == "open":
                return _EmptyFile()
            return [_NoFields()] if source == "process_threads" else _NoFields()
    else:

        def broken(*_a: Any, **_k: Any) -> Any:
            raise ERRORS[error]()

    # wraps() keeps the attributes psutil's oneshot() expects on its methods.
    monkeypatch.setattr(owner, name, functools.wraps(real)(broken), raising=False)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    first = collect(reader)
    second = collect(reader)
    # The other loop source reports only windows with a tick in them: not compared.
    sibling = {m.name for m in METRICS if m.source in LOOP_SOURCES} - fed
    timed = sibling if source in LOOP_SOURCES else set()
    # The histograms of events report once an event (a long collection) happened.
    timed |= {m.name for m in METRICS if m.kind is Kind.HISTOGRAM} - fed
    for got in (first, second):
        assert not fed & set(got), f"{fed & set(got)} still reported"
        assert set(got) - timed == set(healthy) - fed - timed
    ours = [r for r in caplog.records if r.name.startswith(LOGGER)]
    failed = _sharers(source)
    assert len(ours) == len(failed), [r.getMessage() for r in ours]
    assert {s for s in failed for r in ours if f"'{s}'" in r.getMessage()} == failed

    monkeypatch.setattr(owner, name, real)
    assert fed <= set(_collect_fed(reader, source, fed))


def test_unknown_frequency_limits_are_absent_not_zero(
    provider: Any,
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    freq = type(psutil.cpu_freq())  # the platform's named tuple

    def vm_like(percpu: bool = False) -> Any:
        one = freq(current=2400.0, min=0.0, max=0.0)
        return [one, one] if percpu else one

    monkeypatch.setattr(psutil, "cpu_freq", vm_like)
    caplog.set_level(logging.INFO, logger=LOGGER)
    ProcessInstrumentor().instrument(meter_provider=provider, cpu_frequency=True)
    try:
        got = collect(reader)
        assert "process_metrics.cpu.frequency.min" not in got
        assert "process_metrics.cpu.frequency.max" not in got
        assert set(points(got["system.cpu.frequency"]).values()) == {2_400_000_000}
        collect(reader)
        notes = [r for r in caplog.records if "frequency limits" in r.getMessage()]
        assert len(notes) == 1
    finally:
        ProcessInstrumentor().uninstrument()


def test_known_frequency_limits_are_reported_in_hz(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    freq = type(psutil.cpu_freq())

    def bare_metal(percpu: bool = False) -> Any:
        one = freq(current=0.0, min=800.0, max=3600.0)
        return [one] if percpu else one

    monkeypatch.setattr(psutil, "cpu_freq", bare_metal)
    sdk.instrument(cpu_frequency=True)
    got = sdk.collect()
    assert set(points(got["process_metrics.cpu.frequency.min"]).values()) == {800_000_000}
    assert set(points(got["process_metrics.cpu.frequency.max"]).values()) == {3_600_000_000}
    # A CPU reading 0 MHz does not know its frequency: no point rather than 0.
    assert "system.cpu.frequency" not in got


def test_metric_without_a_source_on_this_platform_is_not_registered(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(psutil.Process, "io_counters", raising=False)
    sdk.instrument()
    assert "process.disk.io" not in _registries[sdk.provider].observers
    assert "process.disk.operations" not in _registries[sdk.provider].observers
    got = sdk.collect()
    assert "process.disk.io" not in got
    assert "process.memory.usage" in got


@pytest.mark.skipif(not ON_LINUX, reason="direct reads are Linux-only")
@pytest.mark.parametrize("error", ["OSError", "PermissionError"])
@pytest.mark.parametrize("source", sorted(FALLS_BACK))
def test_failing_direct_read_falls_back_to_psutil_and_says_so_once(
    source: str,
    error: str,
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Direct reads on, whatever the run-wide switch of conftest says.
    sdk.instrument(**{**_options_for(source), "direct_reads": True})
    with _a_child():  # something for the children sources to list
        _, fed = _healthy(sdk.reader, source)
        real = ReadContext.direct_read

        def failing(self: ReadContext, name: str, read: Callable[[], Any]) -> Any:
            def broken() -> Any:
                raise ERRORS[error]()

            return real(self, name, broken)

        monkeypatch.setattr(ReadContext, "direct_read", failing)
        caplog.set_level(logging.DEBUG, logger=LOGGER)
        for _ in range(3):
            got = _collect_fed(sdk.reader, source, fed)
            assert fed <= set(got), fed - set(got)  # psutil's values instead
    for read in SOURCES[source].direct:
        said = [m for m in _ours(caplog) if f"direct Linux read {read.name!r}" in m]
        assert len(said) == 1 and "psutil is used instead" in said[0], _ours(caplog)


@contextlib.contextmanager
def _a_child() -> Iterator[None]:
    """A child process of this one while in the block."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        yield
    finally:
        child.kill()
        child.wait()


class ReadSwitch:
    """Makes the read of source ``name`` fail, or return nothing, while ``failing`` says so.

    Installed before ``instrument()``: the snapshot cache takes its sources then.
    """

    EMPTY = "missing-field"

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.failing: str | None = None
        source = SOURCES[name]

        def read(ctx: ReadContext) -> Any:
            if self.failing == self.EMPTY:
                return {}  # a platform without the fields: nothing known
            if self.failing is not None:
                raise ERRORS[self.failing]()
            return source.read(ctx)

        monkeypatch.setitem(SOURCES, name, source._replace(read=read))  # type: ignore[index]


READ_CASES = [
    pytest.param(name, error, id=f"{name}-{error}")
    for name in SOURCES
    # The refresh's reading is its own cost, filled by the snapshot cache; the per-child
    # sources add points to the process's rows (their faults: test_children.py).
    if name != REFRESH and any(m.source == name and supported(m) for m in METRICS)
    for error in [*ERRORS, ReadSwitch.EMPTY]
]


@pytest.mark.parametrize(("source", "error"), READ_CASES)
def test_a_failing_read_drops_only_its_sources_points(
    source: str,
    error: str,
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every source, from SOURCES: a read that raises, or knows nothing, loses only its points."""
    switch = ReadSwitch(monkeypatch, source)
    sdk.instrument(**_options_for(source))
    with _event_loop_in_a_thread(), _a_child():
        healthy, fed = _healthy(sdk.reader, source)
        caplog.set_level(logging.DEBUG, logger=LOGGER)
        switch.failing = error
        # The loop sources report only windows with a tick in them, the children's
        # only what a child had: the others' sets are compared, theirs not.
        moving = {m.name for m in METRICS if m.source in LOOP_SOURCES or m.option == "children"}
        moving |= {m.name for m in METRICS if m.kind is Kind.HISTOGRAM}  # once an event happened
        for _ in range(2):
            got = set(collect(sdk.reader))
            assert not fed & got, f"{fed & got} still reported"
            assert got - moving == set(healthy) - fed - moving
        ours = [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)]
        if error == ReadSwitch.EMPTY:
            assert ours == [], ours  # nothing known is not a fault: absent, never 0
        else:
            assert len(ours) == 1 and repr(source) in ours[0] and error in ours[0], ours
        switch.failing = None
        assert fed <= set(_collect_fed(sdk.reader, source, fed))


@pytest.mark.skipif(
    not ON_LINUX, reason="process.signals_pending is Linux-only (/proc/self/status)"
)
def test_signals_source_failure_is_contained(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    sdk.instrument(include=["process.signals_pending"])
    assert "process.signals_pending" in sdk.collect()

    def denied(*_a: Any, **_k: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(procfs, "open", denied, raising=False)
    got = sdk.collect()
    assert "process.signals_pending" not in got
    assert "process.memory.usage" in got


def _cache() -> SnapshotCache:
    live = ProcessInstrumentor()._metrics._live
    assert live is not None
    return live.cache


def _ours(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name.startswith(LOGGER) and r.levelno == level
    ]


class Switch:
    """Makes one real psutil call fail while ``failing`` holds the error to raise."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        self.failing: BaseException | None = None
        real = getattr(owner, name)

        @functools.wraps(real)
        def maybe_broken(*args: Any, **kwargs: Any) -> Any:
            if self.failing is not None:
                raise self.failing
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, maybe_broken)


def test_fault_log_period_is_documented_and_sane() -> None:
    assert FAULT_LOG_PERIOD == 300.0
    assert SnapshotCache(ProcessMetricsOptions(), ()).faults.period == FAULT_LOG_PERIOD


def test_flapping_source_resumes_every_time_and_logs_once_per_period(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    switch = Switch(monkeypatch, psutil.Process, "memory_info")
    sdk.instrument()
    caplog.set_level(logging.INFO, logger=LOGGER)
    fed = {"process.memory.usage", "process.memory.virtual", "process.memory.utilization"}
    for _ in range(5):
        switch.failing = psutil.AccessDenied(1)
        got = sdk.collect()
        assert not fed & set(got)
        assert "process.cpu.time" in got
        switch.failing = None
        got = sdk.collect()
        assert fed <= set(got), "the metrics must come back when the source recovers"
        assert points(got["process.memory.usage"])
    warnings = _ours(caplog)
    assert len(warnings) == 1, warnings
    assert "'process_memory' failed (AccessDenied" in warnings[0]
    assert "at most once per 300 s" in warnings[0]
    recovered = _ours(caplog, logging.INFO)
    assert recovered == [
        "process metrics: source 'process_memory' works again; the metrics it feeds are back."
    ]


def test_distinct_faults_of_one_source_are_logged_separately(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    switch = Switch(monkeypatch, psutil, "virtual_memory")
    sdk.instrument()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for error in (psutil.AccessDenied(1), OSError(5, "EIO"), psutil.AccessDenied(1)):
        switch.failing = error
        assert "system.memory.usage" not in sdk.collect()
    warnings = _ours(caplog)
    assert len(warnings) == 2, warnings
    assert "AccessDenied" in warnings[0] and "OSError" in warnings[1]


def test_a_repeating_fault_is_logged_again_after_the_period_with_a_count(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    switch = Switch(monkeypatch, psutil.Process, "memory_info")  # on every platform
    clock = Clock()  # the fault log's clock: a loaded machine's collections take no period
    monkeypatch.setattr(faultlog, "time", clock)
    sdk.instrument()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    switch.failing = psutil.AccessDenied(1)
    for _ in range(4):
        sdk.collect()
    assert len(_ours(caplog)) == 1
    clock.now += FAULT_LOG_PERIOD
    sdk.collect()
    warnings = _ours(caplog)
    assert len(warnings) == 2, warnings
    assert "(3 more times since it was last logged" in warnings[1]


def test_a_failing_callback_never_raises_into_the_sdk_and_logs_once(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A platform returning a non-number where a number belongs breaks the
    # callback's conversion, not the source's read.
    real = gc.get_stats
    monkeypatch.setattr(gc, "get_stats", lambda: [dict(s, collected="?") for s in real()])
    sdk.instrument()
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        got = sdk.collect()
        assert "cpython.gc.collected_objects" not in got
        assert "cpython.gc.collections" in got and "process.cpu.time" in got
    ours = _ours(caplog)
    assert ours == [
        "process metrics: the callback of cpython.gc.collected_objects failed; its points are "
        f"left out. This fault is logged at most once per {FAULT_LOG_PERIOD:.0f} s."
    ]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.sdk")]
    monkeypatch.setattr(gc, "get_stats", real)
    assert "cpython.gc.collected_objects" in sdk.collect()


# (what is read, where to break it, the metrics that need it)
FACT_FAULTS = [
    pytest.param(
        [(psutil, "cpu_count"), (psutil.Process, "cpu_affinity")],
        {
            "process.cpu.utilization",
            "process_metrics.cpu.available",
            "system.cpu.logical.count",
            "system.cpu.physical.count",
        },
        id="cpu-count",
    ),
    pytest.param(
        [(psutil.Process, "create_time"), (facts_module, "_start_boottime")],
        {"process.uptime"},
        id="start-time",
    ),
    pytest.param(
        [(facts_module.cgroup, "memory_limit"), (psutil, "virtual_memory")],
        {"process.memory.utilization", "process_metrics.memory.limit"},
        id="memory-limit",
    ),
    pytest.param(
        [(facts_module, "_fd_limit")], {"process_metrics.unix.file_descriptor.limit"}, id="fd-limit"
    ),
]


@pytest.mark.parametrize(("targets", "needing"), FACT_FAULTS)
@pytest.mark.parametrize("error", ["AccessDenied", "OSError", "PermissionError"])
def test_unreadable_static_facts_leave_out_only_what_needs_them(
    targets: list[tuple[Any, str]],
    needing: set[str],
    error: str,
    sdk: Sdk,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    include = ["process_metrics.unix.file_descriptor.limit"] if ON_LINUX else []
    sdk.instrument(include=include)
    healthy = reported(sdk.collect())
    ProcessInstrumentor().uninstrument()
    if not needing & healthy:
        pytest.skip(f"this platform reports none of {sorted(needing)}")
    needing &= healthy

    def broken(*_a: Any, **_k: Any) -> Any:
        raise ERRORS[error]()

    for owner, name in targets:
        if not hasattr(owner, name):
            # psutil's API differs by platform; a target of this package's is never missing.
            assert owner in (psutil, psutil.Process), f"{owner.__name__}.{name}: a stale target"
            continue
        monkeypatch.setattr(owner, name, functools.wraps(getattr(owner, name))(broken))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    sdk.instrument(include=include)  # must not raise
    assert ProcessInstrumentor().is_instrumented_by_opentelemetry
    monkeypatch.undo()  # only the facts read at instrument() were broken
    got = reported(sdk.collect())
    # Unknown is left out, never reported as a misleading 0.
    assert got == healthy - needing, (healthy - needing) ^ got
    warnings = _ours(caplog)
    # A source that reads the same at its open says so too (the cgroup memory limit).
    assert any("could not read" in w for w in warnings), warnings
    assert all(error in w for w in warnings), warnings


def test_start_time_unreadable_in_the_psutil_constructor_leaves_out_only_uptime(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """psutil before 6.1 reads the start time in ``Process()``, letting an OSError escape.

    The older constructor is imitated here, so that every psutil version runs
    this path; the lowest-versions cell of the matrix runs the real one.
    """
    sdk.instrument()
    healthy = reported(sdk.collect())
    ProcessInstrumentor().uninstrument()
    real_init = psutil.Process.__init__

    def init_reading_start_time(self: psutil.Process, pid: int | None = None) -> None:
        real_init(self, pid)
        with contextlib.suppress(psutil.AccessDenied):  # psutil < 6.1 lets all else escape
            self.create_time()

    def broken(*_a: Any, **_k: Any) -> Any:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(psutil.Process, "__init__", init_reading_start_time)
    monkeypatch.setattr(psutil.Process, "create_time", broken)
    monkeypatch.setattr(facts_module, "_start_boottime", broken)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    sdk.instrument()  # must not raise
    monkeypatch.undo()
    assert reported(sdk.collect()) == healthy - {"process.uptime"}
    assert any("could not read the process start time (OSError" in w for w in _ours(caplog))


def test_garbage_in_cgroup_files_is_a_warning_not_a_crash(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "cgroup"
    (root / "app").mkdir(parents=True)
    (root / "app" / "cpu.max").write_text("lots 100000\n")
    (root / "app" / "memory.max").write_text("plenty\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text("0::/app\n")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    facts = facts_module.read_facts(
        psutil.Process(), cpu_frequency=False, cgroup_root=root, proc_self_cgroup=self_cgroup
    )
    # No quota or limit known: the host's figures stand.
    assert facts.available_cpus == len(psutil.Process().cpu_affinity()) if ON_LINUX else True
    assert facts.memory_limit == psutil.virtual_memory().total
    warnings = _ours(caplog)
    assert len(warnings) == 2, warnings
    assert "the cgroup CPU quota" in warnings[0] and "ValueError" in warnings[0]
    assert "the cgroup memory limit" in warnings[1]


@pytest.mark.skipif(not ON_LINUX, reason="iowait is a Linux field")
def test_host_cpu_time_never_goes_down_when_the_kernel_moves_iowait_back(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch
) -> None:
    # proc(5): "the iowait value ... may decrease in certain conditions".
    real = psutil.cpu_times
    shift = {"iowait": 0.0}

    def drifting(percpu: bool = False) -> Any:
        rows = real(percpu=percpu)
        fix = lambda row: row._replace(iowait=max(0.0, row.iowait + shift["iowait"]))  # noqa: E731
        return [fix(r) for r in rows] if percpu else fix(rows)

    monkeypatch.setattr(psutil, "cpu_times", drifting)
    sdk.instrument(per_cpu=True)
    shift["iowait"] = 100.0
    before = points(sdk.collect()["system.cpu.time"])
    shift["iowait"] = 0.0  # iowait drops by 100 s
    time.sleep(0.15)  # past the 0.1 s utilisation window
    a0 = real(percpu=True)
    after = points(sdk.collect()["system.cpu.time"])
    a1 = real(percpu=True)
    assert set(before) == set(after)
    for attributes, value in after.items():
        assert value >= before[attributes], dict(attributes)
    time.sleep(0.3)
    b0 = real(percpu=True)
    utilization = points(sdk.collect()["system.cpu.utilization"])
    b1 = real(percpu=True)
    # iowait stays at the value it had before it went back: it did not move
    # in this window, and every other mode has its share of what the kernel
    # counted (read around the two collections).
    for attributes, share in utilization.items():
        cpu, mode = dict(attributes)["cpu.logical_number"], dict(attributes)["cpu.mode"]
        if mode == "iowait":
            assert share == 0.0, dict(attributes)
            continue
        moved = {k: v for k, v in HOST_MODES.items() if k != "iowait"}
        total_lo = _ticks(b0[cpu], moved) - _ticks(a1[cpu], moved)
        total_hi = _ticks(b1[cpu], moved) - _ticks(a0[cpu], moved)
        fields = {mode: HOST_MODES[mode]}
        lo = max(0.0, _ticks(b0[cpu], fields) - _ticks(a1[cpu], fields)) / total_hi
        hi = (_ticks(b1[cpu], fields) - _ticks(a0[cpu], fields)) / total_lo
        assert lo - 1e-9 <= share <= hi + 1e-9, (dict(attributes), share, lo, hi)


def _ticks(row: Any, modes: dict[str, tuple[str, ...]]) -> float:
    times = row._asdict()
    return sum(times.get(f, 0.0) for fields in modes.values() for f in fields)


PAUSE_METRICS = {
    "process_metrics.cpython.gc.pause.time",
    "process_metrics.cpython.gc.pause.max",
}


def test_a_source_that_cannot_open_is_left_out_and_says_why(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sdk.instrument()
    healthy = reported(sdk.collect())
    ProcessInstrumentor().uninstrument()
    if not healthy >= PAUSE_METRICS:
        pytest.skip("no garbage-collection pauses here (not CPython)")

    def broken(self: GcPauses) -> bool:  # a fault injected: the hook cannot be installed
        raise RuntimeError("gc.callbacks is read-only")

    monkeypatch.setattr(GcPauses, "start", broken)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    sdk.instrument()
    assert reported(sdk.collect()) == healthy - PAUSE_METRICS
    assert _ours(caplog) == [
        "process metrics: could not open source 'cpython_gc_pauses' (RuntimeError: "
        "gc.callbacks is read-only); the metrics it feeds are left out."
    ]


def test_a_source_that_cannot_close_still_lets_uninstrument_finish(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: GcPauses) -> None:  # a fault injected: the hook cannot be removed
        raise RuntimeError("gc.callbacks is read-only")

    with callbacks_kept():  # the callback the fault leaves goes with the test
        sdk.instrument(event_loop=True)
        assert sdk.collect()
        monkeypatch.setattr(GcPauses, "stop", broken)
        caplog.set_level(logging.WARNING, logger=LOGGER)
        ProcessInstrumentor().uninstrument()
        assert not ProcessInstrumentor().is_instrumented_by_opentelemetry
        assert collect_after_close(sdk.reader) == {}
    assert _ours(caplog) == [
        "process metrics: could not close source 'cpython_gc_pauses' (RuntimeError: "
        "gc.callbacks is read-only); the metrics it feeds are left out."
    ]
