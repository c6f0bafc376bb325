"""Real cgroups for the tests, read and made by the test itself (not by the package).

The package reads cgroup limits in ``facts.py``; these helpers read the same
limits their own way (the mounts from /proc/self/mountinfo, the process's
place from /proc/self/cgroup), so a test can compare the two. ``sub_cgroup``
makes a real cgroup v1 child of the test process's own cgroup, with limits,
for a forked child to move into; it is removed afterwards, pass or fail.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def memory_limit() -> int | None:
    """The tightest cgroup memory limit over this process's cgroup and its ancestors."""
    place = own_dir("memory")
    if place is None:
        return None
    mount, leaf = place
    limits: list[int] = []
    for folder in [leaf, *leaf.parents]:
        for name in ("memory.max", "memory.limit_in_bytes"):
            raw = _read(folder / name)
            if raw is not None and raw != "max" and int(raw) < V1_UNLIMITED:
                limits.append(int(raw))
        if folder == mount:
            break
    return min(limits) if limits else None


def cpu_quota() -> float | None:
    """CPUs allowed by the tightest cgroup CPU quota over this process's cgroup and ancestors."""
    place = own_dir("cpu")
    if place is None:
        return None
    mount, leaf = place
    quotas: list[float] = []
    for folder in [leaf, *leaf.parents]:
        v2 = _read(folder / "cpu.max")
        if v2 is not None and not v2.startswith("max"):
            quota, period = v2.split()
            quotas.append(int(quota) / int(period))
        v1 = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if v1[0] is not None and v1[1] is not None and int(v1[0]) > 0:
            quotas.append(int(v1[0]) / int(v1[1]))
        if folder == mount:
            break
    return min(quotas) if quotas else None


def available_cpus() -> float:
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota."""
    cpus = float(len(os.sched_getaffinity(0)))
    quota = cpu_quota()
    return min(cpus, quota) if quota else cpus


@contextlib.contextmanager
def sub_cgroup(controller: str, settings: dict[str, str]) -> Iterator[Path]:
    """A new cgroup v1 child of this process's ``controller`` cgroup, set up with ``settings``.

    Yields its ``cgroup.procs`` file: a process writes its pid there to move
    in. Skips the test when that cannot be done here (not root, no v1
    hierarchy with the controller). Removed on exit; the processes moved in
    must have exited by then.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    place = own_dir(controller)
    if place is None or not (place[0] / "cgroup.procs").exists():
        pytest.skip(f"no cgroup hierarchy with the {controller} controller here")
    mount, leaf = place
    if not any(t == "cgroup" and m == mount for t, m, _ in _mounts()):
        pytest.skip(f"{controller} is a cgroup v2 controller here; this helper makes v1 groups")
    folder = leaf / f"otel-process-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a {controller} cgroup under {leaf}: {exc}")
    try:
        for name, value in settings.items():
            (folder / name).write_text(value)
        yield folder / "cgroup.procs"
    finally:
        _remove(folder)


def _remove(folder: Path) -> None:
    # A process that just exited can stay charged to the group for a moment.
    deadline = time.monotonic() + 10
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
