"""The cgroup and pressure readers against bare reads of the same files, on pyperf.Runner.

    python benchmarks/cgroup_readers.py -o cgroup_readers.json   # pyperf's options: --fast, -p...
    python -m pyperf stats cgroup_readers.json

Three benchmarks over this process's cgroup and pressure files, as the package
finds them: ``read_all`` (the package's readers, as a refresh calls them),
``bare`` (``os.open``, ``os.read``, ``os.close`` of each file, no parsing) and
``bare_parse`` (the same, plus the least positional parse that yields the
numbers). It imports the readers it times (a component benchmark). To measure
in a cgroup with limits, start it in one. The opens of a collection with
``saturation=True`` are counted exactly by ``counts.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pyperf

from opentelemetry.instrumentation.process.linux import cgroup, psi
from opentelemetry.instrumentation.process.linux.files import KernelFile, read_all

FLAGS = os.O_RDONLY | os.O_CLOEXEC


def least_parse(path: str) -> Callable[[bytes], Any]:
    """The least parsing that yields a file's numbers: positional, unchecked."""
    name = path.rsplit("/", 1)[1]
    if name in ("cpu", "memory", "io") or name.endswith(".pressure"):
        return lambda data: [int(t[6:]) for t in data.split()[4::5]]
    if name == "memory.stat":
        key = b"\ntotal_inactive_file " if "/memory/" in path else b"\ninactive_file "
        return lambda data: int(data[data.find(key) + len(key) :].split(b"\n", 1)[0])
    if name in ("cpu.stat", "cpuacct.stat", "memory.oom_control", "memory.events"):
        return lambda data: [int(x) for x in data.split()[1::2]]
    return int


def files() -> tuple[KernelFile, ...]:
    paths = cgroup.discover()
    return tuple(cgroup.cgroup_files(paths)) + tuple(psi.discover_pressure(paths).files)


def bare(names: list[str], parse: bool) -> Callable[[], None]:
    parses = [(p, least_parse(p) if parse else bytes) for p in names]

    def read() -> None:
        for p, fn in parses:
            fd = os.open(p, FLAGS)
            fn(os.read(fd, 16384))
            os.close(fd)

    return read


def main() -> None:
    found = files()
    names = [f.path for f in found]
    runner = pyperf.Runner()
    runner.metadata["description"] = f"{len(names)} cgroup and pressure files"
    runner.bench_func("bare", bare(names, parse=False))
    runner.bench_func("bare_parse", bare(names, parse=True))
    runner.bench_func("read_all", read_all, found)


if __name__ == "__main__":
    main()
