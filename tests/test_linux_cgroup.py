"""cgroup discovery and readers on fixture trees, laid out and written as the kernel does.

cgroup v2 controllers are not available on the test machine, so the v2 trees
are real files in a temporary folder, in the formats of the kernel's
cgroup-v2.rst, read through the same discovery with a fake
``/proc/self/cgroup``. Faults that a real cgroup cannot produce on demand
(garbage, a folder in place of a file) are made here too. The last part reads
real cgroups that the tests create under this process's own (root): a child
moved in reads them through the package, against the files read by the test.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process.linux import cgroup as cg
from opentelemetry.instrumentation.process.linux.cgroup import (
    CgroupPaths,
    Hierarchy,
    cgroup_files,
    cpu_quota,
    discover,
    limited,
    memory_limit,
    working_set,
)
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
from .support.trees import fake_proc, write_tree

CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc\n"

V2_CPU_STAT = """usage_usec 7543210
user_usec 5234567
system_usec 2308643
core_sched.force_idle_usec 0
nr_periods 1200
nr_throttled 345
throttled_usec 67890123
nr_bursts 0
burst_usec 0
"""

# The head of a 6.x memory.stat; new entries "can show up in the middle".
V2_MEMORY_STAT = """anon 104857600
file 52428800
kernel 4194304
kernel_stack 262144
pagetables 524288
sec_pagetables 0
percpu 0
sock 0
vmalloc 0
shmem 0
file_mapped 8388608
file_dirty 0
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon 104857600
active_anon 0
inactive_file 31457280
active_file 20971520
unevictable 0
slab_reclaimable 1048576
slab_unreclaimable 524288
slab 1572864
workingset_refault_anon 0
workingset_refault_file 12
pgfault 12345
pgmajfault 3
"""

V2_MEMORY_EVENTS = """low 0
high 3
max 17
oom 2
oom_kill 1
oom_group_kill 0
"""


@pytest.fixture
def v2(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A v2 tree: the process in /kubepods/pod1/app, the limits on pod1, its ancestor."""
    sys_fs = tmp_path / "sys-fs-cgroup"
    app = "kubepods/pod1/app"
    write_tree(
        sys_fs,
        {
            "cgroup.controllers": CONTROLLERS,
            "cpu.stat": V2_CPU_STAT.split("core_sched")[0],
            "kubepods/cgroup.controllers": CONTROLLERS,
            "kubepods/cgroup.type": "domain\n",
            "kubepods/cpu.max": "400000 100000\n",
            "kubepods/memory.max": "1073741824\n",
            "kubepods/pod1/cgroup.controllers": CONTROLLERS,
            "kubepods/pod1/cgroup.type": "domain\n",
            "kubepods/pod1/cpu.max": "150000 100000\n",
            "kubepods/pod1/memory.max": "268435456\n",
            f"{app}/cgroup.controllers": CONTROLLERS,
            f"{app}/cgroup.type": "domain\n",
            f"{app}/cpu.max": "max 100000\n",
            f"{app}/cpu.stat": V2_CPU_STAT,
            f"{app}/memory.max": "max\n",
            f"{app}/memory.current": "161480704\n",
            f"{app}/memory.peak": "201326592\n",
            f"{app}/memory.stat": V2_MEMORY_STAT,
            f"{app}/memory.events": V2_MEMORY_EVENTS,
        },
    )
    yield sys_fs, fake_proc(tmp_path, f"0::/{app}\n")


def test_v2_discovery_finds_the_folder_and_its_ancestors(v2: tuple[Path, Path]) -> None:
    sys_fs, proc = v2
    paths = discover(sys_fs, proc)
    app = sys_fs / "kubepods/pod1/app"
    chain = (app, app.parent, app.parent.parent, sys_fs)
    assert paths == CgroupPaths(
        cpu=Hierarchy(2, chain),
        cpuacct=Hierarchy(2, chain),
        memory=Hierarchy(2, chain),
        unified=Hierarchy(2, chain),
    )


def test_v2_limits_come_from_the_tightest_ancestor(v2: tuple[Path, Path]) -> None:
    paths = discover(*v2)
    assert cpu_quota(paths) == 1.5
    assert memory_limit(paths) == 256 << 20
    assert limited(paths)


