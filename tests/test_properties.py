"""Property-based tests (hypothesis) for options and environment parsing.

1. No string in any ``OTEL_PYTHON_PROCESS_METRICS_*`` variable, alone or with
   others, makes ``instrument()`` raise: each valid variable is used, each
   invalid one logs exactly one warning naming it and its default is used.
2. A bad value from code raises ``ValueError`` starting with ``"<option>: "``,
   from ``ProcessMetricsOptions`` and through ``instrument()``; an arbitrary
   value is either accepted (and stored in a valid form) or refused that way,
   never with another exception type. A refused ``instrument()`` leaves the
   instrumentor usable.
3. An unknown keyword of ``instrument()`` raises ``ValueError`` naming it.

Settings: ``deadline=None`` (this machine is shared and noisy) and few
examples, so the file runs in seconds; ``PROCESS_METRICS_LONG=1`` runs ten
times more. When ``CI`` is set, hypothesis is derandomized (a fixed seed per
test) and keeps no example database, so a CI failure reproduces anywhere from
the test name alone; locally each run explores new examples and replays past
failures from ``.hypothesis/``. The profile is applied per test, not loaded
globally, so it does not change other modules' hypothesis settings.

The reader and provider fixtures are shared by all examples of a test, which
also exercises re-instrumenting one provider; every example uninstruments.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.environment import ENV_VARS, from_environment
from opentelemetry.instrumentation.process.metrics import METRICS, METRICS_BY_NAME
from opentelemetry.instrumentation.process.options import OPTION_NAMES, declared
from opentelemetry.instrumentation.process.selection import enabled_metrics

from .conftest import DIRECT_READS_VAR, Records, collect, collect_after_close, events_metrics
from .support.stress import size

LOGGER = "opentelemetry.instrumentation.process"
CI = os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}

settings.register_profile(
    "process-metrics-properties",
    max_examples=size(100, 1000),
    deadline=None,
    derandomize=CI,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    **({"database": None} if CI else {}),
)
PROFILE = settings.get_profile("process-metrics-properties")


@pytest.fixture(autouse=True)
def _without_the_run_wide_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests parse options: conftest's run-wide direct-reads switch does not apply."""
    monkeypatch.delenv(DIRECT_READS_VAR, raising=False)


def examples(ci: int) -> settings:
    """The profile with ``ci`` examples, ten times more in the long variant."""
    return settings(PROFILE, max_examples=size(ci, 10 * ci))


# The options by kind, from their declarations: a new option is tested with no edit here.
FORMS = {name: declared(name).form for name in OPTION_NAMES}
FLAGS = tuple(n for n, f in FORMS.items() if f.kind == "bool")
LISTS = tuple(n for n, f in FORMS.items() if f.kind == "list")
CHOICES = {n: f.values for n, f in FORMS.items() if f.kind == "choice"}
CAPS = {n: f.even for n, f in FORMS.items() if f.kind == "int"}  # whole numbers; even or not
TRISTATES = tuple(n for n, f in FORMS.items() if f.kind == "tristate")  # True, False, None
OPTIONS = OPTION_NAMES
DEFAULTS = ProcessMetricsOptions()
NAMES = sorted(METRICS_BY_NAME)
GATED = sorted(m.name for m in METRICS if m.option is not None)
# Keywords instrument() takes besides the options: the provider, the generic
# providers every instrumentor is given, and BaseInstrumentor's own. "self"
# cannot be passed at all: BaseInstrumentor.instrument(self, **kwargs) raises
# TypeError before this package sees it.
OTHER_KEYWORDS = {
    "self",
    "options",
    "meter_provider",
    "tracer_provider",
    "logger_provider",
    "event_logger_provider",
    "skip_dep_check",
    "raise_exception_on_conflict",
}


# -- The contract, written independently of options.py -----------------------


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def valid_pattern(option: str, pattern: str) -> bool:
    """A name in the table (include: not one turned on by a flag), or a glob matching one
    (an extension's also by its name after ``process_metrics.``), of at most 200 characters."""
    if len(pattern) > 200:
        return False
    if is_glob(pattern):
        bare = [name.removeprefix("process_metrics.") for name in NAMES]
        return any(fnmatch.fnmatchcase(name, pattern) for name in [*NAMES, *bare])
    metric = METRICS_BY_NAME.get(pattern)
    return metric is not None and (option == "exclude" or metric.option is None)


