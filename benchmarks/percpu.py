"""Per-CPU work: what grows with the CPU count, and what does not.

This machine has 2 CPUs, so the CPU count cannot be varied for real. Two
measurements stand in for it:

- on this host, the real cost of the frequency read, divided by its CPU count;
- psutil's own parsing of procfs files shaped like an N-CPU host's (this host's
  ``/proc/stat`` and ``/proc/cpuinfo`` with their per-CPU part repeated N times),
  through ``psutil.PROCFS_PATH``. It times psutil's reading and parsing of files
  of that size; it cannot time the kernel generating them for N real CPUs.

The exact counts (``counts.py``) carry the other half: with frequency off no
configuration opens anything per CPU.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

SYSFS_CPUFREQ = os.path.exists("/sys/devices/system/cpu/cpufreq/policy0") or os.path.exists(
    "/sys/devices/system/cpu/cpu0/cpufreq"
)


def _time(fns: dict[str, Callable[[], object]], rounds: int, pause: float) -> dict[str, float]:
    """Median seconds per call, interleaved in random order, ``pause`` before each."""
    rng = random.Random(4)
    values: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            time.sleep(pause)
            t0 = time.perf_counter()
            fns[name]()
            values[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in values.items()}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def host(rounds: int, pause: float) -> dict[str, Any]:
    """Frequency on this host: what psutil reads, and what it costs per CPU."""
    cpus = psutil.cpu_count() or 1
    fns: dict[str, Callable[[], object]] = {
        "psutil.cpu_times()": psutil.cpu_times,
        "psutil.cpu_times(percpu=True)": lambda: psutil.cpu_times(percpu=True),
        "psutil.cpu_freq(percpu=True)": lambda: psutil.cpu_freq(percpu=True),
    }
    if sys.platform.startswith("linux"):
        fns["read /proc/cpuinfo"] = lambda: _read("/proc/cpuinfo")
        fns["read /proc/stat"] = lambda: _read("/proc/stat")
    medians = _time(fns, rounds, pause)
    return {
        "cpus": cpus,
        "sysfs_cpufreq": SYSFS_CPUFREQ,
        "cpuinfo_bytes": len(_read("/proc/cpuinfo")) if sys.platform.startswith("linux") else 0,
        "median_s": medians,
        "per_cpu_s": {k: v / cpus for k, v in medians.items()},
    }


def _synthetic_procfs(root: Path, n: int) -> None:
    """/proc/stat and /proc/cpuinfo of this host with the per-CPU part repeated ``n`` times."""
    stat = Path("/proc/stat").read_text().splitlines()
    total = stat[0]
    cpu_lines = [line for line in stat[1:] if line.startswith("cpu")]
    rest = [line for line in stat[1:] if not line.startswith("cpu")]
    fields = cpu_lines[0].split(None, 1)[1]
    per_cpu = [f"cpu{i} {fields}" for i in range(n)]
    (root / "stat").write_text("\n".join([total, *per_cpu, *rest]) + "\n")
    block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    body = block.split("\n", 1)[1]
    (root / "cpuinfo").write_text("".join(f"processor\t: {i}\n{body}\n\n" for i in range(n)))


def synthetic(counts: list[int], rounds: int) -> dict[str, Any]:
    """psutil's read-and-parse time per call against the CPU count N (files of N CPUs)."""
    if not sys.platform.startswith("linux"):
        return {"skipped": "not Linux"}
    rows: dict[int, dict[str, float]] = {}
    saved = psutil.PROCFS_PATH
    with tempfile.TemporaryDirectory(prefix="bench-procfs-") as tmp:
        try:
            for n in counts:
                root = Path(tmp) / str(n)
                root.mkdir()
                _synthetic_procfs(root, n)
                psutil.PROCFS_PATH = str(root)
                fns: dict[str, Callable[[], object]] = {
                    "cpu_times()  [frequency off, per_cpu off]": psutil.cpu_times,
                    "cpu_times(percpu=True)  [per_cpu on]": lambda: psutil.cpu_times(percpu=True),
                }
                if not SYSFS_CPUFREQ:
                    # Only the /proc/cpuinfo fallback reads under PROCFS_PATH; with sysfs
                    # cpufreq psutil would read this host's real sysfs files instead.
                    fns["cpu_freq(percpu=True)  [frequency on]"] = lambda: psutil.cpu_freq(
                        percpu=True
                    )
                # Sanity: psutil really parsed n CPUs from the synthetic files.
                assert len(psutil.cpu_times(percpu=True)) == n
                rows[n] = _time(fns, rounds, 0.0)
        finally:
            psutil.PROCFS_PATH = saved
    return {"rows": rows}
