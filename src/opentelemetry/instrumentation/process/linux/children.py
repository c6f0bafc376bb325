"""The descendants of a process, from each task's ``children`` file: no scan of /proc.

``/proc/<pid>/task/<tid>/children`` lists the pids whose parent is that task
(``CONFIG_PROC_CHILDREN``, on in common distribution kernels). A process
forked by a thread other than the main one is listed under that thread, so
every task of a process is read. psutil's ``Process.children()`` reads
``/proc/<pid>/stat`` of every process on the host instead, so its cost grows
with the host, not with the tree.

A process that exits while it is being listed is skipped: its own children,
if any, are then not found in this listing. No file descriptor outlives a call.
"""

from __future__ import annotations

import os

__all__ = ["child_pids", "descendant_pids"]


def _read_children(path: str) -> list[int]:
    # os.open and os.read: no file object to build, for a file of a few bytes.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = chunk = os.read(fd, 4096)
        while chunk:  # a task with hundreds of children: more than one read
            chunk = os.read(fd, 4096)
            data += chunk
    finally:
        os.close(fd)
    return [int(p) for p in data.split()]


def child_pids(pid: int) -> list[int]:
    """Pids of the direct children of process ``pid``, in the kernel's order, each once.

    Raises ``OSError`` when the kernel has no ``children`` file (or ``/proc``
    hides it), read on ``pid``'s main task; ``ProcessLookupError`` when ``pid``
    has gone. A thread that exits during the listing is skipped.
    """
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    # The main task first: its file must exist, or the kernel lacks the feature.
    found = _read_children(f"{base}/{pid}/children")
    for name in tids:
        if name == str(pid):
            continue
        try:
            found.extend(_read_children(f"{base}/{name}/children"))
        except (FileNotFoundError, ProcessLookupError):  # the thread exited
            continue
    return list(dict.fromkeys(found))


def descendant_pids(pid: int) -> list[tuple[int, int]]:
    """``(pid, parent pid)`` of every descendant of ``pid``, parents before their children.

    Breadth first: the children of ``pid``, then theirs, and so on. Raises
    ``OSError`` as :func:`child_pids` does for ``pid`` itself; a descendant
    that exits or may not be listed is skipped with its subtree.
    """
    out: list[tuple[int, int]] = []
    seen = {pid}
    level = [(c, pid) for c in child_pids(pid)]
    while level:
        following: list[tuple[int, int]] = []
        for child, parent in level:
            if child in seen:  # a pid reused during the walk: never loop
                continue
            seen.add(child)
            out.append((child, parent))
            try:
                following.extend((c, child) for c in child_pids(child))
            except OSError:  # exited, or hidden from us
                continue
        level = following
    return out
