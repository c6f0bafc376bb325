"""Real cgroups for the tests, made and read by the test itself (not by the package).

:func:`child_cgroup` creates a cgroup under this process's own one, in a v1
controller (``cpu``, ``cpuacct``, ``memory``) or in the v2 hierarchy
(``unified``), and always removes it: it kills what is left inside (only the
test's own processes can be there), waits for it to empty, then ``rmdir``.

:class:`Child` runs ``tests/support/cgroupchild.py``, which does what the test
asks one stdin line at a time and answers one JSON line each. It uses the
package's own code from inside the cgroup.

The test reads the kernel's files itself (:func:`flat`, :func:`number`,
:func:`total`), with its own parsing, as the truth to hold the package's
readings against; :func:`memory_limit`, :func:`cpu_quota` and
:func:`available_cpus` find this process's limits their own way (the mounts
from /proc/self/mountinfo, the place from /proc/self/cgroup).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CGROUP_ROOT = Path("/sys/fs/cgroup")
CHILD_SCRIPT = Path(__file__).with_name("cgroupchild.py")
ON_LINUX = sys.platform.startswith("linux")


def own_folder(controller: str) -> Path | None:
    """This process's cgroup folder for a v1 controller, or v2 as ``unified``."""
    if not ON_LINUX:
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        if controller == "unified" and hier == "0":
            mount = CGROUP_ROOT / "unified"
        elif controller in controllers.split(","):
            mount = CGROUP_ROOT / controller
        else:
            continue
        folder = mount / path.lstrip("/")
        return folder if (folder / "cgroup.procs").is_file() else None
    return None


def require(controller: str) -> Path:
    """The folder to create a test cgroup in; skips the test when that cannot be done."""
    if not ON_LINUX:
        pytest.skip("cgroups are Linux only")
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup and moving a process into it needs root")
    folder = own_folder(controller)
    if folder is None:
        pytest.skip(f"no mounted cgroup hierarchy for {controller!r} here")
    return folder


class Cgroup:
    """A cgroup folder that a test created."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, name: str, value: str) -> None:
        (self.folder / name).write_text(value)

    def read(self, name: str) -> bytes:
        return (self.folder / name).read_bytes()

    def add(self, pid: int) -> None:
        """Move process ``pid`` into the cgroup."""
        self.write("cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        return {int(p) for p in self.read("cgroup.procs").split()}


@contextlib.contextmanager
def child_cgroup(controller: str) -> Iterator[Cgroup]:
    """A new cgroup under this process's own one, removed afterwards whatever happens."""
    parent = require(controller)
    folder = parent / f"otel-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield Cgroup(folder)
    finally:
        _remove(folder)


@contextlib.contextmanager
def nested_cgroup(parent: Cgroup) -> Iterator[Cgroup]:
    """A new cgroup inside ``parent`` (a test's own), removed afterwards whatever happens."""
    folder = parent.folder / f"inner-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield Cgroup(folder)
    finally:
        _remove(folder)


def _remove(folder: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while folder.exists():
        with contextlib.suppress(FileNotFoundError):
            for pid in (folder / "cgroup.procs").read_text().split():
                # Only the test's own processes were put in this new cgroup.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def flat(data: bytes) -> dict[str, int]:
    """A flat-keyed kernel file (``key value`` lines) as a dict, parsed by the test."""
    return {k.decode(): int(v) for k, v in (line.split() for line in data.splitlines())}


def number(data: bytes) -> int:
    return int(data.strip())


def total(data: bytes, kind: str) -> int:
    """The ``total=`` of the ``kind`` line of a pressure file, parsed by the test."""
    for line in data.decode().splitlines():
        name, *pairs = line.split()
        if name == kind:
            return int(dict(p.split("=") for p in pairs)["total"])
    raise AssertionError(f"no {kind} line in {data!r}")


def between(low: float, value: float, high: float) -> bool:
    return low <= value <= high


class Child:
    """A Python child process running ``cgroupchild.py``, asked one command at a time."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        env = dict(os.environ)
        if "MUTANT_UNDER_TEST" in env:
            # Under mutmut, the original package: its larger copy (every mutant of every
            # function) would take a memory-limited child over its limit.
            for name in ("MUTANT_UNDER_TEST", "PYTHONPATH"):
                env.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.pid = self.proc.pid

    def ask(self, command: str) -> Any:
        """Send ``command``, return the child's JSON answer."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(self.timeout):
                raise TimeoutError(f"child gave no answer to {command!r} in {self.timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child exited ({self.proc.wait()}) on {command!r}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# cgroup v1 reports "no limit" as a huge page-aligned number.
V1_UNLIMITED = 1 << 60


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mount point, super options) of every cgroup mount."""
    found: list[tuple[str, Path, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fstype, Path(fields[4]), set(options.split(","))))
    return found


def own_dir(controller: str) -> tuple[Path, Path] | None:
    """(mount point, this process's folder) of ``controller``'s cgroup, or None.

    A v1 hierarchy that carries the controller is preferred; else the v2
    hierarchy when it has the controller enabled.
    """
    places: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["" if hier == "0" else hier]:
            places[name] = path
    for fstype, mount, options in _mounts():
        if fstype == "cgroup" and controller in options and controller in places:
            return mount, mount / places[controller].lstrip("/")
    for fstype, mount, _options in _mounts():
        if fstype == "cgroup2" and "" in places:
            leaf = mount / places[""].lstrip("/")
            enabled = _read(mount / "cgroup.controllers") or ""
            if controller in enabled.split():
                return mount, leaf
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _up_to_the_mount(controller: str) -> list[Path]:
    """This process's cgroup folder of ``controller`` and its ancestors up to the mount."""
    place = own_dir(controller)
    if place is None:
        return []
    mount, leaf = place
    folders = [leaf, *leaf.parents]
    return folders[: folders.index(mount) + 1] if mount in folders else folders


def memory_limit() -> int | None:
    """The tightest cgroup memory limit over this process's cgroup and its ancestors."""
    limits: list[int] = []
    for folder in _up_to_the_mount("memory"):
        for name in ("memory.max", "memory.limit_in_bytes"):
            raw = _read(folder / name)
            if raw is not None and raw != "max" and int(raw) < V1_UNLIMITED:
                limits.append(int(raw))
    return min(limits) if limits else None


def cpu_quota() -> float | None:
    """CPUs allowed by the tightest cgroup CPU quota over this process's cgroup and ancestors."""
    quotas: list[float] = []
    for folder in _up_to_the_mount("cpu"):
        v2 = _read(folder / "cpu.max")
        if v2 is not None and not v2.startswith("max"):
            quota, period = v2.split()
            quotas.append(int(quota) / int(period))
        v1 = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if v1[0] is not None and v1[1] is not None and int(v1[0]) > 0:
            quotas.append(int(v1[0]) / int(v1[1]))
    return min(quotas) if quotas else None


def available_cpus() -> float:
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota."""
    cpus = float(len(os.sched_getaffinity(0)))
    quota = cpu_quota()
    return min(cpus, quota) if quota else cpus