def test_v2_readings(v2: tuple[Path, Path]) -> None:
    sys_fs, proc = v2
    app = sys_fs / "kubepods/pod1/app"
    files = cgroup_files(discover(sys_fs, proc))
    # cpu.stat once, for both throttling and CPU time.
    assert [f.path for f in files] == [
        str(app / name)
        for name in ("cpu.stat", "memory.current", "memory.stat", "memory.peak", "memory.events")
    ]
    values, failures = read_all(files)
    assert failures == []
    assert values == {
        cg.CPU_TIME_TOTAL: 7.543210,
        cg.CPU_TIME_USER: 5.234567,
        cg.CPU_TIME_SYSTEM: 2.308643,
        cg.CPU_PERIODS: 1200,
        cg.CPU_THROTTLED_PERIODS: 345,
        cg.CPU_THROTTLED_TIME: 67.890123,
        cg.MEMORY_USAGE: 161480704,
        cg.MEMORY_INACTIVE_FILE: 31457280,
        cg.MEMORY_PEAK: 201326592,
        cg.MEMORY_EVENTS_HIGH: 3,
        cg.MEMORY_EVENTS_MAX: 17,
        cg.MEMORY_EVENTS_OOM: 2,
        cg.MEMORY_EVENTS_OOM_KILL: 1,
    }
    assert working_set(values) == 161480704 - 31457280


def test_v2_without_the_cpu_controller_has_cpu_time_but_no_throttling(tmp_path: Path) -> None:
    sys_fs = tmp_path / "sys-fs-cgroup"
    write_tree(
        sys_fs,
        {
            "cgroup.controllers": "memory pids\n",
            "svc/cgroup.controllers": "memory pids\n",
            "svc/cgroup.type": "domain\n",
            "svc/cpu.stat": V2_CPU_STAT.split("core_sched")[0],
            "svc/memory.current": "4096\n",
            "svc/memory.max": "max\n",
        },
    )
    paths = discover(sys_fs, fake_proc(tmp_path, "0::/svc\n"))
    assert paths.cpu is None and paths.cpuacct is not None and paths.cpuacct.version == 2
    assert not limited(paths)
    values, _ = read_all(cgroup_files(paths))
    assert values == {
        cg.CPU_TIME_TOTAL: 7.543210,
        cg.CPU_TIME_USER: 5.234567,
        cg.CPU_TIME_SYSTEM: 2.308643,
        cg.MEMORY_USAGE: 4096,
    }


def test_a_kernel_without_memory_peak_or_oom_kill_leaves_them_out(v2: tuple[Path, Path]) -> None:
    sys_fs, proc = v2
    app = sys_fs / "kubepods/pod1/app"
    (app / "memory.peak").unlink()  # before Linux 5.19
    (app / "memory.events").write_text("low 0\nhigh 3\nmax 17\noom 2\n")  # before 4.13
    files = cgroup_files(discover(sys_fs, proc))
    fields = {k for f in files for k in f.fields}
    assert cg.MEMORY_PEAK not in fields and cg.MEMORY_EVENTS_OOM_KILL not in fields
    values, failures = read_all(files)
    assert failures == [] and values[cg.MEMORY_EVENTS_OOM] == 2


def test_a_v1_kernel_without_oom_kill_leaves_out_only_that_file(tmp_path: Path) -> None:
    sys_fs = tmp_path / "sys-fs-cgroup"
    write_tree(sys_fs, HYBRID)
    # Before Linux 4.13, memory.oom_control has no oom_kill line.
    oom_control = sys_fs / "memory/api/b3c4/memory.oom_control"
    oom_control.write_text("oom_kill_disable 0\nunder_oom 0\n")
    files = cgroup_files(discover(sys_fs, fake_proc(tmp_path, HYBRID_PROC)))
    assert str(oom_control) not in [f.path for f in files]
    values, failures = read_all(files)
    assert failures == []
    assert cg.MEMORY_EVENTS_OOM_KILL not in values and values[cg.MEMORY_FAILCNT] == 7


