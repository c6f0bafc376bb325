"""The saturation group through the instrumentor: when it is off, and cgroup files that fail.

- Auto mode in a cgroup without limits reports no cgroup metric and opens no
  cgroup file at collection; ``saturation=False`` opens no pressure file either.
- Faults on a cgroup v2 fixture tree (v2 controllers are not available on the
  test machine; a vanished v1 cgroup is below, in real cgroups): a file
  that vanishes, cannot be read (a folder in its place) or holds garbage drops
  only the metrics it feeds, is logged once, never raises, and the metrics come
  back when the file does. Discovery is pointed at the tree by replacing
  ``cgroup.discover`` with one bound to it: its folders are default arguments,
  bound when the module is imported, so patching ``CGROUP_ROOT`` would not reach it.
- Last, in real cgroups that the tests create (root): the values against the
  cgroup's files, and the limits a child is moved under.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.linux import cgroup
from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.platforms import FREE_THREADED

from .conftest import (
    OpenRecorder,
    Sdk,
    cgroup_limited_here,
    collect,
    events_metrics,
    points,
    value,
)
from .support.cgroups import Cgroup, Child, child_cgroup, flat, nested_cgroup, number

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CGROUP_METRICS = {m.name for m in METRICS if m.source in ("cgroup_cpu", "cgroup_memory")}
PRESSURE_METRICS = {m.name for m in METRICS if m.source == "pressure"}
# Read at instrument() to decide whether a limit applies (and for the limits gauges).
LIMIT_FILES = {
    "cgroup.controllers",
    "cpu.max",
    "memory.max",
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
    "memory.limit_in_bytes",
}


def under(paths: list[str], prefix: str) -> list[str]:
    return [p for p in paths if p.startswith(prefix)]


def test_auto_mode_without_a_limit_reports_no_cgroup_metric_and_reads_no_cgroup_file(
    sdk: Sdk, opens: OpenRecorder
) -> None:
    if cgroup_limited_here():
        pytest.skip("this process is in a limited cgroup: auto mode turns the group on")
    with opens.recording() as at_start:
        sdk.instrument()
    with opens.recording() as collecting:
        got = sdk.collect()
        got = sdk.collect()
    assert not CGROUP_METRICS & set(got)
    # Deciding reads the limit files once; no file a collection would read. (A
    # process in a cgroup v2 of its own reads that cgroup's pressure files.)
    names = {Path(p).name for p in under(at_start, "/sys/fs/cgroup")}
    assert {n for n in names if not n.endswith(".pressure")} <= LIMIT_FILES
    assert [p for p in under(collecting, "/sys/fs/cgroup") if not p.endswith(".pressure")] == []
    # Pressure stalls are on wherever the kernel has them, each file read once a collection.
    present = {m.name for m in METRICS if m.source == "pressure" and _psi(m.field)}
    assert {n for n in PRESSURE_METRICS if n in got} == present
    pressure = Counter(
        p for p in collecting if p.startswith("/proc/pressure/") or p.endswith(".pressure")
    )
    assert set(pressure.values()) <= {2}
    assert {Path(p).name.removesuffix(".pressure") for p in pressure} == {
        m.field for m in METRICS if m.name in present
    }


def _psi(resource: str) -> bool:
    return os.path.exists(f"/proc/pressure/{resource}")


def test_saturation_false_reads_no_cgroup_and_no_pressure_file(
    sdk: Sdk, opens: OpenRecorder
) -> None:
    with opens.recording() as at_start:
        sdk.instrument(saturation=False)
    with opens.recording() as collecting:
        got = sdk.collect()
    assert not (CGROUP_METRICS | PRESSURE_METRICS) & set(got)
    assert under(at_start + collecting, "/proc/pressure") == []
    assert [p for p in at_start + collecting if p.endswith(".pressure")] == []
    # Only the limits, for the utilisation divisors and their gauges.
    assert {Path(p).name for p in under(at_start, "/sys/fs/cgroup")} <= LIMIT_FILES
    assert under(collecting, "/sys/fs/cgroup") == []
    assert "process_metrics.cpu.available" in got


# --- faults, on a v2 fixture tree ----------------------------------------------------------

CONTROLLERS = "cpuset cpu io memory pids\n"
PSI = "some avg10=1.50 avg60=0.80 avg300=0.20 total={some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"  # noqa: E501
APP = "kubepods/pod1/app"
TREE = {
    "cgroup.controllers": CONTROLLERS,
    "kubepods/cgroup.controllers": CONTROLLERS,
    "kubepods/cgroup.type": "domain\n",
    "kubepods/pod1/cgroup.controllers": CONTROLLERS,
    "kubepods/pod1/cgroup.type": "domain\n",
    "kubepods/pod1/cpu.max": "150000 100000\n",
    "kubepods/pod1/memory.max": "268435456\n",
    f"{APP}/cgroup.controllers": CONTROLLERS,
    f"{APP}/cgroup.type": "domain\n",
    f"{APP}/cpu.max": "max 100000\n",
    f"{APP}/memory.max": "max\n",
    f"{APP}/cpu.stat": (
        "usage_usec 7543210\nuser_usec 5234567\nsystem_usec 2308643\n"
        "nr_periods 1200\nnr_throttled 345\nthrottled_usec 67890123\n"
        "nr_bursts 0\nburst_usec 0\n"
    ),
    f"{APP}/memory.current": "161480704\n",
    f"{APP}/memory.peak": "201326592\n",
    f"{APP}/memory.stat": "anon 104857600\nfile 52428800\ninactive_file 31457280\n"
    "active_file 20971520\npgfault 12345\n",
    f"{APP}/memory.events": "low 0\nhigh 3\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n",
    f"{APP}/cpu.pressure": PSI.format(some=2500000, full=1000000),
    f"{APP}/memory.pressure": PSI.format(some=400000, full=300000),
    f"{APP}/io.pressure": PSI.format(some=70000, full=60000),
}
EXPECTED: dict[str, dict[frozenset[tuple[str, str]], float]] = {
    "process_metrics.cgroup.cpu.periods": {frozenset(): 1200},
    "process_metrics.cgroup.cpu.throttled_periods": {frozenset(): 345},
    "process_metrics.cgroup.cpu.throttled_time": {frozenset(): 67.890123},
    "container.cpu.time": {
        frozenset({("cpu.mode", "user")}): 5.234567,
        frozenset({("cpu.mode", "kernel")}): 2.308643,
    },
    "container.memory.usage": {frozenset(): 161480704},
    "container.memory.working_set": {frozenset(): 161480704 - 31457280},
    "process_metrics.cgroup.memory.limit": {frozenset(): 268435456},
    "process_metrics.cgroup.memory.peak": {frozenset(): 201326592},
    "process_metrics.cgroup.memory.events": {
        frozenset({("process_metrics.cgroup.memory.event", e)}): n
        for e, n in (("high", 3), ("max", 17), ("oom", 2), ("oom_kill", 1))
    },
    **{
        f"process_metrics.{resource}.linux.pressure.stall_time": {
            frozenset(
                {
                    ("process_metrics.pressure.stall_type", kind),
                    ("process_metrics.pressure.scope", "cgroup"),
                }
            ): total
            for kind, total in zip(("some", "full"), totals, strict=True)
        }
        for resource, totals in (("cpu", (2.5, 1.0)), ("memory", (0.4, 0.3)), ("io", (0.07, 0.06)))
    },
}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The app's folder in a v2 fixture tree that discovery (and the facts) now find."""
    root = tmp_path / "sys-fs-cgroup"
    for rel, content in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(f"0::/{APP}\n")
    real = cgroup.discover

    def discover(*_args: object) -> cgroup.CgroupPaths:
        return real(root, proc)

    monkeypatch.setattr(cgroup, "discover", functools.wraps(real)(discover))
    yield root / APP


