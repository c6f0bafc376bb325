"""Shared metrics once per group, and PSS/USS, side by side in one run.

    python benchmarks/groups.py refresh [--saturation]  # non-leader vs leader vs "every"
    python benchmarks/groups.py smaps     # smaps_rollup (PSS/USS) vs statm, by RSS

``refresh`` builds three snapshot caches of the default metrics in one process
tree: a leader (this process), a non-leader (a forked child, whose election
try fails on the leader's lock) and one with ``shared_metrics="every"``, and
times their refreshes interleaved (median CPU time per refresh, µs), with the
files each opens (an audit hook: exact). ``smaps`` grows this process's RSS
and times the two reads at each size. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from opentelemetry.instrumentation.process.linux.smaps import pss_uss
from opentelemetry.instrumentation.process.options import ProcessMetricsOptions
from opentelemetry.instrumentation.process.selection import enabled_metrics
from opentelemetry.instrumentation.process.snapshot import SnapshotCache

_opened: list[str] = []
_recording = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _recording and event == "open":
        _opened.append(str(args[0]))


sys.addaudithook(_hook)


_SATURATION: list[bool | None] = [None]


def _cache(mode: str) -> SnapshotCache:
    options = ProcessMetricsOptions(shared_metrics=mode, saturation=_SATURATION[0])
    return SnapshotCache(options, {m.source for m in enabled_metrics(options)})


def _time_refreshes(cache: SnapshotCache, n: int) -> tuple[float, int]:
    global _recording
    times = []
    seen = 0
    for _ in range(n):
        start = time.thread_time()
        seen = cache.snapshot(seen).generation
        times.append(time.thread_time() - start)
    _opened.clear()
    _recording = True
    cache.snapshot(seen)
    _recording = False
    return statistics.median(times) * 1e6, len(_opened)


def refresh(rounds: int, n: int) -> dict[str, Any]:
    leader = _cache("once")  # this process takes the lock first
    every = _cache("every")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the non-leader: the same metrics, the lock held by its parent
        try:
            follower = _cache("once")
            out = [_time_refreshes(follower, n) for _ in range(rounds)]
            os.write(write_end, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    mine = [(_time_refreshes(leader, n), _time_refreshes(every, n)) for _ in range(rounds)]
    with os.fdopen(read_end) as f:
        theirs = json.load(f)
    os.waitpid(pid, 0)
    result = {
        "leader_us": statistics.median(m[0][0] for m in mine),
        "every_us": statistics.median(m[1][0] for m in mine),
        "non_leader_us": statistics.median(t[0] for t in theirs),
        "files": {"leader": mine[0][0][1], "every": mine[0][1][1], "non_leader": theirs[0][1]},
    }
    result["non_leader/every"] = result["non_leader_us"] / result["every_us"]
    result["leader/every"] = result["leader_us"] / result["every_us"]
    return result


def _read_statm() -> None:
    with open("/proc/self/statm", "rb") as f:
        f.read()


def _median_us(read: Any, n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def smaps(sizes: list[int], n: int) -> list[dict[str, float]]:
    held: list[bytearray] = []
    rows = []
    for mib in sizes:
        while len(held) < mib:
            held.append(bytearray(b"x" * (1 << 20)))  # touched: resident
        with open("/proc/self/statm") as f:
            rss = os.sysconf("SC_PAGE_SIZE") * int(f.read().split()[1])
        rollup = _median_us(pss_uss, n)
        statm = _median_us(_read_statm, n)
        rows.append(
            {
                "rss_mib": rss / (1 << 20),
                "smaps_rollup_us": rollup,
                "statm_us": statm,
                "ratio": rollup / statm,
                "us_per_mib": rollup / (rss / (1 << 20)),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("refresh", "smaps"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument(
        "--saturation", action="store_true", help="with the cgroup and pressure sources on"
    )
    args = parser.parse_args()
    _SATURATION[0] = True if args.saturation else None
    if args.what == "refresh":
        print(json.dumps(refresh(args.rounds, args.n), indent=2))
    else:
        print(json.dumps(smaps([0, 50, 150, 300], args.n // 4 or 1), indent=2))


if __name__ == "__main__":
    main()
