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


def threads(counts: list[int], limit: int, calls: int) -> None:
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
            median = _time(readers, calls)
            opens = {name: _opens(fn) for name, fn in readers.items()}
            rows.append((n, median, opens))
            print(
                f"threads +{n:>5}: direct {median['direct']:9.1f} µs ({opens['direct']} opens)"
                f"   psutil {median['psutil']:9.1f} µs ({opens['psutil']} opens)",
                flush=True,
            )
    finally:
        release.set()
        for t in started:
            t.join()
    base = rows[0]
    for n, median, _ in rows[1:]:
        slopes = {k: (median[k] - base[1][k]) / (n - base[0]) for k in median}
        print(
            f"per extra thread, {base[0]} to {n}: direct {slopes['direct']:.2f} µs,"
            f" psutil {slopes['psutil']:.2f} µs"
        )


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


def sockets(counts: list[int], calls: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < max(counts) + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = socket.create_server(("127.0.0.1", 0), backlog=4096)
    made: list[socket.socket] = []
    readers = {"direct": connection_counts, "psutil": _psutil_connections}
    try:
        for n in counts:
            made += _pairs(server, n - len(made))
            total = sum(connection_counts().values())
            median = _time(readers, calls)
            opens = {name: _opens(fn) for name, fn in readers.items()}
            ratio = median["psutil"] / median["direct"]
            print(
                f"sockets +{n:>6} ({total} inet sockets in the namespace):"
                f" direct {median['direct']:9.1f} µs ({opens['direct']} opens)"
                f"   psutil {median['psutil']:9.1f} µs ({opens['psutil']} opens)"
                f"   psutil/direct {ratio:.1f}x",
                flush=True,
            )
    finally:
        for s in made:
            # Reset rather than close: no TIME_WAIT sockets left behind for a minute.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["threads", "sockets"])
    parser.add_argument("--calls", type=int, default=0, help="timed calls per reader and point")
    args = parser.parse_args()
    if args.what == "threads":
        threads([0, 100, 500, 2000], limit=5, calls=args.calls or 200)
    else:
        sockets([0, 1000, 10_000], calls=args.calls or 30)


if __name__ == "__main__":
    main()
