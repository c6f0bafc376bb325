"""The unit tests of `make check`, in two pytest processes side by side.

Most of a run is waiting (sleeps, forks, children), not CPU, so two halves
take about half the time on 2 CPUs. The test files are split by size, each
file whole in one half; each half stops at its first failure (``-x``).

    python scripts/check_tests.py --ignore=tests/e2e ...   # pytest's --ignore options
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HALVES = 2


def files(ignored: list[str]) -> list[Path]:
    """The top-level test files, less those under an ``--ignore`` path."""
    left_out = [ROOT / path for path in ignored]
    return [
        f
        for f in sorted((ROOT / "tests").glob("test_*.py"))
        if not any(f == p or p in f.parents for p in left_out)
    ]


def split(found: list[Path]) -> list[list[Path]]:
    """Greedy by file size, largest first: halves of about the same size."""
    halves: list[list[Path]] = [[] for _ in range(HALVES)]
    sizes = [0] * HALVES
    for f in sorted(found, key=lambda f: -f.stat().st_size):
        i = sizes.index(min(sizes))
        halves[i].append(f)
        sizes[i] += f.stat().st_size
    return [sorted(h) for h in halves]


def run(halves: list[list[Path]], logs: Path) -> list[int]:
    """Run each half in its own pytest; the exit status of each."""
    procs = []
    for i, half in enumerate(halves):
        # Each half names its own skip log (tests/conftest.py).
        env = dict(os.environ, PROCESS_TESTS_RUN_NAME=f"check-{i + 1}")
        out = open(logs / f"half-{i + 1}.log", "w")  # noqa: SIM115 - closed below
        args = [sys.executable, "-m", "pytest", "-q", "-x", *map(str, half)]
        procs.append((subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env), out))
    codes = []
    for proc, out in procs:
        codes.append(proc.wait())
        out.close()
    return codes


def main(argv: list[str]) -> int:
    ignored = [a.removeprefix("--ignore=") for a in argv if a.startswith("--ignore=")]
    halves = split(files(ignored))
    print(f"check: {sum(map(len, halves))} test files in {HALVES} pytest processes", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        codes = run(halves, Path(tmp))
        for i, code in enumerate(codes):
            lines = (Path(tmp) / f"half-{i + 1}.log").read_text().splitlines()
            shown = lines[-150:] if code else lines[-1:]
            print(f"--- half {i + 1} ({len(halves[i])} files): exit {code}")
            print("\n".join(shown))
    print(f"check: the tests took {time.monotonic() - started:.0f} s")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
