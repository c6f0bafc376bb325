"""Sources about the descendants of this process (supervisor mode): each child, and the tree.

One *pass* per refresh (``child_pass.py``, loaded at the first read) lists
the descendants (on Linux from each task's ``children`` file, else psutil's
``children(recursive=True)``), gives each new one a slot, and reads each
child once, inside its own ``Process.oneshot()``.
Every children source of that refresh takes its fields from the same pass;
the pass reads only what the enabled sources need (each source's open hook
says it is wanted). The state they share: ``child_state.py``.

A per-child source is one row of ``PER_CHILD``: it gives, for each child, the
fields that a source of this process gives of this process, so that the
metrics of those fields get a point per child (``catalog.PER_CHILD``).
Who each child is, and its slot: ``child_slots.py``. Per-child points are
given for the ``max_children`` lowest slots; the tree totals count every child.

Faults: a child that exits during its read drops its points for that
collection; a read the master may not make (another user, hidepid, a process
not dumpable after ``setuid``) drops that read's points of that child. Both are
logged at most once per fault period.

Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import psutil

from ..group import SLOT_ATTRIBUTE
from ..platforms import LINUX
from . import process
from .base import DirectRead, Key, ReadContext, Reading, Source, attributes
from .child_state import KEPT, REAPING, TREE, WANTED, PerChild
from .exit_causes import EXIT

if TYPE_CHECKING:  # the pass and its records load with the first read of a children source
    from .child_slots import Pass

CHILD_ATTRIBUTES = (SLOT_ATTRIBUTE, "process.pid")
"""The attributes of every per-child point, before its own (``process.pid`` with child_pid=True)."""

_MIRRORED = {s.name: s for s in process.SOURCES}
_EMPTY: Mapping[str, str] = MappingProxyType({})


def _per_child(
    name: str,
    mirrors: str,
    read: str | Callable[[psutil.Process], object],
    points: Mapping[str, Mapping[tuple[str, ...], str]],
    cost: str,
    *,
    rates: Mapping[str, str] = _EMPTY,
    what: str = "",
    platforms: frozenset[str] | None = None,
) -> PerChild:
    """A per-child source, read where ``mirrors`` is (or on ``platforms``).

    Each field's attributes are the child's, then those of the field of ``mirrors``.
    """
    own = _MIRRORED[mirrors]
    fields = {}
    for field in (*points, *rates):
        key = own.fields[field]
        fields[field] = attributes(*CHILD_ATTRIBUTES, *(key.names if key is not None else ()))
    where = own.platforms if platforms is None else platforms
    return PerChild(
        name, mirrors, read, points, fields, rates, what or name, cost, where, own.available
    )


def _uptime(child: psutil.Process) -> float:
    return time.time() - child.create_time()


_IN_ONESHOT = "per child, in its oneshot"

PER_CHILD: tuple[PerChild, ...] = (
    _per_child(
        "children_cpu",
        "process_rusage",
        "cpu",
        {"cpu_time": {("user",): "user", ("system",): "system"}},
        f"/proc/<pid>/stat {_IN_ONESHOT} (shared with the tree)",
        rates={"cpu_utilization": "cpu_time"},
    ),
    _per_child(
        "children_memory",
        "process_memory",
        "memory",
        {"rss": {(): "rss"}, "vms": {(): "vms"}},
        f"/proc/<pid>/statm {_IN_ONESHOT}",
    ),
    _per_child(
        "children_memory_full",
        "process_smaps",
        "pss",
        {"pss": {(): "pss"}, "uss": {(): "uss"}},
        f"/proc/<pid>/smaps_rollup {_IN_ONESHOT}: its cost grows with the RSS of the child",
        platforms=LINUX,
    ),
    _per_child(
        "children_io",
        "process_io",
        lambda child: child.io_counters(),
        {
            "bytes": {("read",): "read_bytes", ("write",): "write_bytes"},
            "operations": {("read",): "read_count", ("write",): "write_count"},
        },
        f"/proc/<pid>/io {_IN_ONESHOT}",
        what="I/O",
    ),
    _per_child(
        "children_num_threads",
        "process_num_threads",
        lambda child: child.num_threads(),
        {"count": {(): ""}},
        f"/proc/<pid>/status {_IN_ONESHOT}",
        what="threads",
    ),
    _per_child(
        "children_num_fds",
        "process_num_fds",
        lambda child: child.num_fds(),
        {"count": {(): ""}},
        f"lists /proc/<pid>/fd {_IN_ONESHOT}",
        what="file descriptors",
    ),
    _per_child(
        "children_context_switches",
        "process_rusage",
        lambda child: child.num_ctx_switches(),
        {"context_switches": {("voluntary",): "voluntary", ("involuntary",): "involuntary"}},
        f"/proc/<pid>/status {_IN_ONESHOT} (the main thread only on Linux, as psutil counts)",
        what="context switches",
    ),
    _per_child(
        "children_paging_faults",
        "process_rusage",
        "proc_stat",
        {"paging_faults": {("major",): "majflt", ("minor",): "minflt"}},
        "/proc/<pid>/stat per child, read directly (psutil has no API)",
        platforms=LINUX,
    ),
    _per_child(
        "children_uptime",
        "process_uptime",
        _uptime,
        {"uptime": {(): ""}},
        "none: the create time of each child is read once",
        what="uptime",
    ),
)
"""The per-child sources, one row each: what it reads of each child, and each field's points."""

