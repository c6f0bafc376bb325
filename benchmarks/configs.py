"""The configurations under test: ours, the peer's, and what they are compared with.

Each configuration of this package is a plain :class:`ProcessMetricsOptions`,
so the report can print exactly what was measured.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.metrics import METRICS

# Threads alive (besides the main one) while ``with_threads`` is measured.
WITH_THREADS_N = 16

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
# Our names for what the peer's process set reports (its
# ``process.open_file_descriptor.count`` is our ``process.unix.file_descriptor.count``).
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
EVERYTHING_INCLUDE = ("*", "system.network.connection.count")


def only(names: Iterable[str], *, cpu_frequency: bool = False) -> ProcessMetricsOptions:
    """Options that report exactly ``names``: every other metric is excluded by name."""
    wanted = set(names)
    exclude = tuple(m.name for m in METRICS if m.name not in wanted)
    include = tuple(n for n in sorted(wanted) if not _gated(n))
    return ProcessMetricsOptions(include=include, exclude=exclude, cpu_frequency=cpu_frequency)


def _gated(name: str) -> bool:
    return any(m.name == name and m.option is not None for m in METRICS)


def ours() -> dict[str, ProcessMetricsOptions]:
    """The issue's configurations, in the origin's table order, plus the peer-equivalent set."""
    return {
        "cpu_usage_only": only(CPU_USAGE),
        "with_threads": ProcessMetricsOptions(per_thread=True),
        "default": ProcessMetricsOptions(),
        "with_disk": ProcessMetricsOptions(include=("system.disk.*",)),
        "everything_but_frequency": ProcessMetricsOptions(
            include=EVERYTHING_INCLUDE, per_thread=True, per_cpu=True
        ),
        "everything": ProcessMetricsOptions(
            include=EVERYTHING_INCLUDE, per_thread=True, per_cpu=True, cpu_frequency=True
        ),
        "cpu_with_frequency": only(CPU_USAGE + FREQUENCY, cpu_frequency=True),
        "process_set": only(PEER_PROCESS_EQUIVALENT),
    }


# How each configuration is written, for the report (what ``ours()`` builds).
OURS_CODE = {
    "cpu_usage_only": "only(process.cpu.time, process.cpu.utilization, "
    "system.cpu.time, system.cpu.utilization)",
    "with_threads": f"ProcessMetricsOptions(per_thread=True), with {WITH_THREADS_N} extra "
    "idle threads",
    "default": "ProcessMetricsOptions()",
    "with_disk": 'ProcessMetricsOptions(include=("system.disk.*",))',
    "everything_but_frequency": 'ProcessMetricsOptions(include=("*", '
    '"system.network.connection.count"), per_thread=True, per_cpu=True)',
    "everything": 'ProcessMetricsOptions(include=("*", "system.network.connection.count"), '
    "per_thread=True, per_cpu=True, cpu_frequency=True)",
    "cpu_with_frequency": "only(cpu_usage_only's four, system.cpu.frequency, "
    "process_metrics.cpu.frequency.min/max; cpu_frequency=True)",
    "process_set": "only(the peer's process set, under our names: "
    + ", ".join(PEER_PROCESS_EQUIVALENT)
    + ")",
}

FREQUENCY_ON = {"everything", "cpu_with_frequency"}


def scaling_order() -> list[str]:
    """Metrics for the metric-count sweep: the table's order, without the ones that
    need an option or an exact name (frequency, per-thread, connections)."""
    return [m.name for m in METRICS if m.supported() and m.option is None and not m.exact_only]
