"""An open-loop HTTP/1.1 load generator: requests at a fixed rate, latency from when each was due.

A closed-loop generator (wrk, ab, hey) sends the next request on a connection
only when the last answer came: a slow answer delays the requests after it,
which are then never measured as late (coordinated omission). Here request
``i`` is due at ``start + i / rate`` whatever happened before; it takes an idle
keep-alive connection, or opens one (at most ``connections``), or waits for
one; its latency runs from when it was due to the end of its answer, so every
wait counts. Neither Debian nor PyPI has an open-loop generator that fits
(wrk2 and vegeta are in neither), so this is one, on asyncio (uvloop when
installed); its own delays, the same in every mode compared, count in the
latency too.

    python benchmarks/loadgen.py http://127.0.0.1:8000/items 500 10
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Load:
    rate: float
    """Requests per second asked for."""
    seconds: float
    sent: int
    ok: int
    errors: int
    achieved: float
    """Answers (2xx) per second, over the time from the first due request to the last answer."""
    latencies: list[float]
    """Seconds from due to answered, for each 2xx answer, sorted."""

    def percentile(self, p: float) -> float:
        """Nearest rank; NaN without answers."""
        if not self.latencies:
            return float("nan")
        rank = max(1, round(p / 100 * len(self.latencies) + 0.5))
        return self.latencies[min(rank, len(self.latencies)) - 1]


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Status code, and whether the connection can be used again."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length, keep = 0, not lines[0].startswith("HTTP/1.0")
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            keep = value != "close"
        elif name == "transfer-encoding" and value == "chunked":
            raise ValueError("chunked answers are not read here")
    await reader.readexactly(length)
    return status, keep


async def run(url: str, rate: float, seconds: float, connections: int = 256) -> Load:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = f"GET {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1\r\n"
    request += f"Host: {host}:{port}\r\n\r\n"
    raw = request.encode()
    # Not loop.time(): uvloop's counts whole milliseconds.
    clock = time.perf_counter
    gate = asyncio.Semaphore(connections)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    latencies: list[float] = []
    errors = 0

    async def one(due: float) -> None:
        nonlocal errors
        async with gate:
            conn = idle.pop() if idle else None
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, port)
                conn[1].write(raw)
                status, keep = await _answer(conn[0])
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                errors += 1
                if conn is not None:
                    conn[1].close()
                return
            if 200 <= status < 300:
                latencies.append(clock() - due)
            else:
                errors += 1
            if keep:
                idle.append(conn)
            else:
                conn[1].close()

    total = int(rate * seconds)
    start = clock() + 0.01
    tasks = []
    i = 0
    while i < total:
        now = clock()
        while i < total and start + i / rate <= now:  # everything due by now
            tasks.append(asyncio.ensure_future(one(start + i / rate)))
            i += 1
        if i < total:
            await asyncio.sleep(max(0.0, start + i / rate - clock()))
    await asyncio.gather(*tasks)
    elapsed = clock() - start
    for _, writer in idle:
        writer.close()
    latencies.sort()
    return Load(rate, seconds, total, len(latencies), errors, len(latencies) / elapsed, latencies)


def load(url: str, rate: float, seconds: float, connections: int = 256) -> Load:
    """``run`` on a new event loop (uvloop's when installed)."""
    try:
        import uvloop

        return uvloop.run(run(url, rate, seconds, connections))
    except ImportError:
        return asyncio.run(run(url, rate, seconds, connections))


if __name__ == "__main__":
    found = load(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
    ms = {p: round(found.percentile(p) * 1e3, 2) for p in (50, 99, 99.9)}
    print(f"{found.achieved:.0f}/s, {found.errors} errors, ms {ms}", time.strftime("%H:%M:%S"))
