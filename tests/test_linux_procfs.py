"""The small procfs and syscall readers against the kernel's own files and psutil."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

from .conftest import OpenRecorder, collect, points
from .support.meminfo import read_meminfo
from .support.waiting import while_still

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux readers")

if sys.platform.startswith("linux"):
    from opentelemetry.instrumentation.process.linux import procfs


def test_swap_totals_match_meminfo_and_psutil() -> None:
    before = read_meminfo()
    total, free = procfs.swap_totals()
    after = read_meminfo()
    swap = psutil.swap_memory()
    # The total moves only on swapon/swapoff; free moves with paging.
    assert total == before["SwapTotal"] == after["SwapTotal"] == swap.total
    low = min(before["SwapFree"], after["SwapFree"], swap.free)
    high = max(before["SwapFree"], after["SwapFree"], swap.free)
    slack = 64 << 20  # what paging may move between the reads
    assert low - slack <= free <= high + slack


def test_sysinfo_fields_are_where_the_kernel_puts_them() -> None:
    # The fields next to the swap ones, checked against the kernel's files: a
    # wrong layout or unit shifts them all. The struct is loaded here rather
    # than taken from the module's once-per-process cache, so that this test
    # runs the loading code whichever test ran first.
    import ctypes

    call, struct = procfs._load_sysinfo()
    # struct sysinfo (include/uapi/linux/sysinfo.h): 64 bytes on 32-bit ABIs, 112 on 64-bit.
    assert ctypes.sizeof(struct) == (112 if ctypes.sizeof(ctypes.c_long) == 8 else 64)
    info = struct()
    assert call(ctypes.byref(info)) == 0
    unit = info.mem_unit
    meminfo = read_meminfo()
    assert info.totalswap * unit == meminfo["SwapTotal"]
    assert abs(info.freeswap * unit - meminfo["SwapFree"]) <= 64 << 20
    # Buffers and Shmem move with I/O and tmpfs between the two reads.
    assert abs(info.bufferram * unit - meminfo["Buffers"]) <= 64 << 20
    assert abs(info.sharedram * unit - meminfo["Shmem"]) <= 64 << 20
    assert abs(info.freeram * unit - meminfo["MemFree"]) <= 256 << 20
    assert info.totalhigh == info.freehigh == 0 or sys.maxsize < 2**32  # highmem: 32-bit only
    with open("/proc/loadavg") as f:
        one_minute = float(f.read().split()[0])
    assert abs(info.loads[0] / 65536 - one_minute) <= 0.5  # fixed point, SI_LOAD_SHIFT 16
    assert unit >= 1
    assert info.totalram * unit == read_meminfo()["MemTotal"]
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    assert abs(info.uptime - uptime) <= 2
    with open("/proc/loadavg") as f:
        entities = int(f.read().split()[3].split("/")[1])  # threads of the host, as procs
    assert abs(info.procs - entities) <= 100  # threads come and go between the reads


def test_swap_totals_open_no_file(opens: OpenRecorder) -> None:
    procfs.swap_totals()
    with opens.recording() as paths:
        procfs.swap_totals()
    assert paths == []


def test_thread_ids_are_the_task_listing() -> None:
    # psutil read on either side, until no thread started or ended meanwhile (an earlier
    # test's thread may still be on its way out).
    tids, before, after = while_still(
        lambda: sorted(t.id for t in psutil.Process().threads()), procfs.thread_ids
    )
    assert sorted(tids) == before == after
    assert len(tids) == psutil.Process().num_threads()


_PENDING_CHILD = r"""
import json, os, signal, threading
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.linux import procfs

reader = InMemoryMetricReader()
metrics = ProcessMetrics(
    ProcessMetricsOptions(include=("process.signals_pending",)),
    meter_provider=MeterProvider(metric_readers=[reader]),
)

def reported():
    data = reader.get_metrics_data()
    return [p.value for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics if m.name == "process.signals_pending" for p in m.data.data_points]

# One thread, so a process-directed signal can only wait, blocked, in this one.
assert threading.active_count() == 1
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH})
def counts():
    found = procfs.status()
    return [found.pending, found.threads]

