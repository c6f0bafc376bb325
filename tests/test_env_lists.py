"""One bad entry of INCLUDE or EXCLUDE is left out with a warning; the valid entries apply."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.environment import ENV_VARS

from .conftest import LOGGER, collect, package_warnings


def test_a_bad_include_entry_keeps_the_valid_ones(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
) -> None:
    monkeypatch.setenv(ENV_VARS["include"], "system.disk.*,bogus.*")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inst = instrument()
    assert inst.options is not None and inst.options.include == ("system.disk.*",)
    assert package_warnings(caplog) == [
        "OTEL_PYTHON_PROCESS_METRICS_INCLUDE: the entry 'bogus.*' is not valid (include: the "
        "glob 'bogus.*' matches no metric; allowed: names or globs over the names in the metric "
        "reference); it is left out, the other entries apply."
    ]
    assert "system.disk.io" in collect(reader)


def test_each_bad_exclude_entry_gets_its_own_warning(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
) -> None:
    monkeypatch.setenv(ENV_VARS["exclude"], " zzz* , cpython.gc.*, process.nope ")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inst = instrument()
    assert inst.options is not None and inst.options.exclude == ("cpython.gc.*",)
    got = package_warnings(caplog)
    assert len(got) == 2
    assert got[0].startswith("OTEL_PYTHON_PROCESS_METRICS_EXCLUDE: the entry 'zzz*' is not valid")
    assert got[1].startswith(
        "OTEL_PYTHON_PROCESS_METRICS_EXCLUDE: the entry 'process.nope' is not valid (exclude: "
        "unknown metric name 'process.nope' (did you mean 'process.uptime'?)"
    )
    names = set(collect(reader))
    assert "process.cpu.time" in names
    assert not any(n.startswith("cpython.gc.") for n in names)


def test_a_huge_bad_entry_is_shown_as_a_bounded_excerpt(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    monkeypatch.setenv(ENV_VARS["include"], "system.network.*," + "q" * 100_000)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inst = instrument()
    assert inst.options is not None and inst.options.include == ("system.network.*",)
    [warning] = package_warnings(caplog)
    assert "q" * 150 in warning and len(warning) < 700


def test_a_list_with_no_valid_entry_warns_once_and_uses_the_default(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    monkeypatch.setenv(ENV_VARS["include"], "bogus.*,zzz*")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inst = instrument()
    assert inst.options is not None and inst.options.include == ()
    [warning] = package_warnings(caplog)
    assert warning.startswith("OTEL_PYTHON_PROCESS_METRICS_INCLUDE='bogus.*,zzz*' is not valid")
    assert warning.endswith("using the default, none.")


def test_too_many_entries_warn_once_not_once_each(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    monkeypatch.setenv(ENV_VARS["exclude"], ",".join(["cpython.gc.*"] + ["bogus.*"] * 10_000))
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inst = instrument()
    assert inst.options is not None and inst.options.exclude == ()
    [warning] = package_warnings(caplog)
    assert "expected at most 100 metric names or globs" in warning


def test_from_code_one_bad_entry_still_raises(
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    with pytest.raises(ValueError, match=r"include: the glob 'bogus\.\*' matches no metric"):
        instrument(include=["system.disk.*", "bogus.*"])


def test_a_list_at_the_limit_is_still_filtered_entry_by_entry(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    monkeypatch.setenv(ENV_VARS["exclude"], ",".join(["cpython.gc.*"] * 99 + ["bogus.*"]))
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inst = instrument()
    assert inst.options is not None and inst.options.exclude == ("cpython.gc.*",) * 99
    [warning] = package_warnings(caplog)
    assert "the entry 'bogus.*' is not valid" in warning
