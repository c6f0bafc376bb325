"""Draw a seeded sample of mutants from all of src/, and score it after mutmut has run it.

The same seed on the same tree draws the same mutants, so that a score can be
taken again on the same sample after the tests change:

    # after any `mutmut run` (it generates every mutant first)
    python scripts/mutation_sample.py draw --seed 33 --n 200 > sample.txt
    .venv/bin/mutmut run $(cat sample.txt)
    python scripts/mutation_sample.py score sample.txt  # killed, with a 95 % interval

Run from the repository root, with the venv's Python (mutmut beside it).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutation_score import results


def wilson(killed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson interval of a share ``killed / n``."""
    p = killed / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def draw(seed: int, n: int) -> list[str]:
    """``n`` mutant names, drawn with ``seed`` from every mutant mutmut generated."""
    names = sorted(results())
    if len(names) < n:
        raise SystemExit(f"only {len(names)} mutants: run mutmut first (see the module)")
    return random.Random(seed).sample(names, n)


def score(chosen: list[str]) -> str:
    status = results()
    killed = sum(1 for name in chosen if status.get(name) == "killed")
    low, high = wilson(killed, len(chosen))
    lines = [
        f"killed {killed} of {len(chosen)}: {100 * killed / len(chosen):.1f} % "
        f"(95 % interval {100 * low:.1f}-{100 * high:.1f} %)"
    ]
    lines += [f"  {status.get(n, 'missing')}: {n}" for n in chosen if status.get(n) != "killed"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("draw", help="print a sample of mutant names, one a line")
    d.add_argument("--seed", type=int, required=True)
    d.add_argument("--n", type=int, default=200)
    s = sub.add_parser("score", help="the share of a sample's mutants killed")
    s.add_argument("sample", type=Path)
    args = parser.parse_args()
    if args.command == "draw":
        print("\n".join(draw(args.seed, args.n)))
    else:
        print(score([x.strip() for x in args.sample.read_text().splitlines() if x.strip()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
