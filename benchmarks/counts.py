"""Exact counts per collection: files opened (and which twice), psutil calls, frequency reads.

Counting runs in child processes, so that no counting code runs while timing (an
audit hook cannot be removed once added):

    python benchmarks/counts.py audit 2     # JSON on stdout
    strace -f -e trace=open,openat,openat2 -o FILE python benchmarks/counts.py strace 2

``audit``: ``sys.addaudithook`` records every ``open`` and directory listing, and
psutil's public functions and ``Process`` methods are wrapped to count each
outermost call (the real function runs). An audit hook cannot see files opened
from C (glibc's ``sysconf`` reading ``/sys/devices/system/cpu/online``), so
``strace``, where installed, counts the same collections again between marker
opens of ``/__bench_mark__/...``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
MARK = "/__bench_mark__"
IDLE_THREADS = 8


@dataclass(frozen=True)
class Count:
    """One subject's reads in one collection (the most over the counted collections)."""

    subject: str
    group: str
    opens: int
    twice: dict[str, int]
    """Files opened more than once in one collection, and how often."""
    paths: dict[str, int]
    """Every path opened, per-process and per-thread paths folded."""
    psutil_calls: dict[str, int]
    frequency_reads: int
    strace_opens: float | None = None
    strace_twice: dict[str, float] | None = None


def is_frequency_read(path: str) -> bool:
    """Opens that read CPU frequency: sysfs cpufreq files, or /proc/cpuinfo."""
    return path == "/proc/cpuinfo" or ("/sys/devices/system/cpu" in path and "cpufreq" in path)


def normalise(path: str, pid: int) -> str:
    """This process's /proc/<pid>/ as /proc/self/; other pids stay distinct files."""
    return path.replace(f"/proc/{pid}/", "/proc/self/")


def fold(path: str) -> str:
    """One row for the files of every process and every thread."""
    path = re.sub(r"^/proc/\d+/", "/proc/<pid>/", path)
    return re.sub(r"/task/\d+/", "/task/<tid>/", path)


def count_of(name: str, group: str, per: list[tuple[list[str], list[str]]]) -> Count:
    """From (paths, psutil calls) of each counted collection: the worst one."""
    paths, calls = max(per, key=lambda p: len(p[0]))
    seen = Counter(paths)
    return Count(
        subject=name,
        group=group,
        opens=len(paths),
        twice={p: n for p, n in seen.items() if n > 1},
        paths=dict(Counter(fold(p) for p in paths).most_common()),
        psutil_calls=dict(Counter(calls)),
        frequency_reads=sum(map(is_frequency_read, paths)),
    )


class Recorder:
    """Opens (audit hook) and outermost psutil calls, while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.paths: list[str] = []
        self.calls: list[str] = []
        self._depth = 0
        sys.addaudithook(self._hook)
        _wrap_psutil(self._wrap)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        # An int argument is a descriptor already open: no open.
        wanted = self.active and event in ("open", "os.listdir", "os.scandir")
        if wanted and args and isinstance(args[0], (str, bytes)):
            self.paths.append(normalise(os.fsdecode(args[0]), os.getpid()))

    def _wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)  # keeps psutil's oneshot() cache hooks
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active and self._depth == 0:
                self.calls.append(label)
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1

        return wrapper

    @contextlib.contextmanager
    def recording(self) -> Iterator[tuple[list[str], list[str]]]:
        self.paths, self.calls = [], []
        self.active = True
        try:
            yield self.paths, self.calls
        finally:
            self.active = False


def _wrap_psutil(wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> None:
    for name, obj in list(vars(psutil).items()):
        if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == "psutil":
            setattr(psutil, name, wrap(f"psutil.{name}", obj))
    for name, obj in list(vars(psutil.Process).items()):
        if not name.startswith("_") and inspect.isfunction(obj) and name != "oneshot":
            setattr(psutil.Process, name, wrap(f"Process.{name}", obj))


def audit(collections: int) -> list[Count]:
    import configs

    recorder = Recorder()
    found = []
    for s in configs.build_counted():
        s.warm_up()
        per = []
        for _ in range(collections):
            with recorder.recording() as got:
                s.collect()
            per.append(got)
        found.append(count_of(s.name, s.group, per))
        s.close()
    return found


def strace_marked(collections: int) -> None:
    """The same collections between marker opens, for a parent running this under strace."""
    import configs

    for s in configs.build_counted():
        s.warm_up()
        _mark(f"begin/{s.name}/{collections}/{os.getpid()}")
        for _ in range(collections):
            s.collect()
        _mark(f"end/{s.name}")
        s.close()


def _mark(label: str) -> None:
    with contextlib.suppress(OSError):  # the path does not exist: the attempt is logged
        os.close(os.open(f"{MARK}/{label}", os.O_RDONLY))


def parse_strace(text: str) -> dict[str, tuple[float, dict[str, float]]]:
    """Per subject: opens per collection, and the files opened more than once per collection."""
    found: dict[str, tuple[float, dict[str, float]]] = {}
    current, n, pid, paths = "", 1, 0, Counter[str]()
    for line in text.splitlines():
        if MARK in line:
            kind, _, rest = line.split(MARK + "/", 1)[1].split('"', 1)[0].partition("/")
            if kind == "begin":
                current, count, pid_text = rest.split("/")
                n, pid, paths = int(count), int(pid_text), Counter()
            elif current:
                twice = {p: k / n for p, k in paths.items() if k > n}
                found[current] = (sum(paths.values()) / n, twice)
                current = ""
        elif current and "open" in line and '"' in line:  # "resumed" lines carry no path
            paths[normalise(line.split('"', 2)[1], pid)] += 1
    return found


def measure(collections: int) -> list[Count]:
    """Counts from child processes: the audit hook always, strace when installed."""
    script = str(Path(__file__).resolve())
    out = subprocess.run(
        [sys.executable, script, "audit", str(collections)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    found = [Count(**row) for row in json.loads(out.stdout)]
    traced = _strace(script, collections)
    return [_merge(c, traced.get(c.subject)) for c in found]


def _merge(c: Count, traced: tuple[float, dict[str, float]] | None) -> Count:
    if traced is None:
        return c
    return Count(**{**asdict(c), "strace_opens": traced[0], "strace_twice": traced[1]})


def _strace(script: str, collections: int) -> dict[str, tuple[float, dict[str, float]]]:
    strace = shutil.which("strace")
    if not strace or not sys.platform.startswith("linux"):
        return {}
    with tempfile.TemporaryDirectory(prefix="bench-strace-") as tmp:
        log = Path(tmp) / "strace.log"
        trace = [strace, "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(log)]
        child = [sys.executable, script, "strace", str(collections)]
        done = subprocess.run([*trace, "--seccomp-bpf", *child], capture_output=True, timeout=600)
        if done.returncode != 0:  # an older strace, or seccomp refused: plain ptrace
            done = subprocess.run([*trace, *child], capture_output=True, timeout=900)
        return parse_strace(log.read_text()) if done.returncode == 0 else {}


def main() -> None:
    sys.path.insert(0, str(HERE))
    import crowds

    mode, collections = sys.argv[1], int(sys.argv[2])
    idle = crowds.IdleThreads()
    idle.resize(IDLE_THREADS)  # per-thread reads show: more threads than the cap of 10 series
    if mode == "audit":
        json.dump([asdict(c) for c in audit(collections)], sys.stdout)
    else:
        strace_marked(collections)
    idle.resize(0)


if __name__ == "__main__":
    main()
