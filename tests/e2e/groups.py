"""What a pre-fork server's workers hold in the backend as one group: identities, shared metrics.

Every recipe prints one line per worker when it sets up its metrics::

    worker <pid>: process metrics on, slot <n>, service.instance.id <uuid>

:func:`announced` reads them from the server's output: that is how a test maps
the pids the operating system shows to the identities the backend holds.
The *shared metrics* (host, container, pressure) are reported by one worker of
the group at a time; :func:`shared_samples` returns who reported each point of
one of them, and :func:`check_once_per_window` holds that to "one at a time".
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from .servers import VictoriaMetrics, wait_until

ANNOUNCED = re.compile(
    r"worker (\d+): process metrics (on|NOT on), slot (\d+|None), "
    r"service\.instance\.id ([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|None)"
)
SHARED = "system_memory_usage_bytes"
"""A shared metric on by default (host group), Prometheus naming."""
SHARED_SELECTOR = 'system_memory_state="used"'
PER_PROCESS = "process_uptime_seconds"
"""A per-process metric on by default: one series per identity."""


@dataclass(frozen=True)
class Worker:
    pid: int
    slot: int
    instance: str


def announced(output: str) -> list[Worker]:
    """Every worker that set up its metrics, in the order of its line; fails on "NOT on"."""
    found = []
    for match in ANNOUNCED.finditer(output):
        pid, state, slot, instance = match.groups()
        assert state == "on", match.group(0)
        assert slot != "None", f"no slot: {match.group(0)}"
        found.append(Worker(int(pid), int(slot), instance))
    return found


def identities(vm: VictoriaMetrics, service: str, start: float) -> dict[str, set[str]]:
    """Each ``service_instance_id`` the backend holds for ``service`` since ``start``: its slots."""
    vm.flush()
    series = vm.api(
        "/api/v1/series",
        [
            ("match[]", f'{PER_PROCESS}{{service_name="{service}"}}'),
            ("start", f"{start:.3f}"),
            ("end", f"{time.time() + 60:.3f}"),
        ],
    )
    found: dict[str, set[str]] = {}
    for s in series:
        found.setdefault(s.get("service_instance_id", "(none)"), set()).add(
            s.get("process_metrics_worker_slot", "(none)")
        )
    return found


def by_pid(vm: VictoriaMetrics, service: str) -> dict[str, dict[str, str]]:
    """The ``process_uptime_seconds`` series of ``service``, by ``process_pid``."""
    found = vm.series(f'{PER_PROCESS}{{service_name="{service}"}}')
    return {s.get("process_pid", "(no process_pid)"): s for s in found}


def series_count(vm: VictoriaMetrics, service: str, start: float) -> int:
    """How many series the backend holds for ``service`` since ``start``, all metrics."""
    vm.flush()
    series = vm.api(
        "/api/v1/series",
        [
            ("match[]", f'{{service_name="{service}"}}'),
            ("start", f"{start:.3f}"),
            ("end", f"{time.time() + 60:.3f}"),
        ],
    )
    return len(series)


def shared_samples(vm: VictoriaMetrics, service: str, start: float) -> list[tuple[int, str]]:
    """Each point of the shared metric since ``start``: (timestamp in ms, instance), by time."""
    rows = vm.export(f'{SHARED}{{service_name="{service}", {SHARED_SELECTOR}}}', start=start)
    found = [
        (int(ts), row["metric"].get("service_instance_id", "(none)"))
        for row in rows
        for ts in row["timestamps"]
    ]
    return sorted(found)


def terms(samples: list[tuple[int, str]]) -> list[tuple[str, int, int]]:
    """The runs of one reporter in time order: (instance, first ms, last ms)."""
    runs: list[tuple[str, int, int]] = []
    for ts, instance in samples:
        if runs and runs[-1][0] == instance:
            runs[-1] = (instance, runs[-1][1], ts)
        else:
            runs.append((instance, ts, ts))
    return runs


def crowded_windows(samples: list[tuple[int, str]], interval_ms: int) -> int:
    """Export windows (``interval_ms`` long) in which more than one instance reported."""
    windows: dict[int, set[str]] = {}
    for ts, instance in samples:
        windows.setdefault(ts // interval_ms, set()).add(instance)
    return sum(1 for who in windows.values() if len(who) > 1)


def check_once_per_window(samples: list[tuple[int, str]], interval_ms: int, exits: int) -> None:
    """One reporter at a time: a new one only when a worker went (at most ``exits`` times).

    A window of one export interval holds one reporter, except where the role
    passed from a worker that went to another: there, the last point of one
    and the first of the next may share a window.
    """
    assert len(samples) >= 4, f"too few points of {SHARED}: {samples}"
    runs = terms(samples)
    assert len(runs) <= exits + 1, f"{len(runs)} terms with {exits} exits: {runs}"
    crowded = crowded_windows(samples, interval_ms)
    assert crowded <= exits, f"{crowded} windows with two reporters, {exits} exits: {runs}"
    # Each point is one collection of one process: never two at the same instant.
    assert len({ts for ts, _ in samples}) == len(samples), "two points at one instant"


def leader(vm: VictoriaMetrics, service: str, since: float) -> str:
    """The instance that reported the newest point of the shared metric."""

    def newest() -> str:
        samples = shared_samples(vm, service, since)
        assert samples, "no shared point yet"
        return samples[-1][1]

    return wait_until(newest, 20, "a shared point")


def live_pid(output: Callable[[], str], instance: str) -> int:
    """The live worker that holds ``instance`` (the newest that announced it), once there is one."""

    def holder() -> int:
        workers = announced(output())
        for worker in reversed(workers):
            if worker.instance == instance:
                try:
                    if psutil.Process(worker.pid).status() != psutil.STATUS_ZOMBIE:
                        return worker.pid
                except psutil.NoSuchProcess:
                    pass
                break
        raise AssertionError(f"no live worker holds {instance}: {workers}")

    return wait_until(holder, 20, f"a live worker in the slot of {instance}")


def kill_the_leader_and_wait(
    vm: VictoriaMetrics, service: str, output: Callable[[], str], interval_s: float, since: float
) -> tuple[float, float, str, str]:
    """SIGKILL the reporting worker; wait for the next shared point from anyone.

    Returns (kill time, first point's time after it, killed instance, next instance).
    """
    instance = leader(vm, service, since)
    pid = live_pid(output, instance)
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)

    def next_point() -> tuple[float, str]:
        after = [(ts, who) for ts, who in shared_samples(vm, service, killed_at)]
        assert after, "no shared point since the kill"
        return after[0][0] / 1000, after[0][1]

    at, successor = wait_until(next_point, 10 * interval_s + 10, "a shared point after the kill")
    return killed_at, at, instance, successor


def collections_of(
    vm: VictoriaMetrics, service: str, instance: str, start: float, end: float
) -> int:
    """How many collections ``instance`` of ``service`` exported from ``start`` to ``end``.

    Each collection of a worker carries one point of its own process metrics, at
    the collection's time.
    """
    rows = vm.export(
        f'{PER_PROCESS}{{service_name="{service}", service_instance_id="{instance}"}}', start=start
    )
    return len({ts for row in rows for ts in row["timestamps"] if ts <= end * 1000})
