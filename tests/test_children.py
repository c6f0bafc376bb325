"""Supervisor mode with real child processes: listing, slots, per-child points, tree totals."""

from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.catalog import PER_CHILD, supported
from opentelemetry.instrumentation.process.group import SLOT_ATTRIBUTE
from opentelemetry.instrumentation.process.linux import children as linux_children
from opentelemetry.instrumentation.process.metrics import METRICS_BY_NAME
from opentelemetry.instrumentation.process.platforms import ON_LINUX
from opentelemetry.instrumentation.process.sources.child_exits import SETTLE

from .conftest import OpenRecorder, collect, collect_after_close, points, reported
from .support.forked import c_fork, in_child
from .support.groupkids import Kid, claimed_slot
from .support.waiting import eventually

linux_only = pytest.mark.skipif(not ON_LINUX, reason="reads /proc")
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
MIB = 1 << 20


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a child process (killed and reaped after the test)."""
    started: list[subprocess.Popen[bytes]] = []

    def _spawn(args: list[str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args or ["sleep", "60"])
        started.append(proc)
        return proc

    yield _spawn
    for proc in started:
        proc.kill()
        proc.wait()


def by_slot(found: dict[str, Any], name: str, **attributes: Any) -> dict[int, Any]:
    """The per-child values of ``name`` by slot, for the points with ``attributes``."""
    out: dict[int, Any] = {}
    for key, v in points(found[name]).items():
        attrs = dict(key)
        slot = attrs.pop(SLOT_ATTRIBUTE, None)
        attrs.pop("process.pid", None)
        if slot is not None and attrs == attributes:
            assert slot not in out
            out[slot] = v
    return out


def own(found: dict[str, Any], name: str, **attributes: Any) -> Any:
    return points(found[name])[frozenset(attributes.items())]


def exits(found: dict[str, Any], **attributes: Any) -> Any:
    """The tree's exits with ``attributes`` (process_metrics.exit.cause=..., say), summed."""
    wanted = set(attributes.items())
    return sum(
        v for k, v in points(found["process_metrics.tree.process.exits"]).items() if wanted <= k
    )


CAUSE = "process_metrics.exit.cause"
SIGNAL = "process_metrics.exit.signal"


def failing_for(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    pid: int,
    error: Callable[[int], BaseException],
) -> None:
    """``psutil.Process.<method>`` raises ``error(pid)`` for process ``pid`` alone: a fault
    that psutil reports and that cannot be timed or made for real."""
    real = getattr(psutil.Process, method)

    def failing(self: psutil.Process) -> Any:
        if self.pid == pid:
            raise error(pid)
        return real(self)

    monkeypatch.setattr(psutil.Process, method, failing)


