"""A second instrument() is a no-op, and says which options it ignored and how to apply them."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from opentelemetry.sdk.metrics import MeterProvider

from opentelemetry.instrumentation.process import ProcessInstrumentor

from .conftest import LOGGER, Sdk, package_warnings


def test_second_instrument_warns_once_naming_its_options(
    sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sdk.instrument()
    before = set(sdk.collect())
    assert package_warnings(caplog) == []
    ProcessInstrumentor().instrument(per_thread=True, include=["system.disk.*"])
    after = set(sdk.collect())
    assert after == before  # still a no-op: the options in force stay
    assert not any(n.startswith("process_metrics.thread.") for n in after)
    [warning] = package_warnings(caplog)
    assert warning == (
        "instrument(per_thread=True, include=['system.disk.*']) ignored: already instrumented, "
        "the options in force stay. To apply them, call uninstrument() first, then "
        "instrument() with them."
    )
    options = ProcessInstrumentor().options
    assert options is not None and options.per_thread is False


def test_the_advice_works(sdk: Sdk) -> None:
    sdk.instrument()
    ProcessInstrumentor().uninstrument()
    sdk.instrument(per_thread=True)
    assert any(n.startswith("process_metrics.thread.") for n in sdk.collect())


def test_a_second_call_without_options_adds_no_warning_of_ours(
    provider: MeterProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    inst = ProcessInstrumentor()
    try:
        inst.instrument(meter_provider=provider)
        inst.instrument()  # what opentelemetry-instrument calls: the base class's note only
        inst.instrument(skip_dep_check=True, tracer_provider=None)
    finally:
        inst.uninstrument()
    assert package_warnings(caplog) == []
    generic = [r for r in caplog.records if "already instrumented" in r.getMessage()]
    assert len(generic) == 2 and not any(r.name.startswith(LOGGER) for r in generic)


def test_a_huge_option_is_shown_as_an_excerpt(
    instrument: Callable[..., ProcessInstrumentor], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    instrument()
    ProcessInstrumentor().instrument(include=["x" * 10_000] * 1_000, exclude=["y" * 10_000])
    [warning] = package_warnings(caplog)
    assert len(warning) < 600
    assert warning.startswith("instrument(include=[") and "uninstrument() first" in warning
