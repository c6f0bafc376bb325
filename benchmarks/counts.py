"""Exact counts per collection: psutil calls, files opened, frequency reads.

Run as a child process of ``run.py`` (an audit hook cannot be removed once added,
and it would tax every timed collection after it):

    python benchmarks/counts.py --mode audit --collections 3    # JSON on stdout
    strace -f -e trace=open,openat,openat2 -o FILE \\
        python benchmarks/counts.py --mode strace --collections 3

In ``audit`` mode, psutil's public functions and ``psutil.Process`` methods are
wrapped so that each outermost call is counted (the real function still runs:
this counts, it does not mock), and ``sys.addaudithook`` records ``open`` and
directory listings (``os.listdir``, ``os.scandir``). That works on any machine.
It cannot see files opened from C (for example ``setmntent`` in
``disk_partitions``): ``strace`` can, so when strace exists ``run.py`` runs the
same collections under it, between marker opens of ``/__bench_mark__/...``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil

import configs
import subjects

MARK = "/__bench_mark__"


def is_frequency_read(path: str) -> bool:
    """Opens that read CPU frequency: sysfs cpufreq files (and their listing), /proc/cpuinfo."""
    return path == "/proc/cpuinfo" or (
        path.startswith("/sys/devices/system/cpu") and "cpufreq" in path
    )


def is_per_cpu(path: str) -> bool:
    """Opens of one file per CPU (sysfs cpuN/...)."""
    return path.startswith("/sys/devices/system/cpu/cpu") and path[27:28].isdigit()


class PsutilCounter:
    """Counts outermost calls of psutil's public API while ``active``."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.active = False
        self._depth = 0
        self._saved: list[tuple[Any, str, Any]] = []

    def _wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active and self._depth == 0:
                self.calls.append(label)
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1

        return wrapper

    def install(self) -> None:
        for name, obj in vars(psutil).items():
            if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == "psutil":
                self._patch(psutil, name, f"psutil.{name}")
        for name, obj in vars(psutil.Process).items():
            if not name.startswith("_") and inspect.isfunction(obj) and name != "oneshot":
                self._patch(psutil.Process, name, f"Process.{name}")

    def _patch(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        self._saved.append((owner, name, original))
        setattr(owner, name, self._wrap(label, original))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


class OpenCounter:
    """Files and directory listings opened while ``active`` (audit hook)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.active = False
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in ("open", "os.listdir", "os.scandir"):
            path = args[0]
            if isinstance(path, int):
                return  # listing a directory through a descriptor already open: no open
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            self.paths.append(str(path))


@contextmanager
def counting(psc: PsutilCounter, oc: OpenCounter) -> Iterator[None]:
    psc.calls.clear()
    oc.paths.clear()
    psc.active = oc.active = True
    try:
        yield
    finally:
        psc.active = oc.active = False


def normalise(path: str) -> str:
    """/proc/<our pid>/x -> /proc/self/x, /proc/<other pid>/... -> /proc/<pid>/..."""
    me = f"/proc/{os.getpid()}/"
    if path.startswith(me):
        return "/proc/self/" + path[len(me) :]
    parts = path.split("/")
    if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit():
        parts[2] = "<pid>"
        return "/".join(parts)
    return path


def audit(collections: int) -> dict[str, Any]:
    all_subjects = subjects.build_main()
    psc, oc = PsutilCounter(), OpenCounter()
    psc.install()
    found: dict[str, Any] = {}
    try:
        for s in all_subjects:
            s.collect()  # warm-up, uncounted
            per: list[dict[str, Any]] = []
            for _ in range(collections):
                with counting(psc, oc):
                    s.collect()
                per.append({"calls": list(psc.calls), "paths": [normalise(p) for p in oc.paths]})
            opens = [len(p["paths"]) for p in per]
            calls = [len(p["calls"]) for p in per]
            first = per[-1]
            found[s.name] = {
                "group": s.group,
                "psutil_calls": calls,
                "psutil_distinct": len(set(first["calls"])),
                "psutil_breakdown": dict(Counter(first["calls"])),
                "opens": opens,
                "frequency_reads": [sum(map(is_frequency_read, p["paths"])) for p in per],
                "per_cpu_opens": [sum(map(is_per_cpu, p["paths"])) for p in per],
                "paths": dict(Counter(first["paths"]).most_common()),
                "distinct_paths": len(set(first["paths"])),
            }
    finally:
        psc.uninstall()
    return found


def strace_marked(collections: int) -> None:
    """Collections between marker opens, for a parent that runs this under strace."""
    all_subjects = subjects.build_main()
    for s in all_subjects:
        s.collect()
        _mark(f"begin/{s.name}/{collections}/{os.getpid()}")
        for _ in range(collections):
            s.collect()
        _mark(f"end/{s.name}")


def _mark(label: str) -> None:
    # The path does not exist: only the attempt is wanted, in strace's log.
    with contextlib.suppress(OSError):
        os.close(os.open(f"{MARK}/{label}", os.O_RDONLY))


def parse_strace(text: str) -> dict[str, dict[str, Any]]:
    """Opens per collection for each subject, from ``strace -f -e trace=open,openat`` output."""
    found: dict[str, dict[str, Any]] = {}
    current: str | None = None
    n, pid = 1, ""
    paths: list[str] = []
    for line in text.splitlines():
        if MARK in line:
            label = line.split(MARK + "/", 1)[1].split('"', 1)[0]
            kind, _, rest = label.partition("/")
            if kind == "begin":
                current, count, pid = rest.split("/")
                n, paths = int(count), []
            elif current is not None:
                found[current] = {
                    "opens": len(paths) / n,
                    "frequency_reads": sum(map(is_frequency_read, paths)) / n,
                    "per_cpu_opens": sum(map(is_per_cpu, paths)) / n,
                    "paths": {
                        k: v / n
                        for k, v in Counter(normalise_any(p, pid) for p in paths).most_common()
                    },
                }
                current = None
            continue
        # A call split by another thread ends in a "resumed" line without the path.
        if current is not None and "open" in line and '"' in line:
            paths.append(line.split('"', 2)[1])
    return found


def normalise_any(path: str, pid: str) -> str:
    parts = path.split("/")
    if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit():
        parts[2] = "self" if parts[2] == pid else "<pid>"
    return "/".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("audit", "strace"), required=True)
    parser.add_argument("--collections", type=int, default=3)
    args = parser.parse_args()
    idle = subjects.IdleThreads()
    idle.resize(configs.WITH_THREADS_N)
    if args.mode == "audit":
        json.dump(audit(args.collections), sys.stdout)
    else:
        strace_marked(args.collections)
    idle.resize(0)


if __name__ == "__main__":
    main()