INVALID = object()


TRUE_WORDS = ["true", "1", "yes", "on"]
FALSE_WORDS = ["false", "0", "no", "off"]


def parse_env(option: str, raw: str) -> Any:
    """What ``raw`` means for ``option``, or ``INVALID``: the documented syntax.

    The same text means the same from code (README, "Words are read alike").
    """
    if option in FLAGS:
        word = raw.strip().lower()
        return True if word in TRUE_WORDS else False if word in FALSE_WORDS else INVALID
    if option in CHOICES:
        word = raw.strip().lower()
        return word if word in CHOICES[option] else INVALID
    if option in TRISTATES:
        word = raw.strip().lower()
        return None if word == "auto" else parse_env(FLAGS[0], raw)
    if option in CAPS:
        try:
            number = int(raw.strip())  # Python's int(): also "+7", "1_000", "٣"
        except ValueError:
            return INVALID
        return number if number >= 0 and not (CAPS[option] and number % 2) else INVALID
    return entries(option, raw)[0]


def entries(option: str, raw: str) -> tuple[Any, int]:
    """The entries of a list variable that apply (or ``INVALID``), and how many are left out.

    Each bad entry of a list is left out with a warning of its own, while one
    entry applies; a list with none that applies, or too long, is invalid whole.
    """
    patterns = tuple(p.strip() for p in raw.split(",") if p.strip())
    kept = tuple(p for p in patterns if valid_pattern(option, p))
    if len(patterns) > 100 or not kept:
        return INVALID, 0
    return kept, len(patterns) - len(kept)


def expected_from(
    env: Mapping[str, str],
) -> tuple[ProcessMetricsOptions, set[str], dict[str, int]]:
    """The options ``env`` should give, the variables refused whole, and the entries left
    out of each list variable that applies in part."""
    fields: dict[str, Any] = {}
    invalid: set[str] = set()
    dropped: dict[str, int] = {}
    for option, var in ENV_VARS.items():
        raw = env.get(var, "")
        if not raw.strip():
            continue
        value = parse_env(option, raw)
        if value is INVALID:
            invalid.add(var)
            continue
        fields[option] = value
        if option in LISTS and entries(option, raw)[1]:
            dropped[var] = entries(option, raw)[1]
    return ProcessMetricsOptions(**fields), invalid, dropped


def assert_stored_valid(options: ProcessMetricsOptions, option: str) -> None:
    """The field ``option`` of an accepted ``options`` has a valid, normalised form."""
    value = getattr(options, option)
    if option in FLAGS:
        assert type(value) is bool
    elif option in CAPS:
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0
        assert not CAPS[option] or value % 2 == 0
    elif option in CHOICES:
        assert value in CHOICES[option]
    elif option in TRISTATES:
        assert value is None or type(value) is bool
    elif option in LISTS:
        assert type(value) is tuple
        for p in value:
            assert isinstance(p, str) and p and p == p.strip(), p
            assert valid_pattern(option, p), p
    else:
        assert isinstance(value, Mapping)
        with pytest.raises(TypeError):
            value["probe"] = "x"  # read-only
        for k, v in value.items():
            assert isinstance(k, str) and k
            assert isinstance(v, (str, bool, int, float)) or (
                isinstance(v, (list, tuple))
                and all(isinstance(x, (str, bool, int, float)) for x in v)
                and len({_otlp_type(x) for x in v}) <= 1
            )
            for x in v if isinstance(v, (list, tuple)) else [v]:
                assert not isinstance(x, int) or -(2**63) <= x < 2**63


def _otlp_type(x: object) -> type:
    return bool if isinstance(x, bool) else int if isinstance(x, int) else type(x)


