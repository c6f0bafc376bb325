"""From opentelemetry-instrumentation-system-metrics to this package, metric by metric.

The docs render this table; ``tests/test_docs.py`` checks it both ways: every
old name and attribute is what the installed peer really emits, and every new
name and attribute is a row of this package's metric table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Move:
    old: str
    """The name the peer emits (with ``process.runtime.cpython.*`` as on CPython)."""
    old_attributes: tuple[str, ...]
    new: tuple[str, ...]
    """This package's metric(s); empty when there is no equivalent."""
    new_attributes: tuple[str, ...]
    change: str
    """What changed, in words (MyST inline markup allowed)."""
    may_be_absent: bool = False
    """The peer may leave this one out on some hosts (permissions, platform)."""


_INCLUDE = "Off by default: turn it on with `include`."

MOVES: tuple[Move, ...] = (
    # --- process
    Move(
        "process.cpu.time",
        ("type",),
        ("process.cpu.time",),
        ("cpu.mode",),
        "`type` becomes `cpu.mode`. Read with one `getrusage(2)` call, at microsecond resolution.",
    ),
    Move(
        "process.cpu.utilization",
        (),
        ("process.cpu.utilization",),
        ("cpu.mode",),
        "Now split by `cpu.mode`: sum the modes to get the old single value. The divisor is "
        "the number of CPUs *available to the process* (its affinity, capped by a cgroup CPU "
        "quota), not the host's `cpu_count()`. It comes from the change in CPU time between "
        "two collections, so a second reader no longer gets a window of microseconds.",
    ),
    Move(
        "process.memory.usage",
        (),
        ("process.memory.usage",),
        (),
        "Unchanged (resident set size).",
    ),
    Move(
        "process.memory.virtual",
        (),
        ("process.memory.virtual",),
        (),
        "Unchanged.",
    ),
    Move(
        "process.open_file_descriptor.count",
        (),
        ("process.unix.file_descriptor.count",),
        (),
        "Renamed, as in semantic conventions 1.44 (the old name is deprecated). POSIX only; "
        "Windows has `process.windows.handle.count`.",
    ),
    Move(
        "process.thread.count",
        (),
        ("process.thread.count",),
        (),
        "Unchanged (threads of the OS process).",
    ),
    Move(
        "process.disk.io",
        ("direction",),
        ("process.disk.io",),
        ("disk.io.direction",),
        "`direction` becomes `disk.io.direction`. New beside it: `process.disk.operations`.",
    ),
    Move(
        "process.context_switches",
        ("type",),
        ("process.context_switches",),
        ("process.context_switch.type",),
        "`type` becomes `process.context_switch.type`. Counts all threads of the process "
        "(from `getrusage(2)`); on Linux the peer counted only the main thread's.",
        may_be_absent=True,
    ),
    # --- deprecated process.runtime.cpython.*
    Move(
        "process.runtime.cpython.cpu_time",
        ("type",),
        ("process.cpu.time",),
        ("cpu.mode",),
        "Deprecated duplicate of `process.cpu.time`; `type` becomes `cpu.mode`.",
    ),
    Move(
        "process.runtime.cpython.cpu.utilization",
        (),
        ("process.cpu.utilization",),
        ("cpu.mode",),
        "The old value was not divided by any CPU count, so it could exceed 1; the new one "
        "is divided by the CPUs available to the process.",
    ),
    Move(
        "process.runtime.cpython.memory",
        ("type",),
        ("process.memory.usage", "process.memory.virtual"),
        (),
        "`type=rss` becomes `process.memory.usage`, `type=vms` becomes `process.memory.virtual`.",
    ),
    Move(
        "process.runtime.cpython.thread_count",
        (),
        ("process.thread.count",),
        (),
        "Deprecated duplicate of `process.thread.count`.",
    ),
    Move(
        "process.runtime.cpython.context_switches",
        ("type",),
        ("process.context_switches",),
        ("process.context_switch.type",),
        "Deprecated duplicate of `process.context_switches`.",
        may_be_absent=True,
    ),
    Move(
        "process.runtime.cpython.gc_count",
        ("count",),
        (),
        (),
        "No equivalent. It reported `gc.get_count()` (allocations since the last collection, "
        "per generation), with the unit `By`. To watch the collector, use "
        "`cpython.gc.collections`.",
    ),
    # --- cpython.gc
    Move(
        "cpython.gc.collections",
        ("cpython.gc.generation", "generation"),
        ("cpython.gc.collections",),
        ("cpython.gc.generation",),
        "The duplicate string attribute `generation` is gone; `cpython.gc.generation` (an "
        "int) stays.",
    ),
    Move(
        "cpython.gc.collected_objects",
        ("cpython.gc.generation", "generation"),
        ("cpython.gc.collected_objects",),
        ("cpython.gc.generation",),
        "As for `cpython.gc.collections`.",
    ),
    Move(
        "cpython.gc.uncollectable_objects",
        ("cpython.gc.generation", "generation"),
        ("cpython.gc.uncollectable_objects",),
        ("cpython.gc.generation",),
        "As for `cpython.gc.collections`.",
    ),
    # --- system
    Move(
        "system.cpu.time",
        ("cpu", "state"),
        ("system.cpu.time",),
        ("cpu.mode", "cpu.logical_number"),
        "`state` becomes `cpu.mode`, with the modes of the conventions (`irq` and `softirq` "
        "become `interrupt`; `nice`, `iowait` and `steal` are new). The 1-based `cpu` becomes "
        "the 0-based `cpu.logical_number`, and only with `per_cpu=True`: by default there is "
        "one series per mode for the whole host.",
    ),
    Move(
        "system.cpu.utilization",
        ("cpu", "state"),
        ("system.cpu.utilization",),
        ("cpu.mode", "cpu.logical_number"),
        "As for `system.cpu.time`. Computed from the change in `/proc/stat` between two "
        "collections of this instrumentor, so another caller of psutil cannot shorten the "
        "window.",
    ),
    Move(
        "system.memory.usage",
        ("state",),
        ("system.memory.usage",),
        ("system.memory.state",),
        "`state` becomes `system.memory.state`, and `buffers` is added. `used` is total "
        "minus available, as the conventions define it. The instrument is an UpDownCounter, "
        "not a Gauge.",
    ),
    Move(
        "system.memory.utilization",
        ("state",),
        ("system.memory.utilization",),
        ("system.memory.state",),
        "As for `system.memory.usage`.",
    ),
    Move(
        "system.swap.usage",
        ("state",),
        ("system.paging.usage",),
        ("system.paging.state",),
        "Renamed to `system.paging.usage`, `state` becomes `system.paging.state`, and the "
        "unit is `By` (the peer declared `pages` but reported bytes). " + _INCLUDE,
    ),
    Move(
        "system.swap.utilization",
        ("state",),
        ("system.paging.utilization",),
        ("system.paging.state",),
        "As for `system.swap.usage`. " + _INCLUDE,
    ),
    Move(
        "system.disk.io",
        ("device", "direction"),
        ("system.disk.io",),
        ("system.device", "disk.io.direction"),
        "`device` becomes `system.device`, `direction` becomes `disk.io.direction`. " + _INCLUDE,
    ),
    Move(
        "system.disk.operations",
        ("device", "direction"),
        ("system.disk.operations",),
        ("system.device", "disk.io.direction"),
        "As for `system.disk.io`; the unit is `{operation}`. " + _INCLUDE,
    ),
    Move(
        "system.disk.time",
        ("device", "direction"),
        (),
        (),
        "No equivalent: not reported.",
    ),
    Move(
        "system.network.io",
        ("device", "direction"),
        ("system.network.io",),
        ("network.interface.name", "network.io.direction"),
        "`device` becomes `network.interface.name`, `direction` becomes "
        "`network.io.direction`. " + _INCLUDE,
    ),
    Move(
        "system.network.packets",
        ("device", "direction"),
        ("system.network.packet.count",),
        ("network.interface.name", "network.io.direction"),
        "Renamed to `system.network.packet.count`; attributes as for `system.network.io`. "
        + _INCLUDE,
    ),
    Move(
        "system.network.dropped_packets",
        ("device", "direction"),
        ("system.network.packet.dropped",),
        ("network.interface.name", "network.io.direction"),
        "Renamed to `system.network.packet.dropped`; attributes as for `system.network.io`. "
        + _INCLUDE,
    ),
    Move(
        "system.network.errors",
        ("device", "direction"),
        ("system.network.errors",),
        ("network.interface.name", "network.io.direction"),
        "Attributes as for `system.network.io`. " + _INCLUDE,
    ),
    Move(
        "system.network.connections",
        ("family", "protocol", "state", "type"),
        ("system.network.connection.count",),
        ("network.connection.state", "network.transport"),
        "Renamed to `system.network.connection.count`. `protocol` becomes "
        "`network.transport`, `state` becomes `network.connection.state` (lower case, as in "
        "the conventions; absent for UDP), `family` and `type` are gone. It walks the file "
        "descriptors of every process on the host, so it is on only when named exactly in "
        "`include` (a glob never turns it on).",
        may_be_absent=True,
    ),
    Move(
        "system.thread_count",
        (),
        (),
        (),
        "No equivalent: it counted Python `threading` threads. `process.thread.count` counts "
        "every thread of the OS process.",
    ),
)
