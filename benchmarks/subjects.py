"""Everything that is timed: each one is a ``collect()`` with no arguments.

One collection of an OpenTelemetry subject is ``InMemoryMetricReader.get_metrics_data()``
on its own ``MeterProvider``, so that every configuration lives in one process
and can be interleaved with the others.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil
from opentelemetry.instrumentation.system_metrics import (
    _DEFAULT_CONFIG,
    SystemMetricsInstrumentor,
)
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    InMemoryMetricReader,
    MetricsData,
    NumberDataPoint,
    Sum,
)

import configs
from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.instruments import Live, start, stop
from opentelemetry.instrumentation.process.linux.procfs import thread_count

# The peer reads this when constructed without a config: measure its shipped default.
os.environ.pop("OTEL_PYTHON_SYSTEM_METRICS_EXCLUDED_METRICS", None)

LINUX = sys.platform.startswith("linux")


@dataclass
class Subject:
    """One thing to time."""

    name: str
    group: str
    """ours, peer, floor or reference."""
    collect: Callable[[], object]
    description: str
    reader: InMemoryMetricReader | None = None
    provider: MeterProvider | None = None
    live: Live | None = None
    instruments: int = 0
    points: int = 0
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def measure_shape(self) -> None:
        """Count instruments and points from one collection (it also warms up)."""
        data = self.collect()
        if isinstance(data, MetricsData):
            self.instruments, self.points = shape(data)
        elif isinstance(data, list):  # prometheus_client metric families
            self.instruments = len(data)
            self.points = sum(len(m.samples) for m in data)

    def close(self) -> None:
        for fn in self.cleanup:
            fn()


def shape(data: MetricsData | None) -> tuple[int, int]:
    """(metrics, points) in one collection's data."""
    if data is None:
        return 0, 0
    metrics = [m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    return len(metrics), sum(len(m.data.data_points) for m in metrics)


def _provider() -> tuple[MeterProvider, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]), reader


def _otel(name: str, group: str, description: str) -> Subject:
    provider, reader = _provider()
    subject = Subject(name, group, reader.get_metrics_data, description, reader, provider)
    subject.cleanup.append(provider.shutdown)
    return subject


def ours(name: str, options: ProcessMetricsOptions, description: str = "") -> Subject:
    subject = _otel(name, "ours", description or configs.OURS_CODE.get(name, repr(options)))
    subject.live = live = start(options, subject.provider)
    subject.cleanup.insert(0, lambda: stop(live))
    return subject


# --- the peer -------------------------------------------------------------------------


def peer_process_config() -> dict[str, list[str] | None]:
    """The peer's process-only set: ``process.*`` and ``cpython.*`` without the
    deprecated ``process.runtime.*`` duplicates (20 points)."""
    return {
        k: v
        for k, v in _DEFAULT_CONFIG.items()
        if k.startswith(("process.", "cpython.")) and not k.startswith("process.runtime.")
    }


def peer(name: str, config: dict[str, list[str] | None] | None, description: str) -> Subject:
    """The peer, on its own provider, as its own instance.

    ``SystemMetricsInstrumentor`` is a singleton per class (``BaseInstrumentor.__new__``),
    and constructing it again re-runs ``__init__`` on the live instance, which swaps the
    config under the first one's callbacks (KeyError on every collection). A subclass per
    configuration has its own ``_instance``, so each configuration gets a fresh object,
    constructed once, and the peer's own code runs unchanged.
    """
    cls = type(
        f"SystemMetricsInstrumentor_{name}", (SystemMetricsInstrumentor,), {"_instance": None}
    )
    subject = _otel(name, "peer", description)
    instrumentor = cls(config=config)
    instrumentor.instrument(meter_provider=subject.provider)
    return subject


def prometheus_process() -> Subject:
    from prometheus_client.process_collector import ProcessCollector

    collector = ProcessCollector(registry=None)
    return Subject(
        "prometheus_client",
        "peer",
        collector.collect,
        "prometheus_client ProcessCollector(registry=None).collect(): "
        "/proc/self/stat, /proc/self/limits and the fd listing",
    )