def ours(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    got = collect(reader)
    return {name: points(got[name]) for name in set(EXPECTED) & set(got)}


def garbage(path: Path) -> None:
    path.write_text("garbage\n")


def folder(path: Path) -> None:
    path.unlink()
    path.mkdir()  # open() succeeds, read() fails: IsADirectoryError


def vanish(path: Path) -> None:
    path.unlink()


FAULTS = {"garbage": (garbage, "ValueError"), "folder": (folder, "IsADirectoryError"),
          "vanished": (vanish, "FileNotFoundError")}  # fmt: skip
CPU = {n for n in EXPECTED if n.startswith("process_metrics.cgroup.cpu.")} | {"container.cpu.time"}


@pytest.mark.parametrize(
    ("name", "fault", "drops"),
    [
        ("memory.current", "garbage", {"container.memory.usage", "container.memory.working_set"}),
        ("memory.stat", "folder", {"container.memory.working_set"}),
        ("memory.peak", "garbage", {"process_metrics.cgroup.memory.peak"}),
        ("memory.events", "vanished", {"process_metrics.cgroup.memory.events"}),
        ("cpu.stat", "vanished", CPU),
        ("cpu.stat", "garbage", CPU),
        ("cpu.pressure", "garbage", {"process_metrics.cpu.linux.pressure.stall_time"}),
        ("io.pressure", "folder", {"process_metrics.io.linux.pressure.stall_time"}),
        ("memory.pressure", "vanished", {"process_metrics.memory.linux.pressure.stall_time"}),
    ],
)
def test_a_failing_file_drops_only_what_it_feeds_is_logged_once_and_comes_back(
    name: str, fault: str, drops: set[str], tree: Path, sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.process")
    sdk.instrument()  # auto: the limits on the ancestor turn the group on
    assert ours(sdk.reader) == EXPECTED
    got = sdk.collect()
    assert value(got["process_metrics.cpu.available"]) == min(1.5, len(os.sched_getaffinity(0)))
    assert value(got["process_metrics.memory.limit"]) == 268435456

    path = tree / name
    saved = path.read_bytes()
    break_it, exc_name = FAULTS[fault]
    break_it(path)
    caplog.clear()
    broken = ours(sdk.reader)  # never raises
    assert broken == {k: v for k, v in EXPECTED.items() if k not in drops}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert f"could not read {path} ({exc_name}" in warnings[0].getMessage()
    if fault == "garbage":
        assert "b'garbage\\n'" in warnings[0].getMessage()  # an excerpt of what it held
    caplog.clear()
    assert ours(sdk.reader) == broken
    assert caplog.records == []  # once, not at every collection

    if path.is_dir():
        path.rmdir()
    path.write_bytes(saved)
    assert ours(sdk.reader) == EXPECTED
    assert [r.getMessage() for r in caplog.records] == [
        f"process metrics: {path} can be read again."
    ]


def test_a_cgroup_folder_removed_from_the_tree_drops_its_metrics_and_the_rest_goes_on(
    tree: Path, sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole cgroup goes (as its container does): every file of it at once."""
    caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.process")
    sdk.instrument()
    assert ours(sdk.reader) == EXPECTED
    saved = tree.with_name("saved")
    tree.rename(saved)
    caplog.clear()
    got = ours(sdk.reader)
    # Only the limit, found at discovery, is left.
    assert got == {"process_metrics.cgroup.memory.limit": {frozenset(): 268435456}}
    assert "process.cpu.time" in sdk.collect()  # the rest of the collection goes on
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 8  # one per file
    saved.rename(tree)
    assert ours(sdk.reader) == EXPECTED


def test_the_files_of_the_group_are_found_once_per_process(
    tree: Path,
    instrument: Callable[..., ProcessInstrumentor],
    opens: OpenRecorder,
) -> None:
    """The cpu and the memory sources share one search for the files to read."""
    with opens.recording() as at_start:
        instrument()
    counts = Counter(Path(p).name for p in under(at_start, str(tree)))
    # A one-number file is read once to see that it reads; a flat-keyed one also
    # once before, to see which of its optional lines this kernel writes.
    assert {n: counts[n] for n in ("memory.current", "memory.peak", "memory.stat")} == {
        "memory.current": 1,
        "memory.peak": 1,
        "memory.stat": 1,
    }
    assert {n: counts[n] for n in ("cpu.stat", "memory.events")} == {
        "cpu.stat": 2,
        "memory.events": 2,
    }


# --- in real cgroups created by the tests (root) ---------------------------------------

MIB = 1 << 20
HZ = 100  # USER_HZ, the unit of cpuacct.stat

Collected = dict[str, list[list[Any]]]

CPU_METRICS = (
    "process_metrics.cgroup.cpu.periods",
    "process_metrics.cgroup.cpu.throttled_periods",
    "process_metrics.cgroup.cpu.throttled_time",
    "container.cpu.time",
)
MEMORY_FILE_METRICS = (
    "container.memory.usage",
    "container.memory.working_set",
    "process_metrics.cgroup.memory.peak",
    "process_metrics.cgroup.memory.events",
)


def val(collected: Collected, name: str, **attributes: str) -> Any:
    """The value of the point of ``name`` with exactly ``attributes``."""
    assert name in collected, f"{name} not reported; got {sorted(collected)}"
    found = [v for attrs, v in collected[name] if attrs == attributes]
    assert len(found) == 1, (name, attributes, collected[name])
    return found[0]


def between(low: float, got: float, high: float) -> bool:
    return low <= got <= high


@contextlib.contextmanager
def in_cgroups(*controllers: str) -> Iterator[tuple[dict[str, Cgroup], Child]]:
    """A child process alone in a new cgroup of each controller, configured by the caller."""
    with contextlib.ExitStack() as stack:
        groups = {c: stack.enter_context(child_cgroup(c)) for c in controllers}
        child = stack.enter_context(Child())
        yield groups, child


def enter(groups: dict[str, Cgroup], child: Child) -> None:
    for group in groups.values():
        group.add(child.pid)
        assert group.pids() == {child.pid}


def quota(group: Cgroup, cpus: float) -> None:
    group.write("cpu.cfs_period_us", "100000")
    group.write("cpu.cfs_quota_us", str(round(cpus * 100000)))


def served_first(child: Child) -> None:
    """The highest CPU priority for ``child`` (we are root here): on a loaded machine it
    then still gets its quota in a period, and so is throttled, as on a quiet one."""
    os.setpriority(os.PRIO_PROCESS, child.pid, -20)


def test_auto_mode_reports_cpu_throttling_as_the_cgroup_counts_it() -> None:
    assert os.sysconf("SC_CLK_TCK") == HZ
    with in_cgroups("cpu", "cpuacct") as (groups, child):
        cpu, acct = groups["cpu"], groups["cpuacct"]
        quota(cpu, 0.2)
        enter(groups, child)
        served_first(child)
        child.ask("instrument")  # no option: auto
        first = child.ask("collect")
        child.ask("spin 2")  # throttled: 20 ms of CPU per 100 ms period
        # A loaded machine may leave the child less than its quota: spin on until the
        # cgroup itself counts the throttling asserted below (the metric must then show it).
        for _ in range(10):
            stat = flat(cpu.read("cpu.stat"))
            if stat["nr_throttled"] >= 5 and stat["throttled_time"] >= 0.2e9:
                break
            child.ask("spin 1")
        child.ask("pulse 1")  # within the quota: periods that are not throttled
        stat0, acct0 = flat(cpu.read("cpu.stat")), flat(acct.read("cpuacct.stat"))
        got = child.ask("collect")
        stat1, acct1 = flat(cpu.read("cpu.stat")), flat(acct.read("cpuacct.stat"))
    for name, key in (
        ("process_metrics.cgroup.cpu.periods", "nr_periods"),
        ("process_metrics.cgroup.cpu.throttled_periods", "nr_throttled"),
    ):
        assert between(stat0[key], val(got, name), stat1[key]), (name, stat0, stat1)
        assert val(got, name) > val(first, name)
    throttled = val(got, "process_metrics.cgroup.cpu.throttled_time")
    assert between(stat0["throttled_time"] / 1e9, throttled, stat1["throttled_time"] / 1e9)
    assert throttled > val(first, "process_metrics.cgroup.cpu.throttled_time")
    # 2 s at a 0.2 quota: throttled in most of some 20 periods, up to 0.8 s in all
    # (less when other load on the machine leaves the child less than its quota: spun longer).
    assert val(got, "process_metrics.cgroup.cpu.throttled_periods") >= 5
    assert throttled >= 0.2
    # The pulses made periods without throttling.
    assert val(got, "process_metrics.cgroup.cpu.periods") > val(
        got, "process_metrics.cgroup.cpu.throttled_periods"
    )
    for mode, key in (("user", "user"), ("kernel", "system")):
        seconds = val(got, "container.cpu.time", **{"cpu.mode": mode})
        assert between(acct0[key] / HZ, seconds, acct1[key] / HZ), (mode, acct0, acct1)
    assert val(got, "container.cpu.time", **{"cpu.mode": "user"}) > val(
        first, "container.cpu.time", **{"cpu.mode": "user"}
    )
    assert val(got, "process_metrics.cpu.available") == 0.2
    # The only CPU time counted in the cgroup is in user or kernel mode.
    assert {a["cpu.mode"] for a, _ in got["container.cpu.time"]} == {"user", "kernel"}


def test_bursts_are_throttled_while_the_average_stays_under_the_quota() -> None:
    with in_cgroups("cpu", "cpuacct") as (groups, child):
        quota(groups["cpu"], 0.2)
        enter(groups, child)
        served_first(child)
        child.ask("instrument")
        first = child.ask("collect")
        throttled0 = flat(groups["cpu"].read("cpu.stat"))["nr_throttled"]
        start = time.monotonic()
        # A burst is throttled when it gets its period's quota within its 60 ms: on a loaded
        # machine many do not. Bursts go on until the cgroup itself counts 5 throttled ones
        # (a generous deadline: a wrong count cannot pass for that).
        while time.monotonic() - start < 120:
            child.ask("spin 0.06")  # 60 ms of CPU: three periods' quota
            time.sleep(0.5)
            if flat(groups["cpu"].read("cpu.stat"))["nr_throttled"] - throttled0 >= 5:
                break
        elapsed = time.monotonic() - start
        before = flat(groups["cpu"].read("cpu.stat"))["nr_throttled"]
        got = child.ask("collect")
        after = flat(groups["cpu"].read("cpu.stat"))["nr_throttled"]
    used = sum(v for _, v in got["container.cpu.time"]) - sum(
        v for _, v in first["container.cpu.time"]
    )
    assert used / elapsed < 0.2  # on average, under the quota...
    throttled = val(got, "process_metrics.cgroup.cpu.throttled_periods")
    assert between(before, throttled, after), (before, throttled, after)  # the cgroup's own
    assert throttled - val(first, "process_metrics.cgroup.cpu.throttled_periods") >= 5  # ...yet


def test_throttling_counts_only_the_quota_of_the_process_own_cgroup() -> None:
    """A quota on an ancestor throttles the process, but is counted in the ancestor's cpu.stat."""
    with child_cgroup("cpu") as outer, nested_cgroup(outer) as inner, Child() as child:
        quota(outer, 0.2)
        inner.add(child.pid)
        served_first(child)
        child.ask("instrument")  # auto: the ancestor's quota applies, so the group is on
        child.ask("spin 1.5")
        got = child.ask("collect")
        own, ancestor = flat(inner.read("cpu.stat")), flat(outer.read("cpu.stat"))
    assert ancestor["nr_throttled"] > 0  # the process was throttled...
    assert own["nr_throttled"] == own["nr_periods"] == 0  # ...by a quota that is not its own
    assert val(got, "process_metrics.cgroup.cpu.throttled_periods") == 0
    assert val(got, "process_metrics.cgroup.cpu.periods") == 0
    assert val(got, "process_metrics.cpu.available") == 0.2  # the tightest quota applies


def _memory_files(mem: Cgroup) -> dict[str, int]:
    stat = flat(mem.read("memory.stat"))
    return {
        "usage": number(mem.read("memory.usage_in_bytes")),
        "inactive": stat["total_inactive_file"],
        "peak": number(mem.read("memory.max_usage_in_bytes")),
        "limit": number(mem.read("memory.limit_in_bytes")),
        "failcnt": number(mem.read("memory.failcnt")),
        "oom_kill": flat(mem.read("memory.oom_control"))["oom_kill"],
    }


V1_MEMORY_FILES = (
    "memory.usage_in_bytes",
    "memory.stat",
    "memory.max_usage_in_bytes",
    "memory.failcnt",
    "memory.oom_control",
)
COLLECTION_PAGES = MIB  # at most what one collection allocates and frees, or batches held
LIMIT_MIB = 160  # room for the child's interpreter and SDK, and what it allocates


@contextlib.contextmanager
def limited_memory() -> Iterator[tuple[Cgroup, Child]]:
    """An instrumented child alone in a memory cgroup limited to ``LIMIT_MIB``, and the cgroup."""
    with in_cgroups("memory") as (groups, child):
        mem = groups["memory"]
        mem.write("memory.limit_in_bytes", str(LIMIT_MIB * MIB))
        enter(groups, child)
        child.ask("instrument")
        yield mem, child


@pytest.mark.skipif(
    FREE_THREADED,
    reason="the free-threaded allocator returns freed memory in the background: the cgroup's "
    "usage moves between reads",
)
def test_auto_mode_reports_memory_usage_working_set_and_limit_as_the_cgroup_does() -> None:
    with limited_memory() as (mem, child):
        child.ask("alloc 80")
        child.ask("free")
        child.ask("alloc 40")  # the peak stays at 80 MiB and more
        child.ask("cache 30")  # page cache, inactive: counted in usage, not in the working set
        before = _memory_files(mem)
        got = child.ask("collect")
        after = _memory_files(mem)
    low, high = sorted((before["usage"], after["usage"]))
    # Usage is not monotonic: the collection's own short-lived pages, freed before the read
    # after it, can lift it above both reads (by 4 KiB in a 3.10 CI cell); the kernel's
    # per-CPU charge batches, drained meanwhile, can take it below them.
    low, high = low - COLLECTION_PAGES, high + COLLECTION_PAGES
    usage = val(got, "container.memory.usage")
    assert between(low, usage, high)
    assert usage >= 40 * MIB  # what the child holds is charged here
    inactive = sorted((before["inactive"], after["inactive"]))
    working_set = val(got, "container.memory.working_set")
    assert between(max(0, low - inactive[1]), working_set, high - inactive[0])
    assert inactive[0] >= 20 * MIB and usage - working_set >= 20 * MIB
    assert before["limit"] == LIMIT_MIB * MIB
    assert val(got, "process_metrics.cgroup.memory.limit") == LIMIT_MIB * MIB
    # The divisor of process.memory.utilization: the host's memory, capped by the limit.
    assert val(got, "process_metrics.memory.limit") == LIMIT_MIB * MIB
    peak = val(got, "process_metrics.cgroup.memory.peak")
    assert between(before["peak"], peak, after["peak"])
    # Freed since, but the free-threaded build's allocator (mimalloc) keeps what was freed
    # and reuses it: there the usage may stay at the peak.
    assert peak >= 80 * MIB and peak >= usage + (0 if FREE_THREADED else 1)
    assert val(got, "process_metrics.cgroup.memory.events", **_event("oom_kill")) == 0
    # A memory limit alone turns the group on: the cpu cgroup here has no quota.
    assert "process_metrics.cgroup.cpu.throttled_periods" in got


def test_page_cache_is_reclaimed_before_anything_is_killed() -> None:
    """Usage near the limit is no alarm while it is page cache: the working set is."""
    with limited_memory() as (mem, child):
        child.ask("cache 100")
        cached = child.ask("collect")
        child.ask("alloc 60")  # no room left unless the cache goes
        got = child.ask("collect")
        files = _memory_files(mem)
    assert val(cached, "container.memory.usage") >= 100 * MIB  # cache counts in usage
    assert (
        val(got, "container.memory.working_set")
        >= val(cached, "container.memory.working_set") + 50 * MIB
    )
    assert (
        files["oom_kill"]
        == val(got, "process_metrics.cgroup.memory.events", **_event("oom_kill"))
        == 0
    )
    assert val(got, "container.memory.usage") <= LIMIT_MIB * MIB


def _event(name: str) -> dict[str, str]:
    return {"process_metrics.cgroup.memory.event": name}


def test_a_grandchild_driven_over_the_limit_raises_the_oom_kill_counter() -> None:
    with limited_memory() as (mem, child):  # the OOM killer can pick only the test's processes
        first = child.ask("collect")
        files0 = _memory_files(mem)
        ended = child.ask("oom 320")  # twice the limit
        got = child.ask("collect")
        files1 = _memory_files(mem)
        assert child.ask("free") == {"held": 0}  # the instrumented child was spared
    assert ended["returncode"] == -9  # SIGKILL, from the OOM killer
    kills0 = val(first, "process_metrics.cgroup.memory.events", **_event("oom_kill"))
    kills1 = val(got, "process_metrics.cgroup.memory.events", **_event("oom_kill"))
    assert kills0 == files0["oom_kill"] == 0
    assert kills1 == files1["oom_kill"] >= 1
    # v1 counts the times the usage hit the limit in memory.failcnt: the "max" event.
    hits = val(got, "process_metrics.cgroup.memory.events", **_event("max"))
    assert (
        hits
        == files1["failcnt"]
        > val(first, "process_metrics.cgroup.memory.events", **_event("max"))
    )
    # v1 has no separate oom and high events.
    assert {
        a["process_metrics.cgroup.memory.event"]
        for a, _ in got["process_metrics.cgroup.memory.events"]
    } == {
        "max",
        "oom_kill",
    }


def test_a_process_moved_to_another_cgroup_is_reported_with_the_one_found_at_discovery() -> None:
    """What ``linux/cgroup.py`` promises: no following until instrument() again or a fork."""
    with child_cgroup("cpu") as first, child_cgroup("cpu") as second, Child() as child:
        quota(first, 0.2)
        quota(second, 0.5)
        first.add(child.pid)
        child.ask("instrument")
        second.add(child.pid)  # moved at run time; the first cgroup is now empty
        child.ask("spin 1")  # counted in the second one only
        frozen = flat(first.read("cpu.stat"))
        got = child.ask("collect")
        assert flat(first.read("cpu.stat")) == frozen
        moved = flat(second.read("cpu.stat"))
        # A fork finds the cgroup again: the forked child reports the second one.
        forked = child.ask("forkcollect")["metrics"]
        moved_after = flat(second.read("cpu.stat"))
        # So does instrument() again.
        child.ask("uninstrument")
        child.ask("instrument")
        again = child.ask("collect")
        again_after = flat(second.read("cpu.stat"))
    assert moved["nr_periods"] > 0  # the child ran in the second cgroup, not the first
    assert val(got, "process_metrics.cgroup.cpu.periods") == frozen["nr_periods"]
    assert val(got, "process_metrics.cgroup.cpu.throttled_periods") == frozen["nr_throttled"]
    assert val(got, "process_metrics.cgroup.cpu.throttled_time") == frozen["throttled_time"] / 1e9
    assert val(got, "process_metrics.cpu.available") == 0.2  # a static fact, as found
    for collected, low, high in ((forked, moved, moved_after), (again, moved_after, again_after)):
        for name, key in (
            ("process_metrics.cgroup.cpu.periods", "nr_periods"),
            ("process_metrics.cgroup.cpu.throttled_periods", "nr_throttled"),
        ):
            assert between(low[key], val(collected, name), high[key]), (name, low, high)
        assert val(collected, "process_metrics.cpu.available") == 0.5


def _messages(logs: list[list[str]], level: str) -> list[str]:
    return [message for lvl, message in logs if lvl == level]


def test_a_removed_cgroup_drops_only_its_metrics_logs_once_and_they_come_back() -> None:
    """The cgroup is removed under a running instrumented child, moved out of it first."""
    with in_cgroups("memory", "cpu") as (groups, child):
        mem = groups["memory"]
        mem.write("memory.limit_in_bytes", str(LIMIT_MIB * MIB))
        quota(groups["cpu"], 0.5)
        enter(groups, child)
        child.ask("instrument")
        healthy = child.ask("collect")
        assert set(MEMORY_FILE_METRICS) <= set(healthy)
        healthy_logs = child.ask("logs")
        # The instruments: those with points, and the default histograms of events (none yet).
        events = {m.name for m in METRICS if m.default} & events_metrics()
        reported = len(set(healthy) | events)
        assert ["DEBUG", f"process metrics: reporting {reported} metrics"] in healthy_logs
        assert {level for level, _ in healthy_logs} == {"DEBUG"}, healthy_logs  # nothing worse

        Cgroup(mem.folder.parent).add(child.pid)  # back to the parent, then remove
        mem.folder.rmdir()
        gone = child.ask("collect")
        logs_gone = child.ask("logs")
        gone_again = child.ask("collect")
        logs_again = child.ask("logs")

        mem.folder.mkdir()  # the cgroup is back (a new, empty one)
        files = _memory_files(mem)
        back = child.ask("collect")
        logs_back = child.ask("logs")
    # Only the metrics that the vanished files fed are left out.
    for collected in (gone, gone_again):
        assert set(collected) == set(healthy) - set(MEMORY_FILE_METRICS)
    assert set(CPU_METRICS) <= set(gone)  # another controller: still read
    # The limits were found at discovery: they are still what they were then.
    assert val(gone, "process_metrics.cgroup.memory.limit") == LIMIT_MIB * MIB
    assert val(gone, "process_metrics.memory.limit") == LIMIT_MIB * MIB
    warnings = _messages(logs_gone, "WARNING")
    assert sorted(warnings) == sorted(
        f"process metrics: could not read {mem.folder / name} (FileNotFoundError: [Errno 2] "
        f"No such file or directory: '{mem.folder / name}'); the metrics it feeds are left "
        "out while it fails."
        for name in V1_MEMORY_FILES
    )
    assert logs_gone == [["WARNING", w] for w in warnings]  # nothing else, nothing raised
    assert logs_again == []  # once, not at every collection
    # Back with the files: the new cgroup's values, and one line per file.
    assert set(back) == set(healthy)
    assert val(back, "container.memory.usage") == files["usage"]
    assert val(back, "process_metrics.cgroup.memory.peak") == files["peak"]
    assert val(back, "process_metrics.cgroup.memory.events", **_event("max")) == files["failcnt"]
    assert sorted(_messages(logs_back, "INFO")) == sorted(
        f"process metrics: {mem.folder / name} can be read again." for name in V1_MEMORY_FILES
    )


def test_a_collection_opens_each_file_the_group_reads_once_and_no_other() -> None:
    with in_cgroups("cpu", "cpuacct", "memory") as (groups, child):
        quota(groups["cpu"], 0.5)
        groups["memory"].write("memory.limit_in_bytes", str(LIMIT_MIB * MIB))
        enter(groups, child)
        child.ask("instrument")
        child.ask("collect")
        opened = child.ask("opens")
    cgroup_files = [p for p in opened if p.startswith("/sys/fs/cgroup/")]
    assert sorted(cgroup_files) == sorted(
        [
            str(groups["cpu"].folder / "cpu.stat"),
            str(groups["cpuacct"].folder / "cpuacct.stat"),
            *(str(groups["memory"].folder / name) for name in V1_MEMORY_FILES),
        ]
    )
    pressure = [p for p in opened if p.startswith("/proc/pressure/")]
    assert sorted(pressure) == sorted(
        f"/proc/pressure/{r}"
        for r in ("cpu", "memory", "io")
        if os.path.exists(f"/proc/pressure/{r}")
    )


def test_every_process_of_a_cgroup_reports_the_same_container_values() -> None:
    """With shared_metrics="every". Hence: never sum them across processes (the default,
    "once", has one process of the group report them: tests/test_group_election.py)."""
    every = "instrument " + json.dumps({"shared_metrics": "every"})
    with child_cgroup("memory") as mem, Child() as first, Child() as second, Child() as quiet:
        mem.write("memory.limit_in_bytes", str(256 * MIB))
        for child in (first, second, quiet):
            mem.add(child.pid)
        first.ask(every)
        second.ask(every)
        quiet.ask("instrument " + json.dumps({"saturation": False}))
        second.ask("alloc 16")  # its own memory, and not the first process's
        # Read a moment apart, the usage moves by what the readers themselves touch: most in
        # a process's first collection. Rounds until it held still (a process's own usage
        # would differ by the 16 MiB in every round).
        for _ in range(5):
            a, b = first.ask("collect"), second.ask("collect")
            usage = (val(a, "container.memory.usage"), val(b, "container.memory.usage"))
            if abs(usage[0] - usage[1]) <= 4 * MIB:
                break
        c = quiet.ask("collect")
    for name in ("process_metrics.cgroup.memory.limit", "process_metrics.cgroup.memory.events"):
        assert a[name] == b[name], name
    assert abs(usage[0] - usage[1]) <= 4 * MIB, usage
    assert val(a, "process_metrics.cgroup.memory.limit") == 256 * MIB
    # Each process's own metrics still differ: they are not the container's.
    rss = (val(a, "process.memory.usage"), val(b, "process.memory.usage"))
    assert rss[1] - rss[0] >= 15 * MIB, rss
    # saturation=False: none of the group, pressure stalls included; the limits stay.
    saturation = {m.name for m in METRICS if m.option == "saturation"}
    assert saturation & set(a) and not saturation & set(c)
    assert val(c, "process_metrics.memory.limit") == 256 * MIB
