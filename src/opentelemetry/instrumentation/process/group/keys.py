"""Stable names for a boot, a host, a parent process and a group (file names, ids).

Linux reads ``/proc`` directly (psutil has no boot id); elsewhere psutil's
boot and create times stand in for them.
"""

from __future__ import annotations

import os
import socket
import sys

import psutil

from ..linux import stat
from ..platforms import ON_LINUX
from ..record import Record
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


def ended(pid: int, started: str) -> bool:
    """Whether process ``pid``, which started at ``started`` (:func:`start_time`), has ended.

    Gone, its pid now another process's, or a zombie: ended, its parent yet to
    reap it (uWSGI's master does so up to a second later). A zombie never runs again.
    """
    try:
        if ON_LINUX:
            found = stat.of_process(pid)
            return str(found.starttime) != started or found.state in ("Z", "X")
        return start_time(pid) != started or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except (OSError, ValueError, psutil.Error):
        return True


def parent_key(ppid: int) -> str:
    """``<boot id>-<parent pid>-<parent start time>``: one parent process, over all time.

    A parent pid of 0 (the process is pid 1 of a pid namespace: a container's
    main process) has no ``/proc`` entry: its start time is 0.
    """
    return f"{boot_id()}-{ppid}-{start_time(ppid) if ppid > 0 else 0}"


def program() -> str:
    """This program, as its command line tells it apart: ``<main script>#<hash of the rest>``.

    Read from ``sys.argv``, which the workers of a pre-fork server share: a
    forked child has its parent's, and ``multiprocessing`` gives a spawned one
    its parent's (gunicorn, uWSGI, Celery, pools, uvicorn ``--workers``). The
    script is made absolute where it is a file (two ``app.py`` in two folders
    differ); ``-c`` code is in ``sys.orig_argv`` only. A spawned worker not set
    up yet (``--multiprocessing-fork``: instrumented at its start, by
    ``opentelemetry-instrument``) has only its parent to tell it by.
    """
    argv = [str(a) for a in getattr(sys, "argv", None) or ()]
    if argv[1:2] == ["--multiprocessing-fork"]:
        ppid = os.getppid()
        return f"(spawned by pid {ppid})#{_digest(parent_key(ppid))}"
    main, rest = (argv[0], argv[1:]) if argv else ("", [])
    if main == "-c":
        rest = [str(a) for a in getattr(sys, "orig_argv", ())] or rest
    elif main and os.path.isfile(main):
        main = os.path.abspath(main)
    return f"{main or '(no command line)'}#{_digest(chr(0).join(rest))}"


def _digest(text: str) -> str:
    return str(sha256(text.encode("utf-8", "surrogateescape")).hexdigest())[:8]


class Group(Record):
    """The processes that elect one reporter of the shared metrics.

    One service (``service``, the identity the caller gives: its name,
    namespace and environment) of one user in one cgroup, on one boot of one
    host. ``key`` hashes all of it: the name of the group's lock file.
    """

    __slots__ = (  # noqa: RUF023 - in their order: the repr and _asdict follow it
        "service",
        "user",
        "cgroup",
        "key",
    )

    def __init__(
        self,
        service: str,
        user: int,
        cgroup: str,
        key: str,
    ) -> None:
        self.service = service
        self.user = user
        self.cgroup = cgroup
        self.key = key


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
