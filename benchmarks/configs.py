"""What is measured: ours as plain options, the peer's as its documented config.

Ours are :class:`ProcessMetricsOptions`, so the report prints exactly what was
measured. The peer (``opentelemetry-instrumentation-system-metrics``) is
configured through its public ``config`` argument, with dicts written out from
its documentation.
"""

from __future__ import annotations

from collections.abc import Iterable

import subjects
from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.metrics import METRICS
from subjects import Subject

CPU_USAGE = (
    "process.cpu.time",
    "process.cpu.utilization",
    "system.cpu.time",
    "system.cpu.utilization",
)
FREQUENCY = (
    "system.cpu.frequency",
    "process_metrics.cpu.frequency.min",
    "process_metrics.cpu.frequency.max",
)
# What the peer's process set reports, under our names (its
# process.open_file_descriptor.count is our process.unix.file_descriptor.count).
PEER_PROCESS_EQUIVALENT = (
    "process.context_switches",
    "process.cpu.time",
    "process.cpu.utilization",
    "process.memory.usage",
    "process.memory.virtual",
    "process.unix.file_descriptor.count",
    "process.thread.count",
    "process.disk.io",
    "cpython.gc.collections",
    "cpython.gc.collected_objects",
    "cpython.gc.uncollectable_objects",
)
# The peer's shipped default under our names, with its attribute dimensions: per CPU
# (per_cpu=True), per device, per interface, connections by state and transport.
# Its deprecated process.runtime.* copies are the same data; system.thread_count
# is our process.thread.count; system.disk.time has no equivalent here.
PEER_DEFAULT_EQUIVALENT = (
    *PEER_PROCESS_EQUIVALENT,
    "system.cpu.time",
    "system.cpu.utilization",
    "system.memory.usage",
    "system.memory.utilization",
    "system.paging.usage",
    "system.paging.utilization",
    "system.disk.io",
    "system.disk.operations",
    "system.network.io",
    "system.network.packet.count",
    "system.network.packet.dropped",
    "system.network.errors",
    "system.network.connection.count",
)
CONNECTIONS = ("system.network.connection.count",)
EVERYTHING = ("*", "system.network.connection.count")

# The peer's process set, from its documented default config: process.* and
# cpython.*, without the deprecated process.runtime.* copies.
PEER_PROCESS_CONFIG: dict[str, list[str] | None] = {
    "process.context_switches": ["involuntary", "voluntary"],
    "process.cpu.time": ["user", "system"],
    "process.cpu.utilization": ["user", "system"],
    "process.memory.usage": None,
    "process.memory.virtual": None,
    "process.open_file_descriptor.count": None,
    "process.thread.count": None,
    "process.disk.io": ["read", "write"],
    "cpython.gc.collections": None,
    "cpython.gc.collected_objects": None,
    "cpython.gc.uncollectable_objects": None,
}
PEER_CPU_CONFIG: dict[str, list[str] | None] = {
    "system.cpu.time": ["idle", "user", "system", "irq"],
    "system.cpu.utilization": ["idle", "user", "system", "irq"],
}


def only(
    names: Iterable[str],
    *,
    cpu_frequency: bool = False,
    per_cpu: bool = False,
    direct_reads: bool = True,
) -> ProcessMetricsOptions:
    """Options that report exactly ``names``: every other metric is excluded by name."""
    wanted = set(names)
    return ProcessMetricsOptions(
        include=tuple(sorted(n for n in wanted if not _gated(n))),
        exclude=tuple(m.name for m in METRICS if m.name not in wanted),
        cpu_frequency=cpu_frequency,
        per_cpu=per_cpu,
        direct_reads=direct_reads,
    )


def _gated(name: str) -> bool:
    return any(m.name == name and m.option is not None for m in METRICS)


def main() -> dict[str, tuple[ProcessMetricsOptions, str]]:
    """Ours in the main run: options, and how they are written in the report."""
    return {
        "default": (ProcessMetricsOptions(), "ProcessMetricsOptions()"),
        "process_set": (only(PEER_PROCESS_EQUIVALENT), "only(the peer's process set)"),
        "peer_default_set": (
            only(PEER_DEFAULT_EQUIVALENT, per_cpu=True),
            "only(the peer's default set, connections included), per_cpu=True",
        ),
        "cpu_usage_only": (only(CPU_USAGE), "only(" + ", ".join(CPU_USAGE) + ")"),
        "cpu_with_frequency": (
            only(CPU_USAGE + FREQUENCY, cpu_frequency=True),
            "only(cpu_usage_only's four, the three frequency metrics), cpu_frequency=True",
        ),
        "everything": (
            ProcessMetricsOptions(
                include=EVERYTHING, per_thread=True, per_cpu=True, cpu_frequency=True
            ),
            'ProcessMetricsOptions(include=("*", "system.network.connection.count"), '
            "per_thread=True, per_cpu=True, cpu_frequency=True)",
        ),
    }


