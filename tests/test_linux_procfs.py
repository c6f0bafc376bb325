"""The small procfs and syscall readers against the kernel's own files and psutil."""

from __future__ import annotations

import sys

import psutil
import pytest

from .conftest import OpenRecorder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux readers")

if sys.platform.startswith("linux"):
    from opentelemetry.instrumentation.process.linux import procfs


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes, read here."""
    found = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            found[name] = int(rest.split()[0]) * 1024
    return found


def test_swap_totals_match_meminfo_and_psutil() -> None:
    before = _meminfo()
    total, free = procfs.swap_totals()
    after = _meminfo()
    swap = psutil.swap_memory()
    # The total moves only on swapon/swapoff; free moves with paging.
    assert total == before["SwapTotal"] == after["SwapTotal"] == swap.total
    low = min(before["SwapFree"], after["SwapFree"], swap.free)
    high = max(before["SwapFree"], after["SwapFree"], swap.free)
    slack = 64 << 20  # what paging may move between the reads
    assert low - slack <= free <= high + slack


def test_sysinfo_fields_are_where_the_kernel_puts_them() -> None:
    # The fields next to the swap ones, checked against the kernel's files: a
    # wrong layout or unit shifts them all.
    info = procfs._sysinfo()
    unit = info.mem_unit
    assert unit >= 1
    assert info.totalram * unit == _meminfo()["MemTotal"]
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
    tids = procfs.thread_ids()
    assert sorted(tids) == sorted(t.id for t in psutil.Process().threads())
    assert len(tids) == psutil.Process().num_threads()
