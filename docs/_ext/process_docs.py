"""Sphinx directives that generate the reference tables from the package itself.

Nothing here is copied by hand: the metric reference reads ``METRICS``, the
option table reads the dataclass and ``ENV_VARS``, and the error messages are
produced by calling the real constructor with bad values while the docs build.
A case that stops failing, or a migration row that names an unknown metric,
is a build warning, and the build treats warnings as errors.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging as sphinx_logging
from sphinx.util.docutils import SphinxDirective

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process import environment as environment_module
from opentelemetry.instrumentation.process import metrics as metrics_module
from opentelemetry.instrumentation.process import options as options_module
from opentelemetry.instrumentation.process import platforms as platforms_module
from opentelemetry.instrumentation.process.catalog import (
    PER_CHILD,
    attributes_of,
    cost_of,
    platforms_of,
)
from opentelemetry.instrumentation.process.environment import (
    ENV_VARS,
    FORMATS,
    from_environment,
)
from opentelemetry.instrumentation.process.metrics import METRICS, METRICS_BY_NAME, Kind, Metric
from opentelemetry.instrumentation.process.sources import SOURCES

_log = sphinx_logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_QUERIES = ROOT / "examples" / "grafana" / "queries.py"

Cell: TypeAlias = "str | nodes.Node | Sequence[nodes.Node]"

# --- building docutils nodes -------------------------------------------------

# ``rst literal`` and `markdown code` both become code.
_MARKUP = re.compile(r"``([^`]+)``|`([^`]+)`|\*\*([^*]+)\*\*|\*([^*]+)\*")


def inline(text: str) -> list[nodes.Node]:
    """``text`` with ``code``, **strong** and *emphasis* turned into nodes."""
    out: list[nodes.Node] = []
    pos = 0
    for match in _MARKUP.finditer(text):
        if match.start() > pos:
            out.append(nodes.Text(text[pos : match.start()]))
        rst_code, md_code, strong, emphasis = match.groups()
        code = rst_code if rst_code is not None else md_code
        if code is not None:
            out.append(nodes.literal(code, code))
        elif strong is not None:
            out.append(nodes.strong(strong, strong))
        else:
            out.append(nodes.emphasis(emphasis, emphasis))
        pos = match.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


def para(content: Cell) -> nodes.paragraph:
    if isinstance(content, str):
        return nodes.paragraph("", "", *inline(content))
    if isinstance(content, nodes.Node):
        return nodes.paragraph("", "", content)
    return nodes.paragraph("", "", *content)


def codes(names: Iterable[str], sep: str = ", ") -> list[nodes.Node]:
    out: list[nodes.Node] = []
    for i, name in enumerate(names):
        if i:
            out.append(nodes.Text(sep))
        out.append(nodes.literal(name, name))
    return out


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Cell | list[Cell]]],
    widths: Sequence[int] | None = None,
) -> nodes.table:
    """A table; a cell given as a list of cells becomes several paragraphs."""
    widths = widths or [1] * len(headers)
    tgroup = nodes.tgroup(cols=len(headers))
    for width in widths:
        tgroup += nodes.colspec(colwidth=width)
    head = nodes.row()
    for header in headers:
        head += nodes.entry("", para(header))
    tgroup += nodes.thead("", head)
    body = nodes.tbody()
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            if isinstance(cell, list) and cell and not isinstance(cell[0], nodes.Node):
                for part in cell:
                    entry += para(part)
            else:
                entry += para(cell)
            row += entry
        body += row
    tgroup += body
    result = nodes.table("", tgroup)
    result["classes"].append("process-metrics-table")
    return result


class _Generated(SphinxDirective):
    """Base: rebuild the page when the package source it reads changes."""

    depends_on: ClassVar[tuple[Any, ...]] = (metrics_module, options_module, environment_module)

    def note_dependencies(self, *paths: Path) -> None:
        for module in self.depends_on:
            self.env.note_dependency(str(Path(module.__file__)))
        for source in SOURCES.values():  # the table reads each source's cost and platforms
            self.env.note_dependency(str(Path(sys.modules[source.read.__module__].__file__ or "")))
        for path in paths:
            self.env.note_dependency(str(path))


# --- the metric reference ----------------------------------------------------

_PLATFORMS = {
    platforms_module.ALL: "all",
    platforms_module.POSIX: "POSIX (Linux, macOS, BSD, ...)",
    platforms_module.LINUX: "Linux",
    platforms_module.WINDOWS: "Windows",
}
_UNIT_WORDS = {"s": "seconds", "By": "bytes", "Hz": "hertz"}


def prometheus_name(metric: Metric) -> str:
    """The name a Prometheus-naming OTLP backend gives ``metric``.

    Dots become underscores; the unit is appended in words (``{...}`` units
    are dropped, ``1`` is ``ratio`` on gauges); monotonic counters end in
    ``_total``. This is what VictoriaMetrics with
    ``-opentelemetry.usePrometheusNaming=true`` produces.
    """
    name = metric.name.replace(".", "_")
    if metric.unit == "1":
        suffix = "ratio" if metric.kind is Kind.GAUGE else ""
    elif metric.unit.startswith("{"):
        suffix = ""
    else:
        suffix = _UNIT_WORDS.get(metric.unit, metric.unit.lower())
    if suffix and not name.endswith("_" + suffix):
        name += "_" + suffix
    if metric.kind is Kind.COUNTER:
        name += "_total"
    return name


def when_on(metric: Metric) -> str:
    auto = SOURCES[metric.source].auto
    if auto:
        return f"**auto**: on {auto}; `{metric.option}=True` or `False` forces it"
    if metric.option is not None:  # the section's text gives the environment variable
        return f"off; on with `{metric.option}=True`"
    if metric.default:
        return "**on**"
    if metric.exact_only:
        return "off; on only when its exact name is in `include` (never by a glob)"
    return "off; on when `include` names it or a glob matches it"


def instrument_kind(metric: Metric) -> str:
    number = "double" if metric.value_type is float else "int"
    return f"{metric.kind.value} ({number})"


def sharing(metric: Metric) -> str:
    others = [m.name for m in METRICS if m.source == metric.source and m is not metric]
    if cost_of(metric).startswith("none"):
        return ""
    if not others:
        return f"source `{metric.source}`"
    return f"source `{metric.source}`, one read shared with {len(others)} other metric(s)"


class MetricTable(_Generated):
    """``process-metrics-table``: metrics of the table, filtered by group or default."""

    option_spec: ClassVar[dict[str, Callable[[str], Any]]] = {
        "groups": directives.unchanged,
        "default": lambda arg: directives.choice(arg, ("on", "off")),
    }

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        groups = [g.strip() for g in self.options.get("groups", "").split(",") if g.strip()]
        known = {m.group for m in METRICS}
        for group in groups:
            if group not in known:
                raise self.error(f"unknown metric group {group!r}; known: {sorted(known)}")
        chosen = [m for m in METRICS if not groups or m.group in groups]
        if "default" in self.options:
            chosen = [m for m in chosen if m.default == (self.options["default"] == "on")]
        if not chosen:
            raise self.error("no metric matches")
        rows = []
        for m in chosen:
            name: list[nodes.Node] = [nodes.strong("", "", nodes.literal(m.name, m.name))]
            if m.extension:
                name += [nodes.Text(" "), nodes.emphasis("", "(extension)")]
            cell: list[Cell] = [
                name,
                m.description,
                [nodes.Text("Prometheus: "), nodes.literal("", prometheus_name(m))],
            ]
            attributes: list[Cell] = [codes(attributes_of(m)) if attributes_of(m) else "none"]
            if m.note:
                attributes.append(m.note)
            # Four columns, so that the table fits a desktop page with no
            # identifier broken: when, where and what it reads share one.
            platforms = _PLATFORMS.get(platforms_of(m), ", ".join(sorted(platforms_of(m))))
            usage: list[Cell] = [when_on(m), f"*Platforms:* {platforms}", f"*Reads:* {cost_of(m)}"]
            if sharing(m):
                usage.append(sharing(m))
            rows.append([cell, [instrument_kind(m), f"`{m.unit}`"], attributes, usage])
        headers = ["Metric", "Instrument, unit", "Attributes", "Default, platforms, reads"]
        return [table(headers, rows, [34, 14, 20, 32])]


class MetricCount(_Generated):
    """``process-metrics-count``: one sentence with the numbers of the table."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        on = sum(m.default for m in METRICS)
        ext = sum(m.extension for m in METRICS)
        text = (
            f"The table has **{len(METRICS)}** metrics: **{on}** on by default (each where "
            f"its platform has it) and {len(METRICS) - on} opt-in. {ext} of them are this "
            "package's extensions, named under `process_metrics.`."
        )
        return [para(text)]


