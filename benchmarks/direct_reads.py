"""The direct Linux reads against the psutil calls they replace, side by side in one run.

    python benchmarks/direct_reads.py threads   # busiest_threads(5) vs Process().threads()
    python benchmarks/direct_reads.py sockets   # connection_counts() vs net_connections()

Each point times both readers interleaved (median of many calls, in µs) and counts
the files each call opens (an audit hook: exact). Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from opentelemetry.instrumentation.process.linux.sock_diag import connection_counts
from opentelemetry.instrumentation.process.linux.threads import busiest_threads

_opened: list[str] = []
_recording = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _recording and event in ("open", "os.listdir", "os.scandir"):
        _opened.append(str(args[0]))


sys.addaudithook(_hook)


def _opens(fn: Callable[[], object]) -> int:
    global _recording
    _opened.clear()
    _recording = True
    try:
        fn()
    finally:
        _recording = False
    return len(_opened)


def _time(readers: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Median µs per call of each reader, the readers alternating call by call."""
    samples: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(calls):
        for name, fn in readers.items():
            start = time.perf_counter_ns()
            fn()
            samples[name].append((time.perf_counter_ns() - start) / 1000)
    return {name: statistics.median(s) for name, s in samples.items()}


def _psutil_threads(limit: int) -> Callable[[], object]:
    def read() -> object:
        listed = psutil.Process().threads()
        return sorted(listed, key=lambda t: (-(t.user_time + t.system_time), t.id))[:limit]

    return read


@dataclass(frozen=True)
class Row:
    """One point: both readers' median µs per call and their opens per call."""

    what: str
    n: int
    direct_us: float
    psutil_us: float
    direct_opens: int
    psutil_opens: int


def threads(counts: list[int], limit: int, calls: int) -> list[Row]:
    threading.stack_size(256 << 10)
    release = threading.Event()
    started: list[threading.Thread] = []
    rows = []
    readers = {"direct": lambda: busiest_threads(limit), "psutil": _psutil_threads(limit)}
    try:
        for n in counts:
            while len(started) < n:
                t = threading.Thread(target=release.wait, daemon=True)
                t.start()
                started.append(t)
            time.sleep(0.2)
            rows.append(_row("threads", n, readers, calls))
    finally:
        release.set()
        for t in started:
            t.join()
    return rows


def _row(what: str, n: int, readers: dict[str, Callable[[], object]], calls: int) -> Row:
    median = _time(readers, calls)
    opens = {name: _opens(fn) for name, fn in readers.items()}
    return Row(what, n, median["direct"], median["psutil"], opens["direct"], opens["psutil"])


def _psutil_connections() -> object:
    # As sources._connections counts (its state-name mapping costs nothing here).
    counts: dict[tuple[str | None, str], int] = {}
    for conn in psutil.net_connections(kind="inet"):
        transport = "tcp" if conn.type == socket.SOCK_STREAM else "udp"
        status = conn.status
        state = None if status == psutil.CONN_NONE else status.lower()
        counts[(state, transport)] = counts.get((state, transport), 0) + 1
    return counts


def _pairs(server: socket.socket, count: int) -> list[socket.socket]:
    """``count`` established loopback sockets: count/2 client and accepted ends."""
    made = []
    address = server.getsockname()
    for _ in range(count // 2):
        client = socket.create_connection(address)
        accepted, _ = server.accept()
        made += [client, accepted]
    return made


def sockets(counts: list[int], calls: int) -> list[Row]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < max(counts) + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = socket.create_server(("127.0.0.1", 0), backlog=4096)
    made: list[socket.socket] = []
    readers = {"direct": connection_counts, "psutil": _psutil_connections}
    rows = []
    try:
        for n in counts:
            made += _pairs(server, n - len(made))
            rows.append(_row("sockets", n, readers, calls))
    finally:
        for s in made:
            # Reset rather than close: no TIME_WAIT sockets left behind for a minute.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        server.close()
    return rows


@dataclass(frozen=True)
class DirectReadsResult:
    rows: list[Row]


def measure(quick: bool = False) -> DirectReadsResult:
    """Both readers at each thread and socket count: the typed result ``run.py`` reports."""
    if quick:
        return DirectReadsResult(threads([0, 20], 5, 5) + sockets([0, 100], 3))
    return DirectReadsResult(threads([0, 100, 500, 2000], 5, 50) + sockets([0, 1000, 10_000], 10))


def markdown(result: DirectReadsResult) -> str:
    lines = [
        "| what | extra | direct µs (opens) | psutil µs (opens) | psutil / direct |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result.rows:
        lines.append(
            f"| {r.what} | {r.n:,} | {r.direct_us:,.1f} ({r.direct_opens}) "
            f"| {r.psutil_us:,.1f} ({r.psutil_opens}) | {r.psutil_us / r.direct_us:.1f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["threads", "sockets"])
    parser.add_argument("--calls", type=int, default=0, help="timed calls per reader and point")
    args = parser.parse_args()
    if args.what == "threads":
        rows = threads([0, 100, 500, 2000], limit=5, calls=args.calls or 200)
    else:
        rows = sockets([0, 1000, 10_000], calls=args.calls or 30)
    print(markdown(DirectReadsResult(rows)))


if __name__ == "__main__":
    main()