def normalised(option: str, value: Any) -> Any:
    """What a valid ``value`` is stored as: a word as its variable's text would be."""
    if isinstance(value, str) and option in (*FLAGS, *TRISTATES, *CHOICES):
        return parse_env(option, value)
    if option in LISTS:
        return tuple(p.strip() for p in value)
    if option == "attributes":
        return dict(value)
    return value


# -- Helpers --------------------------------------------------------------------


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """Exactly ``values`` among the package's variables, restored afterwards."""
    saved = {var: os.environ.get(var) for var in ENV_VARS.values()}
    try:
        for var in ENV_VARS.values():
            os.environ.pop(var, None)
        os.environ.update(values)
        yield
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


@contextmanager
def warnings_logged() -> Iterator[list[logging.LogRecord]]:
    """Warnings on the package's logger while active (per example, unlike caplog)."""
    logger = logging.getLogger(LOGGER)
    handler = Records()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    found: list[logging.LogRecord] = []
    try:
        yield found
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        found.extend(r for r in handler.records if r.levelno >= logging.WARNING)


def assert_still_usable(provider: MeterProvider, reader: InMemoryMetricReader) -> None:
    """After a refused ``instrument()``: not instrumented, and a good call works."""
    inst = ProcessInstrumentor()
    assert not inst.is_instrumented_by_opentelemetry
    assert inst.options is None
    assert collect_after_close(reader) == {}
    inst.instrument(meter_provider=provider)
    try:
        assert inst.is_instrumented_by_opentelemetry
        assert "process.cpu.time" in collect(reader)
    finally:
        inst.uninstrument()


def undo(inst: ProcessInstrumentor) -> None:
    """Uninstrument if instrumented (without the SDK's warning when not)."""
    if inst.is_instrumented_by_opentelemetry:
        inst.uninstrument()


def refusal(call: Callable[[], object]) -> str | None:
    """The message of the ``ValueError`` ``call`` raises, or ``None`` if it returns.

    Addresses are blanked: two fresh iterators over one list show different ones.
    """
    try:
        call()
    except ValueError as exc:
        return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x...", str(exc))
    return None


# -- Strategies: environment strings ------------------------------------------

# os.environ cannot hold NUL or lone surrogates.
ENV_TEXT = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40
)
SPACE = st.sampled_from(
    ["", "", " ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\u00a0", "\u2003", "\u3000"]
)
CASE = st.sampled_from([str.lower, str.upper, str.title, str.swapcase, str.capitalize])


