"""Sources about the host: CPU time, memory, frequency, disks, network, swap, filesystems."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from typing import Any

import psutil

from ..linux import procfs
from ..platforms import LINUX
from .base import DirectRead, Key, ReadContext, Reading, Source, attributes, known, psutil_has

_CPU_MODES = {
    "user": "user",
    "nice": "nice",
    "system": "system",
    "idle": "idle",
    "iowait": "iowait",
    "irq": "interrupt",
    "softirq": "interrupt",
    "interrupt": "interrupt",
    "dpc": "interrupt",
    "steal": "steal",
    # guest and guest_nice are already counted in user and nice.
}

_CPU = attributes("cpu.logical_number", "cpu.mode")
_MEMORY = attributes("system.memory.state")
_FREQUENCY = attributes("cpu.logical_number")
_DISK = attributes("system.device", "disk.io.direction")
_NETWORK = attributes("network.interface.name", "network.io.direction")
_PAGING = attributes("system.paging.state")
_USED, _FREE = _PAGING(("used",)), _PAGING(("free",))
_FAULT = attributes("system.paging.fault.type")
_FILESYSTEM = attributes(
    "system.device",
    "system.filesystem.state",
    "system.filesystem.type",
    "system.filesystem.mode",
    "system.filesystem.mountpoint",
)
_CONNECTION = attributes("network.connection.state", "network.transport")

_TCP_STATES = {
    "SYN_RECV": "syn_received",
    "FIN_WAIT1": "fin_wait_1",
    "FIN_WAIT2": "fin_wait_2",
    "CLOSE": "closed",
    # Windows only; the conventions have no such state: the connection is going away.
    "DELETE_TCB": "closed",
}


def _system_cpu(ctx: ReadContext) -> Reading:
    per_cpu = ctx.options.per_cpu
    rows = psutil.cpu_times(percpu=True) if per_cpu else [psutil.cpu_times()]
    times: dict[Key, float] = {}
    for cpu, row in enumerate(rows):
        number = cpu if per_cpu else None
        for field_name, value in row._asdict().items():
            mode = _CPU_MODES.get(field_name)
            if mode is not None:
                key = _CPU((number, mode))
                times[key] = times.get(key, 0.0) + value
    # Linux may move iowait backwards (proc(5)): keep the last value instead.
    # Not mutated: the floor's name is this source's alone, any name would do.
    times = ctx.never_below_previous("system_cpu", times)  # pragma: no mutate

    def share(deltas: Mapping[Key, float], _elapsed: float) -> dict[Key, float]:
        totals: dict[Any, float] = {}
        for (number, _mode), d in deltas.items():
            totals[number] = totals.get(number, 0.0) + d
        return {k: (d / totals[k[0]] if totals[k[0]] else 0.0) for k, d in deltas.items()}

    util = ctx.delta("system_cpu").step(ctx.now, times, share)
    return {"time": times, "utilization": util or {}}


def _system_memory(ctx: ReadContext) -> Reading:
    """Host memory by state; the states add up to the total, as the conventions ask.

    ``used`` is total minus available (the conventions' definition); the others
    share out the available rest: ``free``, ``buffers``, then ``cached``, all
    that remains (the cache and slab the kernel can reclaim). Linux's ``Cached``
    line also counts pages it cannot reclaim (tmpfs), which ``used`` holds.
    Without psutil's cached field (macOS: inactive pages) the rest is ``cached``.
    """
    vm = psutil.virtual_memory()
    total = vm.total
    available = min(vm.available, total)
    free = min(vm.free, available)
    usage: dict[Key, int] = {_MEMORY(("used",)): total - available, _MEMORY(("free",)): free}
    rest = available - free
    buffers = getattr(vm, "buffers", None)
    if buffers is not None:
        usage[_MEMORY(("buffers",))] = held = min(buffers, rest)
        rest -= held
    if rest or hasattr(vm, "cached"):
        usage[_MEMORY(("cached",))] = rest
    return {
        "usage": usage,
        "utilization": {k: v / total for k, v in usage.items()},
        "limit": total,
    }


def _cpu_freq(ctx: ReadContext) -> Reading:
    rows = psutil.cpu_freq(percpu=True) or []
    # A CPU that reports 0 MHz does not expose its frequency: leave it out.
    return {
        "current": {_FREQUENCY((n,)): int(f.current * 1e6) for n, f in enumerate(rows) if f.current}
    }


def _system_disk(ctx: ReadContext) -> Reading:
    disks = psutil.disk_io_counters(perdisk=True) or {}
    return {
        "bytes": _by_direction(_DISK, disks, "read_bytes", "write_bytes"),
        "operations": _by_direction(_DISK, disks, "read_count", "write_count"),
    }


def _system_network(ctx: ReadContext) -> Reading:
    nics = psutil.net_io_counters(pernic=True) or {}
    return {
        "bytes": _by_direction(_NETWORK, nics, "bytes_recv", "bytes_sent", "receive", "transmit"),
        "packets": _by_direction(
            _NETWORK, nics, "packets_recv", "packets_sent", "receive", "transmit"
        ),
        "dropped": _by_direction(_NETWORK, nics, "dropin", "dropout", "receive", "transmit"),
        "errors": _by_direction(_NETWORK, nics, "errin", "errout", "receive", "transmit"),
    }


def _by_direction(
    key: type[Key],
    rows: Mapping[str, Any],
    a: str,
    b: str,
    a_name: str = "read",
    b_name: str = "write",
) -> dict[Key, int]:
    out: dict[Key, int] = {}
    for device, row in rows.items():
        out[key((device, a_name))] = getattr(row, a)
        out[key((device, b_name))] = getattr(row, b)
    return out


def _swap_totals(ctx: ReadContext) -> tuple[int, int]:
    """Swap ``(total, free)``. psutil reads /proc/meminfo and /proc/vmstat for them,
    both read again by other sources of the collection; sysinfo(2) opens no file."""
    found = ctx.direct_read("swap", procfs.swap_totals)
    if found is not None:
        return found
    swap = psutil.swap_memory()
    return swap.total, swap.free


def _open_swap(ctx: ReadContext) -> bool:
    """Build the sysinfo(2) call now, in instrument()'s thread: nothing is imported at a
    collection (snapshot's ``_open``). Without it, the reads fall back to psutil."""
    with contextlib.suppress(OSError):
        procfs.load_sysinfo()
    return True


def _swap(ctx: ReadContext) -> Reading:
    total, free = _swap_totals(ctx)
    # As psutil.swap_memory() computes it.
    usage: dict[Key, int] = {_USED: total - free, _FREE: free}
    util = {k: v / total for k, v in usage.items()} if total else {}
    return {"usage": usage, "utilization": util}


def _vmstat(ctx: ReadContext) -> Reading:
    major, minor = procfs.page_faults()
    return {"faults": {_FAULT(("major",)): major, _FAULT(("minor",)): minor}}


def _filesystem(ctx: ReadContext) -> Reading:
    usage: dict[Key, int] = {}
    util: dict[Key, float] = {}
    for part in psutil.disk_partitions():  # of devices only (all=False)
        try:
            du = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue  # unmounted or unreadable since it was listed
        mode = "ro" if "ro" in part.opts.split(",") else "rw"
        states = {"used": du.used, "free": du.free, "reserved": du.total - du.used - du.free}
        for state, value in states.items():
            key = _FILESYSTEM((part.device, state, part.fstype, mode, part.mountpoint))
            usage[key] = value
            if du.total:
                util[key] = value / du.total
    return {"usage": usage, "utilization": util}


def _connections(ctx: ReadContext) -> Reading:
    # psutil walks every process's descriptors to tie sockets to pids, which
    # this count never uses; a netlink sock_diag dump counts them directly.
    from ..linux import sock_diag  # only where the count is asked for

    found = ctx.direct_read("connections", sock_diag.connection_counts)
    if found is not None:
        return {"count": {_CONNECTION(k): v for k, v in found.items()}}
    counts: dict[Key, int] = {}
    for conn in psutil.net_connections(kind="inet"):
        transport = "tcp" if conn.type == socket.SOCK_STREAM else "udp"
        status = conn.status
        state = None if status == psutil.CONN_NONE else _TCP_STATES.get(status, status.lower())
        key = _CONNECTION((state, transport))
        counts[key] = counts.get(key, 0) + 1
    return {"count": counts}


def _host_facts(ctx: ReadContext) -> Reading:
    facts = ctx.facts
    return known(
        logical_cpus=facts.logical_cpus,
        physical_cpus=facts.physical_cpus,
        cpu_freq_min=facts.cpu_freq_min_hz,
        cpu_freq_max=facts.cpu_freq_max_hz,
    )


SOURCES: tuple[Source, ...] = (
    Source(
        "system_static",
        _host_facts,
        dict.fromkeys(("logical_cpus", "physical_cpus", "cpu_freq_min", "cpu_freq_max")),
        "none: static facts of the host, read once",
        shared=True,
    ),
    Source(
        "system_cpu",
        _system_cpu,
        dict.fromkeys(("time", "utilization"), _CPU),
        "/proc/stat",
        stateful=True,
        shared=True,
    ),
    Source(
        "system_memory",
        _system_memory,
        {"usage": _MEMORY, "utilization": _MEMORY, "limit": None},
        "/proc/meminfo",
        shared=True,
    ),
    Source(
        "system_cpu_freq",
        _cpu_freq,
        {"current": _FREQUENCY},
        "per CPU: sysfs cpufreq files, or /proc/cpuinfo",
        available=psutil_has("cpu_freq"),
        shared=True,
    ),
    Source(
        "system_disk",
        _system_disk,
        {"bytes": _DISK, "operations": _DISK},
        "/proc/diskstats",
        shared=True,
    ),
    Source(
        "system_network",
        _system_network,
        dict.fromkeys(("bytes", "packets", "dropped", "errors"), _NETWORK),
        "/proc/net/dev",
        shared=True,
    ),
    Source(
        "system_swap",
        _swap,
        {"usage": _PAGING, "utilization": _PAGING},
        "one sysinfo(2) syscall (elsewhere: psutil)",
        shared=True,
        open=_open_swap,
        direct=(
            DirectRead(
                "swap",
                "`sysinfo(2)`: no file opened",
                "`psutil.swap_memory()`, which reads `/proc/meminfo` and `/proc/vmstat`, read "
                "again by other sources of the same collection",
            ),
        ),
    ),
    Source(
        "system_vmstat",
        _vmstat,
        {"faults": _FAULT},
        "/proc/vmstat",
        platforms=LINUX,
        shared=True,
    ),
    Source(
        "system_filesystem",
        _filesystem,
        {"usage": _FILESYSTEM, "utilization": _FILESYSTEM},
        "/proc/self/mounts, one statvfs per mount",
        shared=True,
    ),
    Source(
        "system_connections",
        _connections,
        {"count": _CONNECTION},
        "one netlink sock_diag dump per transport (elsewhere: psutil walks the fds of every "
        "process on the host)",
        shared=True,
        modules=(".linux.sock_diag",),
        direct=(
            DirectRead(
                "connections",
                "netlink `sock_diag` dumps (TCP of both families in one, UDP per family), of "
                "which only each socket's state is used",
                "`psutil.net_connections()`, which also walks every process's descriptors to "
                "tie sockets to pids, which a count never uses",
            ),
        ),
    ),
)