# This machine's layout: v1 cpu, cpuacct and memory (memory at a path of its
# own), and a v2 hierarchy at /sys/fs/cgroup/unified with no controllers.
HYBRID = {
    "unified/cgroup.controllers": "hugetlb\n",
    "unified/cpu.stat": "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnice_usec 0\n",
    "unified/cpu.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    "cpu/cpu.cfs_quota_us": "-1\n",
    "cpu/cpu.cfs_period_us": "100000\n",
    "cpu/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\nnr_bursts 0\nburst_time 0\n",
    "cpuacct/cpuacct.stat": "user 31094\nsystem 8013\n",
    "cpuacct/cpuacct.usage": "391077681701\n",
    "memory/memory.limit_in_bytes": "9223372036854771712\n",
    "memory/api/memory.limit_in_bytes": "9223372036854771712\n",
    "memory/api/b3c4/memory.limit_in_bytes": "536870912\n",
    "memory/api/b3c4/memory.usage_in_bytes": "285122560\n",
    "memory/api/b3c4/memory.max_usage_in_bytes": "526970880\n",
    "memory/api/b3c4/memory.failcnt": "7\n",
    "memory/api/b3c4/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    "memory/api/b3c4/memory.stat": "cache 254820352\nrss 1875968\ninactive_file 100\n"
    "hierarchical_memory_limit 536870912\ntotal_cache 254820352\n"
    "total_inactive_file 238784512\ntotal_active_file 16035840\n",
}
HYBRID_PROC = "9:name=systemd:/\n4:memory:/api/b3c4\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n"


def test_hybrid_host_reads_v1_controllers(tmp_path: Path) -> None:
    sys_fs = tmp_path / "sys-fs-cgroup"
    write_tree(sys_fs, HYBRID)
    paths = discover(sys_fs, fake_proc(tmp_path, HYBRID_PROC))
    own = sys_fs / "memory/api/b3c4"
    assert paths.cpu == Hierarchy(1, (sys_fs / "cpu",))
    assert paths.cpuacct == Hierarchy(1, (sys_fs / "cpuacct",))
    assert paths.memory == Hierarchy(1, (own, own.parent, sys_fs / "memory"))
    assert paths.unified == Hierarchy(2, (sys_fs / "unified",))
    assert cpu_quota(paths) is None and memory_limit(paths) == 512 << 20
    values, failures = read_all(cgroup_files(paths))
    assert failures == []
    assert values == {
        cg.CPU_PERIODS: 0,
        cg.CPU_THROTTLED_PERIODS: 0,
        cg.CPU_THROTTLED_TIME: 0.0,
        cg.CPU_TIME_USER: 310.94,  # USER_HZ ticks
        cg.CPU_TIME_SYSTEM: 80.13,
        cg.CPU_TIME_TOTAL: 391.077681701,
        cg.MEMORY_USAGE: 285122560,
        cg.MEMORY_INACTIVE_FILE: 238784512,  # the hierarchy's, not the group's own
        cg.MEMORY_PEAK: 526970880,
        cg.MEMORY_FAILCNT: 7,
        cg.MEMORY_EVENTS_OOM_KILL: 2,
    }


def test_v1_cpu_and_cpuacct_on_one_mount(tmp_path: Path) -> None:
    sys_fs = tmp_path / "sys-fs-cgroup"
    write_tree(
        sys_fs,
        {
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/docker/abc/cpu.stat": "nr_periods 10\nnr_throttled 4\n"
            "throttled_time 123456789\n",
            "cpu,cpuacct/docker/abc/cpuacct.stat": "user 250\nsystem 50\n",
            "cpu,cpuacct/docker/abc/cpuacct.usage": "3000000000\n",
        },
    )
    paths = discover(sys_fs, fake_proc(tmp_path, "3:cpu,cpuacct:/docker/abc\n"))
    folder = sys_fs / "cpu,cpuacct/docker/abc"
    assert paths.cpu is not None and paths.cpu.own == folder
    assert paths.cpuacct is not None and paths.cpuacct.own == folder
    assert cpu_quota(paths) == 0.5
    values, _ = read_all(cgroup_files(paths))
    assert values == {
        cg.CPU_PERIODS: 10,
        cg.CPU_THROTTLED_PERIODS: 4,
        cg.CPU_THROTTLED_TIME: 0.123456789,
        cg.CPU_TIME_USER: 2.5,
        cg.CPU_TIME_SYSTEM: 0.5,
        cg.CPU_TIME_TOTAL: 3.0,
    }


