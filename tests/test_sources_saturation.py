"""The saturation group through the instrumentor: when it is off, and cgroup files that fail.

- Auto mode in a cgroup without limits reports no cgroup metric and opens no
  cgroup file at collection; ``saturation=False`` opens no pressure file either.
- Faults on a cgroup v2 fixture tree (v2 controllers are not available on the
  test machine; a vanished v1 cgroup is in ``test_sources_saturation_real.py``): a file
  that vanishes, cannot be read (a folder in its place) or holds garbage drops
  only the metrics it feeds, is logged once, never raises, and the metrics come
  back when the file does. Discovery is pointed at the tree by replacing
  ``cgroup.discover`` with one bound to it: its folders are default arguments,
  bound when the module is imported, so patching ``CGROUP_ROOT`` would not reach it.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.linux import cgroup
from opentelemetry.instrumentation.process.metrics import METRICS

from .conftest import OpenRecorder, Sdk, cgroup_limited_here, collect, points, value

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CGROUP_METRICS = {m.name for m in METRICS if m.source in ("cgroup_cpu", "cgroup_memory")}
PRESSURE_METRICS = {m.name for m in METRICS if m.source == "pressure"}
# Read at instrument() to decide whether a limit applies (and for the limits gauges).
LIMIT_FILES = {
    "cgroup.controllers",
    "cpu.max",
    "memory.max",
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
    "memory.limit_in_bytes",
}


def under(paths: list[str], prefix: str) -> list[str]:
    return [p for p in paths if p.startswith(prefix)]


def test_auto_mode_without_a_limit_reports_no_cgroup_metric_and_reads_no_cgroup_file(
    sdk: Sdk, opens: OpenRecorder
) -> None:
    if cgroup_limited_here():
        pytest.skip("this process is in a limited cgroup: auto mode turns the group on")
    with opens.recording() as at_start:
        sdk.instrument()
    with opens.recording() as collecting:
        got = sdk.collect()
        got = sdk.collect()
    assert not CGROUP_METRICS & set(got)
    # Deciding reads the limit files once; no file a collection would read. (A
    # process in a cgroup v2 of its own reads that cgroup's pressure files.)
    names = {Path(p).name for p in under(at_start, "/sys/fs/cgroup")}
    assert {n for n in names if not n.endswith(".pressure")} <= LIMIT_FILES
    assert [p for p in under(collecting, "/sys/fs/cgroup") if not p.endswith(".pressure")] == []
    # Pressure stalls are on wherever the kernel has them, each file read once a collection.
    present = {m.name for m in METRICS if m.source == "pressure" and _psi(m.field)}
    assert {n for n in PRESSURE_METRICS if n in got} == present
    pressure = Counter(
        p for p in collecting if p.startswith("/proc/pressure/") or p.endswith(".pressure")
    )
    assert set(pressure.values()) <= {2}
    assert {Path(p).name.removesuffix(".pressure") for p in pressure} == {
        m.field for m in METRICS if m.name in present
    }


def _psi(resource: str) -> bool:
    return os.path.exists(f"/proc/pressure/{resource}")


def test_saturation_false_reads_no_cgroup_and_no_pressure_file(
    sdk: Sdk, opens: OpenRecorder
) -> None:
    with opens.recording() as at_start:
        sdk.instrument(saturation=False)
    with opens.recording() as collecting:
        got = sdk.collect()
    assert not (CGROUP_METRICS | PRESSURE_METRICS) & set(got)
    assert under(at_start + collecting, "/proc/pressure") == []
    assert [p for p in at_start + collecting if p.endswith(".pressure")] == []
    # Only the limits, for the utilisation divisors and their gauges.
    assert {Path(p).name for p in under(at_start, "/sys/fs/cgroup")} <= LIMIT_FILES
    assert under(collecting, "/sys/fs/cgroup") == []
    assert "process_metrics.cpu.available" in got


# --- faults, on a v2 fixture tree ----------------------------------------------------------

CONTROLLERS = "cpuset cpu io memory pids\n"
PSI = "some avg10=1.50 avg60=0.80 avg300=0.20 total={some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"  # noqa: E501
APP = "kubepods/pod1/app"
TREE = {
    "cgroup.controllers": CONTROLLERS,
    "kubepods/cgroup.controllers": CONTROLLERS,
    "kubepods/cgroup.type": "domain\n",
    "kubepods/pod1/cgroup.controllers": CONTROLLERS,
    "kubepods/pod1/cgroup.type": "domain\n",
    "kubepods/pod1/cpu.max": "150000 100000\n",
    "kubepods/pod1/memory.max": "268435456\n",
    f"{APP}/cgroup.controllers": CONTROLLERS,
    f"{APP}/cgroup.type": "domain\n",
    f"{APP}/cpu.max": "max 100000\n",
    f"{APP}/memory.max": "max\n",
    f"{APP}/cpu.stat": (
        "usage_usec 7543210\nuser_usec 5234567\nsystem_usec 2308643\n"
        "nr_periods 1200\nnr_throttled 345\nthrottled_usec 67890123\n"
        "nr_bursts 0\nburst_usec 0\n"
    ),
    f"{APP}/memory.current": "161480704\n",
    f"{APP}/memory.peak": "201326592\n",
    f"{APP}/memory.stat": "anon 104857600\nfile 52428800\ninactive_file 31457280\n"
    "active_file 20971520\npgfault 12345\n",
    f"{APP}/memory.events": "low 0\nhigh 3\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n",
    f"{APP}/cpu.pressure": PSI.format(some=2500000, full=1000000),
    f"{APP}/memory.pressure": PSI.format(some=400000, full=300000),
    f"{APP}/io.pressure": PSI.format(some=70000, full=60000),
}
EXPECTED: dict[str, dict[frozenset[tuple[str, str]], float]] = {
    "process_metrics.cgroup.cpu.periods": {frozenset(): 1200},
    "process_metrics.cgroup.cpu.throttled_periods": {frozenset(): 345},
    "process_metrics.cgroup.cpu.throttled_time": {frozenset(): 67.890123},
    "container.cpu.time": {
        frozenset({("cpu.mode", "user")}): 5.234567,
        frozenset({("cpu.mode", "kernel")}): 2.308643,
    },
    "container.memory.usage": {frozenset(): 161480704},
    "container.memory.working_set": {frozenset(): 161480704 - 31457280},
    "process_metrics.cgroup.memory.limit": {frozenset(): 268435456},
    "process_metrics.cgroup.memory.peak": {frozenset(): 201326592},
    "process_metrics.cgroup.memory.events": {
        frozenset({("process_metrics.cgroup.memory.event", e)}): n
        for e, n in (("high", 3), ("max", 17), ("oom", 2), ("oom_kill", 1))
    },
    **{
        f"process_metrics.{resource}.linux.pressure.stall_time": {
            frozenset(
                {
                    ("process_metrics.pressure.stall_type", kind),
                    ("process_metrics.pressure.scope", "cgroup"),
                }
            ): total
            for kind, total in zip(("some", "full"), totals, strict=True)
        }
        for resource, totals in (("cpu", (2.5, 1.0)), ("memory", (0.4, 0.3)), ("io", (0.07, 0.06)))
    },
}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The app's folder in a v2 fixture tree that discovery (and the facts) now find."""
    root = tmp_path / "sys-fs-cgroup"
    for rel, content in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(f"0::/{APP}\n")
    real = cgroup.discover

    def discover(*_args: object) -> cgroup.CgroupPaths:
        return real(root, proc)

    monkeypatch.setattr(cgroup, "discover", functools.wraps(real)(discover))
    yield root / APP


