"""The pass of supervisor mode: one per refresh lists the descendants and reads each child once.

Every children source of a refresh takes its fields from the same pass
(``children.py`` declares the sources, and gives the pass the per-child ones);
the pass reads only what the enabled sources need. Loaded at the first read
of a children source: a process that does not supervise never imports it.
Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import psutil

from ..linux import children as linux_children
from ..options import TREE_PARENT
from ..platforms import ON_LINUX
from ..probes.reaps import reaps
from .base import ReadContext
from .child_exits import FIRST_MINUTE
from .child_reads import ChildReading, Gone, Row, identity, read_first, read_rest
from .child_slots import Child, Pass, Tree
from .child_state import KEPT, REAPING, TREE, PerChild, wanted

try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None  # type: ignore[assignment]


# --- finding the descendants --------------------------------------------------


def root(ctx: ReadContext) -> int:
    """The pid whose tree is reported: this process, or its parent (``tree_root``)."""
    return os.getppid() if ctx.options.tree_root == TREE_PARENT else os.getpid()


def descendants(ctx: ReadContext) -> list[tuple[int, int | None, psutil.Process | None]]:
    """``(pid, parent pid or None, psutil handle or None)`` of each descendant, parents first.

    The descendants of :func:`root`. The direct Linux read lists each task's
    ``children`` file; psutil's ``children(recursive=True)`` reads every
    process's stat file on the host.
    """
    pid = root(ctx)
    found = ctx.direct_read("children", lambda: linux_children.descendant_pids(pid))
    if found is not None:
        return [(child, parent, None) for child, parent in found]
    top = ctx.process if pid == os.getpid() else psutil.Process(pid)
    return [(p.pid, None, p) for p in top.children(recursive=True)]


# --- the pass -----------------------------------------------------------------


def read_pass(ctx: ReadContext, declared: Sequence[PerChild]) -> Pass:
    """This refresh's pass, made at its first call: ``declared`` are all per-child sources."""
    tree = ctx.state_of(KEPT)
    latest = tree.latest
    if latest is not None and latest.now == ctx.now:
        if latest.failed is not None:  # once per refresh: every children source fails alike
            raise latest.failed
        return latest
    found = tree.latest = Pass(ctx.now)
    want = wanted(ctx)
    try:
        _run(ctx, tree, found, declared, want)
    except Exception as exc:
        found.failed = exc
        raise
    return found


def _own_times(ctx: ReadContext, top: int) -> tuple[float, float, float, float]:
    """``(user, system, reaped children's user, system)`` of the root ``top``, in seconds."""
    if top != os.getpid():  # the parent: its stat file (utime, stime, cutime, cstime)
        t = psutil.Process(top).cpu_times()
        return t.user, t.system, t.children_user, t.children_system
    if _resource is not None:
        own = _resource.getrusage(_resource.RUSAGE_SELF)
        reaped = _resource.getrusage(_resource.RUSAGE_CHILDREN)
        return own.ru_utime, own.ru_stime, reaped.ru_utime, reaped.ru_stime
    t = ctx.process.cpu_times()
    return t.user, t.system, t.children_user, t.children_system


