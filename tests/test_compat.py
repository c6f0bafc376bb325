"""The compatibility harness (scripts/compat.py) on a tiny real suite made here.

regrtest runs the suite's files (``--testdir``) without the package and with it,
each process loading ``scripts/compat/sitecustomize.py``: the harness must flag
a test that fails only with the package, a test file whose worker dies only with
it, and a warning that the package logs in a child process, and must not count a
test that fails either way.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from opentelemetry.instrumentation.process.options import (
    OPTION_NAMES,
    ProcessMetricsOptions,
    declared,
)
from opentelemetry.instrumentation.process.selection import enabled_metrics

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "scripts" / "compat.py"

SUITE = {
    "test_verdicts.py": """
        import sys
        import unittest

        class Verdicts(unittest.TestCase):
            def test_fails_with_the_package(self):
                self.assertNotIn("opentelemetry.instrumentation.process", sys.modules)

            def test_fails_either_way(self):
                self.fail("fails on this machine, with the package or without")

            def test_passes(self):
                pass
        """,
    "test_crash.py": """
        import os
        import sys
        import unittest

        class Crash(unittest.TestCase):
            def test_worker_dies_with_the_package(self):
                if "opentelemetry.instrumentation.process" in sys.modules:
                    os.abort()
        """,
    "test_child_logs.py": """
        import os
        import subprocess
        import sys
        import unittest

        class ChildLogs(unittest.TestCase):
            def test_child_with_a_bad_variable(self):
                # The child inherits PYTHONPATH, so the hook: with the package, it
                # logs one warning for the bad variable and goes on.
                env = dict(os.environ, OTEL_PYTHON_PROCESS_METRICS_MAX_THREAD_SERIES="lots")
                subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        """,
}


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # NamedTuples look their module up
    spec.loader.exec_module(module)
    return module


def load_hook() -> ModuleType:
    return load("compat_sitecustomize", ROOT / "scripts" / "compat" / "sitecustomize.py")


def _has_regrtest() -> bool:
    try:
        return importlib.util.find_spec("test.libregrtest") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(
    not _has_regrtest(), reason="this interpreter has no CPython test suite (test.libregrtest)"
)
def test_flags_what_fails_only_with_the_package_and_what_it_logs(tmp_path: Path) -> None:
    tests = tmp_path / "suite"
    tests.mkdir()
    for name, text in SUITE.items():
        (tests / name).write_text(textwrap.dedent(text))
    out = tmp_path / "out"
    cmd = [sys.executable, str(COMPAT), "--python", sys.executable, "--no-venv"]
    cmd += ["--testdir", str(tests), "--out", str(out), "--jobs", "1", "--timeout", "120"]
    cmd += [arg for name in sorted(SUITE) for arg in ("--suite", name.removesuffix(".py"))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)

    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = {v["suite"]: v for v in json.loads((out / "summary.json").read_text())["suites"]}
    assert set(verdicts) == {"test_verdicts", "test_crash", "test_child_logs"}

    verdicts_ = verdicts["test_verdicts"]
    # What regrtest printed in each package run, should one not name the failing test.
    said = {p.parent.name: p.read_text()[-2000:] for p in out.glob("*/test_verdicts/*/output.txt")}
    expected = ["test_verdicts.Verdicts.test_fails_with_the_package"]
    assert verdicts_["only_package"] == expected, said
    assert verdicts_["either"] == ["test_verdicts.Verdicts.test_fails_either_way"]
    assert verdicts_["sdk"]["tests"] == verdicts_["package"]["tests"] == 3
    assert not verdicts_["ok"]

    crash = verdicts["test_crash"]
    assert crash["only_package"] == ["test_crash [crashed]"], crash
    assert crash["sdk"]["failed"] == []

    child = verdicts["test_child_logs"]
    assert child["only_package"] == [] and child["either"] == []
    logged = child["new_records"]
    assert logged, child
    assert {r["logger"] for r in logged} == {"opentelemetry.instrumentation.process.environment"}
    assert all(r["level"] == "WARNING" and "MAX_THREAD_SERIES" in r["message"] for r in logged)
    assert child["sdk"]["records"] == []
    # The hook ran in regrtest, its worker and the child, in each mode.
    assert child["sdk"]["processes"] >= 3 and child["package"]["processes"] >= 3
    assert not child["ok"]

    progress = [line for line in done.stdout.splitlines() if line.startswith("[compat] ")]
    assert len(progress) == 4, done.stdout  # one per suite, and the total
    assert "-> FAIL" in progress[0]


def test_every_option_on_covers_every_declared_option() -> None:
    hook = load_hook()
    on, other = hook.every_option_on(), hook.every_option_on(other_choices=True)
    options, with_other = ProcessMetricsOptions(**on), ProcessMetricsOptions(**other)
    defaults = ProcessMetricsOptions()
    choices = [n for n in OPTION_NAMES if declared(n).form.kind == "choice"]
    assert choices
    for name in OPTION_NAMES:
        if declared(name).form.kind in ("bool", "tristate"):
            assert on[name] is True and other[name] is True, name
    for name in choices:
        assert getattr(options, name) == getattr(defaults, name), name
        assert getattr(with_other, name) != getattr(defaults, name), name
    assert set(on) >= {n for n in OPTION_NAMES if declared(n).gates}
    enabled = {m.name for m in enabled_metrics(options)}
    assert set(on["include"]) <= enabled and on["include"]


def test_the_docs_page_names_what_runs() -> None:
    compat = load("compat_harness", COMPAT)
    page = (ROOT / "docs" / "compatibility.md").read_text()
    for suite in compat.CPYTHON_SUITES:
        assert f"`{suite}`" in page, suite
    for framework in compat.FRAMEWORKS:
        name, version = framework.requirement.split("==")
        assert f"{name.capitalize()} {version}" in page or f"{name} {version}" in page, name
    quick = ", ".join(compat.QUICK_SUITES[:-1]) + " and " + compat.QUICK_SUITES[-1]
    assert f"make compat-quick # the cell of `make test`: {quick}" in " ".join(page.split())