def padded(core: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(lambda a, s, b: a + s + b, SPACE, core, SPACE)


def typo(name: str, index: int, kind: int) -> str:
    """``name`` with one slip of the finger at ``index``."""
    i = index % len(name)
    if kind == 0:
        return name[:i] + name[i + 1 :]  # dropped
    if kind == 1:
        return name[:i] + name[i] + name[i:]  # doubled
    if kind == 2 and i + 1 < len(name):
        return name[:i] + name[i + 1] + name[i] + name[i + 2 :]  # swapped
    return name[:i] + name[i].swapcase() + name[i + 1 :]


# Non-ASCII look-alikes: Arabic-Indic digits (int() reads them), fullwidth "true".
ARABIC_ONE, ARABIC_THREE, ARABIC_TEN = "\u0661", "\u0663", "\u0661\u0660"
FULLWIDTH_TRUE = "\uff54\uff52\uff55\uff45"
NEAR_BOOL = padded(
    st.builds(
        lambda case, word: case(word),
        CASE,
        st.sampled_from(
            [
                *["true", "false", "1", "0", "yes", "no", "on", "off", "y", "n", "t", "f"],
                *["2", "-1", "tru", "truee", "01", "1.0", "none", "enabled"],
                *("yes please", ARABIC_ONE, FULLWIDTH_TRUE),
            ]
        ),
    )
)
NEAR_INT = padded(
    st.one_of(
        st.integers(-(10**6), 10**9).map(str),
        st.sampled_from(
            [
                *["1_000", "-1", "-0", "+7", "0x10", "1e3", "2.0", "1,000", "0b1", "_1", "1__0"],
                *["\u221e", "nan", "none"],
                *("1 000", ARABIC_THREE, ARABIC_TEN, ARABIC_THREE * 5000),
                *("9" * 4300, "9" * 4301, "9" * 5000, "-" + "9" * 4000),
            ]
        ),
    )
)
GLOB_LIST = [
    *["*", "?", "[", "]", "[]", "[!]", "[!x]*", "**", "*.*.*.*", "\\*", "[a-", "[z-a]*"],
    *["[[]", "[^p]*", "[ps]*", "nope.*", "*frequency*", "process.*", "system.*"],
    *["cpython.gc.*", "process_metrics.*", "*.count", "system.cpu.*", "system.network.*"],
    *["process.cpu.tim?", "cpu.*", "memory.p?s"],  # extensions by their name after the prefix
]
GLOBS = st.sampled_from(GLOB_LIST)
ITEM = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(GATED),
    GLOBS,
    st.builds(typo, st.sampled_from(NAMES), st.integers(0, 60), st.integers(0, 3)),
    st.text(alphabet="*?[]!-.abcdeilmnoprstuy_", max_size=14),
)
NEAR_LIST = st.builds(
    lambda sep, items: sep.join(items),
    st.sampled_from([",", ", ", " ,", ",,", ", ,", "\t,\n"]),
    st.lists(padded(ITEM), max_size=5),
)
NEAR_CHOICE = padded(
    st.sampled_from(["thread", "name", "Name", "THREAD", "names", "threads", "id", "tname", ""])
)
NEAR_TRISTATE = st.one_of(NEAR_BOOL, padded(st.sampled_from(["auto", "AUTO", "Auto", "automatic"])))
NEAR = {
    "bool": NEAR_BOOL,
    "int": NEAR_INT,
    "list": NEAR_LIST,
    "choice": NEAR_CHOICE,
    "tristate": NEAR_TRISTATE,
}
KIND = {
    **dict.fromkeys(FLAGS, "bool"),
    **dict.fromkeys(LISTS, "list"),
    **dict.fromkeys(CAPS, "int"),
    **dict.fromkeys(CHOICES, "choice"),
    **dict.fromkeys(TRISTATES, "tristate"),
}


def good_patterns(option: str) -> st.SearchStrategy[list[str]]:
    """Lists that ``option`` accepts: names and globs of the table."""
    allowed = [p for p in [*NAMES, *GLOB_LIST] if valid_pattern(option, p)]
    return st.lists(st.sampled_from(allowed), max_size=4)


def valid_env(option: str) -> st.SearchStrategy[str]:
    """Spellings of valid values, so that every variable is also exercised as valid."""
    if option in FLAGS:
        words = st.sampled_from([*TRUE_WORDS, *FALSE_WORDS])
        return padded(st.builds(lambda case, word: case(word), CASE, words))
    if option in TRISTATES:
        words = st.sampled_from([*TRUE_WORDS, *FALSE_WORDS, "auto"])
        return padded(st.builds(lambda case, word: case(word), CASE, words))
    if option in CHOICES:
        return padded(
            st.builds(lambda case, word: case(word), CASE, st.sampled_from(CHOICES[option]))
        )
    if option in CAPS:
        odd = st.sampled_from(["0", "200", "1_000", "+7", ARABIC_THREE, "9" * 4300])
        return padded(st.one_of(st.integers(0, 10**6).map(str), odd))
    return st.builds(
        lambda sep, items: sep.join(items),
        st.sampled_from([",", ", ", " ,", ",,", "\t,\n"]),
        good_patterns(option).map(lambda ps: [f" {p} " for p in ps]),
    )


def env_value(option: str) -> st.SearchStrategy[str]:
    """Any string, biased toward valid and near-valid ones for ``option`` (and the others)."""
    return st.one_of(ENV_TEXT, valid_env(option), NEAR[KIND[option]], st.one_of(*NEAR.values()))


ENVIRONMENTS = st.fixed_dictionaries(
    {}, optional={var: env_value(option) for option, var in ENV_VARS.items()}
)


# -- Property 1: the environment never breaks instrument() ---------------------