_OWN_MEMORY = tuple(p.mirrors for p in PER_CHILD if p.read in ("memory", "pss"))
_TREE_MODE = attributes("cpu.mode")
_TREE_USER, _TREE_SYSTEM = _TREE_MODE(("user",)), _TREE_MODE(("system",))
_MEASURE = attributes("process_metrics.memory.measure")


# --- the wanted sources, and the pass they share -------------------------------


def _wants(name: str) -> Callable[[ReadContext], bool]:
    def open_(ctx: ReadContext) -> bool:
        if not ctx.options.children:
            return False
        ctx.state_of(WANTED).add(name)
        return True

    return open_


def _unwants(name: str) -> Callable[[ReadContext], None]:
    def close(ctx: ReadContext) -> None:
        ctx.state_of(WANTED).discard(name)

    return close


def _open_tree(ctx: ReadContext) -> bool:
    """The tree is wanted: the wait calls are wrapped, to see how each child ends."""
    if not _wants(TREE)(ctx):
        return False
    from ..probes.reaps import reaps  # supervisor mode only: most processes never load it

    ctx.state_of(REAPING).append(reaps.subscribe())
    return True


def _close_tree(ctx: ReadContext) -> None:
    _unwants(TREE)(ctx)
    tokens = ctx.state_of(REAPING)
    if tokens:
        from ..probes.reaps import reaps

        while tokens:
            reaps.unsubscribe(tokens.pop())


def _forget_the_parents_tree(ctx: ReadContext, _forked_at: float | None) -> None:
    # A forked child starts a tree of its own: its parent's children, slots,
    # counts, latest pass and CPU floor are not its own (the wanted sources
    # are: same options).
    ctx.drop(KEPT)
    ctx.floors.pop(TREE, None)


def _pass(ctx: ReadContext) -> Pass:
    from .child_pass import read_pass  # supervisor mode only: loaded at its first read

    return read_pass(ctx, PER_CHILD)


def _per_child_reader(name: str) -> Callable[[ReadContext], Reading]:
    def read(ctx: ReadContext) -> Reading:
        return _pass(ctx).fields.get(name, {})

    return read


def _read_tree(ctx: ReadContext) -> Reading:
    found = _pass(ctx)
    kept = ctx.state_of(KEPT)
    out: dict[str, int | float | Mapping[Key, int | float]] = {
        "count": 1 + found.alive,
        "exits": dict(kept.ends.totals),
        "restarts": kept.restarts,
    }
    if found.times is not None:
        user, system = found.times
        out["cpu_time"] = ctx.never_below_previous(TREE, {_TREE_USER: user, _TREE_SYSTEM: system})
    if found.memory is not None:
        kind, total = found.memory
        out["memory"] = {_MEASURE((kind,)): total}
    return out


def _source(
    name: str,
    read: Callable[[ReadContext], Reading],
    fields: Mapping[str, type[Key] | None],
    cost: str,
) -> Source:
    """A children source: it reads the pass, when its option is on."""
    return Source(
        name,
        read,
        dict(fields),
        cost,
        open=_wants(name),
        close=_unwants(name),
        after_fork=_forget_the_parents_tree,
        direct=(
            DirectRead(
                "children",
                "the `children` file of each task of the tree, from its root down",
                "`Process.children(recursive=True)`, which reads the `stat` file of every "
                "process on the host",
            ),
        ),
        keeps=(WANTED, KEPT, REAPING),
        # The pass, run by whichever children source reads first, takes this
        # process's own RSS or PSS of the refresh for the tree: what the per-child
        # memory reads mirror.
        needs=_OWN_MEMORY,
    )


SOURCES: tuple[Source, ...] = (
    *(
        _source(p.name, _per_child_reader(p.name), p.fields, p.cost)._replace(
            platforms=p.platforms,
            available=p.available,
            stateful=bool(p.rates),  # a rate's first point needs a baseline
        )
        for p in PER_CHILD
    ),
    _source(
        TREE,
        _read_tree,
        {
            "cpu_time": _TREE_MODE,
            "count": None,
            "exits": EXIT,
            "restarts": None,
            "memory": _MEASURE,
        },
        "getrusage(2) twice, lists the children file of each task (elsewhere: psutil reads every "
        "process on the host), /proc/<pid>/stat and statm per child; on Linux, "
        "/proc/<pid>/cgroup of each child in its first minute and the OOM kill count of each "
        "memory cgroup of the children (one small file, usually one)",
    )._replace(open=_open_tree, close=_close_tree, stateful=True),
)
