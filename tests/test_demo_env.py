"""``make demo`` installs only the package and the SDK, from wheels: no compiler, no test tools.

What make would run is read from ``make -n demo``; what it pulls in is the
dependency closure of those requirements, read from the installed packages'
metadata (offline: no index is asked).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "opentelemetry-instrumentation-process"

# Everything the demo's venv may hold besides pip (and setuptools on Python < 3.12).
# psutil and wrapt have wheels for every supported platform; the rest is pure Python.
DEMO_CLOSURE = {
    PACKAGE,
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-semantic-conventions",
    "opentelemetry-instrumentation",
    "psutil",
    "wrapt",
    "packaging",
    "typing-extensions",
    "importlib-metadata",  # opentelemetry-api
    "zipp",  # importlib-metadata
    "deprecated",  # opentelemetry-api and -instrumentation at their lowest versions
}


def _demo_commands(tmp_path: Path) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        [make, "-n", "--no-print-directory", "demo", f"DEMO_VENV={tmp_path / 'venv'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def _pip_install(commands: list[str]) -> list[str]:
    joined = "\n".join(commands).replace("\\\n", " ")
    [line] = [c for c in joined.splitlines() if re.search(r"-m pip install\b", c)]
    return shlex.split(line.split("-m pip install", 1)[1])


def test_the_demo_has_its_own_venv_not_the_test_setup(tmp_path: Path) -> None:
    text = "\n".join(_demo_commands(tmp_path)).replace(str(tmp_path / "venv"), "DEMO_VENV")
    assert "DEMO_VENV/bin/python examples/console_demo.py" in text
    assert ".venv" not in text  # the test setup's venv is neither made nor used
    assert not re.search(r"\[(otlp|unit|test|docs|bench)", text)


def test_the_demo_installs_the_package_and_the_sdk_from_wheels_only(tmp_path: Path) -> None:
    args = _pip_install(_demo_commands(tmp_path))
    assert "--only-binary=:all:" in args  # pip fails rather than compile
    requirements = [a for a in args if not a.startswith("-")]
    assert requirements == [".", "opentelemetry-sdk>=1.28,<2"]
    assert args[args.index(".") - 1] == "-e"  # the checkout's src, as the tests run it


def _closure(roots: list[Requirement]) -> set[str]:
    """Names of ``roots`` and of everything they require here, markers evaluated, no extras."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            continue  # not needed on this Python (a marker), or a requirement left unmet
        for spec in dist.requires or []:
            dep = Requirement(spec)
            if dep.marker is None or dep.marker.evaluate({"extra": ""}):
                todo.append(dep)
    return seen


def test_what_the_demo_pulls_in_is_small(tmp_path: Path) -> None:
    args = _pip_install(_demo_commands(tmp_path))
    roots = [Requirement(PACKAGE if a == "." else a) for a in args if not a.startswith("-")]
    got = _closure(roots)
    assert {PACKAGE, "opentelemetry-sdk", "psutil", "opentelemetry-api"} <= got
    assert got <= DEMO_CLOSURE, f"the demo would install more: {sorted(got - DEMO_CLOSURE)}"


def test_the_closure_walk_sees_the_extras_it_leaves_out() -> None:
    """The test setup is much larger: the walk would notice if the demo used it."""
    everything = _closure([Requirement(f"{PACKAGE}")]) | _closure(
        [Requirement(spec) for spec in distribution(PACKAGE).requires or [] if "extra ==" in spec]
    )
    assert {"pytest", "hypothesis", "gunicorn"} <= everything
    assert not everything <= DEMO_CLOSURE


COUNTS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def test_the_readme_counts_the_packages_of_the_demo_venv(tmp_path: Path) -> None:
    """README, "Two commands": `.venv-demo` (N packages), at the latest releases."""
    lowest = (REPO / "constraints" / "lowest.txt").read_text()
    if f"opentelemetry-api=={distribution('opentelemetry-api').version}\n" in lowest:
        pytest.skip("the demo installs the latest releases; this cell has the lowest ones")
    args = _pip_install(_demo_commands(tmp_path))
    roots = [Requirement(PACKAGE if a == "." else a) for a in args if not a.startswith("-")]
    readme = " ".join((REPO / "README.md").read_text().split())
    said = re.search(r"`\.venv-demo` \((\w+) packages\)", readme)
    assert said is not None
    assert COUNTS.index(said.group(1)) == len(_closure(roots)), sorted(_closure(roots))
