"""Static facts: the cgroup limits that set the utilisation denominators.

The cgroup trees here are real files in a temporary folder, laid out as the
kernel lays them out, read by the same code that reads /sys/fs/cgroup.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from opentelemetry.instrumentation.process.facts import available_cpus, read_facts
from opentelemetry.instrumentation.process.linux.cgroup import (
    cgroup_cpu_quota,
    cgroup_memory_limit,
)


def _tree(root: Path, proc_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    self_cgroup = root / "proc-self-cgroup"
    self_cgroup.write_text(proc_cgroup)
    return root / "sys-fs-cgroup", self_cgroup


def test_v2_quota_and_memory_limit(tmp_path: Path) -> None:
    root, self_cgroup = _tree(
        tmp_path,
        "0::/kubepods/pod1/app\n",
        {
            "sys-fs-cgroup/cpu.max": "max 100000",
            "sys-fs-cgroup/memory.max": "max",
            "sys-fs-cgroup/kubepods/pod1/cpu.max": "150000 100000",
            "sys-fs-cgroup/kubepods/pod1/app/cpu.max": "max 100000",
            "sys-fs-cgroup/kubepods/pod1/app/memory.max": "536870912",
        },
    )
    # The pod's quota applies to the app below it: 1.5 CPUs.
    assert cgroup_cpu_quota(root, self_cgroup) == 1.5
    assert cgroup_memory_limit(root, self_cgroup) == 512 << 20


def test_v2_tightest_ancestor_wins(tmp_path: Path) -> None:
    root, self_cgroup = _tree(
        tmp_path,
        "0::/a/b\n",
        {
            "sys-fs-cgroup/a/cpu.max": "50000 100000",
            "sys-fs-cgroup/a/b/cpu.max": "300000 100000",
            "sys-fs-cgroup/a/memory.max": "1073741824",
            "sys-fs-cgroup/a/b/memory.max": "2147483648",
        },
    )
    assert cgroup_cpu_quota(root, self_cgroup) == 0.5
    assert cgroup_memory_limit(root, self_cgroup) == 1 << 30


def test_no_limits(tmp_path: Path) -> None:
    root, self_cgroup = _tree(
        tmp_path,
        "0::/\n",
        {"sys-fs-cgroup/cpu.max": "max 100000", "sys-fs-cgroup/memory.max": "max"},
    )
    assert cgroup_cpu_quota(root, self_cgroup) is None
    assert cgroup_memory_limit(root, self_cgroup) is None


def test_v1_fallback(tmp_path: Path) -> None:
    root, self_cgroup = _tree(
        tmp_path,
        "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n",
        {
            "sys-fs-cgroup/cpu/docker/abc/cpu.cfs_quota_us": "250000",
            "sys-fs-cgroup/cpu/docker/abc/cpu.cfs_period_us": "100000",
            "sys-fs-cgroup/memory/docker/abc/memory.limit_in_bytes": "268435456",
            "sys-fs-cgroup/memory/memory.limit_in_bytes": "9223372036854771712",
        },
    )
    assert cgroup_cpu_quota(root, self_cgroup) == 2.5
    assert cgroup_memory_limit(root, self_cgroup) == 256 << 20


def test_v1_unlimited(tmp_path: Path) -> None:
    root, self_cgroup = _tree(
        tmp_path,
        "4:memory:/\n2:cpu:/\n",
        {
            "sys-fs-cgroup/cpu/cpu.cfs_quota_us": "-1",
            "sys-fs-cgroup/cpu/cpu.cfs_period_us": "100000",
            "sys-fs-cgroup/memory/memory.limit_in_bytes": "9223372036854771712",
        },
    )
    assert cgroup_cpu_quota(root, self_cgroup) is None
    assert cgroup_memory_limit(root, self_cgroup) is None


def test_missing_cgroup_files_mean_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path / "none", tmp_path / "none-either") is None
    assert cgroup_memory_limit(tmp_path / "none", tmp_path / "none-either") is None


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
