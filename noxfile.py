"""The version matrix: the unit tests at the lowest allowed versions and at the latest.

    nox -l                          the cells
    nox -s unit                     every cell (``make matrix``)
    nox -s "unit-3.10(lowest)"      one cell; pytest arguments go after ``--``

A cell installs the package with its ``unit`` extra, either under
``constraints/lowest.txt`` or at the latest releases. In a ``lowest`` cell,
every dependency must then be installed at exactly the lower bound that the
package declares (read from the installed package's metadata, so from
``pyproject.toml``): a bound raised without the constraints file, or a pin
that pip could not honour, fails the cell before any test runs.

The unit tests are every test but ``tests/e2e``, the docs build and the stress
tests. ``OTEL_PYTHON_PROCESS_METRICS_DIRECT_READS=false`` in the environment
runs them on psutil's portable path (the test suite keeps that variable).

pyenv's Pythons are found with no setup: their folders go first on PATH, then
the interpreters that ``make pythons`` (scripts/get-pythons.sh) caches in
``$PYTHONS_CACHE_DIR`` (default ``.cache/pythons``): 3.14 and 3.15 from Debian
sid, and the free-threaded 3.13t. 3.14t is on PATH where CI's setup-python
provides it; elsewhere its cells are skipped.
A cell's venv is kept between runs and reinstalled only when
``pyproject.toml`` or the constraints change; a ``latest`` cell also looks for
new releases once a day.
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import logging
import os
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15", "3.13t", "3.14t"]
# Builds without the GIL: no `lowest` cell (the lowest versions predate
# free-threading wheels) and the `unit-free-threaded` extra, which exports OTLP
# over HTTP only: grpcio has no free-threaded wheel, and importing it turns the
# GIL back on (docs/pythons.md).
FREE_THREADED = {"3.13t", "3.14t"}
PACKAGE = "opentelemetry-instrumentation-process"
ROOT = Path(__file__).resolve().parent
LOWEST = ROOT / "constraints" / "lowest.txt"
NOT_UNIT = (
    "--ignore=tests/e2e",
    "--ignore=tests/test_docs.py",
    "--ignore=tests/test_docs_render.py",
    "--ignore=tests/test_stress.py",
    "--ignore=tests/test_fork_stress.py",
)

# nox looks for uv, an optional backend, and says so when it is absent: noise in a green run.
logging.getLogger("nox").addFilter(lambda record: "uv binary not found" not in record.getMessage())

nox.options.sessions = ["unit"]
nox.options.reuse_venv = "yes"


def _interpreters_first_on_path() -> None:
    """Put pyenv's newest X.Y.Z of each of PYTHONS, then the cached ones, first on PATH.

    pyenv's shims are on PATH too, but fail for a version that is not selected.
    """
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = []
    for xy in (p for p in PYTHONS if p not in FREE_THREADED):
        versions = []
        for folder in glob.glob(os.path.join(root, "versions", f"{xy}.*", "bin")):
            try:
                versions.append((Version(Path(folder).parent.name), folder))
            except InvalidVersion:  # a virtualenv or a named build
                continue
        if versions:
            found.append(max(versions)[1])
    cache = Path(os.environ.get("PYTHONS_CACHE_DIR") or ROOT / ".cache" / "pythons")
    if (cache / "bin").is_dir():
        found.append(str((cache / "bin").resolve()))
    if found:
        os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_interpreters_first_on_path()


def pins(path: Path = LOWEST) -> dict[str, Version]:
    """``name==version`` lines of a constraints file (comments and blank lines skipped)."""
    found: dict[str, Version] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            found[str(canonicalize_name(req.name))] = Version(spec.version)
    return found


def lower_bounds(requires: list[str]) -> dict[str, Version]:
    """The declared lower bound of each dependency of the package and its ``unit`` extra."""
    bounds: dict[str, Version] = {}
    for line in requires:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": "unit"}):
            continue
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
        if not lows:
            raise SystemExit(f"{PACKAGE}: {line!r} declares no lower bound")
        bounds[str(canonicalize_name(req.name))] = max(lows)
    return bounds


def metadata(session: nox.Session) -> tuple[list[str], dict[str, Version]]:
    """The package's declared requirements, and every installed distribution's version."""
    out = session.run(
        "python",
        "-c",
        "import importlib.metadata as m, json, sys; print(json.dumps({"
        "'requires': m.requires(sys.argv[1]) or [], "
        "'installed': {d.metadata['Name']: d.version for d in m.distributions()}}))",
        PACKAGE,
        silent=True,
    )
    assert isinstance(out, str)
    found = json.loads(out.strip().splitlines()[-1])
    installed = {str(canonicalize_name(n)): Version(v) for n, v in found["installed"].items()}
    requires: list[str] = found["requires"]
    return requires, installed


def check_lowest(session: nox.Session, requires: list[str], installed: dict[str, Version]) -> None:
    """Every declared lower bound is pinned in LOWEST, and installed, exactly."""
    declared, pinned = lower_bounds(requires), pins()
    problems = [
        f"{name}: declared >={low}, pinned {pinned.get(name)}, installed {installed.get(name)}"
        for name, low in sorted(declared.items())
        if not pinned.get(name) == installed.get(name) == low
    ]
    if problems:
        session.error("not at the lowest allowed versions:\n  " + "\n  ".join(problems))


def install(session: nox.Session, deps: str) -> None:
    """Install, unless the venv already holds this exact set (a stamp says so)."""
    key = hashlib.sha256()
    for path in (ROOT / "pyproject.toml", LOWEST):
        key.update(path.read_bytes())
    if deps == "latest":
        key.update(datetime.date.today().isoformat().encode())
    stamp = Path(str(session.virtualenv.location)) / ".matrix-stamp"
    if stamp.exists() and stamp.read_text() == key.hexdigest():
        return
    stamp.unlink(missing_ok=True)
    extra, binary = "unit", []
    if session.python in FREE_THREADED:
        # hypothesis' newest releases are compiled and lack free-threaded
        # wheels (their source build needs Rust): the newest with a wheel wins.
        extra, binary = "unit-free-threaded", ["--only-binary=hypothesis"]
    if deps == "lowest":
        session.install("-c", str(LOWEST), "-e", f".[{extra}]")
    else:
        session.install("--upgrade", "--upgrade-strategy=eager", *binary, "-e", f".[{extra}]")
    stamp.write_text(key.hexdigest())


@nox.session(python=PYTHONS)
@nox.parametrize("deps", [nox.param("lowest", id="lowest"), nox.param("latest", id="latest")])
def unit(session: nox.Session, deps: str) -> None:
    """The unit tests, with the dependencies at their lowest allowed or latest versions."""
    if deps == "lowest" and session.python in FREE_THREADED:
        session.skip("no lowest cell without the GIL: the lowest versions predate its wheels")
    install(session, deps)
    requires, installed = metadata(session)
    if deps == "lowest":
        check_lowest(session, requires, installed)
    shown = ("opentelemetry-sdk", "opentelemetry-instrumentation", "psutil", "pytest", "hypothesis")
    direct = os.environ.get("OTEL_PYTHON_PROCESS_METRICS_DIRECT_READS", "").strip() or "default"
    session.log(", ".join(f"{n} {installed.get(n)}" for n in shown) + f"; direct reads: {direct}")
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *NOT_UNIT, *session.posargs
    )
