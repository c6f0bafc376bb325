"""The options of the instrumentor: one frozen dataclass, each option declared once.

Each field is declared with :func:`option`: its default, its :class:`Form`
(how code and the environment give it, and how it is checked) and whether it
alone turns metrics on; its docstring is its documentation. The environment
variables (``environment.py``), the gating options of the metric table, the
configuration reference and the README's table are all derived from these
declarations.

Words are read alike from code and from the environment (:func:`_words_or`).
A bad value raises ``ValueError`` naming the option, a bounded excerpt of the
value, and what is allowed. Which metrics the options turn on is in
``selection.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from .excerpt import excerpt
from .metrics import EXTENSION_PREFIX, METRICS, METRICS_BY_NAME

DEFAULT_MAX_THREAD_SERIES = 200
"""100 threads, each with a ``user`` and a ``system`` series."""

MAX_PATTERNS = 100
"""Most names or globs in ``include`` or in ``exclude``: the whole table has fewer metrics."""
MAX_PATTERN_LENGTH = 200
"""Longest name or glob: every metric name is far shorter."""

DEFAULT_ATTRIBUTE_COUNT_LIMIT = 128
"""Most constant attributes, as ``OTEL_ATTRIBUTE_COUNT_LIMIT``'s default."""
DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT = 4096
"""Longest string, and most elements of a sequence, in one constant attribute value.

The specification's default is no limit; constant attributes are copied onto
every point of every collection, so this package bounds them by default.
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` overrides it.
"""

DEFAULT_MAX_CHILDREN = 64
"""Most descendant processes reported one by one with ``children=True``."""

SHARED_ONCE, SHARED_EVERY = "once", "every"
SHARED_METRICS = (SHARED_ONCE, SHARED_EVERY)
"""Who reports the host, cgroup and pressure metrics: one process of the group, or each."""

TREE_SELF, TREE_PARENT = "self", "parent"
TREE_ROOT = (TREE_SELF, TREE_PARENT)
"""Whose descendants supervisor mode reports: this process's, or its parent's."""

BY_THREAD, BY_NAME = "thread", "name"
THREAD_SERIES_BY = (BY_THREAD, BY_NAME)
"""What a per-thread series stands for: one thread, or one thread-name pattern."""

ENV_PREFIX = "OTEL_PYTHON_PROCESS_METRICS_"
"""An option's environment variable is this prefix and its name in capitals."""