# --- the snapshot sources --------------------------------------------------------


class SourceTable(_Generated):
    """``process-metrics-sources``: what each snapshot source reads, and what it feeds."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        rows = []
        for source in SOURCES.values():
            fed = [m.name for m in METRICS if m.source == source.name]
            if not fed:
                continue
            flags = []
            if source.in_process:
                flags.append("inside the one `Process.oneshot()`")
            if source.stateful:
                flags.append("keeps a baseline, first read at `instrument()`")
            if source.shared:
                flags.append(
                    'shared: with `shared_metrics="once"`, one process of the group reads it'
                )
            if source.name in ("static", "system_static"):
                when = "once per process (and again after fork)"
            elif source.name == "refresh":
                when = "timed by the refresh itself"
            else:
                when = "once per collection, when a metric that needs it is on"
            rows.append(
                [
                    f"`{source.name}`",
                    [source.cost, *flags],
                    when,
                    codes(fed),
                ]
            )
        headers = ["Source", "What one read costs", "When", "Metrics it feeds"]
        return [table(headers, rows, [14, 30, 18, 38])]


class DirectReadTable(_Generated):
    """``process-metrics-direct-reads``: each direct Linux read, what it replaces, what it feeds."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        rows = []
        for source in SOURCES.values():
            fed = [m.name for m in METRICS if m.source == source.name]
            for read in source.direct:
                rows.append([f"`{read.name}`", read.reads, read.instead_of, codes(fed)])
        headers = ["Direct read", "Reads", "Instead of psutil's", "Metrics it feeds"]
        return [table(headers, rows, [10, 30, 30, 30])]


