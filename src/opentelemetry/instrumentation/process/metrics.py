"""The metric table: every metric this package can report, declared once.

Registration, the tests and the generated metric reference all read this
table. Adding a metric means adding one row (and, for a new kind of data, one
source in ``sources.py``). Names and attributes follow OpenTelemetry semantic
conventions 1.44; names under ``process_metrics.`` are this package's own
extensions.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

import psutil

from .sources import SOURCES

EXTENSION_PREFIX = "process_metrics."


class Kind(enum.Enum):
    """Instrument kinds, all observable (asynchronous)."""

    COUNTER = "Counter"
    UP_DOWN_COUNTER = "UpDownCounter"
    GAUGE = "Gauge"


LINUX = frozenset({"linux"})
WINDOWS = frozenset({"windows"})
POSIX = frozenset({"linux", "darwin", "freebsd", "openbsd", "netbsd", "sunos", "aix"})
ALL = POSIX | WINDOWS
# psutil's Process.io_counters() exists on Linux, the BSDs, AIX and Windows.
PROCESS_IO = ALL - {"darwin", "sunos"}


def current_platform() -> str:
    """This platform's name, as used in :attr:`Metric.platforms`."""
    if psutil.WINDOWS:
        return "windows"
    if psutil.LINUX:
        return "linux"
    for name in ("darwin", "freebsd", "openbsd", "netbsd", "sunos", "aix"):
        if sys.platform.startswith(name):
            return name
    return sys.platform


@dataclass(frozen=True)
class Metric:
    """One row of the table."""

    name: str
    kind: Kind
    unit: str
    description: str
    group: str
    source: str
    """Name of the snapshot source (see ``sources.SOURCES``)."""
    field: str
    """Field of that source's reading that holds the value."""
    attributes: tuple[str, ...] = ()
    """Attribute names, in the order of the reading's key tuples."""
    default: bool = False
    value_type: type = int
    platforms: frozenset[str] = ALL
    option: str | None = None
    """Boolean option that alone turns this metric on (``include`` does not)."""
    exact_only: bool = False
    """Enabled by ``include`` only when named exactly, never by a glob."""
    note: str = ""

    @property
    def extension(self) -> bool:
        """True for this package's own metrics, outside the semantic conventions."""
        return self.name.startswith(EXTENSION_PREFIX)

    @property
    def cost(self) -> str:
        return SOURCES[self.source].cost

    def supported(self, platform: str | None = None) -> bool:
        """Whether this metric can be reported on ``platform`` (default: this one)."""
        return (platform or current_platform()) in self.platforms and SOURCES[
            self.source
        ].available()


C, U, G = Kind.COUNTER, Kind.UP_DOWN_COUNTER, Kind.GAUGE
_DIR = ("disk.io.direction",)
_NET = ("network.interface.name", "network.io.direction")
_CPU = ("cpu.logical_number", "cpu.mode")
_FS = (
    "system.device",
    "system.filesystem.state",
    "system.filesystem.type",
    "system.filesystem.mode",
    "system.filesystem.mountpoint",
)
_PER_CPU = "cpu.logical_number only with per_cpu=True"