# --- the SDK floor -----------------------------------------------------------------------


def floor_like(name: str, data: MetricsData, description: str) -> Subject:
    """Same instruments (kind, name) and the same points (attributes) as ``data``,
    from callbacks that return prebuilt constant observations."""
    subject = _otel(name, "floor", description)
    assert subject.provider is not None
    meter = subject.provider.get_meter("benchmarks.sdk_floor")
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points = [
                    Observation(p.value, dict(p.attributes or {}))
                    for p in metric.data.data_points
                    if isinstance(p, NumberDataPoint)
                ]
                callback = _constant(points)
                kind = metric.data
                if isinstance(kind, Sum) and kind.is_monotonic:
                    create: Any = meter.create_observable_counter
                elif isinstance(kind, Sum):
                    create = meter.create_observable_up_down_counter
                elif isinstance(kind, Gauge):
                    create = meter.create_observable_gauge
                else:  # pragma: no cover - observable instruments make only these
                    raise TypeError(type(kind))
                create(metric.name, callbacks=[callback], unit=metric.unit)
    return subject


def _constant(points: list[Observation]) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        return points

    return callback


def sdk_empty() -> Subject:
    return _otel("sdk_empty", "floor", "a MeterProvider and InMemoryMetricReader, no instruments")


# --- bare reads and the kernel floor -------------------------------------------------------

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]


_LINUX = sys.platform.startswith("linux")


def bare_reads(system: bool) -> Callable[[], object]:
    """The OS reads our process set (and, with ``system``, our default) needs, each once,
    done as plainly as sources.py does them: getrusage, one oneshot() around the
    process reads, gc.get_stats(), and for the default /proc/stat and /proc/meminfo."""
    proc = psutil.Process()

    def process_reads() -> object:
        ru = resource.getrusage(resource.RUSAGE_SELF) if resource else proc.cpu_times()
        with proc.oneshot():
            mem = proc.memory_info()
            io = proc.io_counters()
            nt = thread_count() if _LINUX else proc.num_threads()
            nfd = proc.num_fds()
        return ru, mem, io, nt, nfd, gc.get_stats()

    def default_reads() -> object:
        return process_reads(), time.time(), psutil.cpu_times(), psutil.virtual_memory()

    return default_reads if system else process_reads


_PROCFS = {
    "statm": "/proc/self/statm",
    "io": "/proc/self/io",
    "stat": "/proc/stat",
    "meminfo": "/proc/meminfo",
}


