"""Host sources against the kernel's own files and psutil, read by the test.

Connections, interface counters and filesystems are read in a forked child
with its own network or mount namespace: there the test makes every socket,
packet and mount, so each count is exact and no other process moves it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import re
import resource
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.linux import procfs, sock_diag
from opentelemetry.instrumentation.process.sources import host
from opentelemetry.instrumentation.process.sources.base import Key, ReadContext

from .conftest import HOST_MODES, Sdk, collect, points, value
from .support.forked import in_child
from .support.meminfo import read_meminfo
from .support.sockets import Scene, build_all_states
from .support.waiting import while_still

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="namespaces and /proc are Linux-only"
)

LOGGER = "tests.host_sources"
PORTABLE = ProcessMetricsOptions(direct_reads=False)
DEFAULT = ProcessMetricsOptions()


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def captured() -> tuple[FaultLog, Lines]:
    handler = Lines()
    logger = logging.getLogger(LOGGER)
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return FaultLog(logger=logger), handler


def context(options: ProcessMetricsOptions, faults: FaultLog | None = None) -> ReadContext:
    """A read context as the snapshot makes one on Linux for ``options``."""
    process = psutil.Process()
    return ReadContext(
        process=process,
        facts=read_facts(process, cpu_frequency=False),
        options=options,
        faults=faults or FaultLog(),
        direct=options.direct_reads,
    )


def sdk_points(include: list[str], **options: Any) -> dict[str, list[list[Any]]]:
    """One collection through a real MeterProvider: each metric's points as [attributes, value]."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    ProcessInstrumentor().instrument(meter_provider=provider, include=include, **options)
    try:
        got = collect(reader)
    finally:
        ProcessInstrumentor().uninstrument()
        provider.shutdown()
    return {
        name: [[dict(attrs), v] for attrs, v in points(got[name]).items()]
        for name in include
        if name in got
    }


# -- namespaces, made with the syscalls (os.unshare is 3.12+) -------------------------

_LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
IFREQ = struct.Struct("16sH22x")


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def mount(source: str, target: str | Path, fstype: str | None, flags: int) -> None:
    kind = fstype.encode() if fstype else None
    result = _LIBC.mount(source.encode(), str(target).encode(), kind, ctypes.c_ulong(flags), None)
    _check(result, f"mount {target}")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = IFREQ.unpack(fcntl.ioctl(s, SIOCGIFFLAGS, IFREQ.pack(b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, IFREQ.pack(b"lo", flags | IFF_UP))


def in_namespace(flags: int, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``body`` run in a forked child with new namespaces (``flags``); skipped if not allowed."""

    def isolated() -> dict[str, Any]:
        try:
            _check(_LIBC.unshare(flags), "unshare")
        except OSError as exc:
            return {"skip": str(exc)}
        if flags & CLONE_NEWNS:
            mount("none", "/", None, MS_REC | MS_PRIVATE)  # our mounts stay ours
        if flags & CLONE_NEWNET:
            loopback_up()
        return body()

    got = in_child(isolated)
    if "skip" in got:
        pytest.skip(f"no private namespace here: {got['skip']}")
    return got


def canonical(point: list[Any]) -> str:
    attrs, value = point
    return repr((sorted(attrs.items()), value))


def named(counts: Any) -> dict[str, Any]:
    """A reading's ``{key tuple: value}`` as JSON-able ``{"a/b": value}``."""
    return {"/".join(str(part) for part in key): v for key, v in counts.items()}


# -- system.network.connection.count ------------------------------------------------

# psutil's status -> the conventions' network.connection.state, written out here.
STATE_NAMES = {
    psutil.CONN_ESTABLISHED: "established",
    psutil.CONN_SYN_SENT: "syn_sent",
    psutil.CONN_SYN_RECV: "syn_received",
    psutil.CONN_FIN_WAIT1: "fin_wait_1",
    psutil.CONN_FIN_WAIT2: "fin_wait_2",
    psutil.CONN_TIME_WAIT: "time_wait",
    psutil.CONN_CLOSE: "closed",
    psutil.CONN_CLOSE_WAIT: "close_wait",
    psutil.CONN_LAST_ACK: "last_ack",
    psutil.CONN_LISTEN: "listen",
    psutil.CONN_CLOSING: "closing",
}
# include/net/tcp_states.h, by the same names.
KERNEL_STATES = {
    "established": 1,
    "syn_sent": 2,
    "syn_received": 3,
    "fin_wait_1": 4,
    "fin_wait_2": 5,
    "time_wait": 6,
    "closed": 7,
    "close_wait": 8,
    "last_ack": 9,
    "listen": 10,
    "closing": 11,
}


def counted_by_psutil() -> dict[str, int]:
    """``psutil.net_connections()`` counted here, by ``state/transport``."""
    out: dict[str, int] = {}
    for conn in psutil.net_connections(kind="inet"):
        transport = {socket.SOCK_STREAM: "tcp", socket.SOCK_DGRAM: "udp"}[conn.type]
        state = None if conn.status == psutil.CONN_NONE else STATE_NAMES[conn.status]
        key = f"{state}/{transport}"
        out[key] = out.get(key, 0) + 1
    return out


def settle(expected: dict[str, int]) -> None:
    """Wait for the sockets the scene made to be in their states (a peer may be closing)."""
    deadline = time.monotonic() + 5
    while counted_by_psutil() != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached {expected}: {counted_by_psutil()}")
        time.sleep(0.01)


def tcp_tally() -> list[int]:
    """The sock_diag dump's TCP tally, one count per value of the state byte."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, sock_diag.NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(5)
        return sock_diag._tcp_states(sock)


def test_connections_by_psutil_and_by_sock_diag_are_the_sockets_made() -> None:
    """Every state made for real on loopback: both paths count exactly those sockets."""

    def body() -> dict[str, Any]:
        scene = Scene()
        with scene.stack:
            build_all_states(scene)
            created = named(scene.created)
            settle(created)
            got = {
                "created": created,
                "portable": named(host._connections(context(PORTABLE))["count"]),
                "default": named(host._connections(context(DEFAULT))["count"]),
                "sock_diag": named(sock_diag.connection_counts()),
                "tally": tcp_tally(),
                "sdk": sdk_points(["system.network.connection.count"], direct_reads=False),
                "psutil": counted_by_psutil(),
            }
        return got

    got = in_namespace(CLONE_NEWNET, body)
    created = got["created"]
    assert {"listen/tcp", "established/tcp", "time_wait/tcp", "close_wait/tcp"} <= set(created)
    assert created["None/udp"] >= 2
    assert got["psutil"] == created  # nothing moved during the reads
    assert got["portable"] == created
    assert got["default"] == created
    assert got["sock_diag"] == created
    tally = got["tally"]
    assert len(tally) == 256  # idiag_state is a u8
    tcp = {k.split("/")[0]: n for k, n in created.items() if k.endswith("/tcp")}
    assert {n: c for n, c in enumerate(tally) if c} == {KERNEL_STATES[s]: n for s, n in tcp.items()}
    sdk = got["sdk"]["system.network.connection.count"]
    expected = []
    for key, n in created.items():
        state, transport = key.split("/")
        attrs = {"network.transport": transport}
        if state != "None":
            attrs["network.connection.state"] = state
        expected.append([attrs, n])
    assert sorted(map(canonical, sdk)) == sorted(map(canonical, expected))


def small_scene(scene: Scene) -> None:
    server = scene.listener()
    scene.established(server)
    scene.time_wait(server)
    scene.close_wait(server)
    scene.udp()


def test_a_failed_sock_diag_read_falls_back_to_psutil_and_is_not_tried_again() -> None:
    def body() -> dict[str, Any]:
        calls: list[int] = []

        def refused() -> dict[Key, int]:
            calls.append(1)
            raise PermissionError(errno.EACCES, "Permission denied")

        sock_diag.connection_counts = refused  # this child's module only
        faults, lines = captured()
        scene = Scene()
        with scene.stack:
            small_scene(scene)
            created = named(scene.created)
            settle(created)
            ctx = context(DEFAULT, faults)
            reads = [named(host._connections(ctx)["count"]) for _ in range(3)]
            portable = context(PORTABLE, faults)
            reads.append(named(host._connections(portable)["count"]))
        return {"created": created, "reads": reads, "calls": len(calls), "lines": lines.lines}

    got = in_namespace(CLONE_NEWNET, body)
    assert got["reads"] == [got["created"]] * 4
    assert got["calls"] == 1  # failed once, then psutil only; never tried with direct_reads off
    assert got["lines"] == [
        "process metrics: the direct Linux read 'connections' failed (PermissionError: "
        "[Errno 13] Permission denied); psutil is used instead from now on."
    ]


# -- system.network.* ---------------------------------------------------------------


def net_dev() -> dict[str, dict[str, int]]:
    """/proc/net/dev by field: receive and transmit bytes, packets, errors and drops."""
    columns = {"bytes": (0, 8), "packets": (1, 9), "errors": (2, 10), "dropped": (3, 11)}
    out: dict[str, dict[str, int]] = {field: {} for field in columns}
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            numbers = [int(n) for n in rest.split()]
            for field, (rx, tx) in columns.items():
                out[field][f"{name.strip()}/receive"] = numbers[rx]
                out[field][f"{name.strip()}/transmit"] = numbers[tx]
    return out


def test_interface_counters_are_proc_net_dev() -> None:
    """A private namespace: only lo, and only the packets sent here."""

    def body() -> dict[str, Any]:
        # psutil adds counters it saw go down (nowrap) to their last value: the
        # host's lo, seen by an earlier test of this process, is another interface.
        psutil.net_io_counters.cache_clear()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
            rx.bind(("127.0.0.1", 0))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                for size in (10, 200, 3000):
                    tx.sendto(b"x" * size, rx.getsockname())
        before = net_dev()
        reading = host._system_network(context(DEFAULT))
        names = ["bytes", "packets", "dropped", "errors"]
        metrics = {
            "bytes": "system.network.io",
            "packets": "system.network.packet.count",
            "dropped": "system.network.packet.dropped",
            "errors": "system.network.errors",
        }
        return {
            "before": before,
            "proc": net_dev(),
            "reading": {field: named(reading[field]) for field in names},
            "psutil": {n: c._asdict() for n, c in psutil.net_io_counters(pernic=True).items()},
            "sdk": sdk_points(list(metrics.values())),
            "metrics": metrics,
            "after": net_dev(),
        }

    got = in_namespace(CLONE_NEWNET, body)
    proc = got["proc"]
    assert got["before"] == proc == got["after"]  # nothing moved during the reads
    assert proc["packets"]["lo/receive"] >= 3 and proc["bytes"]["lo/transmit"] >= 3210
    assert got["reading"] == proc
    # psutil read the same columns.
    lo = got["psutil"]["lo"]
    assert list(got["psutil"]) == ["lo"]
    for field, (rx, tx) in {
        "bytes": ("bytes_recv", "bytes_sent"),
        "packets": ("packets_recv", "packets_sent"),
        "errors": ("errin", "errout"),
        "dropped": ("dropin", "dropout"),
    }.items():
        assert (lo[rx], lo[tx]) == (proc[field]["lo/receive"], proc[field]["lo/transmit"])
    for field, metric in got["metrics"].items():
        sdk = {
            f"{a['network.interface.name']}/{a['network.io.direction']}": v
            for a, v in got["sdk"][metric]
        }
        assert sdk == proc[field], metric


# -- system.paging.* (swap) ---------------------------------------------------------


def meminfo_swap() -> tuple[int, int]:
    values = read_meminfo()
    return values["SwapTotal"], values["SwapFree"]


def expected_swap(total: int, free: int) -> dict[str, Any]:
    usage = {("used",): total - free, ("free",): free}
    share = {("used",): (total - free) / total, ("free",): free / total} if total else {}
    return {"usage": usage, "utilization": share}


_MEMINFO_STATES = ("MemTotal", "MemFree", "MemAvailable", "Buffers")


def _memory_states() -> dict[str, int]:
    """The fields of /proc/meminfo that the states of system.memory.usage come from."""
    found = read_meminfo()
    return {k: found[k] for k in _MEMINFO_STATES}


def test_memory_states_add_up_to_the_total_in_meminfo() -> None:
    """Semantic conventions: the states of system.memory.usage add up to system.memory.limit,
    and ``used`` is MemTotal - MemAvailable; the test reads /proc/meminfo around the
    collection. Before, used overlapped cached: the states came to over 100 %."""
    names = ["system.memory.usage", "system.memory.utilization", "system.memory.limit"]
    got, before, after = while_still(_memory_states, lambda: sdk_points(names))
    total = before["MemTotal"]
    assert after["MemTotal"] == total
    [[_, limit]] = got["system.memory.limit"]
    assert limit == total
    usage = {attrs["system.memory.state"]: v for attrs, v in got["system.memory.usage"]}
    share = {attrs["system.memory.state"]: v for attrs, v in got["system.memory.utilization"]}
    assert set(usage) == set(share) == {"used", "free", "buffers", "cached"}
    assert sum(usage.values()) == total, usage
    assert sum(share.values()) == pytest.approx(1.0, abs=1e-9), share
    for state, used in usage.items():
        assert used >= 0, usage
        assert share[state] == pytest.approx(used / total, rel=1e-12)

    def between(value: int, of: Callable[[dict[str, int]], int]) -> None:
        low, high = sorted((of(before), of(after)))
        assert low <= value <= high, (value, before, after)

    between(usage["used"], lambda m: m["MemTotal"] - m["MemAvailable"])
    between(usage["free"], lambda m: min(m["MemFree"], m["MemAvailable"]))
    # What is available beyond free: the buffers, then the rest of the reclaimable cache.
    rest = usage["buffers"] + usage["cached"]
    between(rest, lambda m: m["MemAvailable"] - min(m["MemFree"], m["MemAvailable"]))
    between(
        usage["buffers"],
        lambda m: min(m["Buffers"], m["MemAvailable"] - min(m["MemFree"], m["MemAvailable"])),
    )


GIB = 1 << 30


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # psutil's shape on macOS: available is free plus inactive pages.
        (
            {
                "total": 16,
                "available": 10,
                "percent": 37.5,
                "used": 6,
                "free": 2,
                "active": 5,
                "inactive": 8,
                "wired": 1,
            },
            {"used": 6, "free": 2, "cached": 8},
        ),
        # On Windows: free is available; nothing is left for cached.
        (
            {"total": 16, "available": 10, "percent": 37.5, "used": 6, "free": 10},
            {"used": 6, "free": 10},
        ),
        # Linux, when MemFree is above MemAvailable (the kernel's reserve): free is capped.
        (
            {
                "total": 16,
                "available": 3,
                "percent": 81.25,
                "used": 12,
                "free": 4,
                "active": 9,
                "inactive": 2,
                "buffers": 1,
                "cached": 2,
                "shared": 0,
                "slab": 1,
            },
            {"used": 13, "free": 3, "buffers": 0, "cached": 0},
        ),
    ],
    ids=["macos", "windows", "free-above-available"],
)
def test_memory_states_add_up_to_the_total_whatever_fields_psutil_has(
    fields: dict[str, float], expected: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other platforms' psutil shapes, injected: this test runs on Linux."""
    from collections import namedtuple

    svmem = namedtuple("svmem", list(fields))
    fake = svmem(**{k: (v * GIB if k != "percent" else v) for k, v in fields.items()})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: fake)
    got = host._system_memory(context(DEFAULT))
    usage = {k[0]: v for k, v in got["usage"].items()}
    assert usage == {k: v * GIB for k, v in expected.items()}
    assert sum(usage.values()) == got["limit"] == 16 * GIB
    assert sum(got["utilization"].values()) == pytest.approx(1.0)


@pytest.mark.parametrize("options", [DEFAULT, PORTABLE], ids=["sysinfo", "psutil"])
def test_swap_is_meminfo(options: ProcessMetricsOptions) -> None:
    for _ in range(50):
        before = meminfo_swap()
        got = host._swap(context(options))
        if meminfo_swap() == before:
            break
    assert dict(got) == expected_swap(*before)


@pytest.mark.parametrize("options", [DEFAULT, PORTABLE], ids=["sysinfo", "psutil"])
def test_swap_in_use_is_shared_out_by_state(
    options: ProcessMetricsOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swap in use, injected: turning swap on would change the host under the other tests."""
    total, free = 8 << 30, 3 << 30
    monkeypatch.setattr(procfs, "swap_totals", lambda: (total, free))
    real = psutil.swap_memory()
    fake = real._replace(total=total, used=total - free, free=free)
    monkeypatch.setattr(psutil, "swap_memory", lambda: fake)
    got = host._swap(context(options))
    assert dict(got) == {
        "usage": {("used",): 5 << 30, ("free",): 3 << 30},
        "utilization": {("used",): 0.625, ("free",): 0.375},
    }


def test_a_failed_sysinfo_falls_back_to_psutil_and_is_not_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def failing() -> tuple[int, int]:
        calls.append(1)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(procfs, "swap_totals", failing)
    faults, lines = captured()
    ctx = context(DEFAULT, faults)
    for _ in range(3):
        before = meminfo_swap()
        got = host._swap(ctx)
        if meminfo_swap() == before:
            assert dict(got) == expected_swap(*before)
    assert len(calls) == 1
    assert lines.lines == [
        "process metrics: the direct Linux read 'swap' failed (OSError: [Errno 5] "
        "Input/output error); psutil is used instead from now on."
    ]


# -- system.filesystem.* ------------------------------------------------------------


def _unescape(field: str) -> str:
    # getmntent(3): space, tab, newline and backslash are written as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted() -> list[tuple[str, str, str, str]]:
    """/proc/self/mounts: (device, mountpoint, type, options), of block-device filesystems."""
    with open("/proc/filesystems") as f:
        on_devices = {line.split()[0] for line in f if not line.startswith("nodev")}
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            device, where, fstype, opts = line.split()[:4]
            if device != "none" and fstype in on_devices:
                out.append((device, _unescape(where), fstype, opts))
    return out


def statvfs_truth() -> tuple[dict[str, int], dict[str, float]]:
    """Each mount's space by state from statvfs(3), keyed ``device|state|type|mode|mountpoint``."""
    usage: dict[str, int] = {}
    share: dict[str, float] = {}
    for device, where, fstype, opts in mounted():
        try:
            st = os.statvfs(where)
        except OSError:
            continue
        mode = "ro" if "ro" in opts.split(",") else "rw"
        total = st.f_blocks * st.f_frsize
        states = {
            "used": (st.f_blocks - st.f_bfree) * st.f_frsize,
            "free": st.f_bavail * st.f_frsize,
            "reserved": (st.f_bfree - st.f_bavail) * st.f_frsize,  # root's alone
        }
        for state, v in states.items():
            key = "|".join((device, state, fstype, mode, where))
            usage[key] = v
            if total:
                share[key] = v / total
    return usage, share


FS_ATTRIBUTES = (
    "system.device",
    "system.filesystem.state",
    "system.filesystem.type",
    "system.filesystem.mode",
    "system.filesystem.mountpoint",
)


def test_filesystems_are_the_mounts_and_their_statvfs(tmp_path: Path) -> None:
    """A read-only mount, then one hidden under a tmpfs (statvfs fails), then a writable one."""
    src, ro, hide, rw = (tmp_path / n for n in ("src", "ro", "hide", "rw"))
    inner = hide / "inner"
    for d in (src, ro, inner, rw):
        d.mkdir(parents=True)

    def body() -> dict[str, Any]:
        mount(str(src), ro, None, MS_BIND)
        mount("none", ro, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        mount(str(src), inner, None, MS_BIND)
        mount("tmpfs", hide, "tmpfs", 0)  # inner is still listed, but out of reach
        mount(str(src), rw, None, MS_BIND)
        # The disk is shared: statvfs on either side, from a round where nothing moved if
        # one comes; the reading lies between them in any case.
        reading, (usage, share), after = while_still(
            statvfs_truth, lambda: host._filesystem(context(DEFAULT)), rounds=20
        )
        sdk = sdk_points(["system.filesystem.usage"])["system.filesystem.usage"]
        return {
            "mounts": [list(m) for m in mounted()],
            "psutil": [p.mountpoint for p in psutil.disk_partitions(all=False)],
            "usage": usage,
            "share": share,
            "after": {"usage": after[0], "utilization": after[1]},
            "reading": {
                field: {"|".join(map(str, k)): v for k, v in values.items()}
                for field, values in reading.items()
            },
            "sdk": ["|".join(attrs[n] for n in FS_ATTRIBUTES) for attrs, _ in sdk],
            "sdk_names": sorted({n for attrs, _ in sdk for n in attrs}),
        }

    got = in_namespace(CLONE_NEWNS, body)
    mounts = {m[1]: m for m in got["mounts"]}
    order = list(mounts)
    # The scene is as meant: listed in this order, by psutil too, and one out of reach.
    assert order == got["psutil"]
    assert order.index(str(ro)) < order.index(str(inner)) < order.index(str(rw))
    device, _, fstype, _ = mounts[str(ro)]
    assert (mounts[str(ro)][3].split(",")[0], mounts[str(rw)][3].split(",")[0]) == ("ro", "rw")
    assert not any(k.endswith(f"|{inner}") for k in got["usage"])
    for state in ("used", "free", "reserved"):
        assert f"{device}|{state}|{fstype}|ro|{ro}" in got["usage"]
        assert f"{device}|{state}|{fstype}|rw|{rw}" in got["usage"]
    before = {"usage": got["usage"], "utilization": got["share"]}
    assert got["reading"].keys() == before.keys()
    for field, values in got["reading"].items():
        assert values.keys() == before[field].keys() == got["after"][field].keys(), field
        for key, v in values.items():
            low, high = sorted((before[field][key], got["after"][field][key]))
            assert low <= v <= high, (field, key, low, v, high)
    assert got["sdk_names"] == sorted(FS_ATTRIBUTES)
    assert sorted(got["sdk"]) == sorted(got["usage"])


# -- system.cpu.time ----------------------------------------------------------------


def cpu_modes(rows: list[Any], per_cpu: bool) -> dict[tuple[Any, str], float]:
    """psutil's CPU times read here, summed into the conventions' cpu.mode."""
    out: dict[tuple[Any, str], float] = {}
    for n, row in enumerate(rows):
        for mode, fields in HOST_MODES.items():
            present = [getattr(row, f) for f in fields if hasattr(row, f)]
            if present:
                out[(n if per_cpu else None, mode)] = sum(present)
    return out


@pytest.mark.parametrize("per_cpu", [False, True])
def test_cpu_time_by_mode_is_between_psutils_reads_around_it(per_cpu: bool) -> None:
    def read() -> dict[tuple[Any, str], float]:
        rows = psutil.cpu_times(percpu=True) if per_cpu else [psutil.cpu_times()]
        return cpu_modes(rows, per_cpu)

    before = read()
    got = host._system_cpu(context(ProcessMetricsOptions(per_cpu=per_cpu)))["time"]
    after = read()
    assert set(got) == set(before)
    for key, seconds in got.items():
        if key[1] == "iowait":  # it may go down (proc(5)); a fresh context has no floor yet
            assert min(before[key], after[key]) <= seconds <= max(before[key], after[key]), key
        else:
            assert before[key] <= seconds <= after[key], key


# --- host memory, CPUs and CPU utilisation against psutil's, read by the test


def test_host_memory_and_logical_cpus_are_psutils(sdk: Sdk) -> None:
    sdk.instrument()
    m = sdk.collect()
    vm = psutil.virtual_memory()
    assert value(m["system.memory.limit"]) == vm.total
    used = value(m["system.memory.usage"], **{"system.memory.state": "used"})
    assert abs(used - (vm.total - vm.available)) / vm.total < 0.05
    assert value(m["system.cpu.logical.count"]) == psutil.cpu_count()


def _busy(seconds: float) -> None:
    """Spin in user space for about ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(2_000))  # mostly user time: the clock read itself is a syscall


def _host_cpu() -> dict[str, float]:
    times = psutil.cpu_times()._asdict()
    return {
        mode: sum(times[f] for f in fields if f in times)
        for mode, fields in HOST_MODES.items()
        if any(f in times for f in fields)
    }


def test_system_cpu_utilization_is_each_modes_share_since_the_last_collection(sdk: Sdk) -> None:
    sdk.instrument()
    a0 = _host_cpu()
    sdk.collect()
    a1 = _host_cpu()
    user0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    _busy(0.5)
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_utime - user0
    b0 = _host_cpu()
    util = points(sdk.collect()["system.cpu.utilization"])
    b1 = _host_cpu()
    shares = {dict(k)["cpu.mode"]: v for k, v in util.items()}
    assert set(shares) == set(a0)
    # The window runs from the first collection (between a0 and a1) to the
    # second (between b0 and b1), so each share lies between these bounds.
    total_lo = sum(b0.values()) - sum(a1.values())
    total_hi = sum(b1.values()) - sum(a0.values())
    for mode, share in shares.items():
        lo = max(0.0, b0[mode] - a1[mode]) / total_hi
        hi = (b1[mode] - a0[mode]) / total_lo
        assert lo - 1e-9 <= share <= hi + 1e-9, (mode, share, lo, hi)
    # This process's busy loop is host user time too (the host counts in
    # ticks), or nice time when the process runs niced.
    mode = "nice" if hasattr(os, "nice") and os.nice(0) > 0 else "user"
    assert shares[mode] >= (mine - 0.03) / total_hi, (mode, shares, mine, total_hi)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)
