"""Pressure stall information (PSI): total time tasks stalled on cpu, memory and io.

Reads ``/proc/pressure/<resource>``, or ``<resource>.pressure`` in a non-root
v2 cgroup (scope ``"cgroup"``, else ``"host"``): the ``total=`` of the ``some``
and ``full`` lines, in microseconds, returned in seconds. At the host the cpu
``full`` line is left out (undefined there), and so is a resource whose file
is absent. Details: docs/design.md, "Pressure stall information". Nothing here
knows about OpenTelemetry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from .cgroup import CgroupPaths
from .files import KernelFile, Values, available

PROC_PRESSURE = Path("/proc/pressure")
RESOURCES = ("cpu", "memory", "io")
SCOPE_CGROUP = "cgroup"
SCOPE_HOST = "host"


def field(resource: str, kind: str) -> str:
    """The name of a total stall time field (seconds), e.g. ``pressure.cpu.some``."""
    return f"pressure.{resource}.{kind}"


class PressureFiles:
    """The PSI files to read at each collection, and whose stalls they count."""

    __slots__ = ("files", "scope")

    def __init__(self, scope: str, files: tuple[KernelFile, ...]) -> None:
        self.scope = scope
        """``"cgroup"`` (the process's v2 cgroup) or ``"host"`` (/proc/pressure)."""
        self.files = files
        """One per resource whose file exists; fields ``pressure.<resource>.<some|full>``."""


def discover_pressure(paths: CgroupPaths, proc_pressure: Path = PROC_PRESSURE) -> PressureFiles:
    """Find the PSI files, once (at ``instrument()``; a fork keeps them). Never raises."""
    try:
        own = _own_v2_cgroup(paths)
    except OSError:
        own = None
    if own is not None:
        files = available([_file(own / f"{r}.pressure", r, full=True) for r in RESOURCES])
        if files:
            return PressureFiles(SCOPE_CGROUP, files)
    host = [_file(proc_pressure / r, r, full=r != "cpu") for r in RESOURCES]
    return PressureFiles(SCOPE_HOST, available(host))


def _own_v2_cgroup(paths: CgroupPaths) -> Path | None:
    # The root cgroup's pressure is the host's. A non-root cgroup has a
    # cgroup.type file, also when a cgroup namespace shows it as "/".
    unified = paths.unified
    if unified is None or not (unified.own / "cgroup.type").is_file():
        return None
    return unified.own


def _file(path: Path, resource: str, *, full: bool) -> KernelFile:
    kinds = ("some", "full") if full else ("some",)
    return KernelFile(str(path), _parser(resource, kinds), tuple(field(resource, k) for k in kinds))


def _parser(resource: str, kinds: tuple[str, ...]) -> Callable[[bytes], Values]:
    some = field(resource, "some")
    full = field(resource, "full") if "full" in kinds else None
    # A partial, not a closure: one object, not four, for every full collection to walk.
    return functools.partial(_parse, some, full)


def _parse(some: str, full: str | None, data: bytes) -> Values:
    t = data.split()
    # Today's format: "some avg10= avg60= avg300= total=", then the same for "full".
    if len(t) == 10 and t[0] == b"some" and t[5] == b"full" and t[4][:6] == t[9][:6] == b"total=":
        out: Values = {some: int(t[4][6:]) / 1e6}
        if full is not None:
            out[full] = int(t[9][6:]) / 1e6
        return out
    return _by_lines(data.split(b"\n"), some, full)


def _by_lines(lines: list[bytes], some: str, full: str | None) -> Values:
    """Any other layout: a ``some`` line, maybe a ``full`` line, ``total=`` anywhere in each."""
    if not lines[0].startswith(b"some "):
        raise ValueError("no 'some' line")
    out: Values = {some: _total(lines[0]) / 1e6}
    if full is not None and lines[1].startswith(b"full "):
        out[full] = _total(lines[1]) / 1e6
    return out


def _total(line: bytes) -> int:
    """The ``total=`` of one line, in microseconds."""
    # Not mutated: index or rindex alike, as the kernel writes one total= a line.
    at = line.index(b" total=")  # pragma: no mutate
    start = at + 7
    return int(line[start:].partition(b" ")[0])
