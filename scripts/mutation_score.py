"""Print the mutation score of the last ``mutmut run``, and where the survivors cluster.

The score counts every mutant: a mutant that no test reaches ("no tests")
counts as not killed, as one that survived does. Timeouts are listed apart.

    python scripts/mutation_score.py [--top N] [--list]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

NOT_KILLED = ("survived", "no tests")  # where survivors cluster; "not checked" is apart


def results() -> dict[str, str]:
    """Status of every mutant of the last run, by mutant name, from ``mutmut results``."""
    mutmut = Path(sys.executable).with_name("mutmut")
    out = subprocess.run(
        [str(mutmut), "results", "--all", "true"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            found[name] = status
    return found


def function_of(mutant: str) -> str:
    """``pkg.module.x_func__mutmut_3`` -> ``module.func`` (methods: ``module.Class.method``)."""
    name = mutant.rsplit("__mutmut_", 1)[0]
    module, _, mangled = name.rpartition(".")
    module = module.removeprefix("opentelemetry.instrumentation.process.")
    if mangled.startswith("x\u01c1"):
        _, cls, method = mangled.split("\u01c1", 2)
        return f"{module}.{cls}.{method}"
    return f"{module}.{mangled.removeprefix('x_')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="survivor clusters to show")
    parser.add_argument("--list", action="store_true", help="list every mutant not killed")
    args = parser.parse_args()
    found = results()
    if not found:
        print("no mutation results: run `make mutants` first")
        return 1
    counts = collections.Counter(found.values())
    total = len(found)
    killed = counts["killed"]
    print(f"mutants: {total}")
    for status, n in counts.most_common():
        print(f"  {status}: {n}")
    print(f"score: {killed} killed / {total} = {100 * killed / total:.1f}%")
    checked = total - counts["not checked"]
    if checked < total:
        # An interrupted run (or one given mutant names): the rest are unknown.
        print(
            f"run incomplete: {total - checked} mutants not checked, counted as not killed; "
            f"among the {checked} checked: {100 * killed / checked:.1f}% killed"
        )
    clusters = collections.Counter(
        function_of(name) for name, status in found.items() if status in NOT_KILLED
    )
    print(f"\nwhere the {sum(clusters.values())} mutants not killed are (function: count):")
    for function, n in clusters.most_common(args.top):
        print(f"  {function}: {n}")
    if args.list:
        print()
        for name, status in sorted(found.items()):
            if status != "killed":
                print(f"  {name}: {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