_ATTRIBUTE_TYPES = (str, bool, int, float)  # bool before int: see _kind
_ATTRIBUTES_ALLOWED = (
    "a mapping of str to str, bool, int (64-bit), float or a sequence of one of those"
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --- how an option is given and checked -------------------------------------


class Form:
    """How an option's value is checked in code and written in its environment variable."""

    __slots__ = ("check", "even", "format", "kind", "parse", "values")

    def __init__(
        self,
        check: Callable[[str, Any], Any],
        parse: Callable[[str], Any] | None = None,
        format: str = "",
        kind: str = "",
        values: tuple[str, ...] = (),
        even: bool = False,
    ) -> None:
        self.check = check
        """``(option name, value)`` to the value kept; raises ValueError naming the option."""
        self.parse = parse
        """A variable's text to a value (then checked); ``None``: the option has no variable.

        Raises ValueError saying what is allowed.
        """
        self.format = format
        """How the variable is written, for the configuration reference."""
        self.kind = kind
        """What kind of value it takes: ``bool``, ``tristate``, ``list``, ``choice``, ``int``."""
        self.values = values
        """The values a ``choice`` allows."""
        self.even = even
        """An ``int`` that must be even."""


# One rule for words, from code and from the environment alike: any case, blanks
# around ignored, the same spellings. Code may also give the Python value itself.
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
AUTO_WORD = "auto"
_BOOLEAN_WORDS = tuple(w for pair in zip(TRUE_WORDS, FALSE_WORDS, strict=True) for w in pair)
_ALLOWED = ", ".join(_BOOLEAN_WORDS) + " (any case)"


def _written(words: Iterable[str]) -> str:
    """``a``, ``b`` or ``c`` (any case): how the words of a form are written in the docs."""
    quoted = [f"`{w}`" for w in words]
    listed = ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
    return f"{listed} (any case)"


def _boolean(raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ValueError(f"expected one of {_ALLOWED}")


def _boolean_or_auto(raw: str) -> bool | None:
    if raw.strip().lower() == AUTO_WORD:
        return None
    try:
        return _boolean(raw)
    except ValueError:
        raise ValueError(f"expected one of {AUTO_WORD}, {_ALLOWED}") from None


def _words_or(
    native: Callable[[object], bool],
    parse: Callable[[str], Any],
    values: str | None,
    words: tuple[str, ...],
) -> Callable[[str, Any], Any]:
    """The check from code: a ``native`` value as it is, text as its variable would be read.

    Its message lists what code may pass: the Python ``values`` (``None``: words only),
    and the ``words`` only when a string was given, quoted as the strings they are
    (``event_loop=1`` is not told that ``1`` is allowed).
    """
    quoted = f"{', '.join(map(repr, words))} (any case)"
    if values is None:
        expected = expected_text = f"one of {quoted}"
    else:
        expected, expected_text = values, f"{values}, or one of the strings {quoted}"

    def check(name: str, value: object) -> Any:
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return parse(value)
            raise ValueError(f"{name}: expected {expected_text}, got {excerpt(value)}")
        if native(value):
            return value
        raise ValueError(f"{name}: expected {expected}, got {excerpt(value)}")

    return check


_IS_BOOL = _words_or(lambda v: isinstance(v, bool), _boolean, "True or False", _BOOLEAN_WORDS)
BOOLEAN = Form(_IS_BOOL, _boolean, _written(_BOOLEAN_WORDS), kind="bool")
"""``True`` or ``False``, or one of their words in any case."""
_IS_TRISTATE = _words_or(
    lambda v: v is None or isinstance(v, bool),
    _boolean_or_auto,
    "True, False or None (auto)",
    (AUTO_WORD, *_BOOLEAN_WORDS),
)
BOOLEAN_OR_AUTO = Form(
    _IS_TRISTATE, _boolean_or_auto, _written((AUTO_WORD, *_BOOLEAN_WORDS)), kind="tristate"
)
"""``True``, ``False`` or ``None`` (auto: the snapshot side decides), or one of their words."""


def _whole_number(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError("expected a whole number >= 0") from None


def whole_number(*, even_because: str = "") -> Form:
    """A whole number >= 0; with ``even_because``, an even one, for that reason."""

    def check(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected a whole number >= 0, got {excerpt(value)}")
        if even_because and value % 2:
            raise ValueError(f"{name}: expected an even number ({even_because}), got {value}")
        return value

    written = "a whole, even number" if even_because else "a whole number"
    return Form(check, _whole_number, written, kind="int", even=bool(even_because))


def choice(values: tuple[str, ...]) -> Form:
    """One of ``values`` (lower-case words), from code or the environment, in any case."""

    def parse(raw: str) -> str:
        word = raw.strip().lower()
        if word not in values:
            raise ValueError(f"expected one of {', '.join(values)} (any case)")
        return word

    check = _words_or(lambda _v: False, parse, None, values)
    return Form(check, parse, _written(values), "choice", values)


def _patterns(raw: str) -> tuple[str, ...]:
    found = tuple(p.strip() for p in raw.split(",") if p.strip())
    if not found:  # text that names nothing (",") is a mistake, as any other text
        raise ValueError("expected comma-separated metric names or globs, got none")
    return found


PATTERNS = Form(
    lambda name, value: _check_patterns(name, value),  # defined below
    _patterns,
    "comma-separated names or globs, e.g. `cpython.gc.*,system.disk.io`",
    kind="list",
)
"""Metric names or globs: any iterable of str, kept as a tuple."""
ATTRIBUTES = Form(lambda _name, value: _check_attributes(value), kind="attributes")
"""Constant attributes: code only."""


class Declared:
    """What :func:`option` adds to a field (its ``metadata["option"]``)."""

    __slots__ = ("form", "gates")

    def __init__(self, form: Form, gates: bool) -> None:
        self.form = form
        self.gates = gates
        """It alone turns metrics on or off; the metric table names it in ``Metric.option``.

        A metric gated by one is on unless the option is ``False``: ``None`` (auto)
        leaves the decision to the snapshot side, which then may report nothing.
        """


def option(
    default: Any = dataclasses.MISSING,
    form: Form = BOOLEAN,
    *,
    gates: bool = False,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A field of :class:`ProcessMetricsOptions`: its default, its form, if it gates metrics."""
    metadata = {"option": Declared(form, gates)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# --- the options --------------------------------------------------------------


@dataclass(frozen=True)
class ProcessMetricsOptions:
    """What to report. Every field is checked when the object is built.

    Raises ``ValueError`` naming the option, the value given (shortened) and
    what is allowed. Built directly, it does not read the
    ``OTEL_PYTHON_PROCESS_METRICS_*`` variables (``instrument()`` does); only
    the attribute limits come from ``OTEL_ATTRIBUTE_*_LIMIT``.
    """

    cpu_frequency: bool = option(False, BOOLEAN, gates=True)
    """Register ``system.cpu.frequency`` and the min/max extensions (costs reads per CPU)."""
    per_thread: bool = option(False, BOOLEAN, gates=True)
    """Report CPU time per thread (``process_metrics.thread.cpu.time``)."""
    per_cpu: bool = option(False, BOOLEAN)
    """Break ``system.cpu.*`` down by ``cpu.logical_number``."""
    include: tuple[str, ...] = option((), PATTERNS)
    """Metric names or globs to report on top of the defaults, e.g. ``system.disk.*``."""
    exclude: tuple[str, ...] = option((), PATTERNS)
    """Metric names or globs not to report; exclude wins over everything."""
    max_thread_series: int = option(
        DEFAULT_MAX_THREAD_SERIES,
        whole_number(even_because="each thread has a user and a system series"),
    )
    """Cap on per-thread series, an even number (two per thread); the busiest threads are kept."""
    thread_series_by: str = option(BY_THREAD, choice(THREAD_SERIES_BY))
    """``"thread"``: a series per thread. ``"name"``: a series per thread-name pattern
    (digits replaced by ``N``), for servers that start a thread per request or per scrape.

    ``"name"`` replaces each run of digits in a thread's name with ``N``, so
    that threads started one per request or per scrape (``Thread-12 (...)``)
    add up in one stable series instead of a new series each.
    """
    attributes: Mapping[str, Any] = option(form=ATTRIBUTES, factory=dict)
    """Constant attributes on every point: at most 128 (``OTEL_ATTRIBUTE_COUNT_LIMIT``),
    each value at most 4096 characters or elements (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``).
    """
    saturation: bool | None = option(None, BOOLEAN_OR_AUTO, gates=True)
    """Container CPU throttling, memory headroom and OOM kills, pressure stalls (Linux).
    ``None`` (auto): the cgroup metrics when a CPU quota or a memory limit applies to
    the process, pressure stalls whenever the kernel has them.

    ``True`` forces them on where the files exist; ``False`` turns them off.
    """
    gc_pause_histogram: bool = option(False, BOOLEAN, gates=True)
    """Count garbage-collection pauses in buckets from 10 µs to 1 s (a histogram as counters)."""
    gil_wait: bool = option(False, BOOLEAN, gates=True)
    """Sample how long a thread that becomes ready waits for the GIL (Linux, with a GIL).

    One daemon thread wakes about 5 times a second (``process_metrics.cpython.gil.wait.*``).
    """
    event_loop: bool = option(False, BOOLEAN, gates=True)
    """Measure how late each asyncio event loop runs, its busy share and its stalls, with the
    span and function of each (``process_metrics.eventloop.*``).

    A hook on each loop's ``select``: nothing is put in a loop. uvloop and loops
    with a clock of their own are not probed (docs/runtime.md).
    """
    direct_reads: bool = option(True, BOOLEAN)
    """On Linux, read a few values directly where psutil costs more per item or rereads a
    file (each source declares its direct reads; the design page lists them).

    Turn off to troubleshoot: psutil is then used wherever it has the value.
    """
    shared_metrics: str = option(SHARED_ONCE, choice(SHARED_METRICS))
    """``"once"``: one process of a group reports the shared metrics (``system.*``, container,
    cgroup and pressure); ``"every"``: each process does.

    A group is the processes that export one service (its ``service.name``,
    ``service.namespace`` and ``deployment.environment.name``) as one user in
    one cgroup on one boot of one host: the workers of one server in one
    container or systemd service. A program that sets no ``service.name`` is
    told apart by its command line, which a server's workers share. The shared
    metrics are the host ones (``system.*``), the container and cgroup ones and
    the pressure stalls; the group elects its reporter at a collection, by a
    lock the kernel frees when the holder dies, and another process takes over
    at its next collection. A process that does not report them says so once,
    at INFO, with the process that does.
    """

    children: bool = option(False, BOOLEAN, gates=True)
    """Supervisor mode: also report every descendant process (the workers), each by its slot.

    Adds per-child points to the process metrics that can be read from outside
    (attribute ``process_metrics.worker.slot``) and the ``process_metrics.tree.*``
    totals of this process and all its descendants.
    """
    max_children: int = option(DEFAULT_MAX_CHILDREN, whole_number())
    """Cap on descendants reported one by one: the lowest slots are kept; tree totals count all."""
    child_pid: bool = option(False, BOOLEAN)
    """Add ``process.pid`` to per-child points (it churns a series at every restart)."""
    tree_root: str = option(TREE_SELF, choice(TREE_ROOT))
    """``"self"``: the tree is this process and its descendants. ``"parent"``: its parent's.

    ``"parent"`` is for a helper process of a server (a uWSGI mule) that reports
    the whole server, so that the master itself runs no Python thread. The tree
    then counts the parent, all its descendants (this process included) and
    what the parent reaped; this process gets no per-child points of its own.
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            declared: Declared = f.metadata["option"]
            value = getattr(self, f.name)
            kept = declared.form.check(f.name, value)
            if kept is not value:
                object.__setattr__(self, f.name, kept)


def declared(name: str) -> Declared:
    """The declaration of option ``name``."""
    found: Declared = _FIELDS[name].metadata["option"]
    return found


_FIELDS = {f.name: f for f in fields(ProcessMetricsOptions)}
OPTION_NAMES = tuple(_FIELDS)
GATING_OPTIONS = tuple(n for n in OPTION_NAMES if declared(n).gates)
"""Options that alone turn metrics on or off; a metric row's ``option`` must be one of them."""


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has a glob character (``*``, ``?`` or ``[``)."""
    return any(c in pattern for c in "*?[")


def matches(name: str, pattern: str) -> bool:
    """Whether an ``include`` or ``exclude`` pattern matches the metric ``name``.

    A name matches itself only. A glob matches the name, and an extension's
    name after its prefix too: ``cpython.gc.*`` covers
    ``process_metrics.cpython.gc.pause.time``, as one who writes it expects.
    """
    if not is_glob(pattern):
        return name == pattern
    if fnmatch.fnmatchcase(name, pattern):
        return True
    return name.startswith(EXTENSION_PREFIX) and fnmatch.fnmatchcase(
        name[len(EXTENSION_PREFIX) :], pattern
    )


def _check_patterns(option: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        hint = f" (write [{excerpt(value, 60)}])" if isinstance(value, str) else ""
        raise ValueError(
            f"{option}: expected a list of metric names or globs, got {excerpt(value)}{hint}"
        )
    patterns: list[str] = []
    for p in value:
        if len(patterns) == MAX_PATTERNS:
            raise ValueError(
                f"{option}: expected at most {MAX_PATTERNS} metric names or globs, got more"
            )
        if not isinstance(p, str) or not p.strip() or len(p.strip()) > MAX_PATTERN_LENGTH:
            raise ValueError(
                f"{option}: expected metric names or globs (non-empty strings of at most "
                f"{MAX_PATTERN_LENGTH} characters), got {excerpt(p)}"
            )
        patterns.append(p.strip())
    for pattern in patterns:
        _check_pattern(option, pattern)
    return tuple(patterns)


def _check_pattern(option: str, pattern: str) -> None:
    if is_glob(pattern):
        if not any(matches(m.name, pattern) for m in METRICS):
            raise ValueError(
                f"{option}: the glob {excerpt(pattern)} matches no metric; allowed: names or "
                "globs over the names in the metric reference"
            )
        return
    metric = METRICS_BY_NAME.get(pattern)
    if metric is None:
        import difflib  # only on this error path: it costs memory at import

        close = difflib.get_close_matches(pattern, METRICS_BY_NAME)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"{option}: unknown metric name {excerpt(pattern)}{hint}; allowed: names or globs "
            "over the names in the metric reference"
        )
    if option == "include" and metric.option is not None:
        raise ValueError(
            f"include: {pattern!r} is turned on by {metric.option}=True, not by include"
        )


ATTRIBUTE_LIMITS = {
    "OTEL_ATTRIBUTE_COUNT_LIMIT": DEFAULT_ATTRIBUTE_COUNT_LIMIT,
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT,
}
"""The standard attribute-limit variables this package reads, each with its default here."""


def limit_value(raw: str) -> int | None:
    """A limit variable's text as a whole number >= 0; ``None`` if empty or not one."""
    raw = raw.strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def attribute_limits(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(count limit, value length limit)`` for constant attributes.

    From ``OTEL_ATTRIBUTE_COUNT_LIMIT`` and ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``
    where they hold a whole number >= 0, else the defaults (the environment
    module warns about a bad value once).
    """
    environ = os.environ if environ is None else environ
    count, length = (
        found if (found := limit_value(environ.get(var, ""))) is not None else default
        for var, default in ATTRIBUTE_LIMITS.items()
    )
    return count, length


def _check_attributes(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"attributes: expected {_ATTRIBUTES_ALLOWED}, got {excerpt(value)}")
    count_limit, length_limit = attribute_limits()
    if len(value) > count_limit:
        raise ValueError(
            f"attributes: expected at most {count_limit} attributes "
            f"(OTEL_ATTRIBUTE_COUNT_LIMIT), got {len(value)}"
        )
    for key, v in value.items():
        length = _length(v, length_limit)
        if isinstance(key, str) and key and length > length_limit:
            raise ValueError(
                f"attributes: {excerpt(key)}: expected a value of at most {length_limit} "
                f"characters or elements (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT), got "
                f"{length}: {excerpt(v)}"
            )
        if not isinstance(key, str) or not key or not _attribute_value_ok(v):
            raise ValueError(
                f"attributes: expected {_ATTRIBUTES_ALLOWED}, got {excerpt(key)}: {excerpt(v)}"
            )
    return MappingProxyType(dict(value))


def _length(value: object, limit: int) -> int:
    """Characters of a string; elements of a sequence, or its longest string if longer."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        if len(value) > limit:
            return len(value)  # refused anyway: do not walk a huge sequence
        return max([len(value), *(len(x) for x in value if isinstance(x, str))])
    return 0


def _attribute_value_ok(value: object) -> bool:
    # OTLP carries ints as int64 and arrays of one type: anything else is
    # dropped by the exporter at every export, with an error each time.
    if isinstance(value, (list, tuple)):
        kinds = {_kind(x) for x in value}
        return None not in kinds and len(kinds) <= 1
    return _kind(value) is not None


def _kind(value: object) -> type | None:
    """The OTLP scalar type that ``value`` is sent as, or None if it cannot be."""
    for kind in _ATTRIBUTE_TYPES:  # bool before int: bool is an int subclass
        if isinstance(value, kind):
            if kind is int and not _INT64_MIN <= value <= _INT64_MAX:  # type: ignore[operator]
                return None
            return kind
    return None
