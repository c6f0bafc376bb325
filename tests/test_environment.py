"""Options from the environment: how each variable is parsed, what a bad value does, precedence.

A bad value warns once and the default applies; one bad entry of INCLUDE or
EXCLUDE is left out with a warning and the valid entries apply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.environment import (
    ENV_VARS,
    from_environment,
    resolve,
)
from opentelemetry.instrumentation.process.options import MAX_PATTERNS

from .conftest import LOGGER, Sdk, package_warnings
from .support.examples import ROOT

FromEnv = Callable[[str, str], ProcessMetricsOptions]


@pytest.fixture
def from_env(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    instrument: Callable[..., ProcessInstrumentor],
) -> FromEnv:
    """Instrument with ``option``'s variable set to ``raw`` (logs captured): the options taken."""

    def _from_env(option: str, raw: str) -> ProcessMetricsOptions:
        monkeypatch.setenv(ENV_VARS[option], raw)
        caplog.set_level(logging.DEBUG, logger=LOGGER)
        inst = instrument()
        assert inst.options is not None
        return inst.options

    return _from_env


def test_a_bad_include_entry_keeps_the_valid_ones(
    from_env: FromEnv, caplog: pytest.LogCaptureFixture, sdk: Sdk
) -> None:
    assert from_env("include", "system.disk.*,bogus.*").include == ("system.disk.*",)
    assert package_warnings(caplog) == [
        "OTEL_PYTHON_PROCESS_METRICS_INCLUDE: the entry 'bogus.*' is not valid (include: the "
        "glob 'bogus.*' matches no metric; allowed: names or globs over the names in the metric "
        "reference); it is left out, the other entries apply."
    ]
    assert "system.disk.io" in sdk.collect()


def test_each_bad_exclude_entry_gets_its_own_warning(
    from_env: FromEnv, caplog: pytest.LogCaptureFixture, sdk: Sdk
) -> None:
    assert from_env("exclude", " zzz* , cpython.gc.*, process.nope ").exclude == ("cpython.gc.*",)
    got = package_warnings(caplog)
    assert len(got) == 2
    assert got[0].startswith("OTEL_PYTHON_PROCESS_METRICS_EXCLUDE: the entry 'zzz*' is not valid")
    assert got[1].startswith(
        "OTEL_PYTHON_PROCESS_METRICS_EXCLUDE: the entry 'process.nope' is not valid (exclude: "
        "unknown metric name 'process.nope' (did you mean 'process.uptime'?)"
    )
    names = set(sdk.collect())
    assert "process.cpu.time" in names
    assert not any(n.startswith("cpython.gc.") for n in names)


def test_a_huge_bad_entry_is_shown_as_a_bounded_excerpt(
    from_env: FromEnv, caplog: pytest.LogCaptureFixture
) -> None:
    assert from_env("include", "system.network.*," + "q" * 100_000).include == ("system.network.*",)
    [warning] = package_warnings(caplog)
    assert "q" * 150 in warning and len(warning) < 700


def test_a_list_with_no_valid_entry_warns_once_and_uses_the_default(
    from_env: FromEnv, caplog: pytest.LogCaptureFixture
) -> None:
    assert from_env("include", "bogus.*,zzz*").include == ()
    [warning] = package_warnings(caplog)
    assert warning.startswith("OTEL_PYTHON_PROCESS_METRICS_INCLUDE='bogus.*,zzz*' is not valid")
    assert warning.endswith("using the default, none.")


