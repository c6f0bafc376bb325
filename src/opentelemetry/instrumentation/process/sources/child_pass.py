"""The pass of supervisor mode: one per refresh lists the descendants and reads each child once.

Every children source of a refresh takes its fields from the same pass
(``children.py`` declares the sources); the pass reads only what the enabled
sources need. Loaded at the first read of a children source: a process that
does not supervise never imports it. Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import psutil

from ..linux import children as linux_children
from ..options import TREE_PARENT
from .base import Key, ReadContext, Value
from .child_reads import ChildReading, Gone, Row, identity, read_first, read_rest
from .child_slots import Child, Tree
from .children import _KEY_TYPES, _MEASURE, _PASS, _TREE, _TREE_MODE, wanted

try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None  # type: ignore[assignment]


class Pass:
    """What one refresh found; each children source reads its fields from it."""

    __slots__ = ("failed", "fields", "now", "targets")

    def __init__(self, now: float) -> None:
        self.now = now
        self.fields: dict[str, dict[str, Value]] = {}
        self.failed: Exception | None = None
        self.targets: dict[tuple[str, str], dict[Key, float]] = {}
        """The mappings of ``fields`` by (source, field), found once per pass."""

    def target(self, source: str, name: str) -> dict[Key, float]:
        """The mapping of field ``name`` of ``source``, made empty on first use."""
        fields = self.fields.setdefault(source, {})
        found = fields.get(name)
        if found is None:
            found = fields[name] = {}
        return found  # type: ignore[return-value]


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


def read_pass(ctx: ReadContext) -> Pass:
    latest = ctx.state_of(_PASS)
    if latest and latest[0].now == ctx.now:
        if latest[0].failed is not None:  # once per refresh: every children source fails alike
            raise latest[0].failed
        return latest[0]
    found = Pass(ctx.now)
    latest[:] = [found]
    try:
        _run(ctx, found, wanted(ctx))
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


def _run(ctx: ReadContext, out: Pass, want: frozenset[str]) -> None:
    tree = ctx.state_of(_TREE)
    with_tree = "children_tree" in want
    with_pss = "children_memory_full" in want
    need_cpu = with_tree or "children_cpu" in want
    need_memory = (with_tree and not with_pss) or "children_memory" in want
    # The times of this process and of its reaped children first, then each
    # child, parents before their children: a child reaped during the pass is
    # then missed once (the floor holds), never counted twice.
    me = os.getpid()
    top = root(ctx)
    user, system, reaped_user, reaped_system = _own_times(ctx, top) if with_tree else (0, 0, 0, 0)
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
                reading = read_first(ctx, child, need_cpu, need_memory, with_pss, found)
            except (Gone, psutil.Error, OSError):  # gone, hidden, or not ours to read
                if known is not None:
                    live[pid] = known  # listed, so alive: exiting now, or hidden from us
                continue
            if reading.zombie:
                if pid not in tree.live and pid not in tree.zombies:
                    tree.exits += 1  # exited before it was ever seen alive
                tree.zombies.add(pid)
            else:
                if child.parent is None:
                    child.parent = reading.ppid
                live[pid] = child
            readings[pid] = reading
            if with_tree and reading.times is not None:
                u, s, cu, cs = reading.times
                user, system = user + u + cu, system + s + cs
        tree.zombies &= {pid for pid, _, _ in listed}
        # Every listed process that is not a zombie is alive, read or not.
        alive = len(listed) - len(tree.zombies)
        tree.count_exits(live)
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
        for child in kept:
            rows = read_rest(ctx, child, readings[child.pid], want, out.now)
            if rows is not None:
                _store(out, rows)
    tree.live = live
    if with_tree:
        times = (user, system, reaped_user, reaped_system)
        _tree_fields(ctx, tree, alive, readings, out, times, top)


def _store(out: Pass, rows: list[Row]) -> None:
    """One child's points into the pass, each under its field's key type."""
    targets = out.targets
    for source, name, key, value in rows:
        target = targets.get((source, name))
        if target is None:
            target = targets[source, name] = out.target(source, name)
        target[_KEY_TYPES[source, name](key)] = value


def _tree_fields(
    ctx: ReadContext,
    tree: Tree,
    alive: int,
    readings: Mapping[int, ChildReading],
    out: Pass,
    times: tuple[float, float, float, float],
    top: int,
) -> None:
    user, system, reaped_user, reaped_system = times
    cpu = ctx.never_below_previous(
        "children_tree",
        {
            _TREE_MODE(("user",)): user + reaped_user,
            _TREE_MODE(("system",)): system + reaped_system,
        },
    )
    fields = out.fields.setdefault("children_tree", {})
    fields["cpu_time"] = cpu
    fields["count"] = 1 + alive
    fields["exits"] = tree.exits
    fields["restarts"] = tree.restarts
    kind = "pss" if "children_memory_full" in wanted(ctx) else "rss"
    own = _own_memory(ctx, kind, top)
    if own is not None:
        total = own + sum(getattr(r, kind) or 0 for r in readings.values() if not r.zombie)
        fields["memory"] = {_MEASURE((kind,)): total}


def _own_memory(ctx: ReadContext, kind: str, top: int) -> int | None:
    """The memory of the root ``top`` (this process, or its parent)."""
    if top == os.getpid():
        # This process's own reading of this refresh, where its source ran:
        # reading smaps again would cost a second walk of its mappings.
        own = ctx.readings.get("process_smaps" if kind == "pss" else "process_memory", {})
        value = own.get(kind)
        if isinstance(value, int):
            return value
    try:
        process = ctx.process if top == os.getpid() else psutil.Process(top)
        if kind == "pss":
            return int(getattr(process.memory_full_info(), "pss", 0)) or None
        return int(process.memory_info().rss)
    except (psutil.Error, OSError):
        return None
