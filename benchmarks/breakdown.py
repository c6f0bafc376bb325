"""Where one collection of ours goes, seen from the public side only.

- ``total``: the timed collection, ``get_metrics_data()``;
- ``floor``: the SDK alone, with the same instruments and points from constant callbacks;
- ``refresh``: the package's own figures for reading every source once,
  ``process_metrics.refresh.duration`` (wall) and ``.cpu_time``, read from each
  timed collection;
- ``bare``: the same OS reads in a plain function (psutil and os, as the package calls them).

So ``total - floor`` is what the package adds to the SDK; of that, ``refresh`` is
reading (``refresh - bare`` its own overhead on the reads), and the rest builds
observations. An earlier version timed the package's internal parts by reaching
into them; the refresh metric gives the same split through the public API.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis import MainRun


@dataclass(frozen=True)
class Breakdown:
    """Medians in seconds; ``refresh`` and ``bare`` are None where not measured."""

    name: str
    total: float
    floor: float
    refresh: float | None
    refresh_cpu: float | None
    bare: float | None

    @property
    def observe(self) -> float | None:
        """What is neither the SDK floor nor reading: turning readings into observations."""
        return None if self.refresh is None else self.total - self.floor - self.refresh


def breakdown(run: MainRun, name: str, bare: str | None) -> Breakdown:
    wall, cpu = run.refresh.get(name, (None, None))
    return Breakdown(
        name=name,
        total=run.stats[name].median,
        floor=run.stats[f"floor_{name}"].median,
        refresh=wall,
        refresh_cpu=cpu,
        bare=run.stats[bare].median if bare else None,
    )