# Two words for each option, tried all at once: one no form takes, one in an odd case or
# spacing, or one another form would (a number for a pattern, a mode for a choice).
WORDS = {
    "cpu_frequency": ("on", "Yes"),
    "per_thread": ("off", "NO"),
    "per_cpu": ("y", "2"),
    "include": ("1_000", "-1"),
    "exclude": ("process.cpu.tim", "system.cpu.frequency"),
    "max_thread_series": ("*", "["),
    "direct_reads": ("nope", "0"),
    "thread_series_by": ("threads", " NAME "),
    "saturation": ("maybe", " Auto "),
}


@examples(300)
@given(env=ENVIRONMENTS)
@example(env={ENV_VARS["max_thread_series"]: "9" * 5000})
@example(env={ENV_VARS["include"]: "[", ENV_VARS["exclude"]: "process.*"})
@example(env={var: " TRUE " for var in ENV_VARS.values()})
@example(env={ENV_VARS[option]: words[0] for option, words in WORDS.items()})
@example(env={ENV_VARS[option]: words[1] for option, words in WORDS.items()})
def test_environment_never_breaks_instrument(
    env: dict[str, str], provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    want, invalid, dropped = expected_from(env)
    for option, var in ENV_VARS.items():  # shown by --hypothesis-show-statistics
        if var in env:
            state = "invalid" if var in invalid else "valid" if env[var].strip() else "blank"
            event(f"{option}: {state}")
    inst = ProcessInstrumentor()
    # The examples share one provider: a histogram of events that an earlier one recorded
    # (a GC stall, say) is exported again, unchanged, in every later collection.
    earlier = set(collect(reader))
    with environment(env), warnings_logged() as logged:
        inst.instrument(meter_provider=provider)
        try:
            assert inst.is_instrumented_by_opentelemetry
            assert inst.options == want
            names = set(collect(reader))
        finally:
            inst.uninstrument()
    enabled = {m.name for m in enabled_metrics(want)}
    assert earlier <= events_metrics()
    assert names - earlier <= enabled
    assert ("process.cpu.time" in names) == ("process.cpu.time" in enabled)
    for var in ENV_VARS.values():
        # No variable's name is a part of another's, and no generated value holds one.
        about = [r.getMessage() for r in logged if var in r.getMessage()]
        if var in dropped:  # one warning for each entry left out; the others apply
            assert len(about) == dropped[var], (var, about)
            assert all(m.startswith(f"{var}: the entry ") for m in about), about
            continue
        assert len(about) == (var in invalid), (var, about)
        if about:
            shown = repr(env[var])  # a bounded excerpt of the value, whatever its size
            excerpt = shown if len(shown) <= 200 else shown[:195] + "...)"
            assert about[0].startswith(f"{var}={excerpt}"), about[0][:300]
            assert len(about[0]) <= 1000
            assert "using the default" in about[0]
    # The same through from_environment: exactly the valid variables, parsed.
    with warnings_logged():
        found = from_environment(env)
    assert set(found) == {
        o for o, v in ENV_VARS.items() if env.get(v, "").strip() and v not in invalid
    }
    assert all(getattr(want, o) == value for o, value in found.items())
    assert collect_after_close(reader) == {}


# -- Strategies: values from code ------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.sampled_from(NAMES),
    GLOBS,
    st.sampled_from([Decimal(5), Fraction(1, 2), 2**63, -(2**63) - 1, object(), ..., range(3)]),
)
ARBITRARY = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(NAMES)), inner, max_size=4),
        st.dictionaries(SCALARS, inner, max_size=3),
        st.frozensets(st.one_of(st.text(max_size=8), st.sampled_from(NAMES)), max_size=3),
        st.sets(st.integers(), max_size=3),
    ),
    max_leaves=8,
)

NOT_BOOL = st.one_of(
    st.none(),
    st.integers(),  # 0 and 1 included: only their words are
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["", "y", "maybe", "tru", "auto", b"1", b"true", [True], (False,)]),
).filter(lambda v: not isinstance(v, str) or parse_env(FLAGS[0], v) is INVALID)
BAD_CAP = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=0).map(lambda n: 2 * n + 1),  # odd: half a thread
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
    st.sampled_from(["5", "200", 5.0, 0.0, Decimal(5), Fraction(4, 2), [5], (0,), {"n": 5}]),
)


