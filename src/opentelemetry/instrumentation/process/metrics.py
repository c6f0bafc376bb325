"""The metric table: every metric this package can report, declared once.

Registration, the tests and the generated metric reference all read this
table. Adding a metric means adding one row (and, for a new kind of data, one
source under ``sources/``). Names follow OpenTelemetry semantic conventions
1.44; names under ``process_metrics.`` are this package's own extensions. A
row names its source and field by id; ``catalog.py`` joins them and checks
the table.

This module is internal: its names may change between releases.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

EXTENSION_PREFIX = "process_metrics."


class Kind(enum.Enum):
    """Instrument kinds: observable (asynchronous), but for the histogram of events."""

    COUNTER = "Counter"
    UP_DOWN_COUNTER = "UpDownCounter"
    GAUGE = "Gauge"
    HISTOGRAM = "Histogram"
    """Synchronous: each event of the field (a stall) recorded at the collection that finds it."""


class Metric(NamedTuple):
    """One row of the table; ``_replace`` makes a changed copy."""

    name: str
    kind: Kind
    unit: str
    description: str
    group: str
    """The section of the metric reference it is listed in."""
    source: str
    """Id of the snapshot source (see ``sources.SOURCES``); ``catalog.py`` joins the two."""
    field: str
    """Field of that source's reading that holds the value."""
    default: bool = False
    value_type: type = int
    option: str | None = None
    """Option that alone turns this metric on (``include`` does not), declared with ``gates=True``.

    The metric is on unless the option is ``False``: ``None`` (auto) leaves the
    decision to the snapshot side, which then may report nothing.
    """
    exact_only: bool = False
    """Enabled by ``include`` only when named exactly, never by a glob."""
    note: str = ""

    @property
    def extension(self) -> bool:
        """True for this package's own metrics, outside the semantic conventions."""
        return self.name.startswith(EXTENSION_PREFIX)


C, U, G, H = Kind.COUNTER, Kind.UP_DOWN_COUNTER, Kind.GAUGE, Kind.HISTOGRAM
_PER_CPU = "cpu.logical_number only with per_cpu=True"
_LOOP = (
    "thread.name: the thread running the loop, with the counter of default names "
    "removed (Thread (serve)); #2, #3 for loops alive at once under one name"
)
_TREE_CPU = (
    "this process's own time, its live descendants' (with what they reaped of theirs) and "
    "what it reaped of its children (RUSAGE_CHILDREN); never decreases"
)
_EXITS = (
    "process_metrics.exit.cause: exit (code 0), error (another code), signal, oom_kill (a "
    "SIGKILL while the child's memory cgroup counted an OOM kill), timeout (the server's, "
    "with its hook: docs/supervisor.md) or unknown (the status was not seen: reaped by "
    "another process); process_metrics.exit.signal names the signal (SIGKILL...); "
    "process.exit.code is the code of an exit. A child that lived and ended between two "
    "collections is counted only if this process reaped it"
)
_GIL = (
    "about 5 samples a second; time / samples is the mean wait of a thread that becomes "
    "ready, contended / samples the share of time another thread held the GIL "
    "(docs/stalls.md)"
)
_STALL_GC = (
    "recorded at the collection of metrics after the pause; on interpreters that time their "
    "own collections (3.15), without gc_pause_histogram, only a generation's lone collection "
    "of an interval, with no span (docs/stalls.md)"
)
_STALL_LOOP = (
    "code.function.name: module.qualname of the innermost Python frame of the thread of the "
    "loop during the stall, at most 50 names a process, later ones (other); left out if not "
    "seen (a block in C holding the GIL, a free-threaded build)"
)
_PSI = (
    "stall_type is some or full; scope is cgroup (the files of a v2 cgroup) or host "
    "(/proc/pressure); modelled on semantic-conventions PR #3528, whose .total suffix is "
    "left out because Prometheus naming would read it as the counter suffix"
)