steps = [(counts(), reported())]
os.kill(os.getpid(), signal.SIGUSR1)  # to the process: ShdPnd, bit 9
steps.append((counts(), reported()))
signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)  # to the thread: SigPnd, bit 11
steps.append((counts(), reported()))
signal.pthread_kill(threading.get_ident(), signal.SIGWINCH)  # SigPnd, bit 27
os.kill(os.getpid(), signal.SIGWINCH)  # the same signal in ShdPnd too: still one
steps.append((counts(), reported()))
print(json.dumps({"steps": steps, "sigpending": sorted(signal.sigpending())}))
"""


def test_pending_signals_are_counted_from_status() -> None:
    """Real signals, blocked and sent, in a one-thread child: to the process and to the thread.

    A child, because a process-directed signal that some other thread of the
    test runner has unblocked would be delivered there (and kill the runner).
    """
    import json
    import signal
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _PENDING_CHILD], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    wanted = sorted([signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH])
    assert got["sigpending"] == wanted
    # (pending, threads) from status, and the metric of a collection just after.
    assert got["steps"] == [[[0, 1], [0]], [[1, 1], [1]], [[2, 1], [2]], [[3, 1], [3]]]


def test_a_status_without_its_lines_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose ``status`` lacks a line (a layout that cannot be made here, so faked)."""
    import io

    real = (
        b"Name:\tpython\nThreads:\t4\nSigQ:\t0/63408\nSigPnd:\t0000000000000300\n"
        b"ShdPnd:\t0000000000000a00\nSigBlk:\t0000000000000000\n"
    )

    def status(text: bytes) -> Any:
        return lambda *_a, **_k: io.BytesIO(text)

    monkeypatch.setattr(procfs, "open", status(real), raising=False)
    found = procfs.status()
    assert (found.pending, found.threads) == (3, 4)  # bits 8, 9 and 11: the union, once each
    for missing in (b"SigPnd:", b"ShdPnd:", b"Threads:"):
        lines = [line for line in real.splitlines(keepends=True) if not line.startswith(missing)]
        monkeypatch.setattr(procfs, "open", status(b"".join(lines)), raising=False)
        with pytest.raises(LookupError) as raised:
            procfs.status()
        assert str(raised.value) == "SigPnd, ShdPnd or Threads not in /proc/self/status"


@pytest.fixture
def real_swap(tmp_path: Path) -> Iterator[int]:
    """A 16 MiB swap file, on for the test, then off and removed; its size in bytes.

    This host has no swap, and 0 == 0 proves nothing about a swap reader.
    Needs root, mkswap/swapon and a file system that takes swap files.
    """
    tools = [shutil.which(tool) for tool in ("mkswap", "swapon", "swapoff")]
    if os.geteuid() != 0 or None in tools:
        pytest.skip("a swap file needs root and mkswap, swapon and swapoff")
    mkswap, swapon, swapoff = (str(tool) for tool in tools)
    path = tmp_path / "swap"
    with open(path, "wb") as f:
        f.write(bytes(16 << 20))
    path.chmod(0o600)
    subprocess.run([mkswap, str(path)], check=True, capture_output=True)
    on = subprocess.run([swapon, str(path)], capture_output=True, text=True)
    if on.returncode != 0:
        pytest.skip(f"swapon refused a swap file here: {on.stderr.strip()}")
    try:
        with open("/proc/swaps") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        yield sum(int(row[2]) for row in rows) * 1024
    finally:
        subprocess.run([swapoff, str(path)], check=True, capture_output=True)


T = TypeVar("T")


def swap_free_between(read: Callable[[], T]) -> tuple[T, int, int]:
    """``read()``, and meminfo's SwapFree before and after it (sorted), in a round where
    SwapFree held still, or the last of five."""
    got, before, after = while_still(lambda: read_meminfo()["SwapFree"], read)
    return got, min(before, after), max(before, after)


def test_swap_of_a_real_swap_file(real_swap: int) -> None:
    """The swap totals, and the paging metrics both ways, against /proc/swaps and meminfo."""
    total, free = procfs.swap_totals()
    assert total == real_swap == read_meminfo()["SwapTotal"] == psutil.swap_memory().total > 0
    assert isinstance(total, int) and isinstance(free, int)
    # Pages go out and come back between reads (a memory-limited cgroup of a test in the
    # other half of `make check` swaps): SwapFree on either side, in a round where it held still.
    free, low, high = swap_free_between(lambda: procfs.swap_totals()[1])
    assert low - (1 << 20) <= free <= high + (1 << 20)
    for direct in (True, False):
        reader = InMemoryMetricReader()
        with ProcessMetrics(
            ProcessMetricsOptions(include=("system.paging.*",), direct_reads=direct),
            meter_provider=MeterProvider(metric_readers=[reader]),
        ):
            got, low, high = swap_free_between(functools.partial(collect, reader))
        usage = {
            dict(a)["system.paging.state"]: v for a, v in points(got["system.paging.usage"]).items()
        }
        assert usage["used"] + usage["free"] == real_swap
        assert low - (1 << 20) <= usage["free"] <= high + (1 << 20)
        share = {
            dict(a)["system.paging.state"]: v
            for a, v in points(got["system.paging.utilization"]).items()
        }
        assert share == pytest.approx({state: v / real_swap for state, v in usage.items()})


