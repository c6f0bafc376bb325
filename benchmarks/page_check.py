"""The docs page against this run: the same exact counts, and timed figures not older than src/.

The smoke run (in ``make test``) fails when a count of the page's "Exact
counts" table differs from its own, on the machine the page was counted on
(elsewhere the files differ with the host: pressure, cgroup and cpufreq files,
disks). Timed figures cannot be checked that way: they need a full run on a
quiet machine (``make bench``, about 12 minutes), so a page older than the last
change to ``src/`` gives a warning, not a failure, which would block every
change to the sources until someone reran the benchmark.
"""

from __future__ import annotations

import calendar
import itertools
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from counts import Count
from machine import counted_on

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
REGENERATE = "python benchmarks/run.py --counts-only benchmarks/results/results.json"

OURS = "ours"
"""The group of this package's rows in the counts table."""

OPENS = ("Opens (audit hook)", "Opens (strace)")
"""Columns that grow with the host's processes where a read walks all of them."""


def table_after(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after ``heading``, by column name."""
    return rows_of(text.split(heading, 1)[1] if heading in text else "")


def rows_of(text: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``text``, by column name."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")] for line in _first_table(text)
    ]
    if not rows:
        return []
    header, body = rows[0], rows[2:]
    return [dict(zip(header, row, strict=False)) for row in body]


def machine_of(page: str) -> str:
    """The machine the page's counts were counted on, as ``report.counted_on`` wrote it."""
    found = re.search(r"counted\s+\d{4}-\d\d-\d\d \d\d:\d\d \w+ on (.+? CPUs)", page)
    return found.group(1) if found else "an unnamed machine"


WHAT = "docs/benchmarks.md's exact counts are this run's"


def counts_check(
    page: str, run_table: str, counts: Sequence[Count], info: dict[str, Any]
) -> tuple[bool, str]:
    """The page's exact counts against this run's: whether they match here, and what differs."""
    # Only this package's rows: a change here cannot touch the peer's or the bare
    # baselines', whose counts move with the host (its processes, disks, interfaces).
    theirs = {r["Subject"]: r for r in table_after(page, "## Exact counts") if r["Group"] == OURS}
    ours = {r["Subject"]: r for r in rows_of(run_table) if r["Group"] == OURS}
    if machine_of(page) != counted_on(info):
        return True, (
            f"not compared: the page was counted on {machine_of(page)}, this is "
            f"{counted_on(info)} (the files read differ with the host)"
        )
    walks = {f"`{c.subject}`" for c in counts if "psutil.net_connections" in c.psutil_calls}
    differ = []
    for subject in sorted(set(theirs) | set(ours)):
        if subject not in theirs or subject not in ours:
            differ.append(f"{subject} {'only on the page' if subject in theirs else 'not on it'}")
            continue
        for column, mine in ours[subject].items():
            page_value = theirs[subject].get(column)
            skipped = (subject in walks and column in OPENS) or "n/a" in (mine, page_value)
            if not skipped and page_value != mine:
                differ.append(f"{subject} {column}: page {page_value}, run {mine}")
    if not differ:
        return True, f"{len(ours)} of {len(ours)} rows match"
    shown = "; ".join(differ[:6]) + ("; ..." if len(differ) > 6 else "")
    return False, f"{len(differ)} differences: {shown}. Regenerate: {REGENERATE}"


def run_date(page: str) -> float | None:
    """When the page's timed figures were made (its Run row), in seconds since the epoch."""
    found = re.search(r"^\| Run \| (\d{4}-\d\d-\d\d \d\d:\d\d) (\w+)", page, re.MULTILINE)
    if found is None:
        return None
    parsed = time.strptime(found.group(1), "%Y-%m-%d %H:%M")
    utc = found.group(2) in ("UTC", "GMT")
    return float(calendar.timegm(parsed) if utc else time.mktime(parsed))


def last_src_change() -> tuple[float, str] | None:
    """The commit time and hash of the last commit that changed ``src/``, if git knows."""
    git = ["git", "log", "-1", "--format=%ct %h", "--", "src/"]
    try:
        done = subprocess.run(git, cwd=ROOT, capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    parts = done.stdout.split()
    if done.returncode != 0 or len(parts) != 2:
        return None
    return float(parts[0]), parts[1]


def staleness(page: str) -> str:
    """One line: whether the page's timed figures are older than the last change to src/."""
    made, changed = run_date(page), last_src_change()
    if made is None or changed is None:
        return "Benchmark page: not dated against src/ (no Run row, or no git history here)."
    at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(made))
    src_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(changed[0]))
    if made >= changed[0]:
        return f"Benchmark page: timed figures of {at}, newer than the last change to src/."
    return (
        f"WARNING: docs/benchmarks.md's timed figures are from {at}, older than the last "
        f"change to src/ ({src_at}, {changed[1]}): run `make bench` on a quiet machine."
    )


def keep_others(page: str, run_table: str) -> str:
    """``run_table`` with the page's own rows for the subjects that are not this package's.

    Recounting them elsewhere, or later, changes them with the host: a change to
    this package must not rewrite them.
    """
    old = {
        row["Subject"]: line
        for line, row in zip(
            _first_table(page.split("## Exact counts", 1)[-1])[2:],
            table_after(page, "## Exact counts"),
            strict=True,
        )
        if row["Group"] != OURS
    }
    lines = []
    for line in run_table.splitlines():
        subject = line.split("|")[1].strip() if line.startswith("| `") else None
        lines.append(old.get(subject, line) if subject is not None else line)
    return "\n".join(lines)


def _first_table(text: str) -> list[str]:
    """The lines of the first Markdown table in ``text``, its header and rule included."""
    rest = itertools.dropwhile(lambda line: not line.startswith("|"), text.splitlines())
    return list(itertools.takewhile(lambda line: line.startswith("|"), rest))
