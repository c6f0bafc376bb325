"""Micro-measurement: the cgroup and PSI readers against bare reads of the same files.

Not part of the benchmark run. ``python benchmarks/cgroup_readers.py [N] [ROUNDS]``
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
from typing import Any

from opentelemetry.instrumentation.process.linux import cgroup, psi
from opentelemetry.instrumentation.process.linux.files import read_all

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


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    paths = cgroup.discover()
    pressure = psi.discover_pressure(paths)
    files = cgroup.cgroup_files(paths) + pressure.files
    names = [f.path for f in files]
    parses = [(p, least_parse(p)) for p in names]

    opens: Counter[str] = Counter()
    recording = [True]
    sys.addaudithook(
        lambda event, args: opens.update([str(args[0])]) if event == "open" and recording else None
    )
    read_all(files)
    recording.clear()

    def bare() -> None:
        for p in names:
            fd = os.open(p, FLAGS)
            os.read(fd, 16384)
            os.close(fd)

    def bare_parsed() -> None:
        for p, parse in parses:
            fd = os.open(p, FLAGS)
            parse(os.read(fd, 16384))
            os.close(fd)

    def readers() -> None:
        read_all(files)

    print(f"python {sys.version.split()[0]}; psi scope {pressure.scope}")
    for f in files:
        print(f"  {f.path}: {', '.join(f.fields)}")
    print(
        f"{len(files)} files; opens in one read_all: {sum(opens.values())} "
        f"({len(opens)} distinct, at most {max(opens.values(), default=0)} per file)"
    )
    for label, base in (("bare reads", bare), ("bare reads + least parse", bare_parsed)):
        b, r, ratio = paired(base, readers, n, rounds)
        print(
            f"read_all {r:.1f} us vs {label} {b:.1f} us (min of {rounds} rounds of {n}): "
            f"x{r / b:.3f}; median paired ratio x{ratio:.3f}"
        )


if __name__ == "__main__":
    main()
