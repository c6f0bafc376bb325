"""Cost against the CPU count: host CPU metrics on procfs files shaped like an N-CPU host's.

This machine's CPU count cannot be changed, so psutil is pointed (through its
public ``psutil.PROCFS_PATH``) at this host's ``/proc/stat`` and ``/proc/cpuinfo``
with their per-CPU part repeated N times. Ours (per CPU or not, and with
frequency where the host has no sysfs cpufreq, so that psutil reads
``/proc/cpuinfo``) and the peer's ``system.cpu.*`` read them, beside their SDK
floors. This times what N CPUs cost psutil, this package and the SDK, not the
kernel generating those files. With frequency off, no configuration opens a
per-CPU file: the exact counts show it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil

import configs
import subjects
from scaling import Plan, Sweep, ours, sweep


def cpus(xs: Sequence[int], plan: Plan) -> Sweep:
    """Host CPU metrics, ours and the peer's, on procfs files shaped like an N-CPU host's."""
    frequency = not _sysfs_cpufreq()  # else psutil reads the real sysfs, not these files
    timed = ours(configs.cpus(frequency))
    timed.append(subjects.peer("peer_cpu", configs.PEER_CPU_CONFIG, "the peer's system.cpu.*"))
    try:
        with synthetic_procfs() as use:
            return sweep("cpus", "CPUs in /proc/stat and /proc/cpuinfo", xs, use, timed, plan)
    finally:
        for s in timed:
            s.close()


def _sysfs_cpufreq() -> bool:
    return (
        Path("/sys/devices/system/cpu/cpufreq/policy0").exists()
        or Path("/sys/devices/system/cpu/cpu0/cpufreq").exists()
    )


@contextmanager
def synthetic_procfs() -> Iterator[Callable[[int], None]]:
    """A function that points psutil at ``stat`` and ``cpuinfo`` files of N CPUs."""
    saved = psutil.PROCFS_PATH
    with tempfile.TemporaryDirectory(prefix="bench-procfs-") as tmp:

        def use(n: int) -> None:
            root = Path(tmp) / str(n)
            if not root.exists():
                root.mkdir()
                _write_procfs(root, n)
            psutil.PROCFS_PATH = str(root)
            assert len(psutil.cpu_times(percpu=True)) == n  # psutil parsed n CPUs

        try:
            yield use
        finally:
            psutil.PROCFS_PATH = saved


def _write_procfs(root: Path, n: int) -> None:
    stat = Path("/proc/stat").read_text().splitlines()
    cpu_lines = [line for line in stat[1:] if line.startswith("cpu")]
    rest = [line for line in stat[1:] if not line.startswith("cpu")]
    fields = cpu_lines[0].split(None, 1)[1]
    per_cpu = [f"cpu{i} {fields}" for i in range(n)]
    (root / "stat").write_text("\n".join([stat[0], *per_cpu, *rest]) + "\n")
    block = Path("/proc/cpuinfo").read_text().split("\n\n")[0].split("\n", 1)[1]
    (root / "cpuinfo").write_text("".join(f"processor\t: {i}\n{block}\n\n" for i in range(n)))
