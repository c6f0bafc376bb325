"""The cgroup and PSI readers against real cgroups, created by the tests.

Each test makes cgroups under this process's own ones (v1 cpu, cpuacct and
memory; the v2 hierarchy where it is mounted), moves a child process in, and
compares what the child reads through the package with the cgroup's files
read by the test. A value that moves while the child reads it is held between
the test's reads just before and just after. Needs root; the cgroups are
removed even when a test fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from opentelemetry.instrumentation.process.linux import cgroup as cg
from opentelemetry.instrumentation.process.linux.cgroup import discover
from opentelemetry.instrumentation.process.linux.files import read_all
from opentelemetry.instrumentation.process.linux.psi import field
from opentelemetry.instrumentation.process.platforms import FREE_THREADED

from .support.cgroups import (
    CGROUP_ROOT,
    Cgroup,
    Child,
    between,
    child_cgroup,
    flat,
    number,
    own_folder,
    total,
)

MIB = 1 << 20
HZ = 100  # USER_HZ, the unit of cpuacct.stat; checked below against sysconf


@contextlib.contextmanager
def quota_cgroups(*extra: str) -> Iterator[tuple[dict[str, Cgroup], Child]]:
    """A child process alone in a new cpu cgroup with a 0.2 CPU quota, and in ``extra`` ones."""
    with contextlib.ExitStack() as stack:
        groups = {c: stack.enter_context(child_cgroup(c)) for c in ("cpu", *extra)}
        groups["cpu"].write("cpu.cfs_period_us", "100000")
        groups["cpu"].write("cpu.cfs_quota_us", "20000")
        child = stack.enter_context(Child())
        for group in groups.values():
            group.add(child.pid)
            assert group.pids() == {child.pid}
        yield groups, child


def test_cpu_quota_throttles_and_the_readings_match_the_cgroup() -> None:
    import os

    assert os.sysconf("SC_CLK_TCK") == HZ
    with quota_cgroups("cpuacct") as (groups, child):
        cpu, acct = groups["cpu"], groups["cpuacct"]
        found = child.ask("discover")
        assert found["cpu"] == [1, str(cpu.folder)]
        assert found["cpuacct"] == [1, str(acct.folder)]
        assert found["cpu_quota"] == 0.2
        assert found["limited"] is True
        start = child.ask("read")["values"]
        # psutil's count of the child's CPU time since it entered the cgroup.
        child_cpu0 = sum(psutil.Process(child.pid).cpu_times()[:2])

        child.ask("spin 2")  # throttled: 20 ms of CPU per 100 ms period
        child.ask("pulse 1")  # within the quota: periods that are not throttled
        # The child is idle now: the counters move only while it reads.
        stat0, acct0, usage0 = (
            flat(cpu.read("cpu.stat")),
            flat(acct.read("cpuacct.stat")),
            number(acct.read("cpuacct.usage")),
        )
        reading = child.ask("read")
        child_cpu1 = sum(psutil.Process(child.pid).cpu_times()[:2])
        stat1, acct1, usage1 = (
            flat(cpu.read("cpu.stat")),
            flat(acct.read("cpuacct.stat")),
            number(acct.read("cpuacct.usage")),
        )
    got = reading["values"]
    assert reading["failures"] == []
    assert between(stat0["nr_periods"], got[cg.CPU_PERIODS], stat1["nr_periods"])
    assert between(stat0["nr_throttled"], got[cg.CPU_THROTTLED_PERIODS], stat1["nr_throttled"])
    assert between(
        stat0["throttled_time"] / 1e9, got[cg.CPU_THROTTLED_TIME], stat1["throttled_time"] / 1e9
    )
    assert got[cg.CPU_THROTTLED_PERIODS] > start[cg.CPU_THROTTLED_PERIODS]
    assert got[cg.CPU_THROTTLED_TIME] > start[cg.CPU_THROTTLED_TIME]
    assert got[cg.CPU_PERIODS] > got[cg.CPU_THROTTLED_PERIODS]
    # The cgroup's own CPU time, which only the child runs in.
    assert between(acct0["user"] / HZ, got[cg.CPU_TIME_USER], acct1["user"] / HZ)
    assert between(acct0["system"] / HZ, got[cg.CPU_TIME_SYSTEM], acct1["system"] / HZ)
    assert between(usage0 / 1e9, got[cg.CPU_TIME_TOTAL], usage1 / 1e9)
    assert got[cg.CPU_TIME_TOTAL] > start[cg.CPU_TIME_TOTAL]
    # The child is alone in the cgroup: its CPU time is the cgroup's, to a few
    # clock ticks (psutil counts in ticks of 10 ms).
    grown = got[cg.CPU_TIME_TOTAL] - start[cg.CPU_TIME_TOTAL]
    assert abs(grown - (child_cpu1 - child_cpu0)) <= 0.05, (grown, child_cpu1 - child_cpu0)


def test_cgroup_pressure_of_a_real_v2_cgroup() -> None:
    """A hybrid host: the v2 hierarchy has no controllers, but each cgroup has PSI."""
    with quota_cgroups("unified") as (groups, child):
        v2 = groups["unified"]
        found = child.ask("discover")
        assert found["pressure_scope"] == "cgroup"
        assert found["unified"] == [2, str(v2.folder)]
        assert str(v2.folder / "cpu.pressure") in found["files"]
        child.ask("spin 1.5")
        before = {r: v2.read(f"{r}.pressure") for r in ("cpu", "memory", "io")}
        reading = child.ask("read")
        after = {r: v2.read(f"{r}.pressure") for r in ("cpu", "memory", "io")}
    got = reading["values"]
    assert reading["failures"] == []
    for resource in ("cpu", "memory", "io"):
        for kind in ("some", "full"):
            low, high = total(before[resource], kind), total(after[resource], kind)
            assert between(low / 1e6, got[field(resource, kind)], high / 1e6), (resource, kind)
    # Throttled by its quota, the child's cgroup stalled on CPU.
    assert got[field("cpu", "some")] > 0


def test_memory_usage_working_set_and_limit_match_the_cgroup() -> None:
    with child_cgroup("memory") as mem, Child() as child:
        mem.write("memory.limit_in_bytes", str(64 * MIB))
        mem.add(child.pid)
        assert mem.pids() == {child.pid}
        child.ask("alloc 40")
        child.ask("free")
        child.ask("alloc 24")  # the peak stays at 40 MiB and more
        found = child.ask("discover")
        before = _memory_files(mem)
        reading = child.ask("read")
        after = _memory_files(mem)
    got = reading["values"]
    assert reading["failures"] == []
    assert found["memory"] == [1, str(mem.folder)]
    assert found["memory_limit"] == 64 * MIB == number(after["memory.limit_in_bytes"])
    usage = sorted(number(f["memory.usage_in_bytes"]) for f in (before, after))
    inactive = sorted(flat(f["memory.stat"])["total_inactive_file"] for f in (before, after))
    assert between(usage[0], got[cg.MEMORY_USAGE], usage[1])
    assert got[cg.MEMORY_USAGE] >= 24 * MIB  # what the child holds is charged here
    assert between(inactive[0], got[cg.MEMORY_INACTIVE_FILE], inactive[1])
    assert between(max(0, usage[0] - inactive[1]), reading["working_set"], usage[1] - inactive[0])
    peak = sorted(number(f["memory.max_usage_in_bytes"]) for f in (before, after))
    assert between(peak[0], got[cg.MEMORY_PEAK], peak[1])
    assert got[cg.MEMORY_PEAK] >= 40 * MIB
    # Freed since, but the free-threaded build's allocator (mimalloc) keeps what was freed
    # and reuses it: there the usage may stay at the peak.
    assert got[cg.MEMORY_PEAK] >= got[cg.MEMORY_USAGE] + (0 if FREE_THREADED else 1)


def _memory_files(mem: Cgroup) -> dict[str, bytes]:
    names = ("memory.usage_in_bytes", "memory.stat", "memory.limit_in_bytes")
    return {n: mem.read(n) for n in (*names, "memory.max_usage_in_bytes")}


def test_a_grandchild_over_the_limit_raises_the_oom_kill_counter() -> None:
    with child_cgroup("memory") as mem, Child() as child:
        mem.write("memory.limit_in_bytes", str(64 * MIB))
        mem.add(child.pid)
        assert mem.pids() == {child.pid}  # the OOM killer can pick only the test's processes
        child.ask("discover")
        before = child.ask("read")["values"]
        kills0 = flat(mem.read("memory.oom_control"))["oom_kill"]
        ended = child.ask("oom 128")
        after = child.ask("read")["values"]
        kills1 = flat(mem.read("memory.oom_control"))["oom_kill"]
        failcnt = number(mem.read("memory.failcnt"))
        assert child.ask("free") == {"held": 0}  # the child itself was spared
    assert ended["returncode"] == -9  # SIGKILL from the OOM killer
    assert before[cg.MEMORY_EVENTS_OOM_KILL] == kills0 == 0
    assert after[cg.MEMORY_EVENTS_OOM_KILL] == kills1 >= 1
    assert after[cg.MEMORY_FAILCNT] == failcnt > before[cg.MEMORY_FAILCNT]


def test_files_of_a_removed_cgroup_drop_only_their_fields(tmp_path: Path) -> None:
    """The cgroup is removed under the reader (as when its container goes away)."""
    with child_cgroup("memory") as mem:
        relative = mem.folder.relative_to(CGROUP_ROOT / "memory")
        lines = [
            line
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if ":memory:" not in line
        ]
        fake = tmp_path / "proc-self-cgroup"
        fake.write_text("\n".join([*lines, f"4:memory:/{relative}"]) + "\n")
        paths = discover(CGROUP_ROOT, fake)
        assert paths.memory is not None and paths.memory.own == mem.folder
        files = cg.cgroup_files(paths)
        memory_files = {f.path for f in files if f.path.startswith(str(mem.folder))}
        assert len(memory_files) == 5
        healthy, failures = read_all(files)
        assert failures == [] and cg.MEMORY_USAGE in healthy

        mem.folder.rmdir()
        values, failures = read_all(files)
        assert {f.path for f, _ in failures} == memory_files
        assert all(isinstance(exc, FileNotFoundError) for _, exc in failures)
        memory_fields = {k for f in files if f.path in memory_files for k in f.fields}
        assert set(values) == set(healthy) - memory_fields
        assert cg.CPU_TIME_TOTAL in values  # the other files still read

        mem.folder.mkdir()  # the cgroup comes back: so do its metrics
        values, failures = read_all(files)
        assert failures == [] and set(values) == set(healthy)


def test_discovery_of_this_process_matches_proc_self_cgroup() -> None:
    if own_folder("memory") is None:
        pytest.skip("no cgroup v1 memory controller here")
    paths = discover()
    assert paths.memory is not None and paths.memory.own == own_folder("memory")
    assert paths.memory.dirs[-1] == CGROUP_ROOT / "memory"