def ours(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    got = collect(reader)
    return {name: points(got[name]) for name in set(EXPECTED) & set(got)}


def garbage(path: Path) -> None:
    path.write_text("garbage\n")


def folder(path: Path) -> None:
    path.unlink()
    path.mkdir()  # open() succeeds, read() fails: IsADirectoryError


def vanish(path: Path) -> None:
    path.unlink()


FAULTS = {"garbage": (garbage, "ValueError"), "folder": (folder, "IsADirectoryError"),
          "vanished": (vanish, "FileNotFoundError")}  # fmt: skip
CPU = {n for n in EXPECTED if n.startswith("process_metrics.cgroup.cpu.")} | {"container.cpu.time"}


@pytest.mark.parametrize(
    ("name", "fault", "drops"),
    [
        ("memory.current", "garbage", {"container.memory.usage", "container.memory.working_set"}),
        ("memory.stat", "folder", {"container.memory.working_set"}),
        ("memory.peak", "garbage", {"process_metrics.cgroup.memory.peak"}),
        ("memory.events", "vanished", {"process_metrics.cgroup.memory.events"}),
        ("cpu.stat", "vanished", CPU),
        ("cpu.stat", "garbage", CPU),
        ("cpu.pressure", "garbage", {"process_metrics.cpu.linux.pressure.stall_time"}),
        ("io.pressure", "folder", {"process_metrics.io.linux.pressure.stall_time"}),
        ("memory.pressure", "vanished", {"process_metrics.memory.linux.pressure.stall_time"}),
    ],
)
def test_a_failing_file_drops_only_what_it_feeds_is_logged_once_and_comes_back(
    name: str, fault: str, drops: set[str], tree: Path, sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.process")
    sdk.instrument()  # auto: the limits on the ancestor turn the group on
    assert ours(sdk.reader) == EXPECTED
    got = sdk.collect()
    assert value(got["process_metrics.cpu.available"]) == min(1.5, len(os.sched_getaffinity(0)))
    assert value(got["process_metrics.memory.limit"]) == 268435456

    path = tree / name
    saved = path.read_bytes()
    break_it, exc_name = FAULTS[fault]
    break_it(path)
    caplog.clear()
    broken = ours(sdk.reader)  # never raises
    assert broken == {k: v for k, v in EXPECTED.items() if k not in drops}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert f"could not read {path} ({exc_name}" in warnings[0].getMessage()
    if fault == "garbage":
        assert "b'garbage\\n'" in warnings[0].getMessage()  # an excerpt of what it held
    caplog.clear()
    assert ours(sdk.reader) == broken
    assert caplog.records == []  # once, not at every collection

    if path.is_dir():
        path.rmdir()
    path.write_bytes(saved)
    assert ours(sdk.reader) == EXPECTED
    assert [r.getMessage() for r in caplog.records] == [
        f"process metrics: {path} can be read again."
    ]


def test_a_cgroup_folder_removed_from_the_tree_drops_its_metrics_and_the_rest_goes_on(
    tree: Path, sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole cgroup goes (as its container does): every file of it at once."""
    caplog.set_level(logging.DEBUG, logger="opentelemetry.instrumentation.process")
    sdk.instrument()
    assert ours(sdk.reader) == EXPECTED
    saved = tree.with_name("saved")
    tree.rename(saved)
    caplog.clear()
    got = ours(sdk.reader)
    # Only the limit, found at discovery, is left.
    assert got == {"process_metrics.cgroup.memory.limit": {frozenset(): 268435456}}
    assert "process.cpu.time" in sdk.collect()  # the rest of the collection goes on
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 8  # one per file
    saved.rename(tree)
    assert ours(sdk.reader) == EXPECTED


def test_the_files_of_the_group_are_found_once_per_process(
    tree: Path,
    instrument: Callable[..., ProcessInstrumentor],
    opens: OpenRecorder,
) -> None:
    """The cpu and the memory sources share one search for the files to read."""
    with opens.recording() as at_start:
        instrument()
    counts = Counter(Path(p).name for p in under(at_start, str(tree)))
    # A one-number file is read once to see that it reads; a flat-keyed one also
    # once before, to see which of its optional lines this kernel writes.
    assert {n: counts[n] for n in ("memory.current", "memory.peak", "memory.stat")} == {
        "memory.current": 1,
        "memory.peak": 1,
        "memory.stat": 1,
    }
    assert {n: counts[n] for n in ("cpu.stat", "memory.events")} == {
        "cpu.stat": 2,
        "memory.events": 2,
    }
