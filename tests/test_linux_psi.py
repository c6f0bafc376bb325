"""Pressure stall information: the host's real /proc/pressure, and v2 cgroup fixture trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from opentelemetry.instrumentation.process.linux.cgroup import discover
from opentelemetry.instrumentation.process.linux.files import read_all
from opentelemetry.instrumentation.process.linux.psi import (
    PROC_PRESSURE,
    discover_pressure,
    field,
)

from .support.cgroups import between, total
from .support.trees import fake_proc, write_tree

LINE = "avg10=1.23 avg60=0.80 avg300=0.20"


def pressure(some: int, full: int | None) -> str:
    text = f"some {LINE} total={some}\n"
    return text + (f"full {LINE} total={full}\n" if full is not None else "")


def stalled(**seconds: tuple[float, float | None]) -> dict[object, float]:
    """The values a read gives: each resource's ``(some, full)`` seconds (``full`` may be None)."""
    out: dict[object, float] = {}
    for resource, (some, full) in seconds.items():
        out[field(resource, "some")] = some
        if full is not None:
            out[field(resource, "full")] = full
    return out


def test_host_pressure_matches_proc_pressure() -> None:
    if not (PROC_PRESSURE / "cpu").is_file():
        pytest.skip("this kernel has no /proc/pressure (CONFIG_PSI off, or psi=0)")
    found = discover_pressure(discover())
    if found.scope != "host":
        pytest.skip("this process is in a non-root v2 cgroup: its own pressure is read")
    before = {r: (PROC_PRESSURE / r).read_bytes() for r in ("cpu", "memory", "io")}
    values, failures = read_all(found.files)
    after = {r: (PROC_PRESSURE / r).read_bytes() for r in ("cpu", "memory", "io")}
    assert failures == []
    for resource, kind in [("cpu", "some"), ("memory", "some"), ("memory", "full")]:
        low, high = total(before[resource], kind), total(after[resource], kind)
        assert between(low / 1e6, values[field(resource, kind)], high / 1e6)
    for kind in ("some", "full"):
        low, high = total(before["io"], kind), total(after["io"], kind)
        assert between(low / 1e6, values[field("io", kind)], high / 1e6)
    # Undefined for the host as a whole (psi.rst): zeros, or noise before 5.18.
    assert field("cpu", "full") not in values
    assert set(values) == {
        field(r, k) for r in ("cpu", "memory", "io") for k in ("some", "full")
    } - {field("cpu", "full")}


