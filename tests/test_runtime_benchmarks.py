"""The benchmarks' own rules: public API only, and the component benchmark on pyperf.Runner.

Only their shape is checked here, never a time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import opentelemetry.instrumentation.process as package

pyperf = pytest.importorskip("pyperf")

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
PACKAGE = "opentelemetry.instrumentation.process"
PUBLIC_ONLY = ("instructions", "subjects", "configs", "heap", "memory", "counts", "scaling")
"""Everything but the component benchmark, which times one internal component."""
TABLE = ("opentelemetry.instrumentation.process.metrics", "METRICS")
"""The metric table, which names the metric sets measured (configs.py; benchmarks/README.md)."""


def _imports(name: str) -> list[tuple[str, str]]:
    tree = ast.parse((BENCHMARKS / f"{name}.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names]
    return found


@pytest.mark.parametrize("name", PUBLIC_ONLY)
def test_uses_only_the_public_api(name: str) -> None:
    for module, what in _imports(name):
        if module.startswith(PACKAGE) and (module, what) != TABLE:
            assert module == PACKAGE, f"{name} imports the internal module {module}"
            assert what in ("", *package.__all__), f"{name} imports {what}, which is not public"


def test_no_benchmark_imports_a_private_name_of_pyperf_or_pyperformance() -> None:
    for path in BENCHMARKS.glob("*.py"):
        for module, what in _imports(path.stem):
            if module.split(".")[0] in ("pyperf", "pyperformance"):
                private = [p for p in (*module.split(".")[1:], what) if p.startswith("_")]
                assert not private, f"{path.name} imports {module} {what}"


def test_the_component_benchmark_runs_on_pyperf(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import components
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = tmp_path / "cgroup_readers.json"
    script = str(BENCHMARKS / "cgroup_readers.py")
    done = subprocess.run(
        [sys.executable, script, "--debug-single-value", "--quiet", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    suite = pyperf.BenchmarkSuite.load(str(out))
    assert suite.get_benchmark_names() == ["bare", "bare_parse", "read_all"]
    table = components.table(suite).splitlines()
    assert table[0].startswith("Measured ") and " CPUs, load average " in table[0]
    assert table[2] == "| Benchmark | Mean ± std dev | / `bare` |"
    assert table[4].startswith("| `bare` | ") and table[4].endswith(" | 1.000x |")
    assert len(table) == 7


LINES = 4000
"""Issue 37: the harness at most this many lines of code (its .py and .sh files)."""


def _scripts() -> list[Path]:
    return sorted(p for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh"))


def test_the_readme_lists_every_script_and_template() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    files = readme.split("## Files", 1)[1]
    rows = [line.split(" | ")[0] for line in files.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in row.strip("| ").replace("`", "").split(", ")}
    present = {p.name for p in (*_scripts(), *BENCHMARKS.glob("*_template.md"))}
    assert listed == present, (sorted(listed - present), sorted(present - listed))


def test_the_harness_stays_within_its_lines() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in _scripts())
    assert lines <= LINES, f"benchmarks/*.py and *.sh: {lines} lines, more than {LINES}"