@pytest.mark.parametrize("raw", [",", " , ,"])
def test_a_list_that_names_nothing_warns_once(
    raw: str, from_env: FromEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """Text that is not blank but names no metric is a mistake, as any other text."""
    assert from_env("include", raw).include == ()
    [warning] = package_warnings(caplog)
    assert "expected comma-separated metric names or globs, got none" in warning


def test_too_many_entries_warn_once_not_once_each(
    from_env: FromEnv, caplog: pytest.LogCaptureFixture
) -> None:
    assert from_env("exclude", ",".join(["cpython.gc.*"] + ["bogus.*"] * 10_000)).exclude == ()
    [warning] = package_warnings(caplog)
    assert "expected at most 100 metric names or globs" in warning


def test_from_code_one_bad_entry_still_raises(
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    with pytest.raises(ValueError, match=r"include: the glob 'bogus\.\*' matches no metric"):
        instrument(include=["system.disk.*", "bogus.*"])


def test_a_list_at_the_limit_is_still_filtered_entry_by_entry(
    from_env: FromEnv, caplog: pytest.LogCaptureFixture
) -> None:
    assert (
        from_env("exclude", ",".join(["cpython.gc.*"] * 99 + ["bogus.*"])).exclude
        == ("cpython.gc.*",) * 99
    )
    [warning] = package_warnings(caplog)
    assert "the entry 'bogus.*' is not valid" in warning


@pytest.mark.parametrize("word", ["true", "TRUE", "1", "yes", "Yes", " true ", "on", "ON"])
def test_env_booleans_true(word: str) -> None:
    assert from_environment({ENV_VARS["per_cpu"]: word}) == {"per_cpu": True}


@pytest.mark.parametrize("word", ["false", "False", "0", "no", "NO", "off", " Off "])
def test_env_booleans_false(word: str) -> None:
    assert from_environment({ENV_VARS["per_cpu"]: word}) == {"per_cpu": False}


def test_env_lists_and_numbers() -> None:
    env = {
        ENV_VARS["include"]: "system.disk.*, system.network.io",
        ENV_VARS["exclude"]: "cpython.*",
        ENV_VARS["max_thread_series"]: "10",
    }
    assert from_environment(env) == {
        "include": ("system.disk.*", "system.network.io"),
        "exclude": ("cpython.*",),
        "max_thread_series": 10,
    }


_ALLOWED = "allowed: names or globs over the names in the metric reference"


_ODD = (
    "max_thread_series: expected an even number (each thread has a user and a system series), got "
)


# (option, raw value, the reason the warning gives in full)
BAD_ENV = [
    ("cpu_frequency", "maybe", "expected one of true, false, yes, no, on, off, 1, 0 (any case)"),
    ("per_thread", "2", "expected one of true, false, yes, no, on, off, 1, 0 (any case)"),
    ("saturation", "maybe", "expected one of auto, true, false, yes, no, on, off, 1, 0 (any case)"),
    ("max_thread_series", "-5", "max_thread_series: expected a whole number >= 0, got -5"),
    ("max_thread_series", "many", "expected a whole number >= 0"),
    ("max_thread_series", "7", _ODD + "7"),
    # The reason is cut at 300 characters: this one would be 386.
    ("max_thread_series", "9" * 301, (_ODD + "9" * 301)[:300]),
    (
        "include",
        "process.nope",
        f"include: unknown metric name 'process.nope' (did you mean 'process.uptime'?); {_ALLOWED}",
    ),
    ("exclude", "zzz*", f"exclude: the glob 'zzz*' matches no metric; {_ALLOWED}"),
    (
        "thread_series_by",
        "threads",
        "expected one of thread, name (any case)",
    ),
]


def _shown(raw: str) -> str:
    """How a raw value is quoted in a warning: its repr, cut to 200 characters."""
    text = repr(raw)
    return text if len(text) <= 200 else text[:195] + "...)'"


@pytest.mark.parametrize(("option", "raw", "reason"), BAD_ENV, ids=lambda x: str(x)[:20])
def test_bad_env_warns_once_and_uses_the_default(
    option: str,
    raw: str,
    reason: str,
    from_env: FromEnv,
    caplog: pytest.LogCaptureFixture,
    sdk: Sdk,
) -> None:
    var = ENV_VARS[option]
    options = from_env(option, raw)
    warnings = [
        r for r in caplog.records if r.name.startswith(LOGGER) and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1
    default = getattr(ProcessMetricsOptions(), option)
    shown = "none" if default == () else repr(default)
    assert warnings[0].getMessage() == (
        f"{var}={_shown(raw)} is not valid ({reason}); using the default, {shown}."
    )
    assert getattr(options, option) == default
    assert "process.cpu.time" in sdk.collect()


def test_precedence_code_then_env_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VARS["per_cpu"], "true")
    monkeypatch.setenv(ENV_VARS["max_thread_series"], "8")
    resolved = resolve({"max_thread_series": 4})
    assert resolved.max_thread_series == 4  # code beats env
    assert resolved.per_cpu is True  # env beats default
    assert resolved.per_thread is False  # default
    # A whole options object is explicit about everything: env is not read.
    whole = resolve({"options": ProcessMetricsOptions(per_thread=True)})
    assert whole.per_cpu is False and whole.per_thread is True
    # Keywords override fields of a given options object.
    mixed = resolve({"options": ProcessMetricsOptions(per_thread=True), "per_cpu": True})
    assert mixed.per_thread is True and mixed.per_cpu is True


INCLUDE_EXCLUDE_RULE = (
    "In the `include` and `exclude` variables, each bad entry is left out with a warning of "
    "its own and the valid entries apply; a list with no valid entry, or with more than "
    f"{MAX_PATTERNS} entries, is one bad variable: one warning, and the default."
)


def test_the_docs_state_the_rule_for_a_bad_include_or_exclude_variable_as_it_is() -> None:
    """README and configuration: the rule the tests above hold, said where the fallback is."""
    for page in (ROOT / "README.md", ROOT / "docs" / "configuration.md"):
        text = " ".join(page.read_text().split())
        assert INCLUDE_EXCLUDE_RULE in text, page.name
    # The rule, in the order it is written.
    var = ENV_VARS["exclude"]
    assert from_environment({var: "cpython.gc.*,bogus.*"}) == {"exclude": ("cpython.gc.*",)}
    assert from_environment({var: "bogus.*,zzz*"}) == {}
    assert from_environment({var: ",".join(["cpython.gc.*"] * (MAX_PATTERNS + 1))}) == {}
