"""What the children sources (``children.py``) and their pass (``child_pass.py``) share.

The state kept between refreshes, the tree's source id, and the shape of a
per-child source's declaration. Imported with the declarations; the pass, and
the records it keeps, load with the first read. Nothing here knows about
OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import psutil

from .base import Key, ReadContext, State

if TYPE_CHECKING:  # supervisor mode only: most processes never load it
    from .child_slots import Tree

TREE = "children_tree"
"""The source of the tree's totals: this process and all its descendants."""


def _new_tree(_ctx: ReadContext) -> Tree:
    from .child_slots import Tree  # supervisor mode only: most processes never load it

    return Tree()


KEPT: State[Tree] = State("children_slots", _new_tree)
"""The children, their slots and counts, and the latest pass, between refreshes."""
WANTED: State[set[str]] = State("children_wanted", lambda _ctx: set())
"""The names of the children sources of this process, kept by their open hooks."""
REAPING: State[list[int]] = State("children_reaping", lambda _ctx: [])
"""The token of the tree's subscription to the wait wrapper (``probes/reaps.py``), if any."""


def wanted(ctx: ReadContext) -> frozenset[str]:
    """The children sources this process reads."""
    names: set[str] = ctx.state_of(WANTED)
    return frozenset(names)


class PerChild(NamedTuple):
    """A per-child source: what a source of this process gives, read of each child.

    Declared once, as data, in ``children.py``: its fields, its metrics (the
    rows of ``mirrors``), the child's read and each point follow from it.
    """

    name: str
    mirrors: str
    """The source of this process whose fields it gives for each child, under the same names;
    the metrics of those fields get a point per child."""
    read: str | Callable[[psutil.Process], object]
    """What it reads of a child: a part of the read every child gets first (``"cpu"``,
    ``"memory"``, ``"pss"``, or ``"proc_stat"`` where the stat file is read directly), or a
    call on the child's ``psutil.Process``, made inside its ``oneshot()``."""
    points: Mapping[str, Mapping[tuple[str, ...], str]]
    """Each field's points: the values of its own attributes (after the child's), and the
    attribute of what was read that holds the value (``""``: the value itself)."""
    fields: Mapping[str, type[Key]]
    """The key type of each field, the child's attributes first (``children.py`` derives it)."""
    rates: Mapping[str, str]
    """Fields whose points are another field's change per second and per available CPU."""
    what: str
    """What a read the master may not make is called in its one warning."""
    cost: str
    """What its read costs per child, in words (the metric reference)."""
    platforms: frozenset[str]
    available: Callable[[], bool]