# --- configuration ---------------------------------------------------------------


def _field_docs() -> dict[str, str]:
    analyzer = ModuleAnalyzer.for_module(options_module.__name__)
    docs = analyzer.find_attr_docs()
    return {
        attr: " ".join(line.strip() for line in lines if line.strip())
        for (cls, attr), lines in docs.items()
        if cls == "ProcessMetricsOptions"
    }


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    factory = field.default_factory
    assert factory is not dataclasses.MISSING, f"{field.name} has no default"
    return factory()


class OptionTable(_Generated):
    """``process-metrics-options``: every option, its variable, default and format."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        docs = _field_docs()
        rows = []
        for field in dataclasses.fields(ProcessMetricsOptions):
            default = _default(field)
            var = ENV_VARS.get(field.name)
            doc = docs.get(field.name)
            if not doc:
                _log.warning("option %s has no docstring to show", field.name)
                doc = ""
            env: list[Cell] = [f"`{var}`", FORMATS[field.name]] if var else ["none: code only"]
            kind: list[Cell] = [f"`{field.name}`", f"`{field.type}`"]
            shown = f"`{default!r}`"
            if isinstance(default, tuple):  # what callers may pass, and what is kept
                kind = [f"`{field.name}`", "any iterable of `str`, kept as a `tuple`"]
                shown = f"none, `{default!r}`"
            rows.append([kind, shown, env, doc])
        headers = ["Option, type", "Default", "Environment variable", "What it does"]
        return [table(headers, rows, [22, 10, 30, 38])]


class SpellingRule(_Generated):
    """``process-metrics-spellings``: how words are read, from code and the environment."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        from readme_blocks import spelling_rule  # beside this file, on conf.py's path

        return [para(spelling_rule())]


# The bad calls below run while the docs build: the messages shown are real.
ERROR_CASES = (
    'ProcessMetricsOptions(cpu_frequency="maybe")',
    'ProcessMetricsOptions(include="process.cpu.time")',
    'ProcessMetricsOptions(include=["process.cpu.tme"])',
    'ProcessMetricsOptions(exclude=["disk.*"])',
    'ProcessMetricsOptions(include=[""])',
    'ProcessMetricsOptions(include=["system.cpu.frequency"])',
    "ProcessMetricsOptions(max_thread_series=-1)",
    'ProcessMetricsOptions(attributes={"team": None})',
    "ProcessInstrumentor().instrument(cpu_freq=True)",
    'ProcessInstrumentor().instrument(options={"per_cpu": True})',
)

ENV_CASES = (
    ("cpu_frequency", "maybe"),
    ("max_thread_series", "lots"),
    ("include", "process.cpu.tme"),
    ("exclude", "nothing.*"),
)


def message(text: str) -> nodes.literal:
    """A message shown as code that wraps at its blanks (class ``message``, custom.css)."""
    return nodes.literal("", text, classes=["message"])


class OptionErrors(_Generated):
    """``process-metrics-errors``: each bad value and the ``ValueError`` it gets."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        namespace = {
            "ProcessMetricsOptions": ProcessMetricsOptions,
            "ProcessInstrumentor": ProcessInstrumentor,
        }
        rows = []
        for case in ERROR_CASES:
            try:
                eval(case, namespace)  # our own constant cases, shown as run
            except ValueError as exc:
                rows.append([nodes.literal(case, case), message(f"ValueError: {exc}")])
            else:
                ProcessInstrumentor().uninstrument()
                _log.warning("docs: %s no longer raises ValueError; update ERROR_CASES", case)
        return [table(["Code", "Raises"], rows, [45, 55])]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class EnvWarnings(_Generated):
    """``process-metrics-env-warnings``: bad variables and the warning each one logs."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        logger = logging.getLogger(ProcessInstrumentor.__module__)
        rows = []
        for option, raw in ENV_CASES:
            var = ENV_VARS[option]
            capture = _Capture()
            logger.addHandler(capture)
            propagate, logger.propagate = logger.propagate, False  # keep the build log clean
            try:
                found = from_environment({var: raw})
            finally:
                logger.removeHandler(capture)
                logger.propagate = propagate
            if found or len(capture.messages) != 1:
                _log.warning("docs: %s=%r no longer logs one warning; update ENV_CASES", var, raw)
                continue
            rows.append([nodes.literal("", f"{var}={raw}"), message(capture.messages[0])])
        return [table(["Environment", "Logs (WARNING) and uses the default"], rows, [35, 65])]