def bad_pattern(option: str) -> st.SearchStrategy[Any]:
    """One element no ``option`` list may hold."""
    words = st.one_of(
        st.text(max_size=16),
        st.builds(typo, st.sampled_from(NAMES), st.integers(0, 60), st.integers(0, 3)),
        GLOBS,
        st.sampled_from(["", " ", "\t", "nope.*", "process.cpu.tim", "PROCESS.CPU.TIME"]),
    ).filter(lambda s: not s.strip() or not valid_pattern(option, s.strip()))
    others: list[st.SearchStrategy[Any]] = [
        words,
        st.one_of(
            st.none(), st.integers(), st.floats(), st.binary(max_size=4), st.lists(st.text())
        ),
    ]
    if option == "include":
        others.append(st.sampled_from(GATED))  # turned on by a flag, not by include
    return st.one_of(*others)


def bad_list(option: str) -> st.SearchStrategy[Any]:
    good = st.lists(st.sampled_from([n for n in NAMES if valid_pattern(option, n)]), max_size=2)
    with_bad = st.builds(
        lambda kind, before, bad, after: kind([*before, bad, *after]),
        st.sampled_from([list, tuple]),
        good,
        bad_pattern(option),
        good,
    )
    bare = st.one_of(st.text(max_size=16), st.sampled_from(NAMES), GLOBS)  # a str, not a list
    not_iterable = st.one_of(
        st.none(), st.integers(), st.floats(), st.booleans(), st.just(object())
    )
    return st.one_of(with_bad, bare, not_iterable)


ATTR_KEY = st.text(min_size=1, max_size=8)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # what OTLP can carry
ATTR_VALUE = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    INT64,
    st.floats(),
    st.lists(st.text(max_size=4), max_size=3),
    st.tuples(INT64, INT64),
)
BAD_ATTR_ITEM = st.one_of(
    st.tuples(st.one_of(st.integers(), st.none(), st.binary(max_size=4), st.tuples()), ATTR_VALUE),
    st.tuples(st.just(""), ATTR_VALUE),
    st.tuples(
        ATTR_KEY,
        st.one_of(
            st.none(),
            st.dictionaries(ATTR_KEY, ATTR_VALUE, max_size=2),
            st.sets(st.text(max_size=4), max_size=2),
            st.frozensets(st.integers(), max_size=2),
            st.binary(max_size=4),
            st.lists(st.none(), min_size=1, max_size=2),
            st.lists(st.lists(st.integers(), max_size=2), min_size=1, max_size=2),
            st.integers(min_value=2**63),  # past int64: OTLP cannot carry it
            st.integers(max_value=-(2**63) - 1),
            st.tuples(st.text(max_size=2), st.integers()),  # an array of two types
            st.tuples(st.booleans(), INT64),
            st.sampled_from([Decimal(1), Fraction(1, 3), object(), ..., range(2), ["a", None]]),
        ),
    ),
)
BAD_ATTRIBUTES = st.one_of(
    st.builds(
        lambda good, item: {**good, item[0]: item[1]},
        st.dictionaries(ATTR_KEY, ATTR_VALUE, max_size=3),
        BAD_ATTR_ITEM,
    ),
    st.none(),
    st.text(max_size=8),
    st.integers(),
    st.lists(st.tuples(ATTR_KEY, ATTR_VALUE), min_size=1, max_size=2),  # pairs, not a mapping
    st.sets(ATTR_KEY, max_size=2),
    st.frozensets(ATTR_KEY, max_size=2),
)


