"""PSS and USS of this process from ``/proc/self/smaps_rollup`` (Linux 4.14+).

psutil's ``memory_full_info()`` gives them too, by reading every mapping of
``/proc/<pid>/smaps``; the rollup is one file the kernel sums itself. Both
walk the page tables, so the cost grows with the resident size: read only
when the metrics are enabled. Values in bytes.
"""

from __future__ import annotations

SMAPS_ROLLUP = "/proc/self/smaps_rollup"

_FIELDS = {b"Pss:": "pss", b"Private_Clean:": "clean", b"Private_Dirty:": "dirty"}


def pss_uss(path: str = SMAPS_ROLLUP) -> tuple[int, int]:
    """``(pss, uss)`` in bytes: proportional and unique set sizes.

    USS is ``Private_Clean + Private_Dirty``, as psutil computes it. Raises
    ``OSError`` when the file is missing or lacks a field.
    """
    with open(path, "rb") as f:
        data = f.read()
    found: dict[str, int] = {}
    for line in data.splitlines():
        name, _, rest = line.partition(b" ")
        key = _FIELDS.get(name)
        if key is not None:
            found[key] = int(rest.split()[0]) * 1024  # kB
    if len(found) != len(_FIELDS):
        raise OSError(f"{path}: no Pss, Private_Clean or Private_Dirty line")
    return found["pss"], found["clean"] + found["dirty"]