# fmt: off
METRICS: tuple[Metric, ...] = (
    # --- process, on by default
    Metric("process.cpu.time", C, "s", "Total CPU seconds of this process, by mode.",
           "process", "process.rusage", "cpu_time", ("cpu.mode",), True, float),
    Metric("process.cpu.utilization", G, "1",
           "CPU time since the last collection, divided by the elapsed time and the CPUs "
           "available to the process (affinity, capped by a cgroup quota).",
           "process", "process.rusage", "cpu_utilization", ("cpu.mode",), True, float),
    Metric("process.memory.usage", U, "By", "Resident set size of this process.",
           "process", "process.memory", "rss", (), True),
    Metric("process.memory.virtual", U, "By", "Virtual memory size of this process.",
           "process", "process.memory", "vms", (), True),
    Metric("process.memory.utilization", G, "1",
           "Resident set size divided by the memory available to the process "
           "(host memory, capped by a cgroup memory limit).",
           "process", "process.memory", "utilization", (), True, float),
    Metric("process.disk.io", C, "By", "Bytes this process read from and wrote to storage.",
           "process", "process.io", "bytes", _DIR, True, platforms=PROCESS_IO),
    Metric("process.disk.operations", C, "{operation}",
           "Read and write operations of this process (on Linux: read/write syscalls).",
           "process", "process.io", "operations", _DIR, True, platforms=PROCESS_IO),
    Metric("process.thread.count", U, "{thread}", "Threads of this process.",
           "process", "process.num_threads", "count", (), True),
    Metric("process.unix.file_descriptor.count", U, "{file_descriptor}",
           "File descriptors open in this process.",
           "process", "process.num_fds", "count", (), True, platforms=POSIX),
    Metric("process.windows.handle.count", U, "{handle}", "Handles open in this process.",
           "process", "process.num_handles", "count", (), True, platforms=WINDOWS),
    Metric("process.context_switches", C, "{context_switch}",
           "Context switches of all threads of this process.",
           "process", "process.rusage", "context_switches",
           ("process.context_switch.type",), True),
    Metric("process.paging.faults", C, "{fault}", "Page faults of this process.",
           "process", "process.rusage", "paging_faults", ("system.paging.fault.type",), True,
           platforms=POSIX),
    Metric("process.uptime", G, "s", "Seconds since this process started.",
           "process", "process.uptime", "uptime", (), True, float),
    # --- CPython runtime, on by default
    Metric("cpython.gc.collections", C, "{collection}", "Garbage collections, by generation.",
           "cpython", "cpython.gc", "collections", ("cpython.gc.generation",), True),
    Metric("cpython.gc.collected_objects", C, "{object}", "Objects collected, by generation.",
           "cpython", "cpython.gc", "collected", ("cpython.gc.generation",), True),
    Metric("cpython.gc.uncollectable_objects", C, "{object}",
           "Objects found uncollectable, by generation.",
           "cpython", "cpython.gc", "uncollectable", ("cpython.gc.generation",), True),
    # --- host CPU and memory, on by default (cheap: one file each)
    Metric("system.cpu.time", C, "s", "CPU seconds of the host, by mode.",
           "system.cpu", "system.cpu", "time", _CPU, True, float, note=_PER_CPU),
    Metric("system.cpu.utilization", G, "1",
           "Share of host CPU time in each mode since the last collection.",
           "system.cpu", "system.cpu", "utilization", _CPU, True, float, note=_PER_CPU),
    Metric("system.cpu.logical.count", U, "{cpu}", "Logical CPUs of the host.",
           "system.cpu", "static", "logical_cpus", (), True),
    Metric("system.cpu.physical.count", U, "{cpu}", "Physical CPU cores of the host.",
           "system.cpu", "static", "physical_cpus", (), True),
    Metric("system.memory.usage", U, "By",
           "Host memory by state; used is total minus available.",
           "system.memory", "system.memory", "usage", ("system.memory.state",), True),
    Metric("system.memory.utilization", G, "1", "Host memory by state, as a share of total.",
           "system.memory", "system.memory", "utilization", ("system.memory.state",), True,
           float),
    Metric("system.memory.limit", U, "By", "Total host memory.",
           "system.memory", "system.memory", "limit", (), True),
    # --- self-metric, on by default
    Metric("process_metrics.refresh.duration", G, "s",
           "Wall time of the snapshot refresh that this collection used (extension).",
           "self", "snapshot", "duration", (), True, float),
    # --- CPU frequency: only with cpu_frequency=True
    Metric("system.cpu.frequency", G, "Hz", "Current frequency of each logical CPU.",
           "frequency", "system.cpu_freq", "current", ("cpu.logical_number",),
           option="cpu_frequency"),
    Metric("process_metrics.cpu.frequency.min", G, "Hz",
           "Minimum CPU frequency the host allows (extension); absent where unknown.",
           "frequency", "static", "cpu_freq_min", (), option="cpu_frequency"),
    Metric("process_metrics.cpu.frequency.max", G, "Hz",
           "Maximum CPU frequency the host allows (extension); absent where unknown.",
           "frequency", "static", "cpu_freq_max", (), option="cpu_frequency"),
    # --- per-thread CPU: only with per_thread=True
    Metric("process_metrics.thread.cpu.time", C, "s",
           "CPU seconds of each thread of this process (extension), capped by "
           "max_thread_series.",
           "thread", "process.threads", "cpu_time", ("cpu.mode", "thread.id", "thread.name"),
           value_type=float, option="per_thread"),
    # --- opt-in process extras
    Metric("process.signals_pending", U, "{signal}", "Signals pending for this process.",
           "process", "process.signals", "count", (), platforms=LINUX),
    Metric("process_metrics.unix.file_descriptor.limit", U, "{file_descriptor}",
           "Soft limit on open file descriptors (RLIMIT_NOFILE) (extension).",
           "process", "static", "fd_limit", (), platforms=POSIX),
    # --- host groups, opt-in through include
    Metric("system.disk.io", C, "By", "Bytes read from and written to each disk.",
           "disk", "system.disk", "bytes", ("system.device", "disk.io.direction")),
    Metric("system.disk.operations", C, "{operation}", "Reads and writes of each disk.",
           "disk", "system.disk", "operations", ("system.device", "disk.io.direction")),
    Metric("system.network.io", C, "By", "Bytes received and sent on each interface.",
           "network", "system.network", "bytes", _NET),
    Metric("system.network.packet.count", C, "{packet}",
           "Packets received and sent on each interface.",
           "network", "system.network", "packets", _NET),
    Metric("system.network.packet.dropped", C, "{packet}",
           "Packets dropped on each interface.",
           "network", "system.network", "dropped", _NET),
    Metric("system.network.errors", C, "{error}", "Errors on each interface.",
           "network", "system.network", "errors", _NET),
    Metric("system.paging.usage", U, "By", "Swap space by state.",
           "paging", "system.swap", "usage", ("system.paging.state",)),
    Metric("system.paging.utilization", G, "1", "Swap space by state, as a share of total.",
           "paging", "system.swap", "utilization", ("system.paging.state",), value_type=float),
    Metric("system.paging.faults", C, "{fault}", "Page faults of the host.",
           "paging", "system.vmstat", "faults", ("system.paging.fault.type",),
           platforms=LINUX),
    Metric("system.filesystem.usage", U, "By", "Space of each mounted filesystem, by state.",
           "filesystem", "system.filesystem", "usage", _FS),
    Metric("system.filesystem.utilization", G, "1",
           "Space of each mounted filesystem, by state, as a share of its size.",
           "filesystem", "system.filesystem", "utilization", _FS, value_type=float),
    Metric("system.network.connection.count", U, "{connection}",
           "Host network connections by state and transport. Expensive: it walks the fds "
           "of every process; enabled only when named exactly in include.",
           "connections", "system.connections", "count",
           ("network.connection.state", "network.transport"), exact_only=True),
)
# fmt: on

METRICS_BY_NAME = {m.name: m for m in METRICS}
