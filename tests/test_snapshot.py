"""One refresh per collection, only the enabled sources, static facts once."""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.snapshot import SnapshotCache

from .conftest import (
    OpenRecorder,
    Sdk,
    collect,
    events_metrics,
    on_by_default,
    points,
    recorded,
    task_listing,
)
from .conftest import value as value_of
from .support.internals import count_refreshes, snapshot_cache
from .support.waiting import while_still

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads procfs")


class CallCounter:
    """Counts calls of real functions; the real function still runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, int] = {}
        self._monkeypatch = monkeypatch

    def wrap(self, owner: Any, name: str) -> None:
        real = getattr(owner, name)
        label = f"{getattr(owner, '__name__', owner)}.{name}"

        @functools.wraps(real)  # keeps psutil's oneshot cache hooks
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[label] = self.calls.get(label, 0) + 1
            return real(*args, **kwargs)

        self._monkeypatch.setattr(owner, name, counted)


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[CallCounter]:
    c = CallCounter(monkeypatch)
    for name in ("memory_info", "num_threads", "io_counters", "num_fds", "threads"):
        if hasattr(psutil.Process, name):
            c.wrap(psutil.Process, name)
    for name in ("cpu_times", "virtual_memory", "cpu_freq", "cpu_count", "disk_io_counters"):
        c.wrap(psutil, name)
    yield c


def _cache() -> SnapshotCache:
    live = ProcessInstrumentor()._metrics._live
    assert live is not None
    return live.cache


def test_one_refresh_per_collection_with_one_reader(
    sdk: Sdk, counter: CallCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshes = count_refreshes(monkeypatch)
    sdk.instrument()
    counter.calls.clear()
    for n in range(1, 4):
        sdk.collect()
        assert refreshes(_cache()) == n
    assert counter.calls["Process.memory_info"] == 3
    assert counter.calls["psutil.cpu_times"] == 3
    assert counter.calls["psutil.virtual_memory"] == 3


def test_one_refresh_per_reader_collection_with_two_readers(
    counter: CallCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshes = count_refreshes(monkeypatch)
    first, second = InMemoryMetricReader(), InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[first, second])
    ProcessInstrumentor().instrument(meter_provider=provider)
    try:
        counter.calls.clear()
        a = collect(first)
        b = collect(second)
        collect(first)
        assert refreshes(_cache()) == 3
        assert counter.calls["Process.memory_info"] == 3
        # Each reader sees every metric, from its own fresh snapshot.
        assert set(a) - events_metrics() == set(b) - events_metrics() == on_by_default()
    finally:
        ProcessInstrumentor().uninstrument()
        provider.shutdown()


def test_concurrent_collections_never_see_a_half_built_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Slow one source down so that collections overlap; count its reads: one per refresh.
    real = psutil.virtual_memory
    reads = []

    def slow() -> Any:
        reads.append(1)
        threading.Event().wait(0.002)
        return real()

    readers = [InMemoryMetricReader() for _ in range(4)]
    provider = MeterProvider(metric_readers=readers)
    ProcessInstrumentor().instrument(meter_provider=provider)
    monkeypatch.setattr(psutil, "virtual_memory", slow)
    expected = on_by_default()
    failures: list[str] = []
    collections = 0

    def run(r: InMemoryMetricReader) -> None:
        nonlocal collections
        for _ in range(15):
            got = collect(r)
            collections += 1
            if set(got) - events_metrics() != expected:
                failures.append(f"missing {expected - set(got)}")
            elif len(points(got["system.memory.usage"])) < 2:
                failures.append("partial system.memory.usage")

    try:
        threads = [threading.Thread(target=run, args=(r,)) for r in readers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures[:3]
        assert collections == 60
        # The SDK serialises the collections of a provider: exactly one refresh each.
        assert len(reads) == collections
    finally:
        ProcessInstrumentor().uninstrument()
        provider.shutdown()


def test_snapshot_is_complete_for_concurrent_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = {"process_memory", "system_memory", "system_cpu", "cpython_gc", "refresh"}
    cache = SnapshotCache(ProcessMetricsOptions(), sources)
    real = psutil.virtual_memory

    def slow() -> Any:
        threading.Event().wait(0.001)
        return real()

    monkeypatch.setattr(psutil, "virtual_memory", slow)
    seen: list[set[str]] = []

    def run() -> None:
        generation = 0
        for _ in range(30):
            snap = cache.snapshot(generation)
            generation = snap.generation
            seen.append(set(snap.readings))

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 180
    assert all(s == sources for s in seen)


def test_callers_that_start_one_collection_together_share_one_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = snapshot_cache(["system_memory"])
    real = psutil.virtual_memory
    reads: list[int] = []

    def slow() -> Any:
        reads.append(1)
        threading.Event().wait(0.01)
        return real()

    monkeypatch.setattr(psutil, "virtual_memory", slow)
    seen = cache.snapshot(0).generation
    for _ in range(10):
        reads.clear()
        start = threading.Barrier(2)
        got: list[int] = []

        def call(start: threading.Barrier, got: list[int], seen: int) -> None:
            start.wait()
            got.append(cache.snapshot(seen).generation)

        threads = [threading.Thread(target=call, args=(start, got, seen)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Both had read the same snapshot: the one that waited for the lock
        # finds the other's fresh snapshot and takes it.
        assert len(reads) == 1, f"{len(reads)} refreshes for one collection"
        assert got[0] == got[1] != seen
        seen = got[0]


@linux_only
def test_default_collection_opens_only_its_sources(sdk: Sdk, opens: OpenRecorder) -> None:
    sdk.instrument()
    sdk.collect()
    with opens.recording() as paths:
        sdk.collect()
    joined = "\n".join(paths)
    for unwanted in ("cpufreq", "/proc/cpuinfo", "diskstats", "/proc/net", "cgroup", "mounts"):
        assert unwanted not in joined, paths
    # /proc/self/stat is not needed: CPU times come from getrusage(2). The
    # run-queue wait lists /proc/self/task (which gives the thread count too)
    # and reads the schedstat file of each thread that ran since the last
    # collection: this one at least. Pressure stalls are on wherever the kernel
    # has them: one file per resource.
    pressure = [r for r in ("cpu", "io", "memory") if os.path.exists(f"/proc/pressure/{r}")]
    names = [p.rsplit("/", 1)[-1] for p in paths]
    ran = names.count("schedstat")
    assert 1 <= ran <= threading.active_count(), paths
    # The election's lock file: opened for its turn, then closed (group/election.py).
    lock = [p for p in paths if p.endswith(".lock") and "/groups/" in p]
    assert len(lock) == 1, paths
    other = sorted(
        n for p, n in zip(paths, names, strict=True) if n != "schedstat" and p not in lock
    )
    assert other == sorted(["task", "statm", "io", "fd", "stat", "meminfo", *pressure]), paths
    assert f"/proc/self/task/{threading.get_native_id()}/schedstat" in paths
    assert len(paths) == len(set(paths))


@linux_only
def test_frequency_is_read_only_when_on(sdk: Sdk, opens: OpenRecorder) -> None:
    sdk.instrument(cpu_frequency=True)
    sdk.collect()
    with opens.recording() as paths:
        sdk.collect()
    assert any("cpufreq" in p or p == "/proc/cpuinfo" for p in paths), paths


@linux_only
def test_disk_group_is_read_only_when_on(sdk: Sdk, opens: OpenRecorder) -> None:
    sdk.instrument(include=["system.disk.*"])
    with opens.recording() as paths:
        sdk.collect()
    assert any(p.endswith("diskstats") for p in paths), paths


def test_static_facts_are_not_read_per_collection(sdk: Sdk, counter: CallCounter) -> None:
    sdk.instrument(include=["process_metrics.unix.file_descriptor.limit"])
    counter.calls.clear()
    for _ in range(3):
        assert "system.cpu.logical.count" in sdk.collect()
    assert "psutil.cpu_count" not in counter.calls


def test_process_files_are_read_in_one_oneshot(sdk: Sdk, monkeypatch: pytest.MonkeyPatch) -> None:
    depth = {"now": 0, "max": 0, "entered": 0}
    outside: list[str] = []
    real_oneshot = psutil.Process.oneshot

    class Tracking:
        def __init__(self, proc: psutil.Process) -> None:
            self._cm = real_oneshot(proc)

        def __enter__(self) -> None:
            depth["now"] += 1
            depth["entered"] += 1
            self._cm.__enter__()

        def __exit__(self, *exc: object) -> None:
            depth["now"] -= 1
            self._cm.__exit__(*exc)

    def track(name: str) -> None:
        real = getattr(psutil.Process, name)

        @functools.wraps(real)
        def wrapped(proc: psutil.Process, *a: Any, **k: Any) -> Any:
            if depth["now"] == 0:
                outside.append(name)
            return real(proc, *a, **k)

        monkeypatch.setattr(psutil.Process, name, wrapped)

    sdk.instrument()
    monkeypatch.setattr(psutil.Process, "oneshot", lambda proc: Tracking(proc))
    for name in ("memory_info", "num_threads", "io_counters", "num_fds"):
        if hasattr(psutil.Process, name):
            track(name)
    sdk.collect()
    assert depth["entered"] == 1
    assert outside == []


EVERYTHING: dict[str, Any] = {
    "include": ["*", "system.network.connection.count"],
    "per_thread": True,
    "per_cpu": True,
    "cpu_frequency": True,
    "saturation": True,
    "gc_pause_histogram": True,
}
# With direct reads off, psutil is the source wherever it has the value, and three
# of its calls read files that another source reads too: net_connections() lists
# the fds of every process (this one's too), swap_memory() reads meminfo and
# vmstat, num_threads() reads status, which signals_pending (no psutil API) reads;
# memory_full_info() (PSS and USS) reads statm again, outside oneshot's cache.
PSUTIL_REREADS = {
    "/proc/self/fd",
    "/proc/meminfo",
    "/proc/vmstat",
    "/proc/self/status",
    "/proc/self/statm",
}


@linux_only
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"per_thread": True},
        EVERYTHING,
        {**EVERYTHING, "thread_series_by": "name"},
        {**EVERYTHING, "direct_reads": False},
        {**EVERYTHING, "thread_series_by": "name", "direct_reads": False},
        {"include": ["process.signals_pending"]},
        {"include": ["process.signals_pending"], "direct_reads": False},
    ],
    ids=[
        "default",
        "per_thread",
        "everything",
        "by_name",
        "no_direct",
        "by_name_no_direct",
        "signals",
        "signals_no_direct",
    ],
)
def test_each_file_is_opened_once_per_collection(
    options: dict[str, Any], sdk: Sdk, opens: OpenRecorder
) -> None:
    release = threading.Event()
    extra = [threading.Thread(target=release.wait, daemon=True) for _ in range(4)]
    for t in extra:
        t.start()
    try:
        # Direct reads as the case says, whatever the run-wide switch of conftest says.
        sdk.instrument(**{"direct_reads": True, **options})
        sdk.collect()
        # Listed on either side, until no thread started or ended meanwhile (an earlier
        # test's threads may still be on their way out).
        (got, paths), _, listed = while_still(task_listing, lambda: recorded(sdk, opens))
        threads = len(listed)
    finally:
        release.set()
        for t in extra:  # gone before the next test counts threads
            t.join(10)
    me = f"/proc/{os.getpid()}/"
    seen = [p.replace(me, "/proc/self/") for p in paths]
    twice = {p for p in seen if seen.count(p) > 1}
    allowed = PSUTIL_REREADS if options.get("direct_reads") is False else set()
    assert twice <= allowed, sorted(seen)
    # One listing of the threads serves the thread count and the per-thread read.
    assert value_of(got["process.thread.count"]) == threads


# -- a reader is imported only by a source that is enabled ------------------------------

# Each imported only by the option that needs it (the defaults' own objects: tests/test_objects.py).
_READERS = (
    "probes.loops",
    "probes.gil_wait",
    "linux.sock_diag",
    "linux.threads",
    "linux.smaps",
    "sources.children",  # supervisor mode's sources, their state and their pass
    "sources.child_state",
    "sources.child_pass",
)
_PACKAGE = "opentelemetry.instrumentation.process"
_LOADED = """
import json, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import opentelemetry.instrumentation.process as package
loaded = {"import": sorted(m for m in sys.modules if m.startswith(package.__name__ + "."))}
reader = InMemoryMetricReader()
package.ProcessInstrumentor().instrument(
    meter_provider=MeterProvider(metric_readers=[reader]), **json.loads(sys.argv[1])
)
reader.get_metrics_data()
loaded["collected"] = sorted(m for m in sys.modules if m.startswith(package.__name__ + "."))
print(json.dumps(loaded))
"""


def _loaded(**options: Any) -> dict[str, list[str]]:
    """The package's modules a fresh python has loaded after the import, and after a collection."""
    import json
    import subprocess
    import tempfile

    from .support.forked import python_env

    env = {k: v for k, v in python_env().items() if not k.startswith("OTEL_")}
    # A group of its own, so that it reads the shared sources (it leads).
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="otel-loaded-")
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, json.dumps(options)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    found: dict[str, list[str]] = json.loads(done.stdout)
    return {k: [m.removeprefix(_PACKAGE + ".") for m in v] for k, v in found.items()}


def test_the_import_loads_no_source_and_the_defaults_load_no_optional_reader() -> None:
    got = _loaded()
    # The import: the instrumentor only (its package metadata and version).
    assert got["import"] == ["package", "version"], got
    assert "snapshot" in got["collected"], got
    assert not set(_READERS) & set(got["collected"]), got


def test_with_shared_metrics_every_the_group_code_is_not_loaded() -> None:
    got = _loaded(shared_metrics="every")["collected"]
    assert "snapshot" in got, got
    assert not [m for m in got if m.startswith("group")], got
    assert "group.election" in _loaded()["collected"]  # the defaults ("once") elect


@linux_only
def test_each_optional_reader_is_loaded_by_the_option_that_needs_it() -> None:
    wanted = ["system.network.connection.count", "process_metrics.memory.pss"]
    options = {"event_loop": True, "gil_wait": True, "per_thread": True, "children": True}
    got = _loaded(**options, include=wanted)["collected"]
    assert set(_READERS) <= set(got), got
