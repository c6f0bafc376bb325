"""Stable names for a boot, a host, a parent process and a group (file names, ids).

Linux reads ``/proc`` directly (psutil has no boot id); elsewhere psutil's
boot and create times stand in for them.
"""

from __future__ import annotations

import socket
from typing import NamedTuple

import psutil

from ..linux import stat
from ..platforms import ON_LINUX
from .rundir import euid

# CPython's built-in SHA-256, as the random module takes its SHA-512: hashlib
# would load OpenSSL, about 1.5 ms at every start-up, for one short hash.
try:
    from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.10, 3.11
    except ImportError:  # a build without them (FIPS, say): OpenSSL's
        from hashlib import sha256


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    # Decoded as a text file would (universal newlines), without loading the
    # ascii codec's module at start-up as a text file does.
    text = data.decode("ascii", "replace").replace("\r\n", "\n").replace("\r", "\n")
    return text.strip()


def boot_id() -> str:
    """This boot's id: ``/proc/sys/kernel/random/boot_id``, else psutil's boot time."""
    found = _read("/proc/sys/kernel/random/boot_id") if ON_LINUX else None
    return found or f"boot{int(psutil.boot_time())}"


def host_id() -> str:
    """This host's id: ``/etc/machine-id`` (where set) and the host name.

    Both: containers of one image may share a machine id, while their host
    names (a pod's name) differ.
    """
    name = socket.gethostname()
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        found = _read(path)
        if found:
            return f"{found}/{name}"
    return name


def start_time(pid: int) -> str:
    """When process ``pid`` started: clock ticks after boot on Linux, else psutil's create time.

    Raises ``OSError`` (or ``psutil.Error``) when the process is gone.
    """
    if ON_LINUX:
        return str(stat.of_process(pid).starttime)
    return f"{psutil.Process(pid).create_time():.2f}"


def parent_key(ppid: int) -> str:
    """``<boot id>-<parent pid>-<parent start time>``: one parent process, over all time.

    A parent pid of 0 (the process is pid 1 of a pid namespace: a container's
    main process) has no ``/proc`` entry: its start time is 0.
    """
    return f"{boot_id()}-{ppid}-{start_time(ppid) if ppid > 0 else 0}"


class Group(NamedTuple):
    """The processes that elect one reporter of the shared metrics.

    One service (``service``, the identity the caller gives: its name,
    namespace and environment) of one user in one cgroup, on one boot of one
    host. ``key`` hashes all of it: the name of the group's lock file.
    """

    service: str
    user: int
    cgroup: str
    key: str


def group_of(service: str) -> Group:
    """The group of this process for ``service``, whose processes share one reporter.

    Raises ``OSError`` or another error where the system cannot be read (an
    unreadable standard library after ``setuid``, say): the caller falls back.
    """
    cgroup = (_read("/proc/self/cgroup") or "") if ON_LINUX else ""
    user = euid()
    text = "\0".join((service, str(user), cgroup, boot_id(), host_id()))
    key = str(sha256(text.encode("utf-8", "replace")).hexdigest())[:32]
    return Group(service, user, _readable(cgroup), key)


def _readable(cgroup: str) -> str:
    """``/proc/self/cgroup`` as a person reads it: the v2 path alone, or the lines not at ``/``."""
    lines = cgroup.splitlines()
    if len(lines) == 1 and lines[0].startswith("0::"):
        return lines[0][3:]
    placed = [line for line in lines if not line.endswith(":/")]
    return " ".join(placed) or "/"