def v2_tree(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    sys_fs = tmp_path / "sys-fs-cgroup"
    write_tree(sys_fs, {"cgroup.controllers": "cpu memory io\n", **files})
    return sys_fs, fake_proc(tmp_path, "0::/app\n")


def test_cgroup_pressure_on_v2(tmp_path: Path) -> None:
    sys_fs, proc = v2_tree(
        tmp_path,
        {
            "app/cgroup.type": "domain\n",
            "app/cpu.pressure": pressure(4567890, 1234567),
            "app/memory.pressure": pressure(222, 111),
            "app/io.pressure": pressure(0, 0),
            "cpu.pressure": pressure(9, 9),  # the root's: the host's, not read
        },
    )
    found = discover_pressure(discover(sys_fs, proc), tmp_path / "proc-pressure")
    assert found.scope == "cgroup"
    values, failures = read_all(found.files)
    assert failures == []
    # The cpu full line is defined for a cgroup (Linux 5.13+).
    assert values == stalled(cpu=(4.567890, 1.234567), memory=(0.000222, 0.000111), io=(0, 0))


def test_cpu_without_a_full_line_and_a_missing_resource(tmp_path: Path) -> None:
    sys_fs, proc = v2_tree(
        tmp_path,
        {
            "app/cgroup.type": "domain\n",
            "app/cpu.pressure": pressure(5000000, None),  # before Linux 5.13
            "app/memory.pressure": pressure(1000000, 500000),
        },
    )
    found = discover_pressure(discover(sys_fs, proc), tmp_path / "proc-pressure")
    values, failures = read_all(found.files)
    assert failures == []
    assert values == stalled(cpu=(5.0, None), memory=(1.0, 0.5))


def test_the_root_cgroup_reads_the_host_files(tmp_path: Path) -> None:
    proc_pressure = tmp_path / "proc-pressure"
    write_tree(
        proc_pressure,
        {"cpu": pressure(3000000, 0), "memory": pressure(2000000, 1000000)},
    )
    sys_fs, _ = v2_tree(tmp_path, {"cpu.pressure": pressure(3000000, 0)})
    found = discover_pressure(discover(sys_fs, fake_proc(tmp_path, "0::/\n")), proc_pressure)
    assert found.scope == "host"
    assert [f.path for f in found.files] == [str(proc_pressure / r) for r in ("cpu", "memory")]
    values, _ = read_all(found.files)
    assert values == stalled(cpu=(3.0, None), memory=(2.0, 1.0))


def test_unreadable_cgroup_pressure_falls_back_to_the_host(tmp_path: Path) -> None:
    # With cgroup.pressure set to 0, reads fail: the host's files are read instead.
    proc_pressure = tmp_path / "proc-pressure"
    write_tree(proc_pressure, {"io": pressure(7, 6)})
    sys_fs, proc = v2_tree(tmp_path, {"app/cgroup.type": "domain\n"})
    for resource in ("cpu", "memory", "io"):
        (sys_fs / "app" / f"{resource}.pressure").mkdir()
    found = discover_pressure(discover(sys_fs, proc), proc_pressure)
    assert found.scope == "host"
    assert read_all(found.files) == ({field("io", "some"): 7e-6, field("io", "full"): 6e-6}, [])


@pytest.mark.parametrize(
    "content",
    [
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=abc\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00\n",
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n",
        f"some {LINE} total=12\nfull {LINE} total=",  # cut short
        "",
    ],
)
def test_garbage_drops_only_that_resource(tmp_path: Path, content: str) -> None:
    sys_fs, proc = v2_tree(
        tmp_path,
        {
            "app/cgroup.type": "domain\n",
            "app/cpu.pressure": pressure(1000000, 0),
            "app/memory.pressure": pressure(2000000, 1000000),
        },
    )
    found = discover_pressure(discover(sys_fs, proc))
    (sys_fs / "app/memory.pressure").write_text(content)
    values, failures = read_all(found.files)
    assert [(f.path, type(e)) for f, e in failures] == [
        (str(sys_fs / "app/memory.pressure"), ValueError)
    ]
    assert values == {field("cpu", "some"): 1.0, field("cpu", "full"): 0.0}


# Layouts a future kernel may write: a new field, total= elsewhere, no full line.
# (content of /proc/pressure/<resource>, the totals in µs it holds)
OTHER_LAYOUTS = [
    (f"some {LINE} total=123 extra=5\nfull {LINE} total=456 extra=6\n", 123, 456),
    (f"some total=123 {LINE}\nfull total=456 {LINE}\n", 123, 456),
    ("some avg10=0.00 total=123\nfull avg10=0.00 total=456\n", 123, 456),
    (f"some {LINE} total=123 a=1 b=2\nfull {LINE} total=456 a=1 b=2\n", 123, 456),
    (f"some {LINE} total=123\n", 123, None),
    (f"some {LINE} total=123\nfull {LINE} total=456\nnew {LINE} total=789\n", 123, 456),
]


@pytest.mark.parametrize(("content", "some", "full"), OTHER_LAYOUTS)
def test_other_layouts_are_read_by_line(
    tmp_path: Path, content: str, some: int, full: int | None
) -> None:
    proc_pressure = tmp_path / "proc-pressure"
    write_tree(proc_pressure, {"cpu": content, "memory": content})
    found = discover_pressure(discover(tmp_path / "none", tmp_path / "none"), proc_pressure)
    assert found.scope == "host"
    values, failures = read_all(found.files)
    assert failures == []
    expected = {field("cpu", "some"): some / 1e6, field("memory", "some"): some / 1e6}
    if full is not None:  # the host's cpu full line is left out, whatever it holds
        expected[field("memory", "full")] = full / 1e6
    assert values == expected


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (f"full {LINE} total=1\nsome {LINE} total=2 x=1\n", "no 'some' line"),
        (f"some {LINE} x=1\nfull {LINE} total=2\n", "subsection not found"),
    ],
)
def test_a_layout_without_a_some_total_is_garbage(tmp_path: Path, content: str, why: str) -> None:
    proc_pressure = tmp_path / "proc-pressure"
    write_tree(proc_pressure, {"io": content})
    found = discover_pressure(discover(tmp_path / "none", tmp_path / "none"), proc_pressure)
    ((failed, exc),) = read_all(found.files)[1]
    assert failed.path == str(proc_pressure / "io")
    shown = repr(content.encode())  # longer than 60: shortened as every excerpt is
    assert str(exc) == f"{failed.path}: {why}: {shown[:55]}...)'"
