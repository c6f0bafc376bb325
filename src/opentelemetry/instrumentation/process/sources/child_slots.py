"""The children between refreshes (supervisor mode): who each one is, its slot, ends and restarts.

A child is known by its pid and its start time: a pid seen again with another
start time is another process. A new child gets the lowest slot free among
the live children, reused after it exits, unless it is a direct child that
holds a slot of its own from the per-worker resource detector: then it gets
that one. Giving a slot again is a restart. Nothing here knows about
OpenTelemetry.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import psutil

from .base import Delta, Key
from .child_exits import Exits

RECORDED_SLOT_WINDOW = 60.0
"""Seconds after its first sight during which a child's own recorded slot is looked for.

A worker claims its slot in its post-fork hook, which may run after the
master first sees it; a child with no record after this is not a detector's.
"""


class Child:
    """One descendant, as the master sees it."""

    __slots__ = (
        "cgroup",
        "first_seen",
        "parent",
        "pid",
        "process",
        "rates",
        "recorded",
        "rss",
        "slot",
        "started",
    )

    def __init__(
        self,
        pid: int,
        process: psutil.Process,
        parent: int | None,
        first_seen: float,
        started: float,
    ) -> None:
        self.pid = pid
        self.process = process
        self.parent = parent
        self.first_seen = first_seen
        self.started = started
        """When it started: another start time at its pid is a reused pid.

        In clock ticks (10 ms) read directly on Linux, else psutil's create
        time: a pid given again within the tick in which its last process
        started would not be told apart, but the kernel gives a pid again only
        after it has gone through every other one.
        """
        self.slot = -1
        self.recorded = False
        """Whether ``slot`` is the child's own, from the resource detector."""
        self.rates: dict[str, Delta] = {}
        """The baseline of each per-child source's rates, by source."""
        self.rss = 0
        """Its resident memory at the last pass that read it (bytes)."""
        self.cgroup: bytes | None = None
        """Its memory cgroup (``child_exits.Exits.cgroup_of``); ``None``: this process's."""


class Pass:
    """What one refresh found: the per-child sources' points and the tree's totals."""

    __slots__ = ("alive", "failed", "fields", "memory", "now", "times")

    def __init__(self, now: float) -> None:
        self.now = now
        self.fields: dict[str, dict[str, dict[Key, float]]] = {}
        """Each per-child source's fields, by source."""
        self.failed: Exception | None = None
        self.alive = 0
        """The live descendants listed."""
        self.times: tuple[float, float] | None = None
        """User and system seconds of the tree, what was reaped included (tree only)."""
        self.memory: tuple[str, int] | None = None
        """``("pss" or "rss", bytes)`` of the tree (tree only)."""


class Tree:
    """The children of this process between refreshes."""

    __slots__ = ("cap_warned", "ends", "latest", "live", "restarts", "used_slots", "zombies")

    def __init__(self) -> None:
        self.live: dict[int, Child] = {}
        self.used_slots: set[int] = set()
        """Every slot given so far: giving one again is a restart."""
        self.zombies: set[int] = set()
        """Zombie pids whose end is noted already."""
        self.ends = Exits()
        """How the children ended, by cause."""
        self.restarts = 0
        self.cap_warned = False
        self.latest: Pass | None = None
        """The pass of the latest refresh: every children source of it reads that one."""

    def known(self, pid: int, started: float) -> Child | None:
        """The child seen at ``pid`` before, if it is still the one that started at ``started``."""
        child = self.live.get(pid)
        return child if child is not None and child.started == started else None

    def give_slots(self, live: Mapping[int, Child], root: int, now: float) -> None:
        """A slot for each new child; a direct child of ``root`` keeps its own recorded one."""
        helper = os.getpid()  # with tree_root="parent", this process: no slot
        live = {pid: c for pid, c in live.items() if pid != helper}
        young = [
            c
            for c in live.values()
            if c.parent == root and not c.recorded and now - c.first_seen < RECORDED_SLOT_WINDOW
        ]
        recorded = _recorded_slots(root) if young else {}
        held = {c.slot for c in live.values() if c.slot >= 0}
        for child in young:
            own = recorded.get(child.pid)
            if own is None or own == child.slot:
                child.recorded = own is not None
                continue
            if own in held:  # another child holds it: keep this one's
                continue
            if child.slot >= 0:
                held.discard(child.slot)
            elif own in self.used_slots:
                self.restarts += 1
            child.slot, child.recorded = own, True
            held.add(own)
            self.used_slots.add(own)
        reserved = set(recorded.values())
        for child in sorted(live.values(), key=lambda c: c.pid):
            if child.slot >= 0:
                continue
            slot = 0
            while slot in held or slot in reserved:
                slot += 1
            if slot in self.used_slots:
                self.restarts += 1
            child.slot = slot
            held.add(slot)
            self.used_slots.add(slot)


def _recorded_slots(parent: int) -> dict[int, int]:
    """Slots that the per-worker resource detector recorded for the children of ``parent``."""
    try:
        from ..group.slots import recorded_slots

        return recorded_slots(parent)
    except Exception:  # noqa: BLE001 - a record we cannot read: the master's own slots
        return {}
