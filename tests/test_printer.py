"""The readable printer of the snapshot command and the demo: units, alignment, notes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.metrics import METRICS_BY_NAME
from opentelemetry.instrumentation.process.printer import (
    FOOTNOTES,
    Point,
    footnotes,
    label,
    readable,
    table,
)

from .conftest import collect, value

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (0.125, "1", "12.5 %"),
        (0.0, "1", "0.0 %"),
        (512, "By", "512 B"),
        (1536, "By", "1.5 KiB"),
        (3 * 2**20 + 2**19, "By", "3.5 MiB"),
        (25 * 2**30, "By", "25.0 GiB"),
        (2000 * 2**30, "By", "2,000.0 GiB"),
        (0.0, "s", "0 s"),
        (0.000219, "s", "219 µs"),
        (0.0041, "s", "4.10 ms"),
        (1.5, "s", "1.500 s"),
        (3725.0, "s", "3,725.000 s"),
        (2_400_000_000, "Hz", "2.40 GHz"),
        (800_000_000, "Hz", "800 MHz"),
        (20000, "{file_descriptor}", "20,000"),
        (2.0, "{cpu}", "2"),
        (0.5, "{cpu}", "0.5"),
    ],
)
def test_readable_writes_each_unit_as_a_person_would(value: float, unit: str, shown: str) -> None:
    assert readable(value, unit) == shown


def test_a_duration_on_a_boundary_is_written_in_the_larger_unit() -> None:
    assert [readable(v, "s") for v in (0.001, 1.0)] == ["1.00 ms", "1.000 s"]


def test_a_label_is_the_words_and_the_counted_numbers_of_a_point() -> None:
    assert label({}) == ""
    assert label({"cpu.mode": "user"}) == "user"
    assert label({"cpython.gc.generation": 0}) == "generation 0"
    assert label({"process_metrics.worker.slot": 3, "cpu.mode": "user"}) == "slot 3,user"
    assert label({"process_metrics.pressure.stall_type": "some", "x.scope": "host"}) == (
        "some,host"
    )


def test_the_values_start_in_one_column_whatever_the_length_of_the_names() -> None:
    points = [
        Point("process.uptime", "s", {}, 1.25),
        Point("process_metrics.memory.linux.pressure.stall_time", "s", {"t": "some"}, 0.0),
        Point("process_metrics.memory.linux.pressure.stall_time", "s", {"t": "full"}, 2.0),
        Point("process.thread.count", "{thread}", {}, 3),
    ]
    lines = table(points, {"process.uptime": "since start"})
    assert lines == [
        "process.uptime                                    1.250 s   <- since start",
        "process_metrics.memory.linux.pressure.stall_time  some=0 s  full=2.000 s",
        "process.thread.count                              3",
    ]
    assert table([]) == []


def test_footnotes_name_metrics_of_the_table_and_show_only_with_them() -> None:
    for metrics, text in FOOTNOTES:
        assert metrics <= set(METRICS_BY_NAME), metrics
        assert all(name in text for name in metrics)
    [disk] = FOOTNOTES
    assert footnotes(["process.disk.io", "process.disk.operations", "x"]) == [disk[1]]
    assert footnotes(["process.disk.io"]) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_read_from_the_page_cache_adds_an_operation_not_bytes(
    tmp_path: Path, provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    """The disk note: reads served from the page cache count in disk.operations only."""
    data = tmp_path / "cached"
    data.write_bytes(os.urandom(64 * 1024))
    with ProcessMetrics(ProcessMetricsOptions(), meter_provider=provider):
        fd = os.open(data, os.O_RDONLY)
        try:
            os.pread(fd, 64 * 1024, 0)  # now in the page cache, if it was not
            before = collect(reader)
            for _ in range(100):
                assert len(os.pread(fd, 64 * 1024, 0)) == 64 * 1024
            middle = collect(reader)
            pipe_out, pipe_in = os.pipe()
            try:
                for _ in range(100):  # a pipe, not a file: calls, never storage
                    os.write(pipe_in, b"x")
                    assert os.read(pipe_out, 1) == b"x"
            finally:
                os.close(pipe_out)
                os.close(pipe_in)
            after = collect(reader)
        finally:
            os.close(fd)

    def grew(name: str, direction: str, start: dict[str, Any], end: dict[str, Any]) -> float:
        way = {"disk.io.direction": direction}
        return float(value(end[name], **way) - value(start[name], **way))

    assert grew("process.disk.operations", "read", before, middle) >= 100
    # 6.4 MB read through pread(2); storage gave next to none of it.
    assert grew("process.disk.io", "read", before, middle) < 64 * 1024
    for direction in ("read", "write"):
        assert grew("process.disk.operations", direction, middle, after) >= 100, direction


def test_the_demo_prints_with_the_package_printer_and_has_no_copy_of_it() -> None:
    demo = (ROOT / "examples" / "console_demo.py").read_text()
    assert "from opentelemetry.instrumentation.process.printer import" in demo
    for own in ("def readable", "def label", "def table", "def _line", ":<44"):
        assert own not in demo, own