class KernelFloor:
    """The same fields read straight from procfs, without psutil.

    With ``keep_open`` (the kernel floor), descriptors are opened once:
    ``os.pread(fd, n, 0)`` on a procfs file regenerates its content at each call, and
    ``os.listdir(fd)`` on the ``/proc/self/fd`` directory descriptor rewinds it.
    Without it, each file is opened, read and closed every time, as a plain reader
    would. Parsing is the least that yields the numbers.
    """

    def __init__(self, system: bool, keep_open: bool = True) -> None:
        self.system = system
        self.page = os.sysconf("SC_PAGE_SIZE")
        names = ("statm", "io", "stat", "meminfo") if system else ("statm", "io")
        self.names = names
        self.fds = {n: os.open(_PROCFS[n], os.O_RDONLY) for n in names} if keep_open else {}
        self.fd_dir: int | str = (
            os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY) if keep_open else "/proc/self/fd"
        )
        # The package counts threads by listing /proc/self/task, as done here.
        self.task_dir: int | str = (
            os.open("/proc/self/task", os.O_RDONLY | os.O_DIRECTORY)
            if keep_open
            else "/proc/self/task"
        )

    def _read(self, name: str, size: int) -> bytes:
        fd = self.fds.get(name)
        if fd is not None:
            return os.pread(fd, size, 0)
        fd = os.open(_PROCFS[name], os.O_RDONLY)
        try:
            return os.read(fd, size)
        finally:
            os.close(fd)

    def __call__(self) -> tuple[Any, ...]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        statm = self._read("statm", 4096).split(None, 2)
        rss, vms = int(statm[1]) * self.page, int(statm[0]) * self.page
        io = self._read("io", 4096).split()
        # syscr, syscw, read_bytes, write_bytes
        io_fields = (int(io[5]), int(io[7]), int(io[9]), int(io[11]))
        threads = len(os.listdir(self.task_dir))
        nfds = len(os.listdir(self.fd_dir))
        base = (ru.ru_utime, ru.ru_stime, rss, vms, io_fields, threads, nfds, gc.get_stats())
        if not self.system:
            return base
        cpu = self._read("stat", 4096)
        cpu_times = cpu[: cpu.index(b"\n")].split()[1:]
        # MemTotal, MemFree, MemAvailable, Buffers, Cached
        mem = self._read("meminfo", 8192).split(b"\n", 5)[:5]
        return base, cpu_times, [int(line.split()[1]) for line in mem], time.time()

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        for folder in (self.fd_dir, self.task_dir):
            if isinstance(folder, int):
                os.close(folder)

    def check_fresh(self) -> bool:
        """Whether the reads see new content: RSS after a 64 MiB touch, one more fd."""
        before = self()
        block = bytearray(64 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        extra = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            after = self()
        finally:
            os.close(extra)
        b, a = (before if not self.system else before[0]), (after if not self.system else after[0])
        return bool(a[2] > b[2] and a[6] == b[6] + 1)


def reference(name: str, fn: Callable[[], object], description: str) -> Subject:
    return Subject(name, "reference", fn, description)


# --- idle threads ---------------------------------------------------------------------


class IdleThreads:
    """Extra threads that sleep on an event: present, but costing nothing but their stat file."""

    def __init__(self) -> None:
        self._threads: list[tuple[threading.Thread, threading.Event]] = []

    def resize(self, n: int) -> None:
        while len(self._threads) < n:
            stop = threading.Event()
            t = threading.Thread(
                target=stop.wait, name=f"bench-idle-{len(self._threads)}", daemon=True
            )
            t.start()
            self._threads.append((t, stop))
        while len(self._threads) > n:
            t, stop = self._threads.pop()
            stop.set()
            t.join(timeout=5)

    def __len__(self) -> int:
        return len(self._threads)


# --- the whole set for the main run ------------------------------------------------------


def build_main() -> list[Subject]:
    """Ours, the peers, the floors and the references, each warmed up once."""
    subjects = [ours(name, options) for name, options in configs.ours().items()]
    subjects.append(
        peer(
            "peer_default", None, "SystemMetricsInstrumentor(): its shipped default, 32 instruments"
        )
    )
    subjects.append(
        peer(
            "peer_process",
            peer_process_config(),
            "SystemMetricsInstrumentor(config=process.* and cpython.* without the deprecated "
            "process.runtime.*)",
        )
    )
    subjects.append(prometheus_process())
    by_name = {s.name: s for s in subjects}
    for s in subjects:
        s.measure_shape()  # the warm-up collection; every configuration has a baseline now
    floors = [sdk_empty()]
    for target in ("default", "process_set", "peer_default", "peer_process"):
        reader = by_name[target].reader
        assert reader is not None
        data = reader.get_metrics_data()
        assert data is not None
        floors.append(
            floor_like(
                f"floor_{target}",
                data,
                f"constant callbacks with the instruments and points of {target}",
            )
        )
    refs = [
        reference(
            "bare_process_set", bare_reads(False), "the OS reads process_set needs, each once"
        ),
        reference("bare_default", bare_reads(True), "the OS reads default needs, each once"),
    ]
    if LINUX:
        for system, target in ((False, "process_set"), (True, "default")):
            kf = KernelFloor(system)
            sub = reference(
                f"kernel_{target}", kf, f"the fields of {target} by os.pread on fds kept open"
            )
            sub.cleanup.append(kf.close)
            plain = KernelFloor(system, keep_open=False)
            refs += [
                sub,
                reference(
                    f"procfs_{target}",
                    plain,
                    f"the fields of {target} by os.open, os.read, os.close each time, no psutil",
                ),
            ]
    for s in floors + refs:
        s.measure_shape()
    return subjects + floors + refs
