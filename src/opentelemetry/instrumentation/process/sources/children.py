"""Sources about the descendants of this process (supervisor mode): each child, and the tree.

One *pass* per refresh lists the descendants (on Linux from each task's
``children`` file, else psutil's ``children(recursive=True)``), gives each new
one a slot, and reads each child once, inside its own ``Process.oneshot()``.
Every children source of that refresh takes its fields from the same pass;
the pass reads only what the enabled sources need (each source's open hook
says it is wanted).

Who each child is, and its slot: ``child_slots.py``. Per-child points are
given for the ``max_children`` lowest slots; the tree totals count every child.

Faults: a child that exits during its read drops its points for that
collection; a read the master may not make (another user, hidepid, a process
not dumpable after ``setuid``) drops that read's points of that child. Both are
logged at most once per fault period.

Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import psutil

from ..group import SLOT_ATTRIBUTE
from ..linux import children as linux_children
from ..options import TREE_PARENT
from ..platforms import LINUX, POSIX, WINDOWS
from .base import Key, ReadContext, Reading, Source, State, Value, attributes
from .child_reads import ChildReading, Gone, Row, identity, read_first, read_rest
from .child_slots import Child, Tree

try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None  # type: ignore[assignment]

_WANTED: State[set[str]] = State("children_wanted", lambda _ctx: set())
"""The names of the children sources of this process, kept by their open hooks."""

_CHILD = (SLOT_ATTRIBUTE, "process.pid")  # process.pid is None unless child_pid=True
_ONE = attributes(*_CHILD)
_MODE = attributes(*_CHILD, "cpu.mode")
_DIRECTION = attributes(*_CHILD, "disk.io.direction")
_SWITCH = attributes(*_CHILD, "process.context_switch.type")
_FAULT = attributes(*_CHILD, "system.paging.fault.type")
_TREE_MODE = attributes("cpu.mode")
_MEASURE = attributes("process_metrics.memory.measure")


class _Pass:
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


# --- the wanted sources -------------------------------------------------------


def _wants(name: str) -> Callable[[ReadContext], bool]:
    def open_(ctx: ReadContext) -> bool:
        if not ctx.options.children:
            return False
        ctx.state_of(_WANTED).add(name)
        return True

    return open_


def _unwants(name: str) -> Callable[[ReadContext], None]:
    def close(ctx: ReadContext) -> None:
        ctx.state_of(_WANTED).discard(name)

    return close


def wanted(ctx: ReadContext) -> frozenset[str]:
    """The children sources this process reads."""
    names: set[str] = ctx.state_of(_WANTED)
    return frozenset(names)


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


_TREE: State[Tree] = State("children_slots", lambda _ctx: Tree())
"""The children, their slots and the counts, between refreshes."""
_PASS: State[list[_Pass]] = State("children_pass", lambda _ctx: [])
"""The pass of the latest refresh (at most one): every children source of it reads that one."""


def _read_pass(ctx: ReadContext) -> _Pass:
    latest = ctx.state_of(_PASS)
    if latest and latest[0].now == ctx.now:
        if latest[0].failed is not None:  # once per refresh: every children source fails alike
            raise latest[0].failed
        return latest[0]
    found = _Pass(ctx.now)
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


def _run(ctx: ReadContext, out: _Pass, want: frozenset[str]) -> None:
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


def _store(out: _Pass, rows: list[Row]) -> None:
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
    out: _Pass,
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


# --- the sources --------------------------------------------------------------


def _source_reader(name: str) -> Callable[[ReadContext], Reading]:
    def read(ctx: ReadContext) -> Reading:
        return _read_pass(ctx).fields.get(name, {})

    return read


def _source(
    name: str,
    fields: Mapping[str, type[Key] | None],
    cost: str,
    *,
    platforms: frozenset[str] | None = None,
    stateful: bool = False,
    available: Callable[[], bool] | None = None,
    needs: tuple[str, ...] = (),
) -> Source:
    extra: dict[str, Any] = {}
    if platforms is not None:
        extra["platforms"] = platforms
    if available is not None:
        extra["available"] = available
    return Source(
        name,
        _source_reader(name),
        dict(fields),
        cost,
        stateful=stateful,
        open=_wants(name),
        close=_unwants(name),
        after_fork=_forget_the_parents_tree,
        needs=needs,
        direct=("children",),
        keeps=(_WANTED, _TREE, _PASS),
        **extra,
    )


def _forget_the_parents_tree(ctx: ReadContext, _forked_at: float | None) -> None:
    # A forked child starts a tree of its own: its parent's children, slots,
    # counts and CPU floor are not its own (the wanted sources are: same options).
    ctx.drop(_TREE)
    ctx.drop(_PASS)
    ctx.floors.pop("children_tree", None)


def _has(name: str) -> Callable[[], bool]:
    return lambda: hasattr(psutil.Process, name)


_PROCESS_IO = (POSIX | WINDOWS) - {"darwin", "sunos"}
_PER_CHILD = "per child, in its oneshot"

SOURCES: tuple[Source, ...] = (
    _source(
        "children_cpu",
        {"cpu_time": _MODE, "cpu_utilization": _MODE},
        f"/proc/<pid>/stat {_PER_CHILD} (shared with the tree)",
        stateful=True,
    ),
    _source("children_memory", {"rss": _ONE, "vms": _ONE}, f"/proc/<pid>/statm {_PER_CHILD}"),
    _source(
        "children_memory_full",
        {"pss": _ONE, "uss": _ONE},
        f"/proc/<pid>/smaps_rollup {_PER_CHILD}: its cost grows with the RSS of the child",
        platforms=LINUX,
    ),
    _source(
        "children_io",
        {"bytes": _DIRECTION, "operations": _DIRECTION},
        f"/proc/<pid>/io {_PER_CHILD}",
        platforms=_PROCESS_IO,
        available=_has("io_counters"),
    ),
    _source("children_num_threads", {"count": _ONE}, f"/proc/<pid>/status {_PER_CHILD}"),
    _source(
        "children_num_fds",
        {"count": _ONE},
        f"lists /proc/<pid>/fd {_PER_CHILD}",
        platforms=POSIX,
        available=_has("num_fds"),
    ),
    _source(
        "children_context_switches",
        {"context_switches": _SWITCH},
        f"/proc/<pid>/status {_PER_CHILD} (the main thread only on Linux, as psutil counts)",
    ),
    _source(
        "children_paging_faults",
        {"paging_faults": _FAULT},
        "/proc/<pid>/stat per child, read directly (psutil has no API)",
        platforms=LINUX,
    ),
    _source(
        "children_uptime", {"uptime": _ONE}, "none: the create time of each child is read once"
    ),
    _source(
        "children_tree",
        {
            "cpu_time": _TREE_MODE,
            "count": None,
            "exits": None,
            "restarts": None,
            "memory": _MEASURE,
        },
        "getrusage(2) twice, lists the children file of each task (elsewhere: psutil reads every "
        "process on the host), /proc/<pid>/stat and statm per child",
        stateful=True,
        needs=("process_memory", "process_smaps"),  # this process's own RSS or PSS
    ),
)

_KEY_TYPES: dict[tuple[str, str], type[Key]] = {
    (source.name, name): key
    for source in SOURCES
    for name, key in source.fields.items()
    if key is not None
}
"""The key type of each per-child field: a child's point is stored under it."""
