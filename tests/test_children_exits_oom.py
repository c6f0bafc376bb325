"""Supervisor mode: OOM kills told apart from a plain ``kill -9``, in a real memory-limited cgroup.

This test process is the master; its workers (``multiprocessing``, fork
context) move themselves into a cgroup of their own with a memory limit, as a
server's workers in a container do, then allocate until the kernel's OOM
killer ends them. The kernel counts each kill in that cgroup
(``memory.oom_control`` on v1, ``memory.events.local`` on v2): the package
reads the count, and gives the cause to the ``SIGKILL`` ends it saw there.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

from .support import cgroups
from .test_children_exits import EACH, by_cause, counted

FORK = multiprocessing.get_context("fork")
MIB = 1 << 20
LIMIT = 64 * MIB
"""The cgroup's limit: what its workers allocate after they moved in counts against it."""


@pytest.fixture
def supervise(provider: MeterProvider) -> Iterator[Callable[..., ProcessMetrics]]:
    made: list[ProcessMetrics] = []

    def _supervise(**options: Any) -> ProcessMetrics:
        options = ProcessMetricsOptions(children=True, **options)
        pm = ProcessMetrics(options, meter_provider=provider)
        made.append(pm)
        return pm

    yield _supervise
    for pm in made:
        pm.close()


@pytest.fixture
def limited() -> Iterator[cgroups.Cgroup]:
    """A memory cgroup of the test's own, limited to :data:`LIMIT`, without swap."""
    controller = "memory" if cgroups.own_dir("memory") and _v1_memory() else "unified"
    with cgroups.child_cgroup(controller) as cg:
        if controller == "memory":
            cg.write("memory.limit_in_bytes", str(LIMIT))
            if (cg.folder / "memory.memsw.limit_in_bytes").exists():
                cg.write("memory.memsw.limit_in_bytes", str(LIMIT))
        else:
            if "memory" not in cg.read("cgroup.controllers").decode().split():
                pytest.skip("no memory controller in this v2 cgroup")
            cg.write("memory.max", str(LIMIT))
            cg.write("memory.swap.max", "0")
        yield cg


def _v1_memory() -> bool:
    return any(
        line.split(":")[1] == "memory" for line in open("/proc/self/cgroup").read().splitlines()
    )


def _oom_kills(cg: cgroups.Cgroup) -> int:
    """The cgroup's own count, read by the test."""
    v1 = cg.folder / "memory.oom_control"
    return cgroups.flat(cg.read(v1.name if v1.exists() else "memory.events.local"))["oom_kill"]


def _worker(procs: str, orders: int, ready: Any) -> None:
    """Into the cgroup, then what the test says, a byte at a time on ``orders``.

    ``a``: allocate :data:`STEP` and say so; ``g``: allocate without end (until the
    OOM killer comes); the end of the pipe: wait (for the test's kill -9).
    """
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
    ready.put(os.getpid())
    chunks = []
    while True:
        order = os.read(orders, 1)
        if order == b"a":
            chunks.append(b"x" * STEP)  # touched pages: charged to the cgroup
            ready.put(os.getpid())
        elif order == b"g":
            while True:
                chunks.append(b"x" * MIB)
        else:
            time.sleep(600)


STEP = 16 * MIB


class Workers:
    """Workers moved into ``cg``, each told what to do through a pipe of its own."""

    def __init__(self, cg: cgroups.Cgroup, count: int) -> None:
        self.ready = FORK.SimpleQueue()
        self.procs: list[tuple[Any, int]] = []
        where = str(cg.folder / "cgroup.procs")
        for _ in range(count):
            orders, tell = os.pipe()
            p = FORK.Process(target=_worker, args=(where, orders, self.ready))
            p.start()
            os.close(orders)
            self.procs.append((p, tell))
        self._replies()

    def _replies(self) -> None:
        got = {self.ready.get() for _ in self.procs}
        assert got == {p.pid for p, _ in self.procs}

    def tell(self, order: bytes) -> None:
        for _, tell in self.procs:
            os.write(tell, order)
        if order == b"a":
            self._replies()

    def kill(self) -> None:
        for p, _ in self.procs:
            p.kill()

    def join(self) -> list[int | None]:
        for p, tell in self.procs:
            p.join(120)  # reaped by multiprocessing: os.waitpid in this process
            os.close(tell)
        return [p.exitcode for p, _ in self.procs]


root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating a cgroup and moving a process into it needs root"
)


@root_only
def test_oom_kills_are_counted_as_such_and_a_plain_kill_9_is_not(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    limited: cgroups.Cgroup,
) -> None:
    supervise()
    # EACH workers in the limited cgroup allocate until the OOM killer ends each.
    growing = Workers(limited, EACH)
    by_cause(reader)  # each seen alive, in its cgroup
    growing.tell(b"g")
    assert growing.join() == [-9] * EACH
    assert _oom_kills(limited) == EACH  # the kernel's own count, read by the test
    counted(reader, {("oom_kill", "SIGKILL", None): EACH}, timeout=90)
    # EACH more in the same cgroup, ended by a plain kill -9: none of them is an OOM kill.
    waiting = Workers(limited, EACH)
    by_cause(reader)
    waiting.kill()
    assert waiting.join() == [-9] * EACH
    assert _oom_kills(limited) == EACH
    expected = {("oom_kill", "SIGKILL", None): EACH, ("signal", "SIGKILL", None): EACH}
    counted(reader, expected, timeout=90)


@root_only
def test_oom_kills_and_plain_kills_of_one_cgroup_in_one_interval(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    limited: cgroups.Cgroup,
) -> None:
    """N SIGKILL ends against M OOM kills of one cgroup in one interval: M of them.

    The M with the most memory at the last collection get the cause (the growing
    ones here); the counts by cause are the same whichever M get it.
    """
    supervise()
    big, small = Workers(limited, 2), Workers(limited, 3)
    big.tell(b"a")  # 16 MiB more each: the largest at the collection before the kills
    by_cause(reader)
    big.tell(b"g")
    small.kill()  # in the same interval as the OOM kills
    assert big.join() == [-9, -9] and small.join() == [-9, -9, -9]
    assert _oom_kills(limited) == 2
    expected = {("oom_kill", "SIGKILL", None): 2, ("signal", "SIGKILL", None): 3}
    counted(reader, expected, timeout=90)


def _sleeper() -> None:
    time.sleep(600)


@root_only
def test_a_kill_is_matched_with_the_oom_kills_of_its_own_cgroup_only(
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
    limited: cgroups.Cgroup,
) -> None:
    """An OOM kill in the workers' cgroup does not make a kill -9 elsewhere one."""
    supervise()
    growing = Workers(limited, 1)
    here = FORK.Process(target=_sleeper)  # in this process's own cgroup
    here.start()
    by_cause(reader)
    growing.tell(b"g")
    here.kill()  # in the same interval as the OOM kill
    here.join(60)
    assert growing.join() == [-9] and here.exitcode == -9
    expected = {("oom_kill", "SIGKILL", None): 1, ("signal", "SIGKILL", None): 1}
    counted(reader, expected, timeout=90)
