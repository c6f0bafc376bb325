"""Options: every bad value gets a clear error; env falls back with one warning."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.environment import ENV_VARS, resolve
from opentelemetry.instrumentation.process.excerpt import excerpt
from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.options import (
    BOOLEAN,
    DEFAULT_MAX_THREAD_SERIES,
    GATING_OPTIONS,
    OPTION_NAMES,
    choice,
    declared,
    whole_number,
)

from .conftest import collect
from .support.loading import load_file

LOGGER = "opentelemetry.instrumentation.process"
_WORDS = "or one of the strings 'true', 'false', 'yes', 'no', 'on', 'off', '1', '0' (any case)"

BAD_CODE = [
    ({"cpu_frequency": "maybe"}, f"cpu_frequency: expected True or False, {_WORDS}, got 'maybe'"),
    # What code may pass, not the variable's spellings: 1 is refused, so 1 is not listed.
    ({"event_loop": 1}, "event_loop: expected True or False, got 1"),
    ({"per_thread": 0}, "per_thread: expected True or False, got 0"),
    ({"per_cpu": None}, "per_cpu: expected True or False, got None"),
    (
        {"saturation": "sometimes"},
        "saturation: expected True, False or None (auto), or one of the strings 'auto', "
        "'true', 'false', 'yes', 'no', 'on', 'off', '1', '0' (any case), got 'sometimes'",
    ),
    ({"saturation": 1}, "saturation: expected True, False or None (auto), got 1"),
    (
        {"shared_metrics": 1},
        "shared_metrics: expected one of 'once', 'every' (any case), got 1",
    ),
    (
        {"include": ["process.cpu.tim"]},
        "include: unknown metric name 'process.cpu.tim' (did you mean 'process.cpu.time'?); "
        "allowed: names or globs over the names in the metric reference",
    ),
    (
        {"exclude": ["nope.*"]},
        "exclude: the glob 'nope.*' matches no metric; allowed: names or globs over the names "
        "in the metric reference",
    ),
    (
        {"include": "system.disk.*"},
        "include: expected a list of metric names or globs, got 'system.disk.*' "
        "(write ['system.disk.*'])",
    ),
    (
        {"exclude": [3]},
        "exclude: expected metric names or globs (non-empty strings of at most 200 "
        "characters), got 3",
    ),
    (
        {"include": ["x" * 2**20]},
        "include: expected metric names or globs (non-empty strings of at most 200 "
        "characters), got '" + "x" * 194 + "...)'",
    ),
    (
        {"exclude": ["process.*"] * 101},
        "exclude: expected at most 100 metric names or globs, got more",
    ),
    (
        {"max_thread_series": 1},
        "max_thread_series: expected an even number (each thread has a user and a system "
        "series), got 1",
    ),
    (
        {"attributes": {f"k{i}": i for i in range(129)}},
        "attributes: expected at most 128 attributes (OTEL_ATTRIBUTE_COUNT_LIMIT), got 129",
    ),
    (
        {"attributes": {"k": list(range(1_000_000))}},
        "attributes: 'k': expected a value of at most 4096 characters or elements "
        "(OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT), got 1000000: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, "
        "10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, "
        "31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, ...)]",
    ),
    (
        {"include": ["system.cpu.frequency"]},
        "include: 'system.cpu.frequency' is turned on by cpu_frequency=True, not by include",
    ),
    ({"max_thread_series": -1}, "max_thread_series: expected a whole number >= 0, got -1"),
    ({"max_thread_series": 2.5}, "max_thread_series: expected a whole number >= 0, got 2.5"),
    ({"max_thread_series": True}, "max_thread_series: expected a whole number >= 0, got True"),
    (
        {"attributes": ["a"]},
        "attributes: expected a mapping of str to str, bool, int (64-bit), float or a "
        "sequence of one of those, got ['a']",
    ),
    (
        {"attributes": {"k": object}},
        "attributes: expected a mapping of str to str, bool, int (64-bit), float or a "
        "sequence of one of those, got 'k': <class 'object'>",
    ),
    (
        {"attributes": {"k": 2**63}},
        "attributes: expected a mapping of str to str, bool, int (64-bit), float or a "
        "sequence of one of those, got 'k': 9223372036854775808",
    ),
    (
        {"attributes": {"k": ["a", 1]}},
        "attributes: expected a mapping of str to str, bool, int (64-bit), float or a "
        "sequence of one of those, got 'k': ['a', 1]",
    ),
]


@pytest.mark.parametrize(("options", "message"), BAD_CODE, ids=lambda x: str(x)[:40])
def test_bad_option_in_code_raises_a_clear_error(
    options: dict[str, Any],
    message: str,
    provider: Any,
    reader: InMemoryMetricReader,
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ProcessMetricsOptions(**options)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ProcessInstrumentor().instrument(meter_provider=provider, **options)
    # Nothing else broke: not instrumented, and a good call still works.
    assert not ProcessInstrumentor().is_instrumented_by_opentelemetry
    assert collect(reader) == {}
    ProcessInstrumentor().instrument(meter_provider=provider)
    try:
        assert "process.cpu.time" in collect(reader)
    finally:
        ProcessInstrumentor().uninstrument()


def test_unknown_keyword_is_refused(provider: Any) -> None:
    with pytest.raises(ValueError, match=r"^unknown option 'cpu_freq'; allowed: options, "):
        ProcessInstrumentor().instrument(meter_provider=provider, cpu_freq=True)
    assert not ProcessInstrumentor().is_instrumented_by_opentelemetry


def test_options_object_is_frozen_and_normalised() -> None:
    opts = ProcessMetricsOptions(include=["system.disk.*"], attributes={"a": "b"})
    assert opts.include == ("system.disk.*",)
    with pytest.raises(AttributeError):
        opts.per_cpu = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        opts.attributes["c"] = "d"  # type: ignore[index]
    assert ProcessMetricsOptions().max_thread_series == DEFAULT_MAX_THREAD_SERIES


def test_options_object_through_instrument(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    inst = instrument(options=ProcessMetricsOptions(include=["system.network.io"]))
    assert "system.network.io" in collect(reader)
    assert inst.options == ProcessMetricsOptions(include=["system.network.io"])


def test_generic_provider_keywords_are_accepted(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(tracer_provider=None)
    assert "process.cpu.time" in collect(reader)


def test_attribute_limits_follow_the_otel_variables(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, provider: Any
) -> None:
    three = {"a": 1, "b": 2, "c": 3}
    monkeypatch.setenv("OTEL_ATTRIBUTE_COUNT_LIMIT", "2")
    with pytest.raises(ValueError, match=r"^attributes: expected at most 2 attributes "):
        ProcessMetricsOptions(attributes=three)
    monkeypatch.setenv("OTEL_ATTRIBUTE_COUNT_LIMIT", "3")
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    assert dict(ProcessMetricsOptions(attributes=three).attributes) == three
    with pytest.raises(ValueError, match=r"at most 4 characters or elements .* got 5: 'abcde'$"):
        ProcessMetricsOptions(attributes={"k": "abcde"})
    with pytest.raises(ValueError, match=r"got 5: \['a', 'b', 'c', 'd', 'e'\]$"):
        ProcessMetricsOptions(attributes={"k": list("abcde")})
    # A bad variable: one warning at instrument(), and the package's default applies.
    monkeypatch.setenv("OTEL_ATTRIBUTE_COUNT_LIMIT", "lots")
    monkeypatch.delenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=provider, attributes={f"k{i}": i for i in range(128)})
    try:
        said = [
            r.getMessage() for r in caplog.records if "OTEL_ATTRIBUTE_COUNT_LIMIT" in r.getMessage()
        ]
        assert len(said) == 1 and said[0].startswith(
            "OTEL_ATTRIBUTE_COUNT_LIMIT='lots' is not valid"
        )
        assert inst.options is not None and len(inst.options.attributes) == 128
    finally:
        inst.uninstrument()
    with pytest.raises(ValueError, match=r"^attributes: expected at most 128 attributes "):
        ProcessMetricsOptions(attributes={f"k{i}": i for i in range(129)})


def test_a_sequence_as_long_as_the_limit_is_still_checked_for_long_strings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    assert ProcessMetricsOptions(attributes={"k": ["a", "b", "c", "abcd"]}).attributes == {
        "k": ["a", "b", "c", "abcd"]
    }
    with pytest.raises(ValueError, match=r"at most 4 characters or elements .* got 5: "):
        ProcessMetricsOptions(attributes={"k": ["a", "b", "c", "abcde"]})
    with pytest.raises(ValueError, match=r"at most 4 characters or elements .* got 5: "):
        ProcessMetricsOptions(attributes={"k": ["a", "b", "c", "d", "e"]})


def test_a_length_limit_of_zero_allows_numbers_and_empty_strings_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "0")
    numbers = {"i": 5, "f": 1.5, "b": True, "s": ""}
    assert dict(ProcessMetricsOptions(attributes=numbers).attributes) == numbers
    with pytest.raises(ValueError, match=r"at most 0 characters or elements .* got 1: 'x'$"):
        ProcessMetricsOptions(attributes={"s": "x"})


def test_attribute_ints_are_int64_inclusive_of_both_ends() -> None:
    ends = {"lo": -(2**63), "hi": 2**63 - 1}
    assert dict(ProcessMetricsOptions(attributes=ends).attributes) == ends
    for outside in (-(2**63) - 1, 2**63):
        with pytest.raises(ValueError, match=r"^attributes: expected a mapping"):
            ProcessMetricsOptions(attributes={"k": outside})
    with pytest.raises(ValueError, match=r"^attributes: expected a mapping"):
        ProcessMetricsOptions(attributes={"k": [1, 2**63]})


def test_an_unknown_name_is_not_taken_for_a_glob_and_gets_a_hint_only_when_close() -> None:
    with pytest.raises(ValueError) as info:
        ProcessMetricsOptions(include=["process.cpu.timeX"])
    assert str(info.value) == (
        "include: unknown metric name 'process.cpu.timeX' (did you mean 'process.cpu.time'?); "
        "allowed: names or globs over the names in the metric reference"
    )
    with pytest.raises(ValueError) as info:
        ProcessMetricsOptions(exclude=["zzzzzz"])
    assert str(info.value) == (
        "exclude: unknown metric name 'zzzzzz'; allowed: names or globs over the names in "
        "the metric reference"
    )


class Shown:
    """A value whose repr() is counted: showing a huge value must not repr all of it."""

    calls = 0

    def __repr__(self) -> str:
        Shown.calls += 1
        return "s"


def test_excerpt_reprs_at_most_one_more_item_than_it_can_show() -> None:
    limit = 200
    for huge in ([Shown()] * 10_000, tuple([Shown()] * 10_000)):
        Shown.calls = 0
        text = excerpt(huge)
        assert Shown.calls == limit + 1
        assert text == repr(huge[:limit])[: limit - 5] + "...)" + repr(huge)[-1]
        assert len(text) == limit
    Shown.calls = 0
    mapping = {i: Shown() for i in range(10_000)}
    text = excerpt(mapping)
    assert Shown.calls == limit + 1
    assert text == repr(dict(list(mapping.items())[:limit]))[: limit - 5] + "...)}"
    Shown.calls = 0
    assert excerpt([Shown()] * 3) == "[s, s, s]" and Shown.calls == 3
    assert excerpt("x" * 10**6) == "'" + "x" * 194 + "...)'"


def test_excerpt_names_the_type_of_a_value_that_cannot_be_shown() -> None:
    assert excerpt(10**5000) == "<int that cannot be shown>"  # over int's str() digit limit
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    assert excerpt(nested) == "<list that cannot be shown>"


# --- each option declared once: the rest is derived from the declaration

ROOT = Path(__file__).resolve().parent.parent
MARKDOWN = ROOT / "docs" / "_ext" / "readme_blocks.py"


def _markdown() -> Any:
    return load_file(MARKDOWN, "docs_readme_blocks")


def test_the_readme_table_is_the_one_generated_from_the_declarations() -> None:
    markdown = _markdown()
    readme = (ROOT / "README.md").read_text()
    assert markdown.in_readme(readme) == markdown.table(), (
        "README.md's options table differs from options.py: run `python docs/_ext/readme_blocks.py`"
    )
    rows = [line for line in markdown.table().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1].split(":")[0] for row in rows] == list(OPTION_NAMES)
    for name, var in ENV_VARS.items():
        (row,) = (r for r in rows if r.startswith(f"| `{name}:"))
        assert f"`{var}`" in row
        assert f"`{getattr(ProcessMetricsOptions(), name)!r}`" in row or "| none |" in row


def test_the_generator_rewrites_only_its_block_and_check_says_when_it_is_stale(
    tmp_path: Path,
) -> None:
    markdown = _markdown()
    defaults = markdown.defaults()
    stale = f"before\n{markdown.BEGIN}\n| old |\n{markdown.END}\nmiddle\n{defaults}\nafter\n"
    markdown.README = tmp_path / "README.md"
    markdown.README.write_text(stale)
    assert markdown.main(["--check"]) == 1
    assert markdown.main([]) == 0
    wanted = f"before\n{markdown.table()}\nmiddle\n{defaults}\nafter\n"
    assert markdown.README.read_text() == wanted
    assert markdown.main(["--check"]) == 0
    real = subprocess.run(
        [sys.executable, str(MARKDOWN), "--check"], capture_output=True, check=False
    )
    assert real.returncode == 0, real.stderr


def test_variables_formats_and_gating_options_come_from_the_declarations() -> None:
    assert set(ENV_VARS) == set(OPTION_NAMES) - {"attributes"}  # code only
    for name, var in ENV_VARS.items():
        assert var == "OTEL_PYTHON_PROCESS_METRICS_" + name.upper()
    # An option declared to gate metrics gates some, and every gate is such an option.
    assert set(GATING_OPTIONS) == {m.option for m in METRICS if m.option is not None}
    assert all(declared(name).form is BOOLEAN for name in ("per_cpu", "direct_reads"))


def test_words_are_read_alike_from_code_and_from_the_environment() -> None:
    """README, "Words are read alike": the cases that once differed between the two."""
    code = ProcessMetricsOptions(
        shared_metrics="ONCE", saturation="auto", per_cpu="on", direct_reads=" Off "
    )
    env = resolve(
        {},
        {
            ENV_VARS["shared_metrics"]: "ONCE",
            ENV_VARS["saturation"]: "auto",
            ENV_VARS["per_cpu"]: "on",
            ENV_VARS["direct_reads"]: " Off ",
        },
    )
    assert code == env
    assert (code.shared_metrics, code.saturation, code.per_cpu, code.direct_reads) == (
        "once",
        None,
        True,
        False,
    )
    readme = (ROOT / "README.md").read_text()
    assert _markdown().spelling_rule() in readme
    for word in ("`on`", "`off`", "`auto`", "(any case)"):
        assert word in _markdown().spelling_rule()


def test_a_choice_and_a_whole_number_form_check_parse_and_say_how_they_are_written() -> None:
    shared = choice(("once", "every"))
    assert shared.format == "`once` or `every` (any case)"
    assert choice(("a", "b", "c")).format == "`a`, `b` or `c` (any case)"
    assert shared.parse is not None and shared.parse(" EVERY ") == "every"
    assert shared.check("shared_metrics", "once") == "once"
    assert shared.check("shared_metrics", " Every ") == "every"  # as its variable is read
    with pytest.raises(ValueError, match=r"^expected one of once, every \(any case\)$"):
        shared.parse("twice")
    with pytest.raises(
        ValueError, match=r"^shared_metrics: expected one of 'once', 'every' \(any case\), got 'x'$"
    ):
        shared.check("shared_metrics", "x")
    cap = whole_number()
    assert cap.format == "a whole number"
    assert cap.parse is not None and cap.parse(" 7 ") == 7 and cap.check("max_children", 7) == 7
    for bad in (-1, True, 1.0, "7"):
        with pytest.raises(ValueError, match=r"^max_children: expected a whole number >= 0, got "):
            cap.check("max_children", bad)
    with pytest.raises(ValueError, match=r"^expected a whole number >= 0$"):
        cap.parse("lots")


def test_the_readme_lists_every_default_metric_from_the_table() -> None:
    markdown = _markdown()
    readme = (ROOT / "README.md").read_text()
    block = markdown.in_readme(readme, "defaults")
    assert block == markdown.defaults(), "README.md's defaults are stale: run the generator"
    listed = set(re.findall(r"`([a-z_.]+)`", block))
    assert listed == {m.name for m in METRICS if m.default}