METRICS: tuple[Metric, ...] = (
    # --- process, on by default
    Metric("process.cpu.time", C, "s", "Total CPU seconds of this process, by mode.",
           group="process", source="process_rusage", field="cpu_time",
           default=True, value_type=float),
    Metric("process.cpu.utilization", G, "1",
           "CPU time since the last collection, divided by the elapsed time and the CPUs "
           "available to the process (affinity, capped by a cgroup quota).",
           group="process", source="process_rusage", field="cpu_utilization",
           default=True, value_type=float),
    Metric("process.memory.usage", U, "By", "Resident set size of this process.",
           group="process", source="process_memory", field="rss", default=True),
    Metric("process.memory.virtual", U, "By", "Virtual memory size of this process.",
           group="process", source="process_memory", field="vms", default=True),
    Metric("process.memory.utilization", G, "1",
           "Resident set size divided by the memory available to the process "
           "(host memory, capped by a cgroup memory limit).",
           group="process", source="process_memory", field="utilization", default=True,
           value_type=float),
    Metric("process.disk.io", C, "By", "Bytes this process read from and wrote to storage.",
           group="process", source="process_io", field="bytes", default=True),
    Metric("process.disk.operations", C, "{operation}",
           "Read and write operations of this process (on Linux: read/write syscalls).",
           group="process", source="process_io", field="operations", default=True),
    Metric("process.thread.count", U, "{thread}", "Threads of this process.",
           group="process", source="process_num_threads", field="count", default=True),
    Metric("process.unix.file_descriptor.count", U, "{file_descriptor}",
           "File descriptors open in this process.",
           group="process", source="process_num_fds", field="count", default=True),
    Metric("process.windows.handle.count", U, "{handle}", "Handles open in this process.",
           group="process", source="process_num_handles", field="count", default=True),
    Metric("process.context_switches", C, "{context_switch}",
           "Context switches of all threads of this process.",
           group="process", source="process_rusage", field="context_switches", default=True),
    Metric("process.paging.faults", C, "{fault}", "Page faults of this process.",
           group="process", source="process_rusage", field="paging_faults", default=True),
    Metric("process.uptime", G, "s", "Seconds since this process started.",
           group="process", source="process_uptime", field="uptime", default=True,
           value_type=float),
    Metric("process_metrics.cpu.linux.run_queue.wait_time", C, "s",
           "Time the threads of this process were runnable but waiting for a CPU, added up "
           "over the threads (their schedstat run_delay), time throttled by a CPU quota "
           "included (extension).",
           group="process", source="process_run_queue", field="wait_time", default=True,
           value_type=float,
           note="what a thread waited after the last collection is lost when it exits"),
    # --- limits of this process, on by default (static facts: no read)
    Metric("process_metrics.cpu.available", G, "{cpu}",
           "CPUs this process may use: its affinity, capped by a cgroup CPU quota; the "
           "divisor of process.cpu.utilization (extension).",
           group="limits", source="static", field="available_cpus", default=True,
           value_type=float),
    Metric("process_metrics.memory.limit", G, "By",
           "Bytes this process may use: host memory, capped by a cgroup memory limit; the "
           "divisor of process.memory.utilization (extension).",
           group="limits", source="static", field="memory_limit", default=True),
    Metric("process_metrics.unix.file_descriptor.limit", G, "{file_descriptor}",
           "Soft limit on open file descriptors (RLIMIT_NOFILE) (extension).",
           group="limits", source="static", field="fd_limit", default=True),
    # --- CPython runtime, on by default
    Metric("cpython.gc.collections", C, "{collection}",
           "Garbage collections, by the generation CPython reports (a free-threaded build "
           "reports every automatic collection as generation 0, and each is full).",
           group="cpython", source="cpython_gc", field="collections",
           default=True),
    Metric("cpython.gc.collected_objects", C, "{object}",
           "Objects collected, by the generation CPython reports.",
           group="cpython", source="cpython_gc", field="collected",
           default=True),
    Metric("cpython.gc.uncollectable_objects", C, "{object}",
           "Objects found uncollectable, by the generation CPython reports.",
           group="cpython", source="cpython_gc", field="uncollectable",
           default=True),
    Metric("process_metrics.cpython.gc.pause.time", C, "s",
           "Time spent in garbage collections, by the generation CPython reports, measured "
           "around each one (extension).",
           group="cpython", source="cpython_gc_pauses", field="time",
           default=True, value_type=float),
    Metric("process_metrics.cpython.gc.pause.max", G, "s",
           "Longest single garbage-collection pause since the previous collection of "
           "metrics, by generation; 0 for a generation that did not collect (extension).",
           group="cpython", source="cpython_gc_pauses", field="max",
           default=True, value_type=float),
    Metric("process_metrics.cpython.gc.stall.duration", H, "s",
           "Garbage-collection pauses of 100 ms or more, by generation; each carries the span "
           "the collecting thread ran under as an exemplar, where a trace was sampled "
           "(extension).",
           group="cpython", source="cpython_gc_pauses", field="stalls",
           default=True, value_type=float, note=_STALL_GC),
    Metric("process_metrics.cpython.gc.pause.bucket", C, "{pause}",
           "Garbage-collection pauses no longer than each bucket bound, all generations "
           "(extension): a histogram as cumulative counters.",
           group="cpython", source="cpython_gc_pauses", field="buckets",
           option="gc_pause_histogram",
           note="le: 1e-05 to 1 (seconds, the 1-2-5 series) and +Inf, as Prometheus writes "
           "them"),
    # --- GIL wait: only with gil_wait=True
    Metric("process_metrics.cpython.gil.wait.time", C, "s",
           "Time a sampling thread waited for the GIL after it became ready, its run-queue "
           "wait taken out, added up over its samples (extension).",
           group="cpython", source="cpython_gil_wait", field="time", value_type=float,
           option="gil_wait", note=_GIL),
    Metric("process_metrics.cpython.gil.wait.samples", C, "{sample}",
           "Wakes of the GIL-wait sampling thread (extension).",
           group="cpython", source="cpython_gil_wait", field="samples", option="gil_wait",
           note=_GIL),
    Metric("process_metrics.cpython.gil.wait.contended", C, "{sample}",
           "Wakes of the GIL-wait sampling thread that waited for the GIL at all (extension).",
           group="cpython", source="cpython_gil_wait", field="contended", option="gil_wait",
           note=_GIL),
    Metric("process_metrics.cpython.gil.wait.max", G, "s",
           "Longest wait for the GIL of one sample since the previous collection of metrics "
           "(extension).",
           group="cpython", source="cpython_gil_wait", field="max", value_type=float,
           option="gil_wait", note=_GIL),
    # --- event-loop lag: only with event_loop=True
    Metric("process_metrics.eventloop.delay.max", G, "s",
           "Longest delay of an asyncio event loop in running a timer since the previous "
           "collection (extension).",
           group="eventloop", source="asyncio_loops", field="max",
           value_type=float, option="event_loop", note=_LOOP),
    Metric("process_metrics.eventloop.delay.mean", G, "s",
           "Mean delay of an asyncio event loop in running a timer since the previous "
           "collection (extension).",
           group="eventloop", source="asyncio_loops", field="mean",
           value_type=float, option="event_loop", note=_LOOP),
    Metric("process_metrics.eventloop.delay.p50", G, "s",
           "Median delay of an asyncio event loop in running a timer since the previous "
           "collection, rounded up to a bucket bound (extension).",
           group="eventloop", source="asyncio_loops", field="p50",
           value_type=float, option="event_loop", note=_LOOP),
    Metric("process_metrics.eventloop.delay.p99", G, "s",
           "99th percentile of the delays of an asyncio event loop in running a timer since "
           "the previous collection, rounded up to a bucket bound (extension).",
           group="eventloop", source="asyncio_loops", field="p99",
           value_type=float, option="event_loop", note=_LOOP),
    Metric("process_metrics.eventloop.stall.duration", H, "s",
           "Stretches of 100 ms or more in which an asyncio event loop called no select (code "
           "held it), by loop and the function that held it; each carries the span it ran "
           "under as an exemplar, where a trace was sampled (extension).",
           group="eventloop", source="asyncio_loop_stalls", field="stalls",
           value_type=float, option="event_loop", note=_STALL_LOOP),
    Metric("process_metrics.eventloop.utilization", G, "1",
           "Share of its running time an asyncio event loop spent busy, not waiting for I/O, "
           "since the previous collection; not measured on uvloop (extension).",
           group="eventloop", source="asyncio_select_timing", field="utilization",
           value_type=float, option="event_loop", note=_LOOP),
    # --- host CPU and memory, on by default (cheap: one file each)
    Metric("system.cpu.time", C, "s", "CPU seconds of the host, by mode.",
           group="system.cpu", source="system_cpu", field="time",
           default=True, value_type=float, note=_PER_CPU),
    Metric("system.cpu.utilization", G, "1",
           "Share of host CPU time in each mode since the last collection.",
           group="system.cpu", source="system_cpu", field="utilization",
           default=True, value_type=float, note=_PER_CPU),
    Metric("system.cpu.logical.count", U, "{cpu}", "Logical CPUs of the host.",
           group="system.cpu", source="system_static", field="logical_cpus", default=True),
    Metric("system.cpu.physical.count", U, "{cpu}", "Physical CPU cores of the host.",
           group="system.cpu", source="system_static", field="physical_cpus", default=True),
    Metric("system.memory.usage", U, "By",
           "Host memory by state, which add up to the total: used is total minus available; "
           "free, buffers and cached share out the available rest.",
           group="system.memory", source="system_memory", field="usage", default=True),
    Metric("system.memory.utilization", G, "1", "Host memory by state, as a share of total.",
           group="system.memory", source="system_memory", field="utilization", default=True,
           value_type=float),
    Metric("system.memory.limit", U, "By", "Total host memory.",
           group="system.memory", source="system_memory", field="limit", default=True),
    # --- self-metrics, on by default
    Metric("process_metrics.refresh.cpu_time", G, "s",
           "CPU time that the snapshot refresh of this collection cost the thread that ran "
           "it (extension).",
           group="self", source="refresh", field="cpu_time", default=True, value_type=float),
    Metric("process_metrics.refresh.duration", G, "s",
           "Wall time of the snapshot refresh of this collection, waits for the GIL "
           "included (extension).",
           group="self", source="refresh", field="duration", default=True, value_type=float),
    # --- saturation (Linux): on when a cgroup limits the process, or saturation=True
    Metric("process_metrics.cgroup.cpu.periods", C, "{period}",
           "Enforcement periods of the CPU quota of the cgroup of this process in which it was "
           "runnable; 0 when the quota is set on an ancestor only (extension).",
           group="saturation", source="cgroup_cpu", field="periods", option="saturation"),
    Metric("process_metrics.cgroup.cpu.throttled_periods", C, "{period}",
           "Periods in which the cgroup of this process was throttled by its CPU quota "
           "(extension).",
           group="saturation", source="cgroup_cpu", field="throttled_periods",
           option="saturation"),
    Metric("process_metrics.cgroup.cpu.throttled_time", C, "s",
           "Total time the tasks of the cgroup of this process were throttled (extension).",
           group="saturation", source="cgroup_cpu", field="throttled_time", value_type=float,
           option="saturation"),
    Metric("container.cpu.time", C, "s",
           "CPU seconds of the cgroup of this process (all its processes), by mode.",
           group="saturation", source="cgroup_cpu", field="cpu_time",
           value_type=float, option="saturation",
           note="cpu.mode is user or kernel, as the container conventions name them"),
    Metric("container.memory.usage", U, "By",
           "Memory charged to the cgroup of this process, page cache included.",
           group="saturation", source="cgroup_memory", field="usage", option="saturation"),
    Metric("container.memory.working_set", U, "By",
           "Memory usage of the cgroup of this process minus its inactive page cache, floored at "
           "0, as kubelet and cAdvisor compute it.",
           group="saturation", source="cgroup_memory", field="working_set",
           option="saturation"),
    Metric("process_metrics.cgroup.memory.limit", G, "By",
           "The tightest memory limit of the cgroup of this process and its ancestors, read at "
           "instrument() (extension); absent when there is none.",
           group="saturation", source="cgroup_memory", field="limit", option="saturation"),
    Metric("process_metrics.cgroup.memory.peak", G, "By",
           "Highest memory usage of the cgroup of this process, where the kernel keeps it "
           "(extension).",
           group="saturation", source="cgroup_memory", field="peak", option="saturation"),
    Metric("process_metrics.cgroup.memory.events", C, "{event}",
           "Memory events of the cgroup of this process: over high, at max, OOM, OOM kill "
           "(extension).",
           group="saturation", source="cgroup_memory", field="events", option="saturation",
           note="v1 has only max (memory.failcnt) and oom_kill"),
    Metric("process_metrics.cpu.linux.pressure.stall_time", C, "s",
           "Time tasks stalled waiting for CPU (pressure stall information) (extension).",
           group="saturation", source="pressure", field="cpu",
           value_type=float, option="saturation", note=_PSI),
    Metric("process_metrics.memory.linux.pressure.stall_time", C, "s",
           "Time tasks stalled waiting for memory (pressure stall information) (extension).",
           group="saturation", source="pressure", field="memory",
           value_type=float, option="saturation", note=_PSI),
    Metric("process_metrics.io.linux.pressure.stall_time", C, "s",
           "Time tasks stalled waiting for I/O (pressure stall information) (extension).",
           group="saturation", source="pressure", field="io",
           value_type=float, option="saturation", note=_PSI),
    # --- CPU frequency: only with cpu_frequency=True
    Metric("system.cpu.frequency", G, "Hz", "Current frequency of each logical CPU.",
           group="frequency", source="system_cpu_freq", field="current", option="cpu_frequency"),
    Metric("process_metrics.cpu.frequency.min", G, "Hz",
           "Minimum CPU frequency the host allows (extension); absent where unknown.",
           group="frequency", source="system_static", field="cpu_freq_min", option="cpu_frequency"),
    Metric("process_metrics.cpu.frequency.max", G, "Hz",
           "Maximum CPU frequency the host allows (extension); absent where unknown.",
           group="frequency", source="system_static", field="cpu_freq_max", option="cpu_frequency"),
    # --- per-thread CPU: only with per_thread=True
    Metric("process_metrics.thread.cpu.time", C, "s",
           "CPU seconds of each thread of this process (extension), capped by "
           "max_thread_series.",
           group="thread", source="process_threads", field="cpu_time", value_type=float,
           option="per_thread"),
    # --- opt-in process extras
    Metric("process.signals_pending", U, "{signal}", "Signals pending for this process.",
           group="process", source="process_signals", field="count"),
    Metric("process_metrics.memory.pss", U, "By",
           "Proportional set size of this process: its resident pages, each shared page "
           "divided by the processes that share it, so that the PSS of workers adds up "
           "(extension).",
           group="process", source="process_smaps", field="pss"),
    Metric("process_metrics.memory.uss", U, "By",
           "Unique set size of this process: the resident pages no other process shares, "
           "what exiting would free (extension).",
           group="process", source="process_smaps", field="uss"),
    # --- host groups, opt-in through include
    Metric("system.disk.io", C, "By", "Bytes read from and written to each disk.",
           group="disk", source="system_disk", field="bytes"),
    Metric("system.disk.operations", C, "{operation}", "Reads and writes of each disk.",
           group="disk", source="system_disk", field="operations"),
    Metric("system.network.io", C, "By", "Bytes received and sent on each interface.",
           group="network", source="system_network", field="bytes"),
    Metric("system.network.packet.count", C, "{packet}",
           "Packets received and sent on each interface.",
           group="network", source="system_network", field="packets"),
    Metric("system.network.packet.dropped", C, "{packet}",
           "Packets dropped on each interface.",
           group="network", source="system_network", field="dropped"),
    Metric("system.network.errors", C, "{error}", "Errors on each interface.",
           group="network", source="system_network", field="errors"),
    Metric("system.paging.usage", U, "By", "Swap space by state.",
           group="paging", source="system_swap", field="usage"),
    Metric("system.paging.utilization", G, "1", "Swap space by state, as a share of total.",
           group="paging", source="system_swap", field="utilization", value_type=float),
    Metric("system.paging.faults", C, "{fault}", "Page faults of the host.",
           group="paging", source="system_vmstat", field="faults"),
    Metric("system.filesystem.usage", U, "By", "Space of each mounted filesystem, by state.",
           group="filesystem", source="system_filesystem", field="usage"),
    Metric("system.filesystem.utilization", G, "1",
           "Space of each mounted filesystem, by state, as a share of its size.",
           group="filesystem", source="system_filesystem", field="utilization", value_type=float),
    Metric("system.network.connection.count", U, "{connection}",
           "Host network connections by state and transport. Enabled only when named "
           "exactly in include.",
           group="connections", source="system_connections", field="count", exact_only=True),
    # --- supervisor mode (children=True): the tree's totals
    Metric("process_metrics.tree.cpu.time", C, "s",
           "CPU seconds of this process and all its descendants, those that exited and were "
           "reaped included, by mode (extension).",
           group="tree", source="children_tree", field="cpu_time",
           value_type=float, option="children", note=_TREE_CPU),
    Metric("process_metrics.tree.process.count", G, "{process}",
           "Processes in the tree: this one and its live descendants (extension).",
           group="tree", source="children_tree", field="count", option="children"),
    Metric("process_metrics.tree.process.exits", C, "{process}",
           "Descendants that ended since instrument(), by cause (extension).",
           group="tree", source="children_tree", field="exits", option="children",
           note=_EXITS),
    Metric("process_metrics.tree.process.restarts", C, "{restart}",
           "Slots given again to a new child after their child exited: restarts seen "
           "(extension).",
           group="tree", source="children_tree", field="restarts", option="children"),
    Metric("process_metrics.tree.memory.usage", U, "By",
           "Memory of this process and its live descendants: the sum of PSS where PSS is "
           "enabled, else the sum of RSS (which counts shared pages once per process) "
           "(extension).",
           group="tree", source="children_tree", field="memory", option="children",
           note="process_metrics.memory.measure is pss or rss"),
)  # fmt: skip

METRICS_BY_NAME = {m.name: m for m in METRICS}
