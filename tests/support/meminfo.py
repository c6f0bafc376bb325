"""/proc/meminfo as the test reads it itself (Linux), to hold the package's values against."""

from __future__ import annotations


def read_meminfo() -> dict[str, int]:
    """Every line of /proc/meminfo, in bytes (the kernel writes kB)."""
    found = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            found[name] = int(rest.split()[0]) * 1024
    return found