def _run(
    ctx: ReadContext, tree: Tree, out: Pass, declared: Sequence[PerChild], want: frozenset[str]
) -> None:
    # Where the tree's own memory comes from: the source of this process that each
    # part of a child's first read mirrors ("memory": process_memory, say).
    mirrors = {s.read: s.mirrors for s in declared if isinstance(s.read, str)}
    declared = [s for s in declared if s.name in want]
    with_tree = TREE in want
    # What every child is read for first: what the sources take from it, and the tree's.
    parts = {s.read for s in declared if isinstance(s.read, str)}
    memory = "pss" if "pss" in parts else "memory"  # the tree sums PSS where it is read
    if with_tree:
        parts |= {"cpu", memory}
    # The times of this process and of its reaped children first, then each
    # child, parents before their children: a child reaped during the pass is
    # then missed once (the floor holds), never counted twice.
    me = os.getpid()
    top = root(ctx)
    user, system, reaped_user, reaped_system = _own_times(ctx, top) if with_tree else (0, 0, 0, 0)
    # What this process reaped, taken before the listing: a child reaped after it
    # is listed (alive, or a zombie), and its note waits for the next pass.
    tokens = ctx.state_of(REAPING) if with_tree else []
    reaped = [note for token in tokens for note in reaps.drain(token)]
    ends = tree.ends
    cgroups = with_tree and ON_LINUX  # where OOM kills are counted
    noted: set[int] = set()
    listed = descendants(ctx)
    live: dict[int, Child] = {}
    readings: dict[int, ChildReading] = {}
    with contextlib.ExitStack() as stack:
        for pid, parent, handle in listed:
            known = tree.live.get(pid)
            try:
                started, found = identity(pid, handle)
                child = tree.known(pid, started)  # None for a new child, or a reused pid
                if child is None:
                    child = Child(pid, handle or psutil.Process(pid), parent, out.now, started)
                stack.enter_context(child.process.oneshot())
                reading = read_first(ctx, child, frozenset(parts), found)
            except (Gone, psutil.Error, OSError):  # gone, hidden, or not ours to read
                if known is not None:
                    live[pid] = known  # listed, so alive: exiting now, or hidden from us
                continue
            if child.parent is None:
                child.parent = reading.ppid
            if reading.zombie:
                if with_tree and pid not in tree.zombies:
                    status = _zombie_status(reading, child.process)
                    ends.note(pid, child.rss, child.cgroup, out.now, child.parent == me, status)
                    noted.add(pid)
                tree.zombies.add(pid)
            else:
                live[pid] = child
                if cgroups and out.now - child.first_seen < FIRST_MINUTE:
                    child.cgroup = ends.cgroup_of(pid)  # a worker may move itself at first
                resident = reading.pss if reading.pss is not None else reading.memory
                child.rss = int(getattr(resident, "rss", 0) or 0)
            readings[pid] = reading
            if with_tree and reading.cpu is not None:
                t = reading.cpu
                user += t.user + getattr(t, "children_user", 0.0)
                system += t.system + getattr(t, "children_system", 0.0)
        if with_tree:
            for pid, gone in tree.live.items():  # gone, a zombie, or replaced by a reused pid
                if live.get(pid) is not gone and pid not in noted:
                    ends.note(pid, gone.rss, gone.cgroup, out.now, gone.parent == me)
            kept_cgroups = (c.cgroup for c in live.values()) if cgroups else ()
            ends.count(out.now, reaped, tree.zombies, kept_cgroups, reaps.active, cgroups)
        tree.zombies &= {pid for pid, _, _ in listed}
        # Every listed process that is not a zombie is alive, read or not.
        out.alive = len(listed) - len(tree.zombies)
        tree.give_slots(live, top, out.now)
        # A helper reporting its parent's tree (tree_root="parent") is not one of the children.
        kept = sorted(
            (c for c in live.values() if c.pid in readings and c.pid != me), key=lambda c: c.slot
        )
        cap = ctx.options.max_children
        if len(kept) > cap:
            if not tree.cap_warned:
                tree.cap_warned = True
                ctx.faults.warning(
                    ("children", "cap"),
                    "process metrics: %d child processes, more than max_children=%d; the "
                    "%d lowest slots are reported one by one, and the tree totals count them "
                    "all. This is logged once.",
                    len(kept),
                    cap,
                    cap,
                )
            kept = kept[:cap]
        if declared:
            for child in kept:
                rows = read_rest(ctx, child, readings[child.pid], declared, out.now)
                if rows is not None:
                    _store(out, rows)
    tree.live = live
    if with_tree:
        out.times = (user + reaped_user, system + reaped_system)
        kind = "pss" if memory == "pss" else "rss"
        own = _own_memory(ctx, kind, top, ctx.needed(mirrors[memory], kind))
        if own is not None:
            out.memory = (kind, own + sum(_memory(r, kind) for r in readings.values()))


def _zombie_status(reading: ChildReading, process: psutil.Process) -> int | None:
    """A zombie's wait status, from its stat file where it was read directly; else ``None``.

    The kernel shows 0 to a reader that may not trace the zombie: 0 is
    believed only from root, or of a zombie of this process's user.
    """
    found = reading.proc_stat.exit_code if reading.proc_stat is not None else None
    if found != 0:
        return found
    if os.geteuid() == 0:
        return 0
    try:
        uids, gids = process.uids(), process.gids()
    except (psutil.Error, OSError):
        return None
    me, group = os.geteuid(), os.getegid()
    return 0 if {*uids, me} == {me} and {*gids, group} == {group} else None


def _store(out: Pass, rows: list[Row]) -> None:
    """One child's points into the pass."""
    fields = out.fields
    for source, name, key, value in rows:
        found = fields.get(source)
        if found is None:
            found = fields[source] = {}
        target = found.get(name)
        if target is None:
            target = found[name] = {}
        target[key] = value


def _memory(reading: ChildReading, kind: str) -> int:
    """A child's PSS or RSS, 0 where it was not read (a zombie, or one we may not read)."""
    read = reading.pss if kind == "pss" else reading.memory  # the part of the first read
    return int(getattr(read, kind, None) or 0)


def _own_memory(ctx: ReadContext, kind: str, top: int, own: float | None) -> int | None:
    """The ``kind`` memory of the root ``top`` (this process, or its parent).

    ``own`` is this process's, read in this refresh where its source ran.
    """
    if top == os.getpid() and own is not None:
        return int(own)  # reading smaps again would cost a second walk of its mappings
    try:
        process = ctx.process if top == os.getpid() else psutil.Process(top)
        if kind == "pss":
            return int(getattr(process.memory_full_info(), "pss", 0)) or None
        return int(process.memory_info().rss)
    except (psutil.Error, OSError):
        return None
