"""Small reads of this process's /proc files and of host counters that psutil lacks.

Each function opens, reads and closes on every call, and reads ``/proc/self``
(never a pid captured earlier), so a forked child always reads its own files.
"""

from __future__ import annotations

import os
from typing import Any

from ..record import Record


def thread_ids() -> list[int]:
    """Thread ids of this process: one ``/proc/self/task`` entry each.

    The per-thread read needs them; their number is then the thread count,
    at no extra read. Listing costs per thread, so the count alone comes from
    psutil, which reads one line of ``status`` whatever the number of threads.
    """
    return [int(name) for name in os.listdir("/proc/self/task")]


class Status(Record):
    """What is read of ``/proc/self/status``, in one read: each value a source wants of it."""

    __slots__ = (
        "pending",
        "threads",
    )

    def __init__(
        self,
        pending: int,
        threads: int,
    ) -> None:
        self.pending = pending
        """Pending signals: the bits set in ``SigPnd`` or ``ShdPnd`` (psutil has no API)."""
        self.threads = threads
        """``Threads``: the thread count, read with them, so that ``status`` is not read twice."""


def status() -> Status:
    """This process's :class:`Status`, from one read of ``/proc/self/status``.

    Raises ``LookupError`` if the kernel does not show those lines (unknown is not 0).
    """
    pending, found, threads = 0, 0, None
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith((b"SigPnd:", b"ShdPnd:")):
                pending |= int(line.split()[1], 16)
                found += 1
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
    if found != 2 or threads is None:
        raise LookupError("SigPnd, ShdPnd or Threads not in /proc/self/status")
    return Status(bin(pending).count("1"), threads)


def page_faults() -> tuple[int, int]:
    """Host page faults since boot, ``(major, minor)``, from ``/proc/vmstat``.

    psutil has no API for them. ``pgfault`` counts every fault, major ones
    included, so minor is the difference.
    """
    counts: dict[bytes, int] = {}
    with open("/proc/vmstat", "rb") as f:
        for line in f:
            # One space a line: rpartition would agree.
            name, _, value = line.partition(b" ")  # pragma: no mutate
            if name in (b"pgfault", b"pgmajfault"):
                counts[name] = int(value)
    major = counts[b"pgmajfault"]
    return major, counts[b"pgfault"] - major


def swap_totals() -> tuple[int, int]:
    """Host swap ``(total, free)`` in bytes, from sysinfo(2): no file is opened.

    ``psutil.swap_memory()`` reads all of ``/proc/meminfo`` for these two numbers
    and all of ``/proc/vmstat`` for swap-in/out counts that no metric reports,
    and the memory and page-fault sources read both files again in the same
    collection. The kernel fills ``totalswap`` and ``freeswap`` from the same
    ``si_swapinfo()`` as the ``SwapTotal`` and ``SwapFree`` lines of
    ``/proc/meminfo``, and psutil itself falls back to sysinfo(2) without them.
    Raises ``OSError`` if the call fails or libc has no ``sysinfo``.
    """
    info = _sysinfo()
    unit = info.mem_unit or 1
    return info.totalswap * unit, info.freeswap * unit


_LOADED: list[tuple[Any, Any]] = []  # (libc's sysinfo, its struct type), once loaded


def _sysinfo() -> Any:
    """One ``struct sysinfo``, filled by the kernel."""
    # ctypes only here: the swap metrics are opt-in, and its import costs memory.
    import ctypes

    call, struct = load_sysinfo()
    info = struct()
    if call(ctypes.byref(info)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return info


def load_sysinfo() -> tuple[Any, Any]:
    """libc's sysinfo(2) and its struct type, built once: ``swap_totals()`` calls them.

    Building them imports modules (``ctypes``, and ``ctypes._layout`` from 3.14):
    call this where the source opens, not in a collection's thread, where an
    import changes ``sys.modules`` under a program that walks it.
    Raises ``OSError`` if libc has no ``sysinfo``.
    """
    if not _LOADED:
        _LOADED.append(_load_sysinfo())
    return _LOADED[0]


def _load_sysinfo() -> tuple[Any, Any]:
    import ctypes

    long, ulong = ctypes.c_long, ctypes.c_ulong
    # The kernel's struct ends with padding up to 64 bytes on 32-bit ABIs. Not
    # mutated: on 64-bit ABIs the alignment of the struct absorbs any small pad.
    pad = max(0, 20 - 2 * ctypes.sizeof(long) - ctypes.sizeof(ctypes.c_int))  # pragma: no mutate

    class Sysinfo(ctypes.Structure):
        _fields_ = (
            ("uptime", long),
            ("loads", ulong * 3),
            ("totalram", ulong),
            ("freeram", ulong),
            ("sharedram", ulong),
            ("bufferram", ulong),
            ("totalswap", ulong),
            ("freeswap", ulong),
            ("procs", ctypes.c_ushort),
            ("pad", ctypes.c_ushort),  # pragma: no mutate (padding: its name is unused)
            ("totalhigh", ulong),
            ("freehigh", ulong),
            ("mem_unit", ctypes.c_uint),
            ("_f", ctypes.c_char * pad),  # pragma: no mutate (padding: its name is unused)
        )

    try:
        call = ctypes.CDLL(None, use_errno=True).sysinfo
    except AttributeError as exc:  # a libc without it
        raise OSError(f"no sysinfo in libc: {exc}") from exc
    call.argtypes = [ctypes.POINTER(Sysinfo)]
    call.restype = ctypes.c_int
    return call, Sysinfo