class _Sysinfo:
    """A ``struct sysinfo`` as other kernels fill it (a layout this host cannot make)."""

    def __init__(self, mem_unit: int) -> None:
        self.totalswap, self.freeswap, self.mem_unit = 3000, 1000, mem_unit


@pytest.mark.parametrize(
    ("mem_unit", "expected"),
    [
        (4096, (3000 * 4096, 1000 * 4096)),  # 32-bit, more than 4 GiB: counts are in pages
        (0, (3000, 1000)),  # kernels before 2.3.23 had no mem_unit: bytes
        (1, (3000, 1000)),
    ],
)
def test_swap_totals_scale_by_the_kernels_unit(
    monkeypatch: pytest.MonkeyPatch, mem_unit: int, expected: tuple[int, int]
) -> None:
    monkeypatch.setattr(procfs, "_sysinfo", lambda: _Sysinfo(mem_unit))
    got = procfs.swap_totals()
    assert got == expected
    assert all(type(v) is int for v in got)


def test_a_failed_sysinfo_raises_the_errno(monkeypatch: pytest.MonkeyPatch) -> None:
    """sysinfo(2) fails only on a bad pointer (EFAULT): the call is replaced to fail."""
    import ctypes
    import errno

    call, struct = procfs._load_sysinfo()

    def failing(_pointer: Any) -> int:
        ctypes.set_errno(errno.EFAULT)
        return -1

    monkeypatch.setattr(procfs, "_LOADED", [(failing, struct)])
    with pytest.raises(OSError) as raised:
        procfs._sysinfo()
    assert raised.value.errno == errno.EFAULT
    assert raised.value.strerror == os.strerror(errno.EFAULT)
    assert call is not failing


def test_the_sysinfo_call_is_loaded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[int] = []
    real = procfs._load_sysinfo

    def counted() -> Any:
        loads.append(1)
        return real()

    monkeypatch.setattr(procfs, "_LOADED", [])
    monkeypatch.setattr(procfs, "_load_sysinfo", counted)
    first, second = procfs._sysinfo(), procfs._sysinfo()
    assert len(loads) == 1
    assert first.totalram == second.totalram == read_meminfo()["MemTotal"] // first.mem_unit


def _vmstat() -> dict[str, int]:
    with open("/proc/vmstat") as f:
        return {name: int(value) for name, value in (line.split() for line in f)}


def test_page_faults_are_vmstats_major_and_the_rest() -> None:
    before = _vmstat()
    major, minor = procfs.page_faults()
    after = _vmstat()
    assert before["pgmajfault"] <= major <= after["pgmajfault"]
    # pgfault counts every fault, major ones included.
    low = before["pgfault"] - after["pgmajfault"]
    high = after["pgfault"] - before["pgmajfault"]
    assert low <= minor <= high


def test_a_real_sysinfo_failure_gives_its_errno() -> None:
    """sysinfo(2) given a null pointer fails for real, with EFAULT, which ctypes must keep."""
    import ctypes
    import errno

    call, _struct = procfs._load_sysinfo()
    ctypes.set_errno(0)
    assert call(None) == -1
    assert ctypes.get_errno() == errno.EFAULT


def test_a_libc_without_sysinfo_is_an_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    """A libc without the symbol (musl has it; a stripped one may not), faked."""
    import ctypes

    class NoSysinfo:
        def __init__(self, *_a: Any, **_k: Any) -> None:
            pass

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(f"undefined symbol: {name}")

    monkeypatch.setattr(ctypes, "CDLL", NoSysinfo)
    with pytest.raises(OSError) as raised:
        procfs._load_sysinfo()
    assert str(raised.value) == "no sysinfo in libc: undefined symbol: sysinfo"
