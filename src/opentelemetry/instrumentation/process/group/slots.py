"""Worker slots: the lowest number free among the live workers of one parent.

A worker takes slot ``n`` by holding an exclusive ``flock`` on
``<runtime dir>/slots/<parent key>/<n>.lock`` (the file holds its pid); the
kernel frees it when the worker dies, so its replacement takes the same
number. The parent key is ``<boot id>-<parent pid>-<parent start time>``. The
lock's descriptor stays open for the process's life. Races and pruning of
gone parents (at most :data:`MAX_PRUNED` per claim): docs/design.md, "Worker
slots and the election".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

try:
    import fcntl
except ImportError:  # Windows: runtime_dir() is None there, so fcntl is never used
    fcntl = None  # type: ignore[assignment]

from ..locks import ProcessLock
from . import keys
from .heldfile import HeldFile
from .rundir import (
    NOFOLLOW,
    check_private,
    open_private,
    private_dir,
    remove_if_free,
    runtime_dir,
    warn_unusable,
)

MAX_SLOTS = 4096
"""Most slots tried: far more workers than a host runs under one parent."""

_BUSY_RETRIES = 3
_BUSY_WAIT = 0.002  # seconds: a probe holds a lock for two syscalls


@dataclass(frozen=True)
class Claim:
    """A slot this process holds: ``slot`` under ``parent_key``."""

    slot: int
    parent_key: str
    held: HeldFile


_claim: Claim | None = None
_lock = ProcessLock()


def claim() -> Claim | None:
    """This process's slot, taken on the first call; ``None`` when no safe directory is usable.

    Idempotent per process. A forked child never keeps its parent's slot: at
    its first call (a pid check, which a fork from C passes too) it closes the
    inherited descriptor and takes its own.
    """
    global _claim
    with _lock.get():
        found = _claim
        if found is not None and found.held.ours():
            return found
        if found is not None:  # the parent's, inherited through a fork
            found.held.drop()
            _claim = None
        _claim = _take()
        return _claim


def _take() -> Claim | None:
    base = runtime_dir()
    if base is None:
        return None
    ppid = os.getppid()
    folder = base / "slots"
    try:
        parent_key = keys.parent_key(ppid)
        folder = base / "slots" / parent_key
        private_dir(base / "slots")
        private_dir(folder)
        for slot in range(MAX_SLOTS):
            fd = open_private(folder / f"{slot}.lock")
            try:
                if _lock_free(fd, ppid):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
                    held = HeldFile.of(fd)  # moved to a high number: fd is its now
                    fd = held.fd
                    claimed = Claim(slot, parent_key, held)
                    prune(base / "slots", keep=parent_key)
                    return claimed
            except BaseException:
                os.close(fd)  # frees the lock if it was taken
                raise
            os.close(fd)
    except (OSError, ValueError, IndexError, psutil.Error) as exc:
        warn_unusable(folder, exc)
        return None
    warn_unusable(folder, OSError(f"all {MAX_SLOTS} slots are taken"))
    return None


def _lock_free(fd: int, ppid: int) -> bool:
    """Take the lock on ``fd`` if it is free; retry briefly while a probe may hold it."""
    for attempt in range(_BUSY_RETRIES + 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if _holder(fd, ppid) is not None or attempt == _BUSY_RETRIES:
                return False
            time.sleep(_BUSY_WAIT)
    return False  # pragma: no cover - the loop returns


def _holder(fd: int, ppid: int) -> int | None:
    """The pid written in the slot file, if it is a live child of ``ppid``."""
    try:
        text = os.pread(fd, 32, 0)
        pid = int(text.strip() or b"0")
        if pid > 0 and psutil.Process(pid).ppid() == ppid:
            return pid
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def recorded_slots(parent_pid: int) -> dict[int, int]:
    """The live workers of ``parent_pid`` that hold a slot: pid -> slot.

    A slot whose lock is free is not live. The probe takes a shared lock and
    releases it at once, so it never keeps a slot from a worker for longer
    than two syscalls (see the module docstring). Empty when the parent is gone
    or no safe directory is usable.
    """
    base = runtime_dir()
    if base is None or fcntl is None:
        return {}
    try:
        folder = base / "slots" / keys.parent_key(parent_pid)
        names = os.listdir(folder)
    except (OSError, ValueError, IndexError, psutil.Error):
        return {}
    found: dict[int, int] = {}
    for name in names:
        number, _, ext = name.partition(".")
        if ext != "lock" or not number.isdigit():
            continue
        slot = int(number)
        pid = _live_holder(folder / name, parent_pid)
        if pid is not None:
            found[pid] = slot
    return found


def _live_holder(path: Path, parent_pid: int) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None
    try:
        check_private(os.fstat(fd), path, want_dir=False)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fd, parent_pid)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


MAX_PRUNED = 32
"""Most folders of dead parents removed by one claim: the cost stays bounded."""


def prune(folder: Path, keep: str) -> int:
    """Remove the slot folders of parents that are gone (another boot, or a dead pid).

    Only free lock files are removed, each while this process holds its lock:
    a worker that outlived its parent keeps its file and its folder. Returns
    how many folders were removed. Never raises.
    """
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    removed = 0
    this_boot = keys.boot_id()
    for name in names[: MAX_PRUNED * 4]:
        if name == keep or removed >= MAX_PRUNED or not _gone(name, this_boot):
            continue
        removed += _remove_free(folder / name)
    return removed


def _gone(key: str, this_boot: str) -> bool:
    """Whether the parent named by a slot folder ``key`` is gone for good."""
    boot, _, rest = key.rpartition("-")
    boot, _, ppid = boot.rpartition("-")
    if not boot or not ppid.isdigit():
        return False  # not a name this module made: left alone
    if boot != this_boot:
        return True
    if int(ppid) == 0:
        return False
    try:
        return keys.start_time(int(ppid)) != rest
    except (OSError, ValueError, IndexError, psutil.Error):
        return True  # no such process any more


def _remove_free(folder: Path) -> int:
    try:
        check_private(os.lstat(folder), folder, want_dir=True)
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        remove_if_free(folder / name)
    try:
        os.rmdir(folder)
    except OSError:
        return 0
    return 1