def bad_choice(values: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """Not one of ``values``: other words, a right word in another case or padded, other types."""
    last = values[-1]
    return st.one_of(
        st.text(max_size=8).filter(lambda w: w.strip().lower() not in values),
        st.sampled_from([last + "s", last[:-1], None, 1, True, (last,), last.encode()]),
    )


GOOD: dict[str, st.SearchStrategy[Any]] = {
    **{option: st.one_of(st.booleans(), valid_env(option)) for option in FLAGS},
    **{
        option: st.one_of(st.sampled_from([True, False, None]), valid_env(option))
        for option in TRISTATES
    },
    **{
        option: st.builds(
            lambda kind, ps: kind(ps),
            st.sampled_from([list, tuple, set, frozenset, dict.fromkeys]),
            good_patterns(option).map(lambda ps: [f" {p}\t" if len(p) % 3 else p for p in ps]),
        )
        for option in LISTS
    },
    **{
        option: st.one_of(
            st.integers(min_value=0).map(lambda n: n - n % 2) if even else st.integers(min_value=0),
            st.just(2**63),
        )
        for option, even in CAPS.items()
    },
    "attributes": st.dictionaries(ATTR_KEY, ATTR_VALUE, max_size=3).map(
        lambda d: MappingProxyType(d) if len(d) % 2 else d
    ),
    **{option: valid_env(option) for option in CHOICES},
}
BAD = {
    **dict.fromkeys(FLAGS, NOT_BOOL),
    **dict.fromkeys(
        TRISTATES,
        NOT_BOOL.filter(
            lambda v: v is not None and not (isinstance(v, str) and v.strip().lower() == "auto")
        ),
    ),
    "include": bad_list("include"),
    "exclude": bad_list("exclude"),
    **{
        option: BAD_CAP if even else BAD_CAP.filter(lambda v: not (type(v) is int and v >= 0))
        for option, even in CAPS.items()
    },
    **{option: bad_choice(values) for option, values in CHOICES.items()},
    "attributes": BAD_ATTRIBUTES,
}


# -- Property 2: bad values from code ------------------------------------------


@pytest.mark.parametrize("option", OPTIONS)
@examples(60)
@given(data=st.data())
def test_bad_value_from_code_is_refused_by_name(
    option: str, data: st.DataObject, provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    value = data.draw(BAD[option], label=option)
    direct = refusal(lambda: ProcessMetricsOptions(**{option: value}))
    assert direct is not None, f"{option}={value!r} was accepted"
    assert direct.startswith(f"{option}: "), direct
    # The path of instrument(options=..., **fields): replace() validates again.
    base = ProcessMetricsOptions(per_cpu=True)
    assert refusal(lambda: dataclasses.replace(base, **{option: value})) == direct
    inst = ProcessInstrumentor()
    try:
        assert (
            refusal(lambda: inst.instrument(meter_provider=provider, **{option: value})) == direct
        )
        whole = {"options": DEFAULTS, option: value}
        assert refusal(lambda: inst.instrument(meter_provider=provider, **whole)) == direct
    finally:
        undo(inst)  # only does something if a bad value got through
    assert_still_usable(provider, reader)


@pytest.mark.parametrize("option", OPTIONS)
@examples(100)
@given(data=st.data(), one_shot=st.booleans())
def test_arbitrary_value_is_accepted_valid_or_refused_by_name(
    option: str,
    data: st.DataObject,
    one_shot: bool,
    provider: MeterProvider,
    reader: InMemoryMetricReader,
) -> None:
    good = data.draw(st.booleans(), label="good")
    value = data.draw(GOOD[option] if good else ARBITRARY, label=option)

    def fresh() -> Any:
        # A one-shot iterator over a list: built anew for each call.
        return iter(value) if one_shot and isinstance(value, list) else value

    options: ProcessMetricsOptions | None = None
    direct = refusal(lambda: ProcessMetricsOptions(**{option: fresh()}))
    if direct is None:
        options = ProcessMetricsOptions(**{option: fresh()})
    event("accepted" if options is not None else "refused")
    if good:
        assert options is not None, direct
        assert getattr(options, option) == normalised(option, value)
    if options is not None:
        assert_stored_valid(options, option)
        enabled_metrics(options)
    else:
        assert direct is not None and direct.startswith(f"{option}: "), direct
    inst = ProcessInstrumentor()
    try:
        assert refusal(lambda: inst.instrument(meter_provider=provider, **{option: fresh()})) == (
            direct
        )
        assert inst.is_instrumented_by_opentelemetry == (options is not None)
        assert inst.options == options
    finally:
        undo(inst)
    if options is None:
        assert_still_usable(provider, reader)


WORD_OPTIONS = (*FLAGS, *TRISTATES, *CHOICES)


@pytest.mark.parametrize("option", WORD_OPTIONS)
@examples(100)
@given(data=st.data())
def test_a_word_means_the_same_from_code_and_from_the_environment(
    option: str, data: st.DataObject
) -> None:
    """README, "Words are read alike from code and from the environment"."""
    raw = data.draw(env_value(option).filter(str.strip), label=option)
    meant = parse_env(option, raw)
    event("valid" if meant is not INVALID else "invalid")
    code = refusal(lambda: ProcessMetricsOptions(**{option: raw}))
    with warnings_logged() as logged:
        found = from_environment({ENV_VARS[option]: raw})
    if meant is INVALID:
        assert code is not None and code.startswith(f"{option}: "), code
        assert found == {} and len(logged) == 1
    else:
        assert code is None, code
        assert getattr(ProcessMetricsOptions(**{option: raw}), option) == meant
        assert found == {option: meant} and not logged


def _deep(depth: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    return nested


# Values whose repr() raises: minimal forms, outside hypothesis, whose own
# reporting would call repr() on them too.
_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300
HUGE = 10**_DIGITS  # one digit over the int -> str limit
DEEP = _deep(100_000)  # deeper than repr() can go, in every CPython version
UNSHOWABLE = {
    "cap=-huge": ("max_thread_series", -HUGE),
    "per_cpu=huge": ("per_cpu", HUGE),
    "include=[huge]": ("include", [HUGE]),
    "attributes={huge:v}": ("attributes", {HUGE: "v"}),
    "per_thread=deep": ("per_thread", DEEP),
    "exclude=deep": ("exclude", DEEP),
    "attributes={k:deep}": ("attributes", {"k": DEEP}),
    "options=huge": ("options", HUGE),
}


@pytest.mark.parametrize(("option", "value"), UNSHOWABLE.values(), ids=UNSHOWABLE.keys())
def test_unshowable_bad_value_is_refused_by_name(
    option: str, value: Any, provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    if option != "options":  # instrument()'s keyword for a whole ProcessMetricsOptions
        with pytest.raises(ValueError, match=f"^{option}: "):
            ProcessMetricsOptions(**{option: value})
    with pytest.raises(ValueError, match=f"^{option}: "):
        ProcessInstrumentor().instrument(meter_provider=provider, **{option: value})
    assert_still_usable(provider, reader)


@examples(60)
@given(value=ARBITRARY.filter(lambda v: v is not None))
def test_bad_options_object_is_refused_by_name(
    value: Any, provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    inst = ProcessInstrumentor()
    try:
        message = refusal(lambda: inst.instrument(meter_provider=provider, options=value))
    finally:
        undo(inst)
    assert message is not None and message.startswith("options: "), message
    assert_still_usable(provider, reader)


# -- Property 3: unknown keywords -----------------------------------------------

KEYWORDS = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
    st.builds(typo, st.sampled_from(OPTIONS), st.integers(0, 20), st.integers(0, 3)),
    st.text(max_size=12),
).filter(lambda k: k not in OPTIONS and k not in OTHER_KEYWORDS)


@examples(100)
@given(unknown=st.dictionaries(KEYWORDS, ARBITRARY, min_size=1, max_size=3), known=st.booleans())
def test_unknown_keyword_is_refused_by_name(
    unknown: dict[str, Any], known: bool, provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    kwargs = {**unknown, **({"per_cpu": True} if known else {})}
    inst = ProcessInstrumentor()
    try:
        message = refusal(lambda: inst.instrument(meter_provider=provider, **kwargs))
    finally:
        undo(inst)
    assert message is not None, f"{sorted(unknown)} accepted"
    shown = repr(min(unknown))  # a bounded excerpt of the name, whatever its size
    excerpt = shown if len(shown) <= 200 else shown[:195] + "...)" + shown[-1]
    assert message.startswith(f"unknown option {excerpt}; allowed: "), message
    assert_still_usable(provider, reader)
