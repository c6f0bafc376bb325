"""Sources about the descendants of this process (supervisor mode): each child, and the tree.

One *pass* per refresh (``child_pass.py``, loaded at the first read) lists
the descendants (on Linux from each task's ``children`` file, else psutil's
``children(recursive=True)``), gives each new one a slot, and reads each
child once, inside its own ``Process.oneshot()``.
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

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import psutil

from ..group import SLOT_ATTRIBUTE
from ..platforms import LINUX, POSIX, WINDOWS
from .base import DirectRead, Key, ReadContext, Reading, Source, State, attributes

if TYPE_CHECKING:  # the pass and its records load with the first read of a children source
    from .child_pass import Pass
    from .child_slots import Tree

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


# --- the state of the pass, declared by every children source -------------------------


def _new_tree(_ctx: ReadContext) -> Tree:
    from .child_slots import Tree  # supervisor mode only: most processes never load it

    return Tree()


_TREE: State[Tree] = State("children_slots", _new_tree)
"""The children, their slots and the counts, between refreshes."""
_PASS: State[list[Pass]] = State("children_pass", lambda _ctx: [])
"""The pass of the latest refresh (at most one): every children source of it reads that one."""


# --- the sources --------------------------------------------------------------


def _source_reader(name: str) -> Callable[[ReadContext], Reading]:
    def read(ctx: ReadContext) -> Reading:
        from .child_pass import read_pass  # supervisor mode only: loaded at its first read

        return read_pass(ctx).fields.get(name, {})

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
        direct=(
            DirectRead(
                "children",
                "the `children` file of each task of the tree, from its root down",
                "`Process.children(recursive=True)`, which reads the `stat` file of every "
                "process on the host",
            ),
        ),
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
