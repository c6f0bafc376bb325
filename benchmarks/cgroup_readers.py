"""Micro-measurement: the cgroup and PSI readers against bare reads of the same files.

``benchmarks/run.py`` reports it; alone: ``python benchmarks/cgroup_readers.py [N] [ROUNDS]``
reads this process's cgroup and PSI files as the package does (``read_all``)
and compares, in paired rounds (so that other load hits both sides), with:

- bare: ``os.open``/``os.read``/``os.close`` of each file, no parsing;
- bare + least parse: the same, plus the least positional parse that yields
  the numbers (as the benchmark's ``bare`` subjects do).

It also counts the opens of one ``read_all`` with an audit hook. To measure in
a cgroup with limits, start it in one (see the saturation helper's report).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.process.linux import cgroup, psi
from opentelemetry.instrumentation.process.linux.files import KernelFile, read_all

FLAGS = os.O_RDONLY | os.O_CLOEXEC


def least_parse(path: str) -> Callable[[bytes], Any]:
    """The least parsing that yields a file's numbers: positional, unchecked."""
    name = path.rsplit("/", 1)[1]
    if name in ("cpu", "memory", "io") or name.endswith(".pressure"):

        def pressure(data: bytes) -> Any:
            t = data.split()
            return int(t[4][6:]), int(t[9][6:]) if len(t) > 9 else None

        return pressure
    if name == "memory.stat":
        key = b"\ntotal_inactive_file " if "/memory/" in path else b"\ninactive_file "

        def stat(data: bytes) -> int:
            at = data.find(key) + len(key)
            return int(data[at : data.index(b"\n", at)])

        return stat
    if name in ("cpu.stat", "cpuacct.stat", "memory.oom_control", "memory.events"):
        return lambda data: [int(x) for x in data.split()[1::2]]
    return int


def per_call_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1000


def paired(
    a: Callable[[], object], b: Callable[[], object], n: int, rounds: int
) -> tuple[float, float, float]:
    """Min of each side over rounds, and the median of the per-round ratios b/a."""
    ta, tb, ratios = [], [], []
    for _ in range(rounds):
        x, y = per_call_us(a, n), per_call_us(b, n)
        ta.append(x)
        tb.append(y)
        ratios.append(y / x)
    return min(ta), min(tb), statistics.median(ratios)


@dataclass(frozen=True)
class Row:
    against: str
    bare_us: float
    readers_us: float
    ratio_of_mins: float
    median_ratio: float


@dataclass(frozen=True)
class CgroupResult:
    scope: str
    files: list[str]
    opens: int
    distinct: int
    most_per_file: int
    calls: int
    rounds: int
    rows: list[Row]


def _opens_of(files: tuple[KernelFile, ...]) -> Counter[str]:
    """Opens of one read_all, by an audit hook (added once per process)."""
    opens: Counter[str] = Counter()
    recording = [True]
    sys.addaudithook(
        lambda event, args: opens.update([str(args[0])]) if event == "open" and recording else None
    )
    read_all(files)
    recording.clear()
    return opens


def _bare(names: list[str], parse: bool) -> Callable[[], None]:
    parses = [(p, least_parse(p) if parse else bytes) for p in names]

    def read() -> None:
        for p, fn in parses:
            fd = os.open(p, FLAGS)
            fn(os.read(fd, 16384))
            os.close(fd)

    return read


def measure(quick: bool = False, n: int | None = None, rounds: int | None = None) -> CgroupResult:
    """The package's readers against bare reads: the typed result ``run.py`` reports."""
    n, rounds = n or (20 if quick else 300), rounds or (3 if quick else 30)
    paths = cgroup.discover()
    pressure = psi.discover_pressure(paths)
    files = cgroup.cgroup_files(paths) + pressure.files
    names = [f.path for f in files]
    opens = _opens_of(files)
    rows = []
    for label, parse in (("bare reads", False), ("bare reads + least parse", True)):
        b, r, ratio = paired(_bare(names, parse), lambda: read_all(files), n, rounds)
        rows.append(Row(label, b, r, r / b, ratio))
    most = max(opens.values(), default=0)
    return CgroupResult(
        pressure.scope, names, sum(opens.values()), len(opens), most, n, rounds, rows
    )


def markdown(result: CgroupResult) -> str:
    lines = [
        f"{len(result.files)} files (pressure scope {result.scope}); one read_all opens "
        f"{result.opens} ({result.distinct} distinct, at most {result.most_per_file} per file). "
        f"Min of {result.rounds} rounds of {result.calls} calls.",
        "",
        "| read_all against | bare µs | read_all µs | ratio of mins | median paired ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result.rows:
        lines.append(
            f"| {r.against} | {r.bare_us:.1f} | {r.readers_us:.1f} | {r.ratio_of_mins:.3f}x "
            f"| {r.median_ratio:.3f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    print(f"python {sys.version.split()[0]}")
    print(markdown(measure(n=n, rounds=rounds)))


if __name__ == "__main__":
    main()
