"""Cost per collection against threads, sockets and CPUs, as PNG files for the docs page.

matplotlib comes with the ``bench`` extra (``pip install -e '.[bench]'``, which
``make bench`` does); the smoke run draws nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaling import Sweep

STYLE: dict[str, dict[str, Any]] = {
    "ours": {"linestyle": "-", "marker": "o"},
    "peer": {"linestyle": "--", "marker": "s"},
    "floor": {"linestyle": ":", "marker": ".", "alpha": 0.8},
    "bare": {"linestyle": "-.", "marker": "^"},
}


def draw(sweep: Sweep, names: Sequence[str], title: str, path: Path) -> None:
    """One line per subject (median µs per collection, whiskers at the MAD), log scale.

    A subject's SDK floor has its colour, dotted. The points of a sweep are
    evenly spaced, labelled with their value.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.8), dpi=110)
    colours = {n: f"C{i}" for i, n in enumerate(n for n in names if not n.startswith("floor_"))}
    for name in names:
        colour = colours.get(name.removeprefix("floor_"), "0.4")
        _line(ax, sweep, name, colour)
    ax.set_yscale("log")
    ax.set_xticks(range(len(sweep.points)), [f"{p.x:,}" for p in sweep.points])
    ax.set_xlabel(sweep.axis)
    ax.set_ylabel("µs per collection (median, log scale)")
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _line(ax: Any, sweep: Sweep, name: str, colour: str) -> None:
    found = [(i, p) for i, p in enumerate(sweep.points) if name in p.stats]
    if not found:
        return
    xs = [i for i, _ in found]
    ys = [p.stats[name].median * 1e6 for _, p in found]
    err = [p.stats[name].mad * 1e6 for _, p in found]
    style = STYLE[sweep.groups[name]]
    label = _wrap(f"{name}: {sweep.descriptions[name]}")
    ax.errorbar(xs, ys, yerr=err, label=label, capsize=2, color=colour, **style)


def _wrap(text: str, width: int = 44) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + len(w) + 1 > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "\n".join([*lines, line])


FIGURES = {
    "threads": (
        "Cost per collection against idle threads",
        ["per_thread_off", "per_thread_cap10", "per_thread", "peer_default", "psutil_threads"],
        ["floor_per_thread_cap10", "floor_per_thread", "floor_peer_default"],
    ),
    "sockets": (
        "Cost per collection against open loopback sockets",
        ["connections", "connections_psutil", "peer_default_set", "peer_default"],
        ["net_connections", "floor_connections", "floor_peer_default_set", "floor_peer_default"],
    ),
    "cpus": (
        "Host CPU metrics against the CPU count in procfs",
        ["cpu_total", "cpu_per_cpu", "cpu_frequency", "peer_cpu"],
        ["floor_cpu_per_cpu", "floor_peer_cpu"],
    ),
}


def draw_all(sweeps: Sequence[Sweep], folder: Path) -> list[Path]:
    """One figure per sweep, named after it; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for s in sweeps:
        title, lines, more = FIGURES[s.name]
        path = folder / f"{s.name}.png"
        draw(s, [*lines, *more], title, path)
        made.append(path)
    return made