def wait_listed(pids: set[int]) -> None:
    """Until every pid in ``pids`` is a live child process of this one."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        listed = {p.pid for p in psutil.Process().children()}
        if pids <= listed:
            return
        time.sleep(0.01)
    raise AssertionError(f"{pids} not all children of this process")


# --- finding the children ---------------------------------------------------------


def _grandparent() -> None:
    """In a kid: a child, and a grandchild forked from a non-main thread."""
    subprocess.Popen(["sleep", "60"])

    def fork_from_thread() -> None:
        subprocess.Popen(["sleep", "60"])

    t = threading.Thread(target=fork_from_thread)
    t.start()
    t.join()


@linux_only
def test_the_children_files_list_what_psutil_lists(spawn: Callable[..., Any]) -> None:
    for _ in range(3):
        spawn()
    kid = Kid(lambda: _grandparent() or os.getpid())
    try:
        assert kid.result == kid.pid
        # A child forked from a thread is listed under that thread's children file.
        thread_forked: list[subprocess.Popen[bytes]] = []
        t = threading.Thread(target=lambda: thread_forked.append(subprocess.Popen(["sleep", "60"])))
        t.start()
        t.join()
        try:
            wanted = {p.pid for p in psutil.Process().children(recursive=True)}
            found = linux_children.descendant_pids(os.getpid())
            assert {pid for pid, _ in found} == wanted
            assert len(found) == len(wanted) == 7  # 3 + kid + its 2 + the thread's
            # Parents come before their children, and each parent is right.
            order = [os.getpid(), *(pid for pid, _ in found)]
            for pid, parent in found:
                assert psutil.Process(pid).ppid() == parent
                assert order.index(parent) < order.index(pid)
            assert set(linux_children.child_pids(kid.pid)) == {
                p.pid for p in psutil.Process(kid.pid).children()
            }
        finally:
            for proc in thread_forked:
                proc.kill()
                proc.wait()
    finally:
        for p in psutil.Process(kid.pid).children():
            p.kill()
        kid.kill()


@linux_only
def test_a_gone_process_has_no_children_file() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(ProcessLookupError):
        linux_children.child_pids(proc.pid)
    with pytest.raises(ProcessLookupError):
        linux_children.descendant_pids(proc.pid)


@linux_only
def test_a_process_without_children_has_none() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        wait_listed({proc.pid})
        assert linux_children.child_pids(proc.pid) == []
        assert linux_children.descendant_pids(proc.pid) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "psutil"])
def test_both_listings_give_the_same_points(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    direct: bool,
) -> None:
    kids = [spawn() for _ in range(3)]
    wait_listed({k.pid for k in kids})
    supervise(direct_reads=direct, child_pid=True)
    # A child just started may still be mapping its libraries: psutil's reading on
    # either side of the collection bounds the package's.
    first = {k.pid: psutil.Process(k.pid).memory_info().rss for k in kids}
    found = collect(reader)
    last = {k.pid: psutil.Process(k.pid).memory_info().rss for k in kids}
    rss = {}
    for key, v in points(found["process.memory.usage"]).items():
        attrs = dict(key)
        if SLOT_ATTRIBUTE in attrs:
            rss[attrs["process.pid"]] = (attrs[SLOT_ATTRIBUTE], v)
    assert sorted(rss) == sorted(k.pid for k in kids)
    assert sorted(slot for slot, _ in rss.values()) == [0, 1, 2]
    page = resource.getpagesize()
    for pid, (_, v) in rss.items():
        low, high = sorted((first[pid], last[pid]))
        assert low - 2 * page <= v <= high + 2 * page, (first[pid], v, last[pid])


# --- per-child points -------------------------------------------------------------


def test_every_per_child_metric_has_a_point_per_child(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    kids = [spawn() for _ in range(2)]
    wait_listed({k.pid for k in kids})
    supervise()
    time.sleep(0.15)  # past the utilisation window
    found = collect(reader)
    for name, row in PER_CHILD.items():
        if not supported(row) or name not in found:
            assert not METRICS_BY_NAME[name].default or not supported(row), name
            continue
        slots = {dict(k).get(SLOT_ATTRIBUTE) for k in points(found[name])} - {None}
        assert slots == {0, 1}, name
        for key in points(found[name]):
            assert "process.pid" not in dict(key), name  # opt-in only
    for slot, v in by_slot(found, "process.thread.count").items():
        assert v == 1, slot
    uptimes = by_slot(found, "process.uptime")
    assert all(0 < u < 60 for u in uptimes.values())
    assert set(by_slot(found, "process.cpu.utilization", **{"cpu.mode": "user"})) == {0, 1}


def test_the_master_keeps_its_own_points_without_a_slot(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    wait_listed({spawn().pid})
    supervise()
    # psutil's reading on either side of the collection: the heap can shrink by tens of
    # MiB in between (a free-threaded build's allocator returning pages), or grow.
    before = psutil.Process().memory_info().rss
    found = collect(reader)
    after = psutil.Process().memory_info().rss
    mine = own(found, "process.memory.usage")
    low, high = sorted((before, after))
    assert low - 8 * MIB < mine < high + 8 * MIB, (before, mine, after)


def test_child_pid_adds_the_pid(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    kid = spawn()
    wait_listed({kid.pid})
    supervise(child_pid=True)
    keys = [dict(k) for k in points(collect(reader)["process.thread.count"])]
    assert {SLOT_ATTRIBUTE: 0, "process.pid": kid.pid} in keys


def test_off_by_default_no_child_points_and_no_tree(
    provider: MeterProvider, reader: InMemoryMetricReader, spawn: Callable[..., Any]
) -> None:
    wait_listed({spawn().pid})
    with ProcessMetrics(meter_provider=provider):
        found = collect(reader)
    assert not any(n.startswith("process_metrics.tree.") for n in found)
    for key in points(found["process.memory.usage"]):
        assert SLOT_ATTRIBUTE not in dict(key)


def test_excluding_a_metric_drops_its_children_too(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    wait_listed({spawn().pid})
    supervise(exclude=["process.disk.*", "process.unix.file_descriptor.count"])
    found = collect(reader)
    assert "process.disk.io" not in found
    assert "process.unix.file_descriptor.count" not in found
    assert by_slot(found, "process.memory.usage").keys() == {0}


# --- slots --------------------------------------------------------------------------


def test_slots_are_the_lowest_free_and_reused_after_exit(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    kids = [spawn() for _ in range(3)]
    wait_listed({k.pid for k in kids})
    supervise(child_pid=True)

    def slots() -> dict[int, int]:
        out = {}
        for key in points(collect(reader)["process.thread.count"]):
            attrs = dict(key)
            if SLOT_ATTRIBUTE in attrs:
                out[attrs["process.pid"]] = attrs[SLOT_ATTRIBUTE]
        return out

    first = slots()
    assert sorted(first.values()) == [0, 1, 2]
    middle = next(pid for pid, slot in first.items() if slot == 1)
    gone = next(k for k in kids if k.pid == middle)
    gone.kill()
    gone.wait()
    after = slots()
    assert sorted(after.values()) == [0, 2]
    new = spawn()
    wait_listed({new.pid})
    again = slots()
    assert again[new.pid] == 1  # the lowest free slot, reused
    for pid, slot in after.items():
        assert again[pid] == slot  # the others keep theirs
    # Reaped by this process: counted once its status is a second old, as a SIGKILL.
    killed = {CAUSE: "signal", SIGNAL: "SIGKILL"}
    assert eventually(lambda: exits(collect(reader), **killed) == 1)
    tree = collect(reader)
    assert exits(tree) == 1
    assert own(tree, "process_metrics.tree.process.restarts") == 1
    assert own(tree, "process_metrics.tree.process.count") == 4


def _claim() -> int | None:

    return claimed_slot()


@linux_only
def test_a_worker_that_recorded_its_slot_keeps_it_in_the_master(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    # The master sees a plain child first (slot 0), then workers that claim
    # slots 0 and 1 of their own: the first one's slot is held, so the master's
    # 0 stays with the plain child and the claimed slots are honoured otherwise.
    plain = spawn()
    wait_listed({plain.pid})
    supervise(child_pid=True)
    collect(reader)
    kids = [Kid(_claim), Kid(_claim), Kid(_claim)]
    try:
        claimed = {k.pid: k.result for k in kids}
        assert sorted(claimed.values()) == [0, 1, 2]
        seen = {}
        for key in points(collect(reader)["process.thread.count"]):
            attrs = dict(key)
            if SLOT_ATTRIBUTE in attrs:
                seen[attrs["process.pid"]] = attrs[SLOT_ATTRIBUTE]
        for pid, slot in claimed.items():
            if slot != 0:
                assert seen[pid] == slot
        assert seen[plain.pid] == 0
        assert len(set(seen.values())) == len(seen) == 4  # no two children share a slot
    finally:
        for k in kids:
            k.stop()


@linux_only
def test_a_claimed_slot_wins_when_it_is_free(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise(child_pid=True)
    collect(reader)
    kids = [Kid(_claim), Kid(_claim)]
    try:
        claimed = {k.pid: k.result for k in kids}
        kids[0].stop()
        third = Kid(_claim)
        kids.append(third)
        claimed[third.pid] = third.result
        del claimed[kids[0].pid]
        seen = {}
        for key in points(collect(reader)["process.thread.count"]):
            attrs = dict(key)
            seen[attrs.get("process.pid")] = attrs.get(SLOT_ATTRIBUTE)
        for pid, slot in claimed.items():
            assert seen[pid] == slot
    finally:
        for k in kids:
            k.stop()


# --- the cap ---------------------------------------------------------------------


def test_the_cap_keeps_the_lowest_slots_warns_once_and_counts_all(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    kids = [spawn() for _ in range(5)]
    wait_listed({k.pid for k in kids})
    with caplog.at_level(logging.WARNING):
        supervise(max_children=2)
        for _ in range(3):
            found = collect(reader)
    assert by_slot(found, "process.memory.usage").keys() == {0, 1}
    assert own(found, "process_metrics.tree.process.count") == 6
    warned = [r.getMessage() for r in caplog.records if "max_children" in r.getMessage()]
    assert len(warned) == 1
    assert "5 child processes, more than max_children=2" in warned[0]
    rss = [psutil.Process(k.pid).memory_info().rss for k in kids]
    total = own(
        found, "process_metrics.tree.memory.usage", **{"process_metrics.memory.measure": "rss"}
    )
    assert total >= sum(rss) + psutil.Process().memory_info().rss - 8 * MIB


def test_a_cap_of_zero_reports_the_tree_only(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    wait_listed({spawn().pid})
    supervise(max_children=0)
    found = collect(reader)
    assert by_slot(found, "process.memory.usage") == {}
    assert own(found, "process_metrics.tree.process.count") == 2


# --- the tree's CPU time ------------------------------------------------------------


BURN = [
    sys.executable,
    "-c",
    "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass",
]


def _tree_cpu(found: dict[str, Any]) -> float:
    return sum(points(found["process_metrics.tree.cpu.time"]).values())


def test_tree_cpu_counts_live_and_reaped_children_and_never_decreases(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    before = _tree_cpu(collect(reader))
    burners = [subprocess.Popen(BURN) for _ in range(2)]
    seen = [before]
    while any(b.poll() is None for b in burners):
        seen.append(_tree_cpu(collect(reader)))
        time.sleep(0.02)
    seen.append(_tree_cpu(collect(reader)))
    assert seen == sorted(seen), "the tree's CPU time went down"
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    after = _tree_cpu(collect(reader))
    # Both burners' 0.3 s each are in, reaped: at least the children's and our own time.
    assert after >= reaped.ru_utime + reaped.ru_stime + me.ru_utime + me.ru_stime - 0.02
    assert after - before >= 0.55


BURNS_BOTH = (
    "import resource\nuse=lambda: resource.getrusage(resource.RUSAGE_SELF)\n"
    "while use().ru_utime<0.3: sum(range(99_999))\n"
    "f=open('/dev/zero','rb',buffering=0)\nwhile use().ru_stime<0.3: f.read(1<<22)"
)
"""Burns 0.3 s in Python, and 0.3 s in the kernel: copying zeros and faulting in buffers."""
WAITS_FOR_A_BURNER = (
    "import subprocess, sys, time\n"
    "subprocess.run([sys.executable, '-c', sys.argv[1]], check=True)\ntime.sleep(60)"
)


def test_tree_cpu_counts_what_a_live_child_reaped_in_each_mode(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., subprocess.Popen[bytes]],
) -> None:
    # The child waits for its own child, then lives on: that time is in neither
    # our own nor our reaped children's, only in the child's stat file.
    child = psutil.Process(spawn([sys.executable, "-c", WAITS_FOR_A_BURNER, BURNS_BOTH]).pid)
    assert eventually(lambda: child.cpu_times().children_system > 0, 30), "no grandchild ran"
    supervise()
    parts = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    times = child.cpu_times()
    tree = points(collect(reader)["process_metrics.tree.cpu.time"])
    assert times.children_user >= 0.3 and times.children_system >= 0.3, times
    for mode, ru in (("user", "ru_utime"), ("system", "ru_stime")):
        least = sum(getattr(p, ru) for p in parts) + getattr(times, mode)
        least += getattr(times, f"children_{mode}")
        # The same figures, summed in another order: equal but for the last bit.
        assert tree[frozenset({("cpu.mode", mode)})] >= least - 1e-9, (mode, tree, times)


def _zombie_maker() -> int:
    """In a kid: a child that burns 0.2 s and exits, never waited for."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        t = time.process_time()
        while time.process_time() - t < 0.2:
            pass
        os._exit(0)
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    return pid


