"""Static facts: the cgroup limits that set the utilisation denominators.

The cgroup trees here are real files in a temporary folder, laid out as the
kernel lays them out, read by the same code that reads /sys/fs/cgroup.
"""

from __future__ import annotations

import glob
import logging
import os
import resource
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process.facts import available_cpus, read_facts
from opentelemetry.instrumentation.process.linux.cgroup import cpu_quota, discover, memory_limit

from .support import cgroups


def _tree(root: Path, proc_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    self_cgroup = root / "proc-self-cgroup"
    self_cgroup.write_text(proc_cgroup)
    return root / "sys-fs-cgroup", self_cgroup


TREES = {
    # The pod's quota applies to the app below it: 1.5 CPUs.
    "v2-quota-and-memory-limit": (
        "0::/kubepods/pod1/app\n",
        {
            "sys-fs-cgroup/cpu.max": "max 100000",
            "sys-fs-cgroup/memory.max": "max",
            "sys-fs-cgroup/kubepods/pod1/cpu.max": "150000 100000",
            "sys-fs-cgroup/kubepods/pod1/app/cpu.max": "max 100000",
            "sys-fs-cgroup/kubepods/pod1/app/memory.max": "536870912",
        },
        1.5,
        512 << 20,
    ),
    "v2-tightest-ancestor-wins": (
        "0::/a/b\n",
        {
            "sys-fs-cgroup/a/cpu.max": "50000 100000",
            "sys-fs-cgroup/a/b/cpu.max": "300000 100000",
            "sys-fs-cgroup/a/memory.max": "1073741824",
            "sys-fs-cgroup/a/b/memory.max": "2147483648",
        },
        0.5,
        1 << 30,
    ),
    "no-limits": (
        "0::/\n",
        {"sys-fs-cgroup/cpu.max": "max 100000", "sys-fs-cgroup/memory.max": "max"},
        None,
        None,
    ),
    "v1-fallback": (
        "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n",
        {
            "sys-fs-cgroup/cpu/docker/abc/cpu.cfs_quota_us": "250000",
            "sys-fs-cgroup/cpu/docker/abc/cpu.cfs_period_us": "100000",
            "sys-fs-cgroup/memory/docker/abc/memory.limit_in_bytes": "268435456",
            "sys-fs-cgroup/memory/memory.limit_in_bytes": "9223372036854771712",
        },
        2.5,
        256 << 20,
    ),
    "v1-unlimited": (
        "4:memory:/\n2:cpu:/\n",
        {
            "sys-fs-cgroup/cpu/cpu.cfs_quota_us": "-1",
            "sys-fs-cgroup/cpu/cpu.cfs_period_us": "100000",
            "sys-fs-cgroup/memory/memory.limit_in_bytes": "9223372036854771712",
        },
        None,
        None,
    ),
}
"""/proc/self/cgroup, the files under /sys/fs/cgroup, and the CPU quota and memory limit found."""


@pytest.mark.parametrize(("proc_cgroup", "files", "quota", "limit"), TREES.values(), ids=TREES)
def test_cgroup_quota_and_memory_limit(
    tmp_path: Path,
    proc_cgroup: str,
    files: dict[str, str],
    quota: float | None,
    limit: int | None,
) -> None:
    root, self_cgroup = _tree(tmp_path, proc_cgroup, files)
    found = discover(root, self_cgroup)
    assert cpu_quota(found) == quota
    assert memory_limit(found) == limit


def test_missing_cgroup_files_mean_no_limit(tmp_path: Path) -> None:
    nothing = discover(tmp_path / "none", tmp_path / "none-either")
    assert cpu_quota(nothing) is None
    assert memory_limit(nothing) is None


@pytest.mark.parametrize(
    ("affinity", "quota", "expected"), [(8, None, 8.0), (8, 1.5, 1.5), (2, 4.0, 2.0)]
)
def test_available_cpus_is_affinity_capped_by_quota(
    affinity: int, quota: float | None, expected: float
) -> None:
    assert available_cpus(affinity, quota) == expected


def test_facts_of_this_process_use_the_cgroup_limits(tmp_path: Path) -> None:
    root, self_cgroup = _tree(
        tmp_path,
        "0::/svc\n",
        {"sys-fs-cgroup/svc/cpu.max": "50000 100000", "sys-fs-cgroup/svc/memory.max": "1048576"},
    )
    facts = read_facts(
        psutil.Process(), cpu_frequency=False, cgroup_root=root, proc_self_cgroup=self_cgroup
    )
    assert facts.available_cpus == 0.5
    assert facts.memory_limit == 1 << 20
    real = read_facts(psutil.Process(), cpu_frequency=False)
    assert 0 < real.available_cpus <= (psutil.cpu_count() or 1)
    assert real.memory_limit <= psutil.virtual_memory().total


def _clock_ticks_since_boot() -> float:
    """This process's start, in seconds after boot: field 22 of /proc/self/stat."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    return int(stat.rsplit(b")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_every_fact_of_this_process_is_the_oses() -> None:
    facts = read_facts(psutil.Process(), cpu_frequency=False)
    assert facts.pid == os.getpid()
    assert facts.create_time == psutil.Process().create_time()
    assert facts.start_boottime == _clock_ticks_since_boot()
    assert facts.logical_cpus == os.cpu_count()
    # Physical cores: distinct (package, core) pairs of the CPUs sysfs lists.
    cores = set()
    for cpu in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology"):
        package = Path(cpu, "physical_package_id").read_text().strip()
        cores.add((package, Path(cpu, "core_id").read_text().strip()))
    assert facts.physical_cpus == (len(cores) or None)
    affinity = len(os.sched_getaffinity(0))
    quota = cgroups.cpu_quota()
    assert facts.available_cpus == (min(affinity, quota) if quota else affinity)
    assert type(facts.available_cpus) is float
    limit = cgroups.memory_limit()
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024  # MemTotal, in kB
    assert facts.memory_limit == (min(total, limit) if limit else total)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert facts.fd_limit == soft
    assert facts.cpu_freq_min_hz is None and facts.cpu_freq_max_hz is None  # not asked for


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_fd_limit_is_the_soft_limit_in_force() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, 321)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
    try:
        assert read_facts(psutil.Process(), cpu_frequency=False).fd_limit == lower
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_memory_limit_is_the_smaller_of_host_and_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = psutil.virtual_memory().total
    for cgroup_limit, expected in [(1 << 20, 1 << 20), (host * 2, host)]:
        root, self_cgroup = _tree(
            tmp_path / str(cgroup_limit),
            "0::/svc\n",
            {"sys-fs-cgroup/svc/memory.max": str(cgroup_limit)},
        )
        facts = read_facts(
            psutil.Process(), cpu_frequency=False, cgroup_root=root, proc_self_cgroup=self_cgroup
        )
        assert facts.memory_limit == expected
    # Host memory unknown (a fault injected): the cgroup's limit alone.
    root, self_cgroup = _tree(
        tmp_path / "unknown", "0::/svc\n", {"sys-fs-cgroup/svc/memory.max": "1048576"}
    )

    def broken() -> Any:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(psutil, "virtual_memory", broken)
    facts = read_facts(
        psutil.Process(), cpu_frequency=False, cgroup_root=root, proc_self_cgroup=self_cgroup
    )
    assert facts.memory_limit == 1 << 20
    facts = read_facts(
        psutil.Process(), cpu_frequency=False, cgroup_root=tmp_path, proc_self_cgroup=tmp_path
    )
    assert facts.memory_limit is None  # neither known


FREQ = type(psutil.cpu_freq()) if hasattr(psutil, "cpu_freq") else None


@pytest.mark.skipif(FREQ is None, reason="psutil has no cpu_freq here")
@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (800.0, 3600.0, (800_000_000, 3_600_000_000)),
        (0.0, 0.0, (None, None)),  # a VM: unknown, not 0
        (0.0, 3600.0, (None, 3_600_000_000)),
        (800.0, 0.0, (800_000_000, None)),
    ],
)
def test_frequency_limits_in_hz_and_unknown_ones_are_none(
    low: float,
    high: float,
    expected: tuple[int | None, int | None],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The hardware's limits cannot be set here: psutil's answer is faked.
    assert FREQ is not None
    monkeypatch.setattr(psutil, "cpu_freq", lambda percpu=False: FREQ(2400.0, low, high))
    caplog.set_level(logging.INFO, logger="opentelemetry.instrumentation.process")
    facts = read_facts(psutil.Process(), cpu_frequency=True)
    assert (facts.cpu_freq_min_hz, facts.cpu_freq_max_hz) == expected
    notes = [r for r in caplog.records if r.levelno == logging.INFO]
    if None in expected:
        assert [r.getMessage() for r in notes] == [
            "CPU frequency limits are not exposed on this host (usual in VMs and "
            "containers); the minimum/maximum frequency metrics are left out rather than "
            "reported as 0."
        ]
    else:
        assert notes == []


def test_no_frequency_api_means_no_limits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A platform where psutil has no cpu_freq at all (faked by removing it).
    monkeypatch.delattr(psutil, "cpu_freq", raising=False)
    caplog.set_level(logging.WARNING, logger="opentelemetry.instrumentation.process")
    facts = read_facts(psutil.Process(), cpu_frequency=True)
    assert (facts.cpu_freq_min_hz, facts.cpu_freq_max_hz) == (None, None)
    assert caplog.records == []  # nothing failed: there is nothing to read


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(5, "Input/output error")


_cpu_count = psutil.cpu_count


def _refuse_physical(logical: bool = True) -> int | None:
    return _cpu_count(logical=True) if logical else _refuse()


# The OS cannot be made to fail these reads for one test: each is refused at psutil's or
# Python's call, and the warning must name the fact.
REFUSED = {
    "physical_cpus": ("the physical CPU count", psutil, "cpu_count", _refuse_physical),
    "fd_limit": ("the file descriptor limit", resource, "getrlimit", _refuse),
    "create_time": ("the process start time", psutil.Process, "create_time", _refuse),
}


@pytest.mark.parametrize("field", list(REFUSED))
def test_a_fact_that_cannot_be_read_is_none_and_its_warning_names_it(
    field: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    what, owner, name, refusal = REFUSED[field]
    process = psutil.Process()
    monkeypatch.setattr(owner, name, refusal)
    with caplog.at_level(logging.WARNING):
        facts = read_facts(process, cpu_frequency=False)
    assert getattr(facts, field) is None
    assert facts.pid == os.getpid()  # the other facts are read
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"process metrics: could not read {what} (OSError: [Errno 5] Input/output error); "
        "the metrics that need it are left out."
    ]