def threads() -> dict[str, tuple[ProcessMetricsOptions, str]]:
    """Ours in the thread sweep."""
    return {
        "per_thread_off": (ProcessMetricsOptions(), "ProcessMetricsOptions()"),
        "per_thread_cap10": (
            ProcessMetricsOptions(per_thread=True, max_thread_series=10),
            "per_thread=True, max_thread_series=10",
        ),
        "per_thread": (ProcessMetricsOptions(per_thread=True), "per_thread=True (cap 200)"),
    }


def sockets() -> dict[str, tuple[ProcessMetricsOptions, str]]:
    """Ours in the socket sweep."""
    return {
        "connections": (only(CONNECTIONS), "only(system.network.connection.count)"),
        "connections_psutil": (
            only(CONNECTIONS, direct_reads=False),
            "the same, direct_reads=False (psutil.net_connections)",
        ),
        "peer_default_set": main()["peer_default_set"],
    }


def cpus(frequency: bool) -> dict[str, tuple[ProcessMetricsOptions, str]]:
    """Ours in the CPU sweep: host CPU time and utilisation, per CPU or not."""
    cpu = ("system.cpu.time", "system.cpu.utilization")
    found = {
        "cpu_total": (only(cpu), "only(system.cpu.time, system.cpu.utilization)"),
        "cpu_per_cpu": (only(cpu, per_cpu=True), "the same, per_cpu=True"),
    }
    if frequency:
        found["cpu_frequency"] = (
            only((*cpu, "system.cpu.frequency"), cpu_frequency=True),
            "the same with system.cpu.frequency, cpu_frequency=True",
        )
    return found


def counted() -> dict[str, tuple[ProcessMetricsOptions, str]]:
    """Every configuration whose opens are counted, including psutil-only ones."""
    found = {**main(), **threads(), **sockets()}
    found["everything_by_name"] = (
        ProcessMetricsOptions(include=EVERYTHING, per_thread=True, thread_series_by="name"),
        "everything but frequency and per_cpu, thread_series_by='name'",
    )
    found["saturation"] = (
        ProcessMetricsOptions(saturation=True),
        "ProcessMetricsOptions(saturation=True): the cgroup and pressure files",
    )
    found["signals_psutil"] = (
        only(("process.thread.count", "process.signals_pending"), direct_reads=False),
        "only(process.thread.count, process.signals_pending), direct_reads=False",
    )
    found["everything_psutil"] = (
        ProcessMetricsOptions(
            include=EVERYTHING, per_thread=True, per_cpu=True, direct_reads=False
        ),
        "everything but frequency, direct_reads=False",
    )
    return found


FREQUENCY_ON = frozenset({"everything", "cpu_with_frequency", "cpu_frequency"})
DIRECT_OFF = frozenset({"connections_psutil", "signals_psutil", "everything_psutil"})


def build_main() -> list[Subject]:
    """Ours, the peers and the bare reads of the main run, each warmed up, and SDK floors."""
    found = [subjects.ours(n, o, d) for n, (o, d) in main().items()]
    found += peers()
    found += [
        subjects.bare("bare_process_set", subjects.process_reads(), "the reads process_set needs"),
        subjects.bare("bare_default", subjects.default_reads(), "the reads default needs"),
        subjects.sdk_empty(),
    ]
    for s in found:
        s.warm_up()
    with_floor = ("default", "process_set", "peer_default_set", "everything", *PEERS)
    return found + [subjects.floor_of(s) for s in found if s.name in with_floor]


PEERS = ("peer_default", "peer_process")


def peers() -> list[Subject]:
    return [*(peer(name) for name in PEERS), subjects.prometheus_client()]


def peer(name: str) -> Subject:
    if name == "peer_default":
        return subjects.peer(name, None, "SystemMetricsInstrumentor(): its shipped default")
    return subjects.peer(
        name, PEER_PROCESS_CONFIG, "SystemMetricsInstrumentor(config=its process set)"
    )


def instruction_configs(*, ours_only: bool) -> tuple[str, ...]:
    """The configurations whose collections are counted in instructions: each set of
    options once (``per_thread_off`` is ``default``), then the peer's."""
    seen: list[ProcessMetricsOptions] = []
    names = []
    for name, (options, _) in counted().items():
        if options not in seen:
            seen.append(options)
            names.append(name)
    return tuple(names) if ours_only else (*names, *PEERS)


def build_one(name: str) -> Subject:
    """One configuration of ``counted()`` or one of the peer's, alone (not warmed up)."""
    ours = counted()
    if name in ours:
        return subjects.ours(name, *ours[name])
    return peer(name)


def build_counted() -> list[Subject]:
    """Every configuration whose reads are counted, ours and theirs (not warmed up)."""
    return [
        *[subjects.ours(n, o, d) for n, (o, d) in counted().items()],
        *peers(),
        subjects.bare("bare_default", subjects.default_reads(), "the reads default needs"),
        subjects.bare("net_connections", subjects.net_connections, "psutil.net_connections()"),
    ]