def test_a_container_without_cgroup_namespace_reads_its_mount(tmp_path: Path) -> None:
    # /proc/self/cgroup names the host's path; the mount shows the container's own cgroup.
    sys_fs = tmp_path / "sys-fs-cgroup"
    write_tree(
        sys_fs,
        {
            "memory/memory.limit_in_bytes": "268435456\n",
            "memory/memory.usage_in_bytes": "1000\n",
        },
    )
    paths = discover(sys_fs, fake_proc(tmp_path, "4:memory:/docker/0123abcd\n"))
    assert paths.memory == Hierarchy(1, (sys_fs / "memory",))
    assert memory_limit(paths) == 256 << 20


def test_no_cgroup_at_all(tmp_path: Path) -> None:
    paths = discover(tmp_path / "none", tmp_path / "none-either")
    assert paths == CgroupPaths()
    assert cgroup_files(paths) == () and not limited(paths)


def test_working_set_is_floored_at_zero() -> None:
    assert working_set({cg.MEMORY_USAGE: 100, cg.MEMORY_INACTIVE_FILE: 150}) == 0
    assert working_set({cg.MEMORY_USAGE: 100}) is None


# Faults: each breaks one file; only that file's fields go missing.

FIELDS_OF = {
    "cpu.stat": {
        cg.CPU_TIME_TOTAL,
        cg.CPU_TIME_USER,
        cg.CPU_TIME_SYSTEM,
        cg.CPU_PERIODS,
        cg.CPU_THROTTLED_PERIODS,
        cg.CPU_THROTTLED_TIME,
    },
    "memory.current": {cg.MEMORY_USAGE},
    "memory.stat": {cg.MEMORY_INACTIVE_FILE},
    "memory.peak": {cg.MEMORY_PEAK},
    "memory.events": {
        cg.MEMORY_EVENTS_HIGH,
        cg.MEMORY_EVENTS_MAX,
        cg.MEMORY_EVENTS_OOM,
        cg.MEMORY_EVENTS_OOM_KILL,
    },
}


def _vanish(path: Path) -> None:
    path.unlink()


