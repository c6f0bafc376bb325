"""Every PromQL query of the Grafana dashboard, ready to run against a backend.

The end-to-end tests run each one against VictoriaMetrics and require data
from it, so that no panel of the dashboard can silently go blank::

    from queries import queries
    for q in queries():
        run(q.expr)

Panel queries come as they are, with dashboard variables filled in (``.*``,
i.e. "All", unless given) and ``$__rate_interval`` set. A variable's
``label_values(metric, label)`` becomes ``group by (label) (metric{label!=""})``,
which returns data exactly when the variable would have values.

As a script it prints one query a line: ``python examples/grafana/queries.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parent / "process-metrics-dashboard.json"

# Grafana's built-in interval variables.
_BUILTINS = ("__rate_interval", "__interval", "__range")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<metric>.+),\s*)?(?P<label>\w+)\s*\)\s*$")


@dataclass(frozen=True)
class Query:
    """One query of the dashboard: where it comes from and the expression to run."""

    source: str
    """``panel <title> / <refId>`` or ``variable <name>``."""
    expr: str
    row: str = ""
    """Title of the dashboard row the panel is in; empty for a variable."""


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel of ``items``, the panels inside collapsed rows included."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))  # collapsed rows hold their panels


def panels_by_row(items: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every panel of ``items`` as in :func:`panels`, with the title of the row it is in."""
    row = ""
    for panel in items:
        if panel.get("type") == "row":
            row = panel.get("title", "")
        yield row, panel
        for inner in panels(panel.get("panels", [])):
            yield row, inner


def expand(expr: str, variables: Mapping[str, str] | None = None, interval: str = "1m") -> str:
    """``expr`` with every ``$variable`` replaced; unknown ones raise ``ValueError``."""
    values = {name: interval for name in _BUILTINS}
    values.update(variables or {})

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise ValueError(f"no value for dashboard variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(one, expr)


def variable_names(dashboard: Mapping[str, Any]) -> list[str]:
    return [v["name"] for v in dashboard.get("templating", {}).get("list", [])]


def queries(
    path: Path = DASHBOARD,
    variables: Mapping[str, str] | None = None,
    interval: str = "1m",
) -> list[Query]:
    """All queries of the dashboard at ``path``: variables first, then panels in order."""
    dashboard = load(path)
    values = {name: ".*" for name in variable_names(dashboard)}
    values.update(variables or {})
    found: list[Query] = []
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        raw = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = _LABEL_VALUES.match(raw)
        if match is None:
            raise ValueError(f"variable {var['name']}: cannot run {raw!r}")
        label, metric = match["label"], match["metric"] or ""
        selector = f'{label}!=""'
        if metric.endswith("}"):
            metric = f"{metric[:-1]}, {selector}}}"
        else:
            metric = f"{metric}{{{selector}}}"
        expr = f"group by ({label}) ({metric})"
        found.append(Query(f"variable {var['name']}", expand(expr, values, interval)))
    for row, panel in panels_by_row(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                source = f"panel {panel['title']} / {target['refId']}"
                found.append(Query(source, expand(target["expr"], values, interval), row))
    return found


if __name__ == "__main__":
    for q in queries():
        print(q.expr)
