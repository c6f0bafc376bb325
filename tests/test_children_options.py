"""Supervisor-mode options: children, max_children, child_pid, from code and environment."""

from __future__ import annotations

import logging

import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.environment import ENV_VARS, from_environment
from opentelemetry.instrumentation.process.options import DEFAULT_MAX_CHILDREN


def test_defaults_are_off_with_a_cap_of_64() -> None:
    options = ProcessMetricsOptions()
    assert options.children is False
    assert options.child_pid is False
    assert options.max_children == DEFAULT_MAX_CHILDREN == 64


@pytest.mark.parametrize(
    ("value", "shown"), [(-1, "-1"), (2.5, "2.5"), (True, "True"), ("8", "'8'"), (None, "None")]
)
def test_a_bad_cap_from_code_names_the_option(value: object, shown: str) -> None:
    with pytest.raises(ValueError) as caught:
        ProcessMetricsOptions(max_children=value)  # type: ignore[arg-type]
    assert str(caught.value) == f"max_children: expected a whole number >= 0, got {shown}"


@pytest.mark.parametrize("option", ["children", "child_pid"])
def test_flags_from_code_are_booleans_or_their_words(option: str) -> None:
    assert getattr(ProcessMetricsOptions(**{option: "yes"}), option) is True
    with pytest.raises(ValueError, match=f"^{option}: expected True or False, or one of .*'yep'$"):
        ProcessMetricsOptions(**{option: "yep"})


def test_zero_and_odd_caps_are_allowed() -> None:
    assert ProcessMetricsOptions(max_children=0).max_children == 0
    assert ProcessMetricsOptions(max_children=3).max_children == 3


def test_the_environment_sets_all_three() -> None:
    env = {
        "OTEL_PYTHON_PROCESS_METRICS_CHILDREN": "true",
        "OTEL_PYTHON_PROCESS_METRICS_MAX_CHILDREN": " 7 ",
        "OTEL_PYTHON_PROCESS_METRICS_CHILD_PID": "yes",
    }
    assert {ENV_VARS[k] for k in ("children", "max_children", "child_pid")} == set(env)
    assert from_environment(env) == {"children": True, "max_children": 7, "child_pid": True}


def test_a_bad_cap_in_the_environment_warns_once_and_keeps_the_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        found = from_environment({"OTEL_PYTHON_PROCESS_METRICS_MAX_CHILDREN": "-3"})
    assert found == {}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "OTEL_PYTHON_PROCESS_METRICS_MAX_CHILDREN='-3' is not valid (max_children: expected a "
        "whole number >= 0, got -3); using the default, 64."
    ]