def _folder_in_its_place(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _cut_mid_number(path: Path) -> None:
    # The last number loses its last digit and the newline: a plausible value.
    path.write_bytes(path.read_bytes()[:-2])


def _writer(content: str) -> Any:
    def write(path: Path) -> None:
        path.write_text(content)

    return write


FAULTS = [
    pytest.param(_vanish, FileNotFoundError, id="vanished"),
    pytest.param(_folder_in_its_place, IsADirectoryError, id="unreadable"),
    pytest.param(_writer(""), ValueError, id="empty"),
    pytest.param(_writer("12x\n"), ValueError, id="not-a-number"),
    pytest.param(_writer("oom 2\nmax 1"), ValueError, id="cut-short"),
    pytest.param(_cut_mid_number, ValueError, id="cut-mid-number"),
]


@pytest.mark.parametrize("name", sorted(FIELDS_OF))
@pytest.mark.parametrize(("fault", "error"), FAULTS)
def test_a_broken_file_drops_only_its_fields(
    v2: tuple[Path, Path], name: str, fault: Any, error: type[Exception]
) -> None:
    sys_fs, proc = v2
    files = cgroup_files(discover(sys_fs, proc))
    healthy, _ = read_all(files)
    path = sys_fs / "kubepods/pod1/app" / name
    saved = path.read_bytes()

    fault(path)
    values, failures = read_all(files)
    assert [(f.path, type(exc)) for f, exc in failures] == [(str(path), error)]
    assert values == {k: v for k, v in healthy.items() if k not in FIELDS_OF[name]}
    if error is ValueError:
        assert str(path) in str(failures[0][1])  # the log line says which file

    if path.is_dir():
        shutil.rmtree(path)
    path.write_bytes(saved)  # repaired: its fields come back
    assert read_all(files) == (healthy, [])


@pytest.mark.parametrize(
    "content",
    [
        "usage_usec 1\nuser_usec 1\n",  # a required line missing
        "usage_usec 1\nuser_usec 1\nsystem_usec 1\nnr_periods\n",  # a line without value
        "usage_usec 1\nuser_usec 1\nsystem_usec abc\n",
        V2_CPU_STAT.replace("burst_usec 0", "burst_usec"),  # even a line not used
    ],
)
def test_garbage_in_cpu_stat(v2: tuple[Path, Path], content: str) -> None:
    sys_fs, proc = v2
    files = cgroup_files(discover(sys_fs, proc))
    (sys_fs / "kubepods/pod1/app/cpu.stat").write_text(content)
    values, failures = read_all(files)
    assert len(failures) == 1 and isinstance(failures[0][1], ValueError)
    assert not FIELDS_OF["cpu.stat"] & set(values)
    assert values[cg.MEMORY_USAGE] == 161480704


def test_garbage_in_a_limit_file_raises_value_error(v2: tuple[Path, Path]) -> None:
    sys_fs, proc = v2
    (sys_fs / "kubepods/pod1/memory.max").write_text("lots\n")
    with pytest.raises(ValueError):
        memory_limit(discover(sys_fs, proc))


def test_each_file_is_opened_once_per_read(v2: tuple[Path, Path]) -> None:
    sys_fs, proc = v2
    files = cgroup_files(discover(sys_fs, proc))
    opened: Counter[str] = Counter()
    with _opens(opened):
        read_all(files)
    assert opened == Counter({f.path: 1 for f in files})


_recording: list[Counter[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _recording:
        _recording[-1][str(args[0])] += 1


sys.addaudithook(_audit)


class _opens:
    def __init__(self, counter: Counter[str]) -> None:
        self.counter = counter

    def __enter__(self) -> None:
        _recording.append(self.counter)

    def __exit__(self, *exc: object) -> None:
        _recording.pop()


def test_lines_that_move_between_reads_are_still_found(v2: tuple[Path, Path]) -> None:
    # "New entries can show up in the middle" (cgroup-v2.rst): the layout is
    # learnt at the first read and learnt again when it changes.
    sys_fs, proc = v2
    files = cgroup_files(discover(sys_fs, proc))
    first, _ = read_all(files)
    stat = sys_fs / "kubepods/pod1/app/cpu.stat"
    lines = V2_CPU_STAT.splitlines()
    stat.write_text("\n".join(["new_entry 5", *reversed(lines)]) + "\n")
    assert read_all(files) == (first, [])
    stat.write_text(V2_CPU_STAT.replace("nr_throttled 345", "nr_throttled 346"))
    values, _ = read_all(files)
    assert values == {**first, cg.CPU_THROTTLED_PERIODS: 346}


# --- against real cgroups, created by the tests (root) ----------------------------------

MIB = 1 << 20
HZ = 100  # USER_HZ, the unit of cpuacct.stat; checked below against sysconf
READ_PAGES = MIB  # at most what one read allocates and frees, or the kernel holds in batches


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
    limit = 128 * MIB  # room above its 40 MiB: at 64 MiB, mutmut's stats pass saw it killed
    with child_cgroup("memory") as mem, Child() as child:
        mem.write("memory.limit_in_bytes", str(limit))
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
    assert found["memory_limit"] == limit == number(after["memory.limit_in_bytes"])
    low, high = sorted(number(f["memory.usage_in_bytes"]) for f in (before, after))
    # Usage is not monotonic: the read's own short-lived pages, freed before the read after
    # it, lift it above both reads; the kernel's per-CPU charge batches, drained meanwhile,
    # can take it below them.
    low, high = low - READ_PAGES, high + READ_PAGES
    inactive = sorted(flat(f["memory.stat"])["total_inactive_file"] for f in (before, after))
    assert between(low, got[cg.MEMORY_USAGE], high)
    assert got[cg.MEMORY_USAGE] >= 24 * MIB  # what the child holds is charged here
    assert between(inactive[0], got[cg.MEMORY_INACTIVE_FILE], inactive[1])
    assert between(max(0, low - inactive[1]), reading["working_set"], high - inactive[0])
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
