"""What the package costs the application: the page ``docs/application-cost.md``.

    python benchmarks/app_cost.py                # the heap, the counts (instructions.py), the page
    python benchmarks/app_cost.py --render-only  # the page again from benchmarks/results/

The figures come from the latest record of ``results/instructions.json`` and
from ``results/heap.json``; the prose is ``app_cost_template.md``. The timed
runs that this page quoted before (pyperformance under pyperf, web servers
under load) are archived in ``benchmarks/archive/``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAGE = ROOT / "docs" / "application-cost.md"
sys.path.insert(0, str(HERE))

import heap  # noqa: E402
import instructions  # noqa: E402
from report import fill, table  # noqa: E402

INTERVAL = 10.0
"""Seconds between two collections, for the cost of collections per second."""

# Issue 37's goals on the cost between collections: (work, a bound on defaults / SDK alone).
LIMIT = {"cycles": 1.0120}
OVER_THE_PEER = {"allocation": 0.0030, "json": 0.0015, "asyncio": 0.0010}


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def goals(entry: dict[str, Any], objects: dict[str, Any]) -> str:
    rows = []
    for work, limit in LIMIT.items():
        found = instructions.ratio(entry, "defaults", work) or 0.0
        rows.append([f"`{work}`: defaults / SDK alone", f"<= {limit:.4f}", f"{found:.4f}"])
        rows[-1].append(_met(round(found, 6) <= limit))  # as shown: to the fourth place
    for work, points in OVER_THE_PEER.items():
        ours = instructions.ratio(entry, "defaults", work) or 0.0
        peer = instructions.ratio(entry, "peer", work) or 0.0
        what = f"`{work}`: defaults / SDK alone, against the peer's"
        met = _met(round(ours - peer, 6) <= points)  # as shown: to the fourth place
        empty = instructions.ratio(entry, "gc_callback", work)
        shown = f"{ours:.4f}" + (f" (an empty gc callback: {empty:.4f})" if empty else "")
        rows.append([what, f"<= {peer:.4f} + {points:.4f}", shown, met])
    if objects:
        ours = objects["defaults"]["objects"]
        rows.append(
            [
                "GC-tracked objects that instrumenting adds beyond the base instrumentor, defaults",
                f"<= {heap.GOAL:,} (the peer: {objects['peer']['objects']:,})",
                f"{ours:,} ({objects['defaults']['modules']} modules)",
                _met(ours <= heap.GOAL),
            ]
        )
    gated = instructions.gated_entries(entry)
    caught = {k for k, v in gated.items() if instructions.caught(v)}
    missed = ", ".join(sorted(k.split()[-1] for k in set(gated) - caught))
    rows.append(
        [
            "`make test` fails on 1% more instructions in a collection or between collections",
            "each collection counted and each work between collections",
            f"1% more fails {len(caught)} of {len(gated)} gated counts"
            + (f"; not {missed}" if missed else ""),
            _met(caught == set(gated)),
        ]
    )
    return table(["Goal", "Required", "Measured", "Verdict"], rows)


def summary(entry: dict[str, Any]) -> str:
    """The cost in short, from a record: the README says it too (a test holds it to this)."""
    between, per_s = entry["between"], instructions.rate(entry)

    def pct(mode: str, work: str) -> str:
        return f"{((instructions.ratio(entry, mode, work) or 1.0) - 1) * 100:.1f}%"

    def per_op(work: str) -> str:  # what the defaults add per operation, and its time here
        kind, sdk = instructions.KINDS[work], between["sdk"][work]["median"]
        n = (between["defaults"][work]["median"] - sdk) / kind.ops
        return f"{n:,.0f} instructions per {kind.op}, {instructions.duration(n, per_s)} here"

    def geo(mode: str) -> str:
        names = instructions.SUITES["pyperformance"]
        logs = [math.log(instructions.ratio(entry, mode, w) or 1.0) for w in names]
        return f"{(math.exp(sum(logs) / len(logs)) - 1) * 100:.1f}%"

    ops = instructions.PROBES["gc_collect0"].ops
    gc0 = {m: between[m]["gc_collect0"]["median"] / ops for m in ("sdk", "gc_callback", "defaults")}
    callback, empty = gc0["defaults"] - gc0["sdk"], gc0["gc_callback"] - gc0["sdk"]
    ours, peer = (entry["collections"][c]["median"] for c in ("default", "peer_default"))
    return (
        f"Between collections, the defaults add {pct('defaults', 'allocation')} to the "
        f"instructions of allocation-heavy work ({per_op('allocation')}) and "
        f"{pct('defaults', 'cycles')} to work that is mostly garbage collection "
        f"({per_op('cycles')}; the peer's default: {pct('peer', 'allocation')} and "
        f"{pct('peer', 'cycles')}), and {geo('defaults')} to a subset of pyperformance (geometric "
        f"mean; the peer's {geo('peer')}): a callback on each garbage collection "
        f"({callback:,.0f} instructions, {instructions.duration(callback, per_s)} here, of "
        f"which an empty callback is {empty:,.0f}) and the objects of its modules, which each full "
        f"collection walks. One default collection is {ours / 1e6:.1f} million instructions, "
        f"{instructions.duration(ours, per_s)} of CPU here (the peer's default "
        f"{peer / 1e6:.1f} million): at a {INTERVAL:g} s export interval, "
        f"{instructions.duration(ours / INTERVAL, per_s)} of CPU per second. Counted by "
        "`python benchmarks/instructions.py`."
    )


def values() -> dict[str, str]:
    entry = instructions.latest()
    objects = (
        {h["mode"]: h for h in json.loads(heap.RESULT.read_text())} if heap.RESULT.exists() else {}
    )
    return instructions.page() | {
        "commit": entry.get("commit", "unknown"),
        "goals": goals(entry, objects) if entry else "(not counted yet)",
        "summary": summary(entry) if entry else "(not counted yet)",
        "heap": heap.markdown([heap.Heap(**h) for h in objects.values()])
        if objects
        else "(not run)",
    }


README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- cost: .*? -->\n)(.*?)(<!-- end of cost -->)", re.S)


def render() -> None:
    """The page, and the README's sentence on the cost (between its two markers)."""
    template = (HERE / "app_cost_template.md").read_text()
    PAGE.write_text(fill(template, found := values()))
    text = README.read_text()
    block = textwrap.fill(found["summary"], 80, break_on_hyphens=False) + "\n"
    README.write_text(BLOCK.sub(lambda m: m.group(1) + block + m.group(3), text))
    print(f"wrote {PAGE.relative_to(ROOT)} and README.md's cost", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render-only", action="store_true")
    if not parser.parse_args().render_only:
        for script in ("heap.py", "instructions.py"):
            if status := subprocess.run([sys.executable, str(HERE / script)]).returncode:
                return status
    render()
    return 0


if __name__ == "__main__":
    sys.exit(main())