@linux_only
def test_a_zombie_counts_as_an_exit_keeps_its_cpu_and_has_no_points(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise(child_pid=True)
    kid = Kid(_zombie_maker)
    try:
        zombie = kid.result
        mine = resource.getrusage(resource.RUSAGE_SELF).ru_utime  # before: it only grows
        found = collect(reader)
        pids = {dict(k).get("process.pid") for k in points(found["process.memory.usage"])}
        assert kid.pid in pids and zombie not in pids
        # Not this process's child: counted at once, with the status its stat file shows.
        assert exits(found, **{CAUSE: "exit", "process.exit.code": 0}) == 1
        assert exits(found) == 1
        assert own(found, "process_metrics.tree.process.count") == 2  # us and the kid
        assert _tree_cpu(found) >= 0.2 + mine - 0.05
        again = collect(reader)
        assert exits(again) == 1  # counted once
    finally:
        kid.kill()


# --- faults ------------------------------------------------------------------------


def _setuid_child() -> None:
    os.setgid(65534)
    os.setuid(65534)  # no longer dumpable
    time.sleep(60)


@pytest.mark.skipif(not ON_LINUX or os.geteuid() != 0, reason="needs root, to setuid")
def test_a_root_master_reads_a_worker_that_changed_user(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            _setuid_child()
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(pid).uids().real != 65534:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with caplog.at_level(logging.WARNING):
            supervise()
            found = [collect(reader) for _ in range(2)][-1]
        # Root may trace anything: every read works, and nothing is logged.
        assert by_slot(found, "process.unix.file_descriptor.count").keys() == {0}
        for direction in ("read", "write"):
            io = by_slot(found, "process.disk.io", **{"disk.io.direction": direction})
            assert io.keys() == {0}, direction
        assert not [r for r in caplog.records if "child process" in r.getMessage()]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


MASTER_AS_NOBODY = """
import logging, os, signal, sys, time
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.group import slots  # imported as root, as a server does
import encodings.ascii, hashlib  # this Python's stdlib is readable by root only
# Every module of the package, as root, as a server that preloads does: a checkout in a
# folder of mode 0700 (mktemp -d) cannot be read by nobody, who would import the rest lazily.
import importlib, pkgutil, opentelemetry.instrumentation.process as package
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    try:
        importlib.import_module(module.name)
    except ImportError:  # an optional dependency (uvloop) that is not installed
        pass

warnings = []
class Count(logging.Handler):
    def emit(self, record):
        if "child process" in record.getMessage():
            warnings.append(record.getMessage())
logging.getLogger("opentelemetry.instrumentation.process").addHandler(Count())

reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])  # reads files only root may read here

# The master: effective user nobody (no capabilities), real and saved root, so
# that a worker it forks may become yet another user, as a root-started
# server's workers do.
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(0, 65534, 0)
# Changing the effective user made us not dumpable, which our first child would
# inherit: a server started as its user directly is dumpable.
import ctypes
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE

def child(uid, gid):
    pid = os.fork()
    if pid == 0:
        os.closerange(0, 3)  # the test waits for our output pipes to close
        if uid != 65534:
            os.setresuid(0, 0, 0)
            os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        time.sleep(60)
        os._exit(0)
    return pid

same = child(65534, 65534)   # the master's own user: readable
other = child(65533, 65533)  # another user, not dumpable: io and fd denied

def user_is(pid, uid):  # /proc/<pid>/status is world-readable
    with open("/proc/%d/status" % pid) as f:
        ids = next(line.split()[1:] for line in f if line.startswith("Uid:"))
    return ids == [str(uid)] * 4

# Until both have changed user: a fixed sleep can end first on a loaded machine.
deadline = time.monotonic() + 30
while not (user_is(same, 65534) and user_is(other, 65533)):
    assert time.monotonic() < deadline, "the children did not change user"
    time.sleep(0.01)
# The group election is not under test here: every process reports its shared metrics.
options = ProcessMetricsOptions(children=True, shared_metrics="every")
pm = ProcessMetrics(options, meter_provider=provider)
for _ in range(3):
    data = reader.get_metrics_data()

def slots(name):
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    return ",".join(str(s) for s in sorted(
                        p.attributes["process_metrics.worker.slot"] for p in m.data.data_points
                        if "process_metrics.worker.slot" in p.attributes))
    return "absent"

print("memory_slots=" + slots("process.memory.usage"))
print("cpu_slots=" + slots("process.cpu.time"))
print("fd_slots=" + slots("process.unix.file_descriptor.count"))
print("io_slots=" + slots("process.disk.io"))
print("warnings=%d" % len(warnings))
for line in warnings:
    print(line.replace(" ", "_"), file=sys.stderr)
os.setresuid(0, 0, 0)  # root again, to stop the other user's child
for pid in (same, other):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
pm.close()
"""


@pytest.mark.skipif(not ON_LINUX or os.geteuid() != 0, reason="needs root, to setuid")
def test_a_master_that_may_not_read_a_worker_drops_only_those_points(tmp_path: Any) -> None:
    # The master runs as one user, a worker as another (setuid after fork):
    # the worker's I/O and descriptor counts are denied, the rest is reported,
    # one warning per read, and nothing crashes.
    script = tmp_path / "master.py"
    script.write_text(MASTER_AS_NOBODY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    out = dict(line.split("=", 1) for line in done.stdout.split())
    assert out["memory_slots"] == "0,1", out  # statm is world-readable
    assert out["cpu_slots"] == "0,0,1,1", out  # user and system each
    # Slot 0 is the first child, the master's own user's.
    assert out["fd_slots"] == "0", out
    assert out["io_slots"] == "0,0", out  # read and write
    assert out["warnings"] == "2", done.stderr  # descriptors and I/O, once each


def test_a_child_that_exits_mid_read_drops_only_its_points(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kids = [spawn() for _ in range(2)]
    wait_listed({k.pid for k in kids})
    supervise(child_pid=True)
    collect(reader)
    # An exit between two reads of one child cannot be timed for real: the
    # second child's num_fds says it has gone (psutil's own exception).
    victim = kids[1].pid
    failing_for(monkeypatch, "num_fds", victim, psutil.NoSuchProcess)
    with caplog.at_level(logging.WARNING):
        found = collect(reader)
    pids = {dict(k).get("process.pid") for k in points(found["process.memory.usage"])}
    assert kids[0].pid in pids and victim not in pids
    assert own(found, "process_metrics.tree.process.count") == 3  # still listed: alive
    assert not [r for r in caplog.records if "child" in r.getMessage()]
    monkeypatch.undo()
    pids = {dict(k).get("process.pid") for k in points(collect(reader)["process.memory.usage"])}
    assert victim in pids


@linux_only
def test_a_listed_child_that_seems_gone_in_one_pass_is_not_counted_as_an_exit(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listed, so alive: a child that psutil says is gone while it is still listed (exiting
    just then) stays in the tree, and no exit is counted until it is no longer listed."""
    kids = [spawn() for _ in range(2)]
    wait_listed({k.pid for k in kids})
    supervise(child_pid=True)
    collect(reader)
    # psutil's own exception for a process gone mid-read: it cannot be timed for real.
    victim = kids[1].pid
    failing_for(monkeypatch, "status", victim, psutil.NoSuchProcess)
    seeming = collect(reader)
    monkeypatch.undo()
    again = collect(reader)
    pids = {dict(k).get("process.pid") for k in points(again["process.memory.usage"])}
    assert victim in pids and kids[0].pid in pids
    time.sleep(SETTLE)  # an end noted by mistake would be counted by now
    assert exits(seeming) == exits(again) == exits(collect(reader)) == 0
    kids[1].kill()
    kids[1].wait()
    assert eventually(lambda: exits(collect(reader)) == 1)  # once it is no longer listed


# What a child's read says when the OS refuses it otherwise than with EPERM (an I/O
# error of /proc, say): refused for one child at psutil's call, which cannot be made
# to fail for real; the other child's points stay.
REFUSED_READS = {"status": "status", "create_time": "uptime"}


@linux_only
@pytest.mark.parametrize("method", list(REFUSED_READS))
def test_a_read_refused_for_one_child_is_said_by_name_and_leaves_the_others(
    method: str,
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kids = [spawn() for _ in range(2)]
    wait_listed({k.pid for k in kids})
    victim = kids[1].pid
    # The direct listing: psutil's create_time is then read for the uptime alone.
    supervise(child_pid=True, direct_reads=True)
    failing_for(monkeypatch, method, victim, lambda _pid: OSError(5, "Input/output error"))
    with caplog.at_level(logging.WARNING):
        found = collect(reader)
    what = REFUSED_READS[method]
    said = [r.getMessage() for r in caplog.records if "child process" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        f"process metrics: cannot read {what} of child process {victim} "
        "(OSError: [Errno 5] Input/output error)"
    ), said
    uptime = {dict(k).get("process.pid") for k in points(found["process.uptime"])}
    memory = {dict(k).get("process.pid") for k in points(found["process.memory.usage"])}
    assert kids[0].pid in uptime and kids[0].pid in memory
    assert (victim in uptime) is (method != "create_time")
    assert victim in memory  # still read: a status unknown is not a zombie


@linux_only
def test_a_childs_memory_is_not_read_when_no_metric_needs_it(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    opens: OpenRecorder,
) -> None:
    kid = spawn()
    wait_listed({kid.pid})
    statm = f"/proc/{kid.pid}/statm"  # psutil's memory_info
    cpu_only = supervise(exclude=["process.memory.*", "process_metrics.tree.*"])
    with opens.recording() as paths:
        found = collect(reader)
    assert set(by_slot(found, "process.cpu.time", **{"cpu.mode": "user"})) == {0}
    assert statm not in paths, paths
    cpu_only.close()
    supervise()
    with opens.recording() as paths:
        collect(reader)
    assert statm in paths  # the tree's memory and the child's own need it


def test_uninstrument_stops_the_children_points(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    wait_listed({spawn().pid})
    pm = supervise()
    assert "process_metrics.tree.cpu.time" in collect(reader)
    pm.close()
    assert collect_after_close(reader) == {}


# --- PSS and USS -------------------------------------------------------------------


@linux_only
def test_pss_and_uss_per_child_and_the_tree_sums_pss_when_enabled(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    kids = [spawn(SLEEP) for _ in range(2)]
    wait_listed({k.pid for k in kids})
    supervise(include=["process_metrics.memory.pss", "process_metrics.memory.uss"], child_pid=True)

    procs = (os.getpid(), *(k.pid for k in kids))

    def full() -> dict[int, Any]:
        return {pid: psutil.Process(pid).memory_full_info() for pid in procs}

    # A child just started moves its memory both ways while Python starts up: a round
    # in which every child's USS held still (up to 5).
    for _ in range(5):
        before = full()
        found = collect(reader)
        after = full()
        if all(before[k.pid].uss == after[k.pid].uss for k in kids):
            break
    # USS is private: stable. PSS divides each shared page by its sharers, which
    # other processes of the host (the same Python) join and leave meanwhile.
    for name, field, slack in (
        ("process_metrics.memory.pss", "pss", 1 << 20),
        ("process_metrics.memory.uss", "uss", 64 << 10),
    ):
        per = {}
        for key, v in points(found[name]).items():
            attrs = dict(key)
            if SLOT_ATTRIBUTE in attrs:
                per[attrs["process.pid"]] = v
        assert set(per) == {k.pid for k in kids}, name
        for pid, v in per.items():
            low, high = sorted((getattr(before[pid], field), getattr(after[pid], field)))
            assert low - slack <= v <= high + slack, (name, pid, v, low, high)
    tree = points(found["process_metrics.tree.memory.usage"])
    assert list(tree) == [frozenset({("process_metrics.memory.measure", "pss")})]
    # The sums on either side: this process's heap can move by MiB meanwhile.
    low, high = sorted(sum(side[pid].pss for pid in procs) for side in (before, after))
    assert low - 8 * MIB < next(iter(tree.values())) < high + 8 * MIB, (low, tree, high)
    # Without PSS the tree sums RSS, and says so.
    rss_only = ProcessMetricsOptions(children=True)
    assert "process_metrics.memory.pss" not in {m.name for m in _enabled(rss_only)}


def _enabled(options: ProcessMetricsOptions) -> Any:
    from opentelemetry.instrumentation.process.selection import enabled_metrics

    return enabled_metrics(options)


@linux_only
def test_a_child_that_cannot_even_be_opened_counts_in_the_tree_only(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kids = [spawn() for _ in range(2)]
    wait_listed({k.pid for k in kids})
    # hidepid cannot be mounted for one test: psutil refusing the second child
    # at construction stands for it.
    hidden = kids[1].pid
    real_init = psutil.Process.__init__

    def init(self: psutil.Process, pid: int | None = None) -> None:
        if pid == hidden:
            raise psutil.AccessDenied(pid)
        real_init(self, pid)

    monkeypatch.setattr(psutil.Process, "__init__", init)
    supervise(child_pid=True, direct_reads=True)
    found = collect(reader)
    pids = {dict(k).get("process.pid") for k in points(found["process.memory.usage"])}
    assert kids[0].pid in pids and hidden not in pids
    assert own(found, "process_metrics.tree.process.count") == 3


def test_a_failing_pass_is_run_once_drops_the_children_only_and_recovers(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.instrumentation.process.sources import child_pass as children_sources

    wait_listed({spawn().pid})
    supervise()
    healthy = collect(reader)
    calls = []

    def broken(ctx: Any) -> Any:
        calls.append(1)
        raise RuntimeError("listing broke")

    monkeypatch.setattr(children_sources, "descendants", broken)
    found = collect(reader)
    assert len(calls) == 1, "the pass was retried by each children source"
    assert not any(n.startswith("process_metrics.tree.") for n in found)
    assert by_slot(found, "process.memory.usage") == {}
    assert own(found, "process.memory.usage") > 0  # the master's own points stay
    monkeypatch.undo()
    assert by_slot(collect(reader), "process.memory.usage").keys() == {0}
    assert reported(collect(reader)) == reported(healthy)


NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
BUSY_THEN_SLEEP = [
    sys.executable,
    "-c",
    "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
    "time.sleep(60)",
]


def _start_at(pid: int, spawn: Callable[..., subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """``BUSY_THEN_SLEEP`` with the pid ``pid``, free again: the kernel's next pid is set to it.

    Another process of the machine may fork first and take it: tried again.
    """
    for _ in range(50):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = spawn(BUSY_THEN_SLEEP)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.skip("another process took the freed pid each time")


@pytest.mark.skipif(
    not (ON_LINUX and os.access(NS_LAST_PID, os.W_OK)),
    reason="reusing a pid on purpose needs root (ns_last_pid)",
)
def test_a_reused_pid_is_a_new_child_even_with_more_cpu_time(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
) -> None:
    old = spawn()  # sleep: it uses almost no CPU
    wait_listed({old.pid})
    supervise()
    assert exits(collect(reader)) == 0
    time.sleep(0.05)  # start times count clock ticks (10 ms): the new one starts in a later one
    old.kill()
    old.wait()
    # Its pid, reused at once by a process that has used more CPU than it had.
    new = _start_at(old.pid, spawn)
    wait_listed({new.pid})
    assert eventually(lambda: sum(psutil.Process(new.pid).cpu_times()[:2]) >= 0.4, timeout=30)
    assert eventually(lambda: exits(collect(reader), **{SIGNAL: "SIGKILL"}) == 1)
    found = collect(reader)
    assert exits(found) == 1
    assert own(found, "process_metrics.tree.process.restarts") == 1  # slot 0, given again
    assert by_slot(found, "process.memory.usage").keys() == {0}
    # Its own CPU time from the start, not the old child's continued.
    modes = ("user", "system")
    cpu = sum(by_slot(found, "process.cpu.time", **{"cpu.mode": m})[0] for m in modes)
    assert cpu >= 0.4


def _report_parents_tree() -> dict[str, Any]:
    """In a kid: supervisor mode over its parent's tree, as a uWSGI mule runs it."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    options = ProcessMetricsOptions(children=True, tree_root="parent", child_pid=True)
    with ProcessMetrics(options, meter_provider=provider):
        found = collect(reader)
    slots = {
        dict(k)["process.pid"]: dict(k)[SLOT_ATTRIBUTE]
        for k in points(found["process.memory.usage"])
        if SLOT_ATTRIBUTE in dict(k)
    }
    return {
        "slots": {str(pid): slot for pid, slot in slots.items()},
        "count": own(found, "process_metrics.tree.process.count"),
        "cpu": sum(points(found["process_metrics.tree.cpu.time"]).values()),
    }


@linux_only
def test_tree_root_parent_reports_the_parents_tree_but_not_itself(
    spawn: Callable[..., Any],
) -> None:
    siblings = [spawn() for _ in range(2)]
    wait_listed({s.pid for s in siblings})
    me = resource.getrusage(resource.RUSAGE_SELF)  # before the kid's read: it only grows
    kid = Kid(_report_parents_tree)
    try:
        got = kid.result
        tree = psutil.Process().children(recursive=True)
    finally:
        kid.stop()
    assert {int(p) for p in got["slots"]} == {s.pid for s in siblings}, "the helper has a slot"
    assert sorted(got["slots"].values()) == [0, 1]
    assert got["count"] == 1 + len(tree)  # this process, the siblings and the kid
    assert got["cpu"] >= me.ru_utime + me.ru_stime - 0.05  # this process's own time is in it


def test_tree_root_is_checked() -> None:
    with pytest.raises(
        ValueError, match=r"^tree_root: expected one of 'self', 'parent' \(any case\), got 'up'$"
    ):
        ProcessMetricsOptions(tree_root="up")


@linux_only
@pytest.mark.parametrize("fork", ["os.fork", "c_fork"])
def test_a_forked_child_of_a_supervisor_reports_its_own_tree_not_its_parents(
    fork: str,
    spawn: Callable[..., Any],
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
) -> None:
    """A fork starts its own tree: no parent's child counts in it as an exit or a slot."""
    kids = [spawn() for _ in range(2)]
    wait_listed({k.pid for k in kids})
    supervise(child_pid=True)
    before = collect(reader)
    assert own(before, "process_metrics.tree.process.count") == 3

    def in_the_fork() -> dict[str, Any]:
        first, second = collect(reader), collect(reader)
        return {
            name: {
                "count": own(found, "process_metrics.tree.process.count"),
                "exits": exits(found),
                "restarts": own(found, "process_metrics.tree.process.restarts"),
                "cpu": sum(points(found["process_metrics.tree.cpu.time"]).values()),
                "slots": len(by_slot(found, "process.memory.usage")),
            }
            for name, found in (("first", first), ("second", second))
        }

    got = in_child(in_the_fork, fork=os.fork if fork == "os.fork" else c_fork)
    parents_cpu = sum(points(before["process_metrics.tree.cpu.time"]).values())
    for found in got.values():
        assert found["count"] == 1  # the fork itself: the parent's children are not its own
        assert found["exits"] == 0 and found["restarts"] == 0
        assert found["slots"] == 0
        assert found["cpu"] < parents_cpu  # its own time since the fork, not the parent's tree


@linux_only
def test_the_tree_takes_this_process_pss_from_the_same_refresh_not_a_second_read(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    spawn: Callable[..., Any],
    opens: OpenRecorder,
) -> None:
    kids = [spawn(SLEEP) for _ in range(2)]
    wait_listed({k.pid for k in kids})
    supervise(include=["process_metrics.memory.pss"])
    collect(reader)  # the first collection opens what discovery needs
    with opens.recording() as paths:
        found = collect(reader)

    def smaps_reads(*pids: int | str) -> int:
        # psutil reads smaps_rollup, or smaps where it or the kernel lacks it.
        return sum(paths.count(f"/proc/{p}/{f}") for p in pids for f in ("smaps_rollup", "smaps"))

    # The process's own PSS is read once, by its source; the tree reuses it.
    assert smaps_reads(os.getpid(), "self") == 1, paths
    for kid in kids:
        assert smaps_reads(kid.pid) == 1, paths
    own_pss = own(found, "process_metrics.memory.pss")
    tree = sum(points(found["process_metrics.tree.memory.usage"]).values())
    children = sum(by_slot(found, "process_metrics.memory.pss").values())
    assert tree == own_pss + children  # the same values, added