# --- migration -------------------------------------------------------------------


class MigrationTable(_Generated):
    """``process-metrics-migration``: each peer metric and where it went."""

    def run(self) -> list[nodes.Node]:
        import migration_map

        self.note_dependencies(Path(migration_map.__file__))
        rows = []
        for move in migration_map.MOVES:
            for name in move.new:
                metric = METRICS_BY_NAME.get(name)
                if metric is None:
                    _log.warning("migration: %s maps to unknown metric %s", move.old, name)
                elif not set(move.new_attributes) <= set(attributes_of(metric)):
                    _log.warning("migration: %s has no attributes %s", name, move.new_attributes)
            old: list[Cell] = [f"`{move.old}`"]
            old.append(codes(move.old_attributes) if move.old_attributes else "no attributes")
            if move.new:
                new: list[Cell] = [codes(move.new, " and ")]
                new.append(codes(move.new_attributes) if move.new_attributes else "no attributes")
            else:
                new = ["none"]
            rows.append([old, new, move.change])
        headers = ["Peer metric, attributes", "This package, attributes", "What changed"]
        return [table(headers, rows, [26, 26, 48])]


class NewMetrics(_Generated):
    """``process-metrics-new``: metrics the peer has no equivalent for."""

    def run(self) -> list[nodes.Node]:
        import migration_map

        self.note_dependencies(Path(migration_map.__file__))
        mapped = {name for move in migration_map.MOVES for name in move.new}
        rows = [[f"`{m.name}`", m.description, when_on(m)] for m in METRICS if m.name not in mapped]
        return [table(["Metric", "What it is", "Default"], rows, [30, 50, 20])]


# --- dashboard -------------------------------------------------------------------


def _load_queries_module() -> Any:
    spec = importlib.util.spec_from_file_location("process_docs_queries", DASHBOARD_QUERIES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class DashboardQueries(_Generated):
    """``process-metrics-dashboard``: every panel of the dashboard and its queries."""

    def run(self) -> list[nodes.Node]:
        queries = _load_queries_module()
        self.note_dependencies(DASHBOARD_QUERIES, queries.DASHBOARD)
        dashboard = queries.load()
        rows = []
        for panel in queries.panels(dashboard["panels"]):
            exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
            if not exprs:
                continue
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
            rows.append(
                [
                    [f"**{panel['title']}**", panel.get("description", "")],
                    [[nodes.literal("", e)] for e in exprs],
                    f"`{unit}`" if unit else "",
                ]
            )
        return [table(["Panel", "PromQL", "Unit"], rows, [30, 60, 10])]


class PerChildTable(_Generated):
    """``process-metrics-per-child``: the process metrics that get per-child points."""

    def run(self) -> list[nodes.Node]:
        self.note_dependencies()
        rows = []
        for name, row in PER_CHILD.items():
            platforms = _PLATFORMS.get(platforms_of(row), ", ".join(sorted(platforms_of(row))))
            rows.append(
                [
                    [nodes.literal(name, name)],
                    codes(attributes_of(row)),
                    [f"*Platforms:* {platforms}", f"*Reads:* {cost_of(row)}"],
                ]
            )
        headers = ["Metric", "Attributes of a child's points", "Platforms, reads"]
        return [table(headers, rows, [30, 35, 35])]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("process-metrics-per-child", PerChildTable)
    app.add_directive("process-metrics-table", MetricTable)
    app.add_directive("process-metrics-count", MetricCount)
    app.add_directive("process-metrics-sources", SourceTable)
    app.add_directive("process-metrics-direct-reads", DirectReadTable)
    app.add_directive("process-metrics-options", OptionTable)
    app.add_directive("process-metrics-errors", OptionErrors)
    app.add_directive("process-metrics-spellings", SpellingRule)
    app.add_directive("process-metrics-env-warnings", EnvWarnings)
    app.add_directive("process-metrics-migration", MigrationTable)
    app.add_directive("process-metrics-new", NewMetrics)
    app.add_directive("process-metrics-dashboard", DashboardQueries)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
